#include "collage/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

#include "api/api_internal.h"
#include "backends/backend_list.h"
#include "core/ir/threading.h"
#include "core/runtime/session.h"

namespace collage::api {

struct Session::Impl {
  Impl(const Model& m, const Plan& p, const SessionOptions& o) : model(m), plan(p), options(o) {}
  Model model;
  Plan plan;
  SessionOptions options;
  // The model with the plan's graph substitutions replayed (docs/substitutions.md),
  // when it has any: the Session runs this graph.
  std::unique_ptr<collage::Graph> rewritten;
  BackendSet backends;
  std::vector<std::string> warnings;
  std::unique_ptr<collage::Session> session;
  double lastMs = 0;
  // The core Session reuses its buffers from run to run, so runs from
  // several threads (Python releases the GIL around one) take turns.
  mutable std::mutex running;
};

namespace {

bool sameDType(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

std::string dtypeName(DLDataType t) {
  const char* code = t.code == kDLFloat    ? "float"
                     : t.code == kDLInt    ? "int"
                     : t.code == kDLUInt   ? "uint"
                     : t.code == kDLBfloat ? "bfloat"
                                           : "dlpack-code-";
  return code + std::to_string(t.bits) + (t.lanes > 1 ? "x" + std::to_string(t.lanes) : "");
}

// A view of the caller's memory as the graph input `v` expects it; Error
// naming the input for anything the kernels could not read in place.
collage::Tensor viewOf(const Graph& graph, ValueId v, const DLTensor& dl) {
  const Value& value = graph.value(v);
  const TensorType& type = value.type;
  const std::string name = "input '" + value.name + "'";
  if (dl.device.device_type != kDLCPU)
    throw api::Error(name + " is not in CPU memory (DLPack device type " +
                     std::to_string(dl.device.device_type) + "): copy it to the CPU first");
  if (!sameDType(dl.dtype, toDLDataType(type.elementType)))
    throw api::Error(name + " is " + dtypeName(dl.dtype) + ", the model expects " +
                     type.toString());
  const Shape shape(dl.shape, dl.shape + dl.ndim);
  if (shape != type.shape)
    throw api::Error(name + " has shape " + shapeToString(shape) + ", the model expects " +
                     type.toString() +
                     " (a model with dynamic dimensions is bound at load: "
                     "Model::load's inputShapes)");
  if (dl.strides && dl.ndim > 0 && stridesOf(shape) != Shape(dl.strides, dl.strides + dl.ndim))
    throw api::Error(name + " is not compact row-major (strides given): pass a contiguous copy");
  if (!dl.data && type.numElements() > 0) throw api::Error(name + " has no data (null pointer)");
  return collage::Tensor::view(type, static_cast<char*>(dl.data) + dl.byte_offset);
}

}  // namespace

Session::Session(const Model& model, const Plan& plan, const SessionOptions& options)
    : impl_(std::make_unique<Impl>(model, plan, options)) {
  translateErrors([&] {
    if (options.threads > 0) setThreadCount(options.threads);
    const collage::Plan& p = plan.impl().plan;
    if (!p.substitutions.empty())
      impl_->rewritten = std::make_unique<collage::Graph>(planGraph(p, model.impl().graph));
    const Graph& graph = impl_->rewritten ? *impl_->rewritten : model.impl().graph;
    impl_->backends =
        loadBackendsForPlan(p, graph, model.path(), options.backends, &impl_->warnings);
    if (!impl_->warnings.empty() && !options.acceptStalePlan) {
      std::string why;
      for (const auto& w : impl_->warnings) why += (why.empty() ? "" : "; ") + w;
      throw api::Error("refused: " + why +
                       " (optimize again on this machine, or accept the plan with "
                       "SessionOptions::acceptStalePlan)");
    }
    // The Impl, not `this`: a Session may be moved, its Impl stays put.
    Impl* impl = impl_.get();
    impl_->session = std::make_unique<collage::Session>(
        graph, p, [impl](const std::string& n) { return impl->backends.find(n); });
    impl_->session->setProfiling(options.profile);
  });
}

Session Session::open(const std::string& model, const std::string& plan,
                      const SessionOptions& options) {
  Model m = Model::load(model);
  return Session(m, plan.empty() ? Plan::fromAnnotatedOnnx(model) : Plan::load(plan), options);
}

Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

std::map<std::string, api::Tensor> Session::run(const std::map<std::string, DLTensor>& inputs,
                                                const std::vector<std::string>& outputs) {
  return translateErrors([&] {
    const Graph& graph = impl_->model.impl().graph;
    std::string expected;
    for (ValueId v : graph.inputs())
      expected += (expected.empty() ? "'" : ", '") + graph.value(v).name + "'";
    for (const auto& [name, tensor] : inputs) {
      auto v = graph.findValue(name);
      if (!v || !graph.value(*v).isGraphInput)
        throw api::Error("'" + name + "' is not an input of " + impl_->model.path() +
                         " (its inputs: " + expected + ")");
    }
    std::vector<collage::Tensor> views;
    for (ValueId v : graph.inputs()) {
      auto it = inputs.find(graph.value(v).name);
      if (it == inputs.end())
        throw api::Error("input '" + graph.value(v).name +
                         "' is missing (the model's inputs: " + expected + ")");
      views.push_back(viewOf(graph, v, it->second));
    }
    std::vector<size_t> wanted;  // indices into graph.outputs()
    for (const auto& name : outputs) {
      auto at = std::find_if(graph.outputs().begin(), graph.outputs().end(),
                             [&](ValueId v) { return graph.value(v).name == name; });
      if (at == graph.outputs().end())
        throw api::Error("'" + name + "' is not an output of " + impl_->model.path());
      wanted.push_back(static_cast<size_t>(at - graph.outputs().begin()));
    }
    if (outputs.empty())
      for (size_t i = 0; i < graph.outputs().size(); ++i) wanted.push_back(i);

    const std::lock_guard<std::mutex> turn(impl_->running);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<collage::Tensor> results = impl_->session->run(views);
    impl_->lastMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::map<std::string, api::Tensor> named;
    for (size_t i : wanted)
      named.emplace(graph.value(graph.outputs()[i]).name, handOut(std::move(results[i])));
    return named;
  });
}

double Session::lastLatencyMs() const {
  const std::lock_guard<std::mutex> turn(impl_->running);
  return impl_->lastMs;
}
size_t Session::peakBytes() const { return impl_->session->peakBytes(); }

std::vector<BackendShare> Session::placement() const {
  const std::lock_guard<std::mutex> turn(impl_->running);
  const collage::Plan& plan = impl_->session->plan();
  std::vector<double> groupNs(plan.groups.size(), 0);
  const auto& timings = impl_->session->lastTimings();
  for (size_t g = 0; g < plan.groups.size(); ++g)
    groupNs[g] =
        timings.empty() && std::isfinite(plan.groups[g].costNs) ? plan.groups[g].costNs : 0;
  for (const auto& t : timings) groupNs[t.group] += t.durUs * 1e3;

  std::vector<BackendShare> shares;
  double total = 0;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    auto it = std::find_if(shares.begin(), shares.end(), [&](const BackendShare& s) {
      return s.backend == plan.groups[g].backend;
    });
    if (it == shares.end()) it = shares.insert(shares.end(), BackendShare{plan.groups[g].backend});
    ++it->groups;
    it->nodes += static_cast<int>(plan.groups[g].nodes.size());
    it->ms += groupNs[g] / 1e6;
    total += groupNs[g] / 1e6;
  }
  for (auto& s : shares) s.share = total > 0 ? s.ms / total : 0;
  return shares;
}

std::vector<std::string> Session::backends() const {
  std::vector<std::string> out;
  for (const auto& [name, version] : impl_->backends.versions())
    out.push_back(name + " " + version);
  return out;
}

const std::vector<std::string>& Session::warnings() const { return impl_->warnings; }
const Model& Session::model() const { return impl_->model; }
const Plan& Session::plan() const { return impl_->plan; }

}  // namespace collage::api
