#include "core/runtime/session.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "core/ir/error.h"
#include "core/ir/memory_budget.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"
#include "core/ir/sub_graph.h"
#include "core/runtime/kernel_activity.h"

namespace collage {

namespace {

// Rethrows with a prefix, keeping Unsupported apart from other errors.
[[noreturn]] void rethrowWith(const std::string& prefix, const std::exception& e) {
  if (dynamic_cast<const Unsupported*>(&e)) throw Unsupported(prefix + e.what());
  throw Error(prefix + e.what());
}

}  // namespace

struct Session::Kernel_ {
  KernelRequest request;
  Backend* backend = nullptr;
  std::shared_ptr<Kernel> kernel;  // shared with the KernelCache, if any
  std::vector<size_t> inputLocations;  // Session::locations_, in request order
  std::vector<const DLTensor*> inputs;  // point into Session::dl_
  std::vector<DLTensor*> outputs;
};

Session::DeviceBlock::DeviceBlock(DeviceBlock&& o) noexcept
    : runtime(o.runtime), data(std::exchange(o.data, nullptr)) {}

Session::DeviceBlock::~DeviceBlock() {
  if (data) runtime->release(data);
}

Kernel& Session::groupKernel(size_t group) const { return *kernels_.at(group)->kernel; }

Session::Session(const Graph& graph, const Plan& plan, BackendLookup backends, KernelCache* cache)
    : graph_(graph), plan_(plan), cache_(cache), epoch_(std::chrono::steady_clock::now()) {
  if (cache_) cache_->beginSession();
  const std::vector<NodeSet> sets = resolvePlanGroups(plan_, graph_);
  // Each group must be one kernel's worth: convex (no path leaves and re-enters).
  const SubGraphLimits noLimits{0, 0, 0, true};
  for (size_t g = 0; g < sets.size(); ++g) {
    SubGraphValidity validity = checkSubGraph(graph_, sets[g], noLimits);
    if (!validity.ok())
      throw Error(plan_.displayName() + ": " + plan_.describeGroup(g) +
                  " cannot be one kernel: " + validity.reason);
  }
  order_ = planExecutionOrder(plan_, graph_, sets);

  // Compile every group once.
  kernels_.resize(sets.size());
  for (size_t g = 0; g < sets.size(); ++g) {
    const PlanGroup& group = plan_.groups[g];
    const std::string label = plan_.displayName() + ": " + plan_.describeGroup(g) + ": ";
    Backend* backend = backends ? backends(group.backend) : nullptr;
    if (!backend) throw Error(label + "backend '" + group.backend + "' is not available");
    auto k = std::make_unique<Kernel_>();
    k->request = KernelRequest::of(graph_, sets[g], group.pattern);
    k->backend = backend;
    std::string refusal;
    try {
      if (cache_) {
        k->kernel = cache_->get(*backend, k->request, {}, {}, &refusal);
      } else {
        CompileResult compiled = backend->compile(k->request);
        k->kernel = std::move(compiled.kernel);
        refusal = compiled.refusal.empty() ? std::string("no reason given") : compiled.refusal;
      }
    } catch (const std::exception& e) {
      rethrowWith(label + group.backend + " failed to compile it: ", e);
    }
    if (!k->kernel) throw Error(label + group.backend + " refused it: " + refusal);
    kernels_[g] = std::move(k);
  }

  placeOnDevices(sets);
  handOverNativeLayouts();
  planMemory();
  timings_.reserve(order_.size());
}

bool layoutHandoverEnabled() {
  const char* off = std::getenv("COLLAGE_NO_LAYOUT_HANDOVER");
  return !(off && *off && *off != '0');
}

void Session::handOverNativeLayouts() {
  nativeBytes_.assign(static_cast<size_t>(graph_.numValues()), 0);
  layouts_.assign(nativeBytes_.size(), std::nullopt);
  if (!layoutHandoverEnabled()) return;
  // Who reads each value: (group, input position).
  std::vector<std::vector<std::pair<size_t, size_t>>> readers(nativeBytes_.size());
  for (size_t g = 0; g < kernels_.size(); ++g)
    for (size_t i = 0; i < kernels_[g]->request.inputs.size(); ++i)
      readers[static_cast<size_t>(kernels_[g]->request.inputs[i])].emplace_back(g, i);
  // Decide on the kernels as compiled, then switch them.
  std::vector<std::vector<size_t>> nativeIn(kernels_.size()), nativeOut(kernels_.size());
  for (size_t p = 0; p < kernels_.size(); ++p) {
    const Kernel_& producer = *kernels_[p];
    for (size_t o = 0; o < producer.request.outputs.size(); ++o) {
      const ValueId v = producer.request.outputs[o];
      const auto& consumers = readers[static_cast<size_t>(v)];
      if (graph_.value(v).isGraphOutput || consumers.empty()) continue;
      // A copy between devices reads plain memory.
      if (std::any_of(consumers.begin(), consumers.end(),
                      [&](const auto& c) { return !(groupDevices_[c.first] == groupDevices_[p]); }))
        continue;
      const std::optional<NativeLayout> layout = producer.kernel->nativeOutputLayout(o);
      if (!layout) continue;
      const bool all = std::all_of(consumers.begin(), consumers.end(), [&](const auto& c) {
        return kernels_[c.first]->kernel->nativeInputLayout(c.second) == layout;
      });
      if (!all) continue;
      nativeOut[p].push_back(o);
      for (const auto& [g, i] : consumers) nativeIn[g].push_back(i);
      nativeBytes_[static_cast<size_t>(v)] = layout->bytes;
      layouts_[static_cast<size_t>(v)] = layout;
      ++nativeLayoutValues_;
    }
  }
  for (size_t g = 0; g < kernels_.size(); ++g) {
    if (nativeIn[g].empty() && nativeOut[g].empty()) continue;
    Kernel_& k = *kernels_[g];
    std::sort(nativeIn[g].begin(), nativeIn[g].end());
    if (cache_) {
      // The cache's plain kernel may serve other sessions: take a switched one.
      std::string refusal;
      k.kernel = cache_->get(*k.backend, k.request, nativeIn[g], nativeOut[g], &refusal);
      COLLAGE_CHECK(k.kernel != nullptr, "a kernel compiled once was refused the second time");
    } else {
      for (size_t o : nativeOut[g]) k.kernel->useNativeOutputLayout(o);
      for (size_t i : nativeIn[g]) k.kernel->useNativeInputLayout(i);
    }
  }
}

DeviceRuntime& Session::runtimeOf(int pool) const {
  COLLAGE_CHECK(pool > 0 && static_cast<size_t>(pool) <= deviceRuntimes_.size(),
                "no device runtime for pool " + std::to_string(pool));
  return *deviceRuntimes_[static_cast<size_t>(pool - 1)];
}

int Session::poolOf(const Device& device) const {
  if (device.type == DeviceType::CPU) return 0;
  for (size_t k = 0; k < deviceRuntimes_.size(); ++k)
    if (deviceRuntimes_[k]->device() == device) return static_cast<int>(k + 1);
  return -1;
}

void Session::placeOnDevices(const std::vector<NodeSet>& sets) {
  groupDevices_.clear();
  for (size_t g = 0; g < kernels_.size(); ++g) {
    Backend& backend = *kernels_[g]->backend;
    const Device device = backend.device();
    groupDevices_.push_back(device);
    if (device.type == DeviceType::CPU || poolOf(device) > 0) continue;
    const std::string label = plan_.displayName() + ": " + plan_.describeGroup(g) + ": ";
    DeviceRuntime* runtime = backend.deviceRuntime();
    if (!runtime)
      throw Error(label + backend.name() + " runs on " + device.toString() +
                  " but gives no device runtime to allocate and copy there");
    if (!(runtime->device() == device))
      throw Error(label + backend.name() + " runs on " + device.toString() +
                  " but its device runtime is for " + runtime->device().toString());
    deviceRuntimes_.push_back(runtime);
  }
  deviceEdges_ = crossDeviceEdges(graph_, sets, groupDevices_);
  for (const DeviceEdge& e : deviceEdges_)
    if (e.from.type != DeviceType::CPU && e.to.type != DeviceType::CPU)
      throw Unsupported(plan_.displayName() + ": value '" + graph_.value(e.value).name +
                        "' would pass from " + e.from.toString() + " to " + e.to.toString() +
                        ": copies between two devices are not supported");

  // Locations: every value where it is made (its producer's device; graph
  // inputs and constants on the host), then each copy.
  const size_t numValues = static_cast<size_t>(graph_.numValues());
  std::vector<int> groupOfNode(static_cast<size_t>(graph_.numNodes()), -1);
  for (size_t g = 0; g < sets.size(); ++g)
    sets[g].forEach([&](NodeId n) { groupOfNode[static_cast<size_t>(n)] = static_cast<int>(g); });
  locations_.assign(numValues + deviceEdges_.size(), Location{});
  for (size_t v = 0; v < numValues; ++v) {
    const NodeId producer = graph_.value(static_cast<ValueId>(v)).producer;
    const int g = producer == kNoNode ? -1 : groupOfNode[static_cast<size_t>(producer)];
    locations_[v].value = static_cast<ValueId>(v);
    locations_[v].pool = g < 0 ? 0 : poolOf(groupDevices_[static_cast<size_t>(g)]);
  }
  std::map<std::pair<ValueId, int>, size_t> copyAt;  // (value, pool) -> its copy's location
  for (size_t e = 0; e < deviceEdges_.size(); ++e) {
    Location& l = locations_[numValues + e];
    l.value = deviceEdges_[e].value;
    l.pool = poolOf(deviceEdges_[e].to);
    copyAt[{l.value, l.pool}] = numValues + e;
  }
  outputLocation_.clear();
  for (ValueId v : graph_.outputs()) {
    auto it = copyAt.find({v, 0});
    outputLocation_.push_back(it == copyAt.end() ? static_cast<size_t>(v) : it->second);
  }

  // One DLTensor per location; data pointers are filled by planMemory() (pool
  // buffers) or by run() (graph inputs and outputs).
  dl_.resize(locations_.size());
  for (size_t l = 0; l < locations_.size(); ++l) {
    const TensorType& type = graph_.value(locations_[l].value).type;
    DLTensor& d = dl_[l];
    d = DLTensor{};
    const int pool = locations_[l].pool;
    d.device = pool == 0 ? DLDevice{kDLCPU, 0} : toDLDevice(runtimeOf(pool).device());
    d.ndim = static_cast<int32_t>(type.shape.size());
    d.dtype = toDLDataType(type.elementType);
    // The graph is const but outlives the session and is never edited while
    // it runs; DLPack wants a mutable shape pointer.
    d.shape = const_cast<int64_t*>(type.shape.data());
    d.strides = nullptr;
    d.byte_offset = 0;
  }
  for (size_t g = 0; g < kernels_.size(); ++g) {
    Kernel_& k = *kernels_[g];
    const int pool = poolOf(groupDevices_[g]);
    for (ValueId v : k.request.inputs) {
      const size_t l = locations_[static_cast<size_t>(v)].pool == pool
                           ? static_cast<size_t>(v)
                           : copyAt.at({v, pool});
      k.inputLocations.push_back(l);
      k.inputs.push_back(&dl_[l]);
    }
    // A kernel writes its outputs where they are made: their own location.
    for (ValueId v : k.request.outputs) k.outputs.push_back(&dl_[static_cast<size_t>(v)]);
  }
}

size_t Session::bytesOf(ValueId v) const {
  return std::max(graph_.value(v).type.byteSize(), nativeBytes_[static_cast<size_t>(v)]);
}

Session::~Session() = default;

const KernelRequest& Session::request(size_t group) const { return kernels_.at(group)->request; }
Backend* Session::groupBackend(size_t group) const { return kernels_.at(group)->backend; }

void Session::planMemory() {
  const size_t numValues = static_cast<size_t>(graph_.numValues());
  const size_t numSteps = order_.size();
  std::vector<int64_t> stepOfGroup(kernels_.size());
  std::vector<int64_t> producerStep(numValues, -1);
  for (size_t s = 0; s < numSteps; ++s) {
    stepOfGroup[order_[s]] = static_cast<int64_t>(s);
    for (ValueId v : kernels_[order_[s]]->request.outputs)
      producerStep[static_cast<size_t>(v)] = static_cast<int64_t>(s);
  }
  std::vector<bool> isOutput(numValues, false);
  for (ValueId v : graph_.outputs()) isOutput[static_cast<size_t>(v)] = true;

  // When each location is written first (acquired) and read last.
  std::vector<int64_t> firstStep(locations_.size(), -1), lastStep(locations_.size(), -1);
  for (size_t v = 0; v < numValues; ++v) firstStep[v] = producerStep[v];
  for (size_t s = 0; s < numSteps; ++s)
    for (size_t l : kernels_[order_[s]]->inputLocations) lastStep[l] = static_cast<int64_t>(s);
  copiesBefore_.assign(numSteps, {});
  copiesAfter_.assign(numSteps, {});
  for (size_t e = 0; e < deviceEdges_.size(); ++e) {
    const DeviceEdge& edge = deviceEdges_[e];
    const size_t source = static_cast<size_t>(edge.value);
    int64_t step;
    if (edge.consumers.empty()) {
      // A graph output back to the host: as soon as it is made, so its
      // device buffer can be reused.
      step = producerStep[source];
      copiesAfter_[static_cast<size_t>(step)].push_back(e);
    } else {
      step = static_cast<int64_t>(numSteps);
      for (int g : edge.consumers) step = std::min(step, stepOfGroup[static_cast<size_t>(g)]);
      copiesBefore_[static_cast<size_t>(step)].push_back(e);
    }
    firstStep[numValues + e] = step;
    lastStep[source] = std::max(lastStep[source], step);
  }

  // Pooled: what a kernel makes and nobody outside holds, and every copy,
  // except graph outputs on the host (the tensors run() returns).
  auto pooled = [&](size_t l) {
    const Location& loc = locations_[l];
    if (firstStep[l] < 0) return false;  // a graph input or constant where it lives
    return !(loc.pool == 0 && isOutput[static_cast<size_t>(loc.value)]);
  };
  auto bytesAt = [&](size_t l) {
    return l < numValues ? bytesOf(static_cast<ValueId>(l)) : deviceEdges_[l - numValues].bytes;
  };
  std::vector<std::vector<size_t>> acquiredAt(numSteps), releasedAt(numSteps);
  for (size_t l = 0; l < locations_.size(); ++l) {
    if (!pooled(l)) continue;
    acquiredAt[static_cast<size_t>(firstStep[l])].push_back(l);
    // A value nobody reads goes back at once (defensive: a request lists
    // only values used outside).
    releasedAt[static_cast<size_t>(std::max(firstStep[l], lastStep[l]))].push_back(l);
  }

  std::vector<BufferPoolPlan> pools(1 + deviceRuntimes_.size());
  std::vector<size_t> live(pools.size(), 0), peak(pools.size(), 0);
  size_t outputBytes = 0;  // graph outputs returned so far, held on the host
  totalValueBytes_ = 0;
  deviceTotalValueBytes_ = 0;
  for (size_t v = 0; v < numValues; ++v)
    if (isOutput[v] && producerStep[v] >= 0) totalValueBytes_ += bytesOf(static_cast<ValueId>(v));
  for (size_t s = 0; s < numSteps; ++s) {
    // Copies made before the kernel first, then its outputs: a kernel's
    // outputs never share a buffer with its inputs.
    for (size_t l : acquiredAt[s]) {
      const size_t pool = static_cast<size_t>(locations_[l].pool);
      locations_[l].buffer = pools[pool].acquire(bytesAt(l));
      live[pool] += bytesAt(l);
      (pool == 0 ? totalValueBytes_ : deviceTotalValueBytes_) += bytesAt(l);
    }
    for (ValueId v : kernels_[order_[s]]->request.outputs)
      if (isOutput[static_cast<size_t>(v)]) outputBytes += graph_.value(v).type.byteSize();
    peak[0] = std::max(peak[0], live[0] + outputBytes);
    for (size_t p = 1; p < pools.size(); ++p) peak[p] = std::max(peak[p], live[p]);
    for (size_t l : releasedAt[s]) {
      const size_t pool = static_cast<size_t>(locations_[l].pool);
      pools[pool].release(locations_[l].buffer);
      live[pool] -= bytesAt(l);
    }
  }

  // The host's buffers and the outputs a run returns must fit in this
  // machine's memory (core/ir/memory_budget.h): refused here, naming the
  // largest value, before anything is allocated, rather than std::bad_alloc
  // or the out-of-memory killer in the middle of a run. Each buffer is named
  // by the largest value it holds and the group that makes it.
  {
    std::vector<size_t> largest(pools[0].bufferCount(), SIZE_MAX);
    for (size_t l = 0; l < locations_.size(); ++l) {
      const Location& loc = locations_[l];
      if (loc.pool != 0 || loc.buffer < 0) continue;
      size_t& at = largest[static_cast<size_t>(loc.buffer)];
      if (at == SIZE_MAX || bytesAt(l) > bytesAt(at)) at = l;
    }
    auto describe = [&](size_t l) {
      const ValueId v = locations_[l].value;
      std::string what = "'" + graph_.value(v).name + "' " + graph_.value(v).type.toString();
      if (const int64_t step = producerStep[static_cast<size_t>(v)]; step >= 0) {
        const Kernel_& k = *kernels_[order_[static_cast<size_t>(step)]];
        what += " (made by group " + std::to_string(order_[static_cast<size_t>(step)]) + " on " +
                k.backend->name() + ")";
      }
      return what;
    };
    std::vector<TensorBytes> tensors;
    for (size_t b = 0; b < largest.size(); ++b)
      if (largest[b] != SIZE_MAX)
        tensors.push_back({"the buffer of " + describe(largest[b]), pools[0].bufferBytes(static_cast<int32_t>(b))});
    for (size_t v = 0; v < numValues; ++v)
      if (isOutput[v] && producerStep[v] >= 0 && locations_[v].pool == 0)
        tensors.push_back({"output " + describe(v), bytesOf(static_cast<ValueId>(v))});
    const std::string why = memoryRefusal(tensors);
    if (!why.empty())
      throw DoesNotFitInMemory(plan_.displayName() + ": its tensors do not fit in memory: " + why +
                  " (a plan whose kernels keep such a tensor inside them, as an attention kernel keeps the "
                  "scores, may fit)");
  }

  // Allocate once: the host's buffers as tensors, a device's through its runtime.
  std::vector<std::vector<void*>> memory(pools.size());
  buffers_.clear();
  deviceBuffers_.clear();
  for (size_t b = 0; b < pools[0].bufferCount(); ++b) {
    const size_t bytes = pools[0].bufferBytes(static_cast<int32_t>(b));
    buffers_.emplace_back(ElementType::UInt8, Shape{static_cast<int64_t>(bytes)});
    memory[0].push_back(buffers_.back().raw());
  }
  for (size_t p = 1; p < pools.size(); ++p) {
    DeviceRuntime& runtime = *deviceRuntimes_[p - 1];
    for (size_t b = 0; b < pools[p].bufferCount(); ++b) {
      const size_t bytes = pools[p].bufferBytes(static_cast<int32_t>(b));
      void* data = nullptr;
      try {
        data = runtime.allocate(bytes);
      } catch (const std::exception& e) {
        rethrowWith(plan_.displayName() + ": allocating " + std::to_string(bytes) + " bytes on " +
                        runtime.device().toString() + ": ",
                    e);
      }
      deviceBuffers_.emplace_back(&runtime, data);
      memory[p].push_back(data);
    }
  }
  for (size_t l = 0; l < locations_.size(); ++l) {
    const Location& loc = locations_[l];
    if (loc.buffer >= 0)
      dl_[l].data = memory[static_cast<size_t>(loc.pool)][static_cast<size_t>(loc.buffer)];
  }

  peakBytes_ = peak[0];
  arenaBytes_ = pools[0].totalBytes();
  devicePeakBytes_ = 0;
  deviceArenaBytes_ = 0;
  for (size_t p = 1; p < pools.size(); ++p) {
    devicePeakBytes_ += peak[p];
    deviceArenaBytes_ += pools[p].totalBytes();
  }
}

void Session::appendInPlace(size_t output, Tensor buffer, const std::vector<int64_t>& offsets) {
  const auto& outs = graph_.outputs();
  if (output >= outs.size())
    throw Error("appendInPlace: output " + std::to_string(output) + " of " +
                std::to_string(outs.size()));
  const ValueId v = outs[output];
  const Value& value = graph_.value(v);
  const std::string label = "output '" + value.name + "' cannot be written in place: ";
  if (std::count(outs.begin(), outs.end(), v) != 1) throw Error(label + "it is returned twice");
  if (value.producer == kNoNode || graph_.node(value.producer).op != "Concat")
    throw Error(label + "it is not made by a Concat");
  const Node& concat = graph_.node(value.producer);
  const Shape& out = value.type.shape;
  const int64_t rank = static_cast<int64_t>(out.size());
  int64_t axis = concat.attrs.getInt("axis");
  if (axis < 0) axis += rank;
  // The buffer: the output itself, or a window of it (offsets before the
  // Concat's axis, its own rows along it, whole after it).
  bool fits = buffer.raw() && buffer.elementType() == value.type.elementType &&
              buffer.shape().size() == out.size() &&
              static_cast<int64_t>(offsets.size()) <= axis;
  int64_t newRows = 0;
  for (size_t i = 1; i < concat.inputs.size(); ++i)
    newRows += graph_.value(concat.inputs[i]).type.shape[static_cast<size_t>(axis)];
  for (int64_t a = 0; fits && a < rank; ++a) {
    const int64_t size = buffer.shape()[static_cast<size_t>(a)], whole = out[static_cast<size_t>(a)];
    const int64_t offset = a < static_cast<int64_t>(offsets.size()) ? offsets[static_cast<size_t>(a)] : 0;
    if (a < axis)
      fits = offset >= 0 && size >= 1 && offset + size <= whole;
    else if (a == axis)
      fits = size >= newRows;
    else
      fits = size == whole;
  }
  if (!fits)
    throw Error(label + "the buffer is " + buffer.type().toString() + ", neither " +
                value.type.toString() + " nor a window of it");
  const Value& head = graph_.value(concat.inputs.at(0));
  if (!head.isGraphInput || head.consumers.size() != 1 || head.isGraphOutput)
    throw Error(label + "the first input of Concat '" + concat.name +
                "' is not a graph input that only it reads");
  inPlaceOutput_.resize(kernels_.size(), -1);
  inPlaceBuffers_.resize(outs.size());
  for (size_t g = 0; g < kernels_.size(); ++g) {
    const Kernel_& k = *kernels_[g];
    if (!k.request.nodes.contains(value.producer)) continue;
    if (k.request.nodes.count() != 1)
      throw Error(label + "Concat '" + concat.name + "' shares " + plan_.describeGroup(g) +
                  " with other nodes");
    if (groupDevices_[g].type != DeviceType::CPU)
      throw Error(label + "Concat '" + concat.name + "' runs on " + groupDevices_[g].toString());
    for (ValueId in : concat.inputs)
      if (layouts_[static_cast<size_t>(in)])
        throw Error(label + "'" + graph_.value(in).name + "' reaches Concat '" + concat.name +
                    "' in a backend's own layout");
    inPlaceOutput_[g] = static_cast<int>(output);
    inPlaceBuffers_[output] = std::move(buffer);
    inPlaceOffsets_.resize(outs.size());
    inPlaceOffsets_[output] = offsets;
    inPlaceOffsets_[output].resize(static_cast<size_t>(axis), 0);
    return;
  }
  throw Error(label + "no group holds Concat '" + concat.name + "'");
}

std::vector<ValueId> Session::windowedOutputs() const {
  std::vector<ValueId> out;
  for (size_t i = 0; i < inPlaceBuffers_.size(); ++i) {
    const ValueId v = graph_.outputs()[i];
    if (inPlaceBuffers_[i].raw() && !(inPlaceBuffers_[i].type() == graph_.value(v).type))
      out.push_back(v);
  }
  return out;
}

// The group's Concat, its first input already at the head of the output:
// each other input's rows go after it, one block per index before the axis.
// With a window (appendInPlace's offsets), only the blocks inside it, at
// the buffer's last rows.
void Session::runInPlaceConcat(size_t group) {
  const Kernel_& k = *kernels_[group];
  const Node& concat = graph_.node(k.request.nodes.first());
  const Shape& out = graph_.value(concat.outputs[0]).type.shape;
  const int64_t rank = static_cast<int64_t>(out.size());
  int64_t axis = concat.attrs.getInt("axis");
  if (axis < 0) axis += rank;
  const size_t output = static_cast<size_t>(inPlaceOutput_[group]);
  const Shape& held = inPlaceBuffers_[output].shape();
  const std::vector<int64_t>& offsets = inPlaceOffsets_[output];
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= out[static_cast<size_t>(a)];
  for (int64_t a = axis + 1; a < rank; ++a) inner *= out[static_cast<size_t>(a)];
  const size_t rowBytes =
      static_cast<size_t>(inner) * elementSize(graph_.value(concat.outputs[0]).type.elementType);
  // Block o of the output (its index before the axis) is block heldAt[o] of
  // the buffer, or -1 outside the window.
  std::vector<int64_t> heldAt(static_cast<size_t>(outer));
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rest = o, at = 0, scale = 1;
    for (int64_t a = axis - 1; a >= 0 && at >= 0; --a) {
      const int64_t i = rest % out[static_cast<size_t>(a)] - offsets[static_cast<size_t>(a)];
      rest /= out[static_cast<size_t>(a)];
      if (i < 0 || i >= held[static_cast<size_t>(a)]) at = -1;
      else at += i * scale;
      scale *= held[static_cast<size_t>(a)];
    }
    heldAt[static_cast<size_t>(o)] = at;
  }
  const int64_t heldRows = held[static_cast<size_t>(axis)];
  char* dst = static_cast<char*>(k.outputs.front()->data);
  int64_t row = heldRows;
  for (size_t i = 1; i < concat.inputs.size(); ++i)
    row -= graph_.value(concat.inputs[i]).type.shape[static_cast<size_t>(axis)];
  for (size_t i = 1; i < concat.inputs.size(); ++i) {
    const ValueId v = concat.inputs[i];
    const int64_t rows = graph_.value(v).type.shape[static_cast<size_t>(axis)];
    const void* data = nullptr;
    if (graph_.value(v).isConstant()) {
      data = graph_.value(v).constant->raw();
    } else {
      auto it = std::find(k.request.inputs.begin(), k.request.inputs.end(), v);
      data = k.inputs[static_cast<size_t>(it - k.request.inputs.begin())]->data;
    }
    const char* src = static_cast<const char*>(data);
    const size_t bytes = static_cast<size_t>(rows) * rowBytes;
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t at = heldAt[static_cast<size_t>(o)];
      if (at < 0) continue;
      std::memcpy(dst + (at * heldRows + row) * rowBytes, src + o * bytes, bytes);
      appendedBytes_ += bytes;
    }
    row += rows;
  }
}

