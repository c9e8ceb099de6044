#include "api/api_internal.h"
#include "core/onnx/onnx_import.h"

namespace collage::api {

namespace {
// Keeps the tensor (and the shape its DLTensor points into) alive until the
// receiver calls the deleter.
struct OutputHolder {
  collage::Tensor tensor;
  DLManagedTensor managed{};
};
}  // namespace

api::Tensor handOut(collage::Tensor tensor) {
  auto* holder = new OutputHolder{std::move(tensor)};
  holder->managed.dl_tensor = holder->tensor.toDLTensor();
  holder->managed.manager_ctx = holder;
  holder->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<OutputHolder*>(self->manager_ctx);
  };
  return api::Tensor(&holder->managed);
}

api::Tensor loadTensorProto(const std::string& path) {
  return translateErrors([&] { return handOut(readTensorProtoFile(path)); });
}

}  // namespace collage::api
