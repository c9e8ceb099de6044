#include "api/api_internal.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/model_stats.h"

namespace collage::api {

namespace {
TensorInfo infoOf(const Graph& graph, ValueId v) {
  const Value& value = graph.value(v);
  return TensorInfo{value.name, std::string(elementTypeName(value.type.elementType)),
                    value.type.shape};
}
}  // namespace

Model Model::load(const std::string& path,
                  const std::map<std::string, std::vector<int64_t>>& inputShapes) {
  return translateErrors([&] {
    auto impl = std::make_shared<Impl>();
    impl->path = path;
    impl->inputShapes = inputShapes;
    ImportOptions options;
    options.inputShapes = inputShapes;
    options.notes = &impl->importNotes;
    impl->graph = importOnnx(path, options);
    for (ValueId v : impl->graph.inputs()) impl->inputs.push_back(infoOf(impl->graph, v));
    for (ValueId v : impl->graph.outputs()) impl->outputs.push_back(infoOf(impl->graph, v));
    return Model(std::move(impl));
  });
}

const std::string& Model::path() const { return impl_->path; }
const std::vector<TensorInfo>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Model::outputs() const { return impl_->outputs; }
int Model::numNodes() const { return impl_->graph.numNodes(); }
const std::vector<std::string>& Model::importNotes() const { return impl_->importNotes; }
std::string Model::summary() const { return describeModel(impl_->graph, impl_->path); }

}  // namespace collage::api
