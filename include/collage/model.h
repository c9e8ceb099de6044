// A model imported from ONNX, ready to be optimised or run. Importing folds
// constants and fixes every shape: dynamic dimensions (batch, sequence) are
// bound by `inputShapes`, or default to 1, as `collage --input-shape` does.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collage/export.h"

namespace collage::api {

// A graph input or output: its ONNX name, element type and static shape.
struct TensorInfo {
  std::string name;
  std::string elementType;     // "float32", "int64", ...: ONNX's names, lower case
  std::vector<int64_t> shape;  // every dimension fixed
};

class COLLAGE_API Model {
 public:
  // Imports `path`. Error (naming the file, the node or the op) for a file
  // that cannot be read, is not ONNX, or uses what the importer cannot run.
  static Model load(const std::string& path,
                    const std::map<std::string, std::vector<int64_t>>& inputShapes = {});

  const std::string& path() const;
  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  int numNodes() const;
  // What `collage inspect` prints: inputs, outputs, node and op counts,
  // FLOPs and parameters.
  std::string summary() const;
  // What the import chose that the caller may want to show, one line each:
  // "input 'x' has dynamic dims [N, T]: bound to 1x1 by default; bind them
  // with --input-shape x=NxT" (inputShapes binds them here).
  const std::vector<std::string>& importNotes() const;

  // The library's own use: Impl is defined inside it only.
  struct Impl;
  explicit Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;  // shared: a Session keeps its model alive
};

}  // namespace collage::api
