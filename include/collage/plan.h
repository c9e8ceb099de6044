// A placement plan: which backend runs each group of a model's nodes, with
// the cost measured for it. `collage optimize` and optimize() (optimize.h)
// make one; a Session runs one. On disk it is the versioned JSON of
// docs/plan-format.md, or written into an annotated ONNX model.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collage/export.h"

namespace collage::api {

class Model;

struct PlanGroup {
  std::string backend;             // "onednn"
  std::vector<std::string> nodes;  // ONNX node names, in topological order
  std::string pattern;             // what produced the candidate: "pattern:conv_relu", "rule:op"
  std::string origin;              // "op-level", "graph-level" or "user"
  double costMs = 0;               // measured; NaN when not measured, +inf when invalid
};

class COLLAGE_API Plan {
 public:
  // A plan file (JSON). Error naming the file and the field for anything malformed.
  static Plan load(const std::string& path);
  // The plan written into a model by `collage run --annotated-onnx` (or the
  // app's export). Run it on the same annotated file: the plan is pinned to it.
  static Plan fromAnnotatedOnnx(const std::string& path);
  // Every node in a group of its own on `backend`, costs unknown: a baseline,
  // and a starting point for hand-written plans.
  static Plan singleBackend(const Model& model, const std::string& backend);

  void save(const std::string& path) const;
  std::string toJson() const;

  std::vector<PlanGroup> groups() const;
  double predictedMs() const;       // the optimizer's estimate; NaN when unknown
  std::string modelSha256() const;  // the model file the plan was made for
  std::string createdBy() const;
  // "groups 12: onednn 7 (81.2%), native 5 (18.8%); predicted 1.234 ms"
  std::string summary() const;

  // The library's own use: Impl is defined inside it only.
  struct Impl;
  explicit Plan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;  // immutable, so copies share it
};

}  // namespace collage::api