void Session::copy(size_t e) {
  const DeviceEdge& edge = deviceEdges_[e];
  void* destination = dl_[static_cast<size_t>(graph_.numValues()) + e].data;
  const void* source = dl_[static_cast<size_t>(edge.value)].data;
  try {
    if (edge.to.type == DeviceType::CPU)
      runtimeOf(poolOf(edge.from)).copyToHost(destination, source, edge.bytes);
    else
      runtimeOf(poolOf(edge.to)).copyToDevice(destination, source, edge.bytes);
  } catch (const std::exception& ex) {
    rethrowWith("copying '" + graph_.value(edge.value).name + "' from " + edge.from.toString() +
                    " to " + edge.to.toString() + ": ",
                ex);
  }
}

std::vector<Tensor> Session::run(const std::vector<Tensor>& inputs) { return run(inputs, nullptr); }

std::vector<Tensor> Session::run(const std::vector<Tensor>& inputs,
                                 const AfterKernel& afterKernel) {
  const auto& graphInputs = graph_.inputs();
  if (inputs.size() != graphInputs.size()) {
    std::string names;
    for (ValueId v : graphInputs) names += (names.empty() ? "" : ", ") + graph_.value(v).name;
    throw Error("the model has " + std::to_string(graphInputs.size()) + " input" +
                (graphInputs.size() == 1 ? "" : "s") + " (" + names + "), got " +
                std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& value = graph_.value(graphInputs[i]);
    if (!(inputs[i].type() == value.type))
      throw Error("input '" + value.name + "': expected " + value.type.toString() + ", got " +
                  inputs[i].type().toString());
    if (inputs[i].raw() == nullptr && value.type.byteSize() > 0)
      throw Error("input '" + value.name + "' has no data");
    // Kernels take inputs as const DLTensor*: they never write through it.
    dl_[static_cast<size_t>(graphInputs[i])].data = const_cast<void*>(inputs[i].raw());
  }

  // Graph outputs: fresh tensors (the caller keeps them). A value listed twice
  // is returned twice, the second time as a copy; inputs and constants that
  // are outputs are copied at the end.
  const auto& graphOutputs = graph_.outputs();
  std::vector<Tensor> outputs(graphOutputs.size());
  std::vector<bool> producedByKernel(graphOutputs.size(), false);
  for (size_t i = 0; i < graphOutputs.size(); ++i) {
    const Value& value = graph_.value(graphOutputs[i]);
    if (value.producer == kNoNode) continue;
    bool first = std::find(graphOutputs.begin(), graphOutputs.begin() + static_cast<std::ptrdiff_t>(i),
                           graphOutputs[i]) == graphOutputs.begin() + static_cast<std::ptrdiff_t>(i);
    if (!first) continue;
    outputs[i] = i < inPlaceBuffers_.size() && inPlaceBuffers_[i].raw() ? inPlaceBuffers_[i] : outputTensor(i);
    // Where the kernel writes it, or where its copy back from a device lands.
    dl_[outputLocation_[i]].data = outputs[i].raw();
    producedByKernel[i] = true;
  }

  timings_.clear();
  appendedBytes_ = 0;
  KernelActivity::Scope running;  // tests check that no two threads run kernels at once
  for (size_t s = 0; s < order_.size(); ++s) {
    const size_t g = order_[s];
    Kernel_& k = *kernels_[g];
    for (size_t e : copiesBefore_[s]) copy(e);
    std::chrono::steady_clock::time_point start;
    if (profiling_) start = std::chrono::steady_clock::now();
    // A diagnostic: a line on stdout before each kernel, so that a library's
    // own log (ONEDNN_VERBOSE) can be split by kernel and backend.
    static const bool marks = [] {
      const char* v = std::getenv("COLLAGE_KERNEL_MARKS");
      return v && *v && *v != '0';
    }();
    if (marks) {
      std::printf("collage_kernel,%zu,%s\n", g, plan_.groups[g].backend.c_str());
      std::fflush(stdout);
    }
    try {
      if (g < inPlaceOutput_.size() && inPlaceOutput_[g] >= 0)
        runInPlaceConcat(g);
      else
        k.kernel->run(k.inputs, k.outputs);
    } catch (const std::exception& e) {
      rethrowWith(plan_.describeGroup(g) + ": " + plan_.groups[g].backend + " kernel failed: ", e);
    }
    if (profiling_) {
      // A device kernel's time is until it is done (it runs asynchronously).
      for (DeviceRuntime* runtime : deviceRuntimes_) runtime->synchronize();
      auto end = std::chrono::steady_clock::now();
      timings_.push_back(
          {g, std::chrono::duration<double, std::micro>(start - epoch_).count(),
           std::chrono::duration<double, std::micro>(end - start).count(), runs_});
    }
    if (afterKernel) afterKernel(g, k.outputs);
    for (size_t e : copiesAfter_[s]) copy(e);
  }
  for (DeviceRuntime* runtime : deviceRuntimes_) runtime->synchronize();

  for (size_t i = 0; i < graphOutputs.size(); ++i) {
    if (producedByKernel[i]) continue;
    const Value& value = graph_.value(graphOutputs[i]);
    if (value.isConstant()) {
      outputs[i] = value.constant->clone();
    } else if (value.isGraphInput) {
      auto it = std::find(graphInputs.begin(), graphInputs.end(), graphOutputs[i]);
      outputs[i] = inputs[static_cast<size_t>(it - graphInputs.begin())].clone();
    } else {
      // A repeated output: copy the first occurrence.
      auto it = std::find(graphOutputs.begin(), graphOutputs.end(), graphOutputs[i]);
      outputs[i] = outputs[static_cast<size_t>(it - graphOutputs.begin())].clone();
    }
  }
  ++runs_;
  return outputs;
}

// A fresh tensor for every run cost a large output its page faults and
// zeroing on each run: 68 faults per run, a quarter of a 0.43 ms plan, on a
// segmentation net's 344 KB output (docs/measurement.md). So a tensor
// returned earlier is handed out again once its caller has let go of it;
// two per output, so that a loop that keeps the last result while it asks
// for the next (out = session.run(in)) gets them in turn. Kernels write
// every element of their outputs, so a reused one needs no zeroing.
Tensor Session::outputTensor(size_t output) {
  constexpr size_t kKeptPerOutput = 2;
  if (returnedOutputs_.size() <= output) returnedOutputs_.resize(graph_.outputs().size());
  std::vector<Tensor>& kept = returnedOutputs_[output];
  for (const Tensor& t : kept)
    if (t.soleOwner()) return t;
  Tensor fresh(graph_.value(graph_.outputs()[output]).type);
  ++outputAllocations_;
  if (kept.size() < kKeptPerOutput) kept.push_back(fresh);
  return fresh;
}

Tolerance declaredTolerance(const Plan& plan, const BackendLookup& backends) {
  Tolerance t = kPlanTolerance;
  for (const PlanGroup& g : plan.groups) {
    const Backend* backend = backends ? backends(g.backend) : nullptr;
    if (!backend) continue;
    if (const std::optional<Tolerance> declared = backend->reducedPrecisionTolerance()) {
      t.rtol = std::max(t.rtol, declared->rtol);
      t.atol = std::max(t.atol, declared->atol);
    }
  }
  return t;
}

double scaledBound(const Tolerance& declared) { return std::max(declared.rtol, declared.atol); }

double groupBound(const Backend* backend) {
  if (!backend) return kFloat32Bound;
  const std::optional<Tolerance> declared = backend->reducedPrecisionTolerance();
  if (!declared) return kFloat32Bound;
  const double kernel = backend->reducedPrecisionKernelError();
  return std::max(kFloat32Bound, kernel > 0 ? kernel : scaledBound(*declared));
}

double planBound(const Plan& plan, const BackendLookup& backends) {
  double bound = kFloat32Bound;
  for (const PlanGroup& g : plan.groups) {
    const Backend* backend = backends ? backends(g.backend) : nullptr;
    if (!backend) continue;
    if (const std::optional<Tolerance> declared = backend->reducedPrecisionTolerance())
      bound = std::max(bound, scaledBound(*declared));
  }
  return bound;
}

SessionVerification verifySession(Session& session, const std::vector<Tensor>& inputs,
                                  Tolerance tolerance) {
  SessionVerification result;
  const Graph& graph = session.graph();
  result.outputs = session.run(inputs);
  result.expected = ReferenceExecutor(graph).run(inputs);
  for (size_t i = 0; i < result.outputs.size(); ++i) {
    CompareResult c = compareTensors(result.outputs[i], result.expected[i], tolerance);
    if (!c.ok)
      result.problems.push_back("output '" + graph.value(graph.outputs()[i]).name + "': " + c.message);
    result.comparisons.push_back(std::move(c));
  }
  return result;
}

}  // namespace collage
