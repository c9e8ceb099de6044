// A Session runs a model as a plan places it: every kernel is compiled once,
// here, and run() only computes. It is the deployable product of Collage
// Studio, the same Session `collage run --plan` uses.
//
//   auto model = collage::api::Model::load("model.onnx");
//   collage::api::Session session(model, collage::api::Plan::load("plan.json"));
//   auto outputs = session.run({{"input", inputView}});  // DLTensor views, no copy
//   std::printf("%.3f ms\n", session.lastLatencyMs());
//
// Construction refuses, with the reason, a plan made for another model (its
// file's sha256 or an input shape differs), a plan whose groups do not fit
// the model, a plan on a backend that is not built in or not allowed by the
// options, and, unless SessionOptions::acceptStalePlan, a plan measured on
// another machine or with other backend versions.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collage/export.h"
#include "collage/model.h"
#include "collage/plan.h"
#include "collage/tensor.h"

namespace collage::api {

struct SessionOptions {
  // Threads of every backend; 0 = the number of cores. Process-wide: the
  // backends share one OpenMP pool, so the last Session created sets it.
  int threads = 0;
  // The backends that may be loaded; empty = any built-in one. A plan that
  // needs another is refused, naming its group and the allowed ones.
  std::vector<std::string> backends;
  // Run a plan measured on another machine or with other backend versions
  // (its costs may not hold here) instead of refusing it; warnings() says why.
  bool acceptStalePlan = false;
  // Time each kernel, so placement() reports measured time shares (a clock
  // read per kernel); without it the shares are the plan's measured costs.
  bool profile = true;
};

// Where the time goes, per backend.
struct BackendShare {
  std::string backend;
  int groups = 0;
  int nodes = 0;
  double ms = 0;     // the last run's kernels on it (profiling), else the plan's costs
  double share = 0;  // of the sum over backends, 0..1
};

class COLLAGE_API Session {
 public:
  Session(const Model& model, const Plan& plan, const SessionOptions& options = {});
  // Loads both: `plan` is a plan file (JSON), or "" for the plan written
  // into an annotated ONNX `model` (Plan::fromAnnotatedOnnx).
  static Session open(const std::string& model, const std::string& plan,
                      const SessionOptions& options = {});
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  // Runs the model once. `inputs` maps every graph input's name to a view of
  // the caller's memory (CPU, compact row-major, the input's element type and
  // shape): it is read in place, not copied, and must stay alive during the
  // call. Returns the graph outputs by name; with `outputs`, only those.
  // Error naming the input or output for an unknown, missing or mismatched
  // one. Runs from several threads take turns (the Session reuses its
  // buffers): use one Session per thread to run in parallel.
  std::map<std::string, Tensor> run(const std::map<std::string, DLTensor>& inputs,
                                    const std::vector<std::string>& outputs = {});

  double lastLatencyMs() const;  // wall time of the last run()
  // The most bytes of intermediate values and outputs alive at once in a run.
  size_t peakBytes() const;
  std::vector<BackendShare> placement() const;
  // Backends loaded for the plan: "onednn 3.0.0".
  std::vector<std::string> backends() const;
  // What makes the plan suspect here (only with acceptStalePlan).
  const std::vector<std::string>& warnings() const;
  const Model& model() const;
  const Plan& plan() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collage::api
