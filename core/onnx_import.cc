#include "core/onnx_import.h"

#include "core/error.h"

namespace collage {
std::pair<std::string, Shape> parseInputShapeBinding(const std::string& text) {
  throw Error("not implemented");
}
Graph importOnnx(const std::string& path, const ImportOptions& options) {
  throw Error("not implemented");
}
Tensor readTensorProtoFile(const std::string& path, std::string* name) { throw Error("todo"); }
void writeTensorProtoFile(const std::string& path, const Tensor& tensor, const std::string& name) {}
}  // namespace collage
