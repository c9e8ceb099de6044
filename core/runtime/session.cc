#include "core/runtime/session.h"

#include <algorithm>
#include <cstdlib>

#include "core/ir/error.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"
#include "core/ir/sub_graph.h"

namespace collage {

namespace {

constexpr size_t kBufferAlignment = 64;

size_t roundUp(size_t bytes) {
  return std::max<size_t>(kBufferAlignment, (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment);
}

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
  std::vector<const DLTensor*> inputs;  // point into Session::dl_
  std::vector<DLTensor*> outputs;
};

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

  // One DLTensor per value; data pointers are filled by planMemory() (pool
  // buffers) or by run() (graph inputs and outputs).
  dl_.resize(static_cast<size_t>(graph_.numValues()));
  for (ValueId v = 0; v < graph_.numValues(); ++v) {
    const TensorType& type = graph_.value(v).type;
    DLTensor& d = dl_[static_cast<size_t>(v)];
    d = DLTensor{};
    d.device = DLDevice{kDLCPU, 0};
    d.ndim = static_cast<int32_t>(type.shape.size());
    d.dtype = toDLDataType(type.elementType);
    // The graph is const but outlives the session and is never edited while
    // it runs; DLPack wants a mutable shape pointer.
    d.shape = const_cast<int64_t*>(type.shape.data());
    d.strides = nullptr;
    d.byte_offset = 0;
  }
  for (auto& k : kernels_) {
    for (ValueId v : k->request.inputs) k->inputs.push_back(&dl_[static_cast<size_t>(v)]);
    for (ValueId v : k->request.outputs) k->outputs.push_back(&dl_[static_cast<size_t>(v)]);
  }
  handOverNativeLayouts();
  planMemory();
  timings_.reserve(order_.size());
}

void Session::handOverNativeLayouts() {
  nativeBytes_.assign(static_cast<size_t>(graph_.numValues()), 0);
  // A diagnostic switch, to measure what the hand-over gains.
  if (const char* off = std::getenv("COLLAGE_NO_LAYOUT_HANDOVER"); off && *off && *off != '0') return;
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
      const std::optional<NativeLayout> layout = producer.kernel->nativeOutputLayout(o);
      if (!layout) continue;
      const bool all = std::all_of(consumers.begin(), consumers.end(), [&](const auto& c) {
        return kernels_[c.first]->kernel->nativeInputLayout(c.second) == layout;
      });
      if (!all) continue;
      nativeOut[p].push_back(o);
      for (const auto& [g, i] : consumers) nativeIn[g].push_back(i);
      nativeBytes_[static_cast<size_t>(v)] = layout->bytes;
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

size_t Session::bytesOf(ValueId v) const {
  return std::max(graph_.value(v).type.byteSize(), nativeBytes_[static_cast<size_t>(v)]);
}

Session::~Session() = default;

const KernelRequest& Session::request(size_t group) const { return kernels_.at(group)->request; }

void Session::planMemory() {
  const size_t numValues = static_cast<size_t>(graph_.numValues());
  // Step at which each value's last reader runs, and whether it is a graph output.
  std::vector<int64_t> lastRead(numValues, -1);
  for (size_t s = 0; s < order_.size(); ++s)
    for (ValueId v : kernels_[order_[s]]->request.inputs)
      lastRead[static_cast<size_t>(v)] = static_cast<int64_t>(s);
  std::vector<bool> isOutput(numValues, false);
  for (ValueId v : graph_.outputs()) isOutput[static_cast<size_t>(v)] = true;

  struct PoolBuffer {
    size_t size = 0;
    bool free = true;
  };
  std::vector<PoolBuffer> pool;
  bufferOf_.assign(numValues, -1);
  size_t live = 0;        // bytes of pooled values alive now
  size_t outputBytes = 0; // bytes of graph outputs produced so far
  peakBytes_ = 0;
  totalValueBytes_ = 0;

  for (size_t s = 0; s < order_.size(); ++s) {
    const KernelRequest& req = kernels_[order_[s]]->request;
    for (ValueId v : req.outputs) {
      const size_t bytes = bytesOf(v);
      totalValueBytes_ += bytes;
      if (isOutput[static_cast<size_t>(v)]) {
        outputBytes += bytes;
        continue;
      }
      const size_t need = roundUp(bytes);
      int32_t best = -1, largestFree = -1;
      for (size_t b = 0; b < pool.size(); ++b) {
        if (!pool[b].free) continue;
        if (pool[b].size >= need && (best < 0 || pool[b].size < pool[static_cast<size_t>(best)].size))
          best = static_cast<int32_t>(b);
        if (largestFree < 0 || pool[b].size > pool[static_cast<size_t>(largestFree)].size)
          largestFree = static_cast<int32_t>(b);
      }
      if (best < 0 && largestFree >= 0) {
        best = largestFree;  // grow it: cheaper than a new buffer beside a free one
        pool[static_cast<size_t>(best)].size = need;
      }
      if (best < 0) {
        pool.push_back({need, true});
        best = static_cast<int32_t>(pool.size() - 1);
      }
      pool[static_cast<size_t>(best)].free = false;
      bufferOf_[static_cast<size_t>(v)] = best;
      live += bytes;
    }
    peakBytes_ = std::max(peakBytes_, live + outputBytes);
    // Values whose last reader has now run go back to the pool; so do values
    // nobody reads (defensive: a request lists only values used outside).
    auto release = [&](ValueId v) {
      int32_t b = bufferOf_[static_cast<size_t>(v)];
      if (b < 0 || pool[static_cast<size_t>(b)].free) return;
      pool[static_cast<size_t>(b)].free = true;
      live -= bytesOf(v);
    };
    for (ValueId v : req.inputs)
      if (lastRead[static_cast<size_t>(v)] == static_cast<int64_t>(s)) release(v);
    for (ValueId v : req.outputs)
      if (lastRead[static_cast<size_t>(v)] < 0) release(v);
  }

  buffers_.clear();
  arenaBytes_ = 0;
  for (const PoolBuffer& b : pool) {
    buffers_.emplace_back(ElementType::UInt8, Shape{static_cast<int64_t>(b.size)});
    arenaBytes_ += b.size;
  }
  for (size_t v = 0; v < numValues; ++v)
    if (bufferOf_[v] >= 0) dl_[v].data = buffers_[static_cast<size_t>(bufferOf_[v])].raw();
}

std::vector<Tensor> Session::run(const std::vector<Tensor>& inputs) {
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
    outputs[i] = Tensor(value.type);
    dl_[static_cast<size_t>(graphOutputs[i])].data = outputs[i].raw();
    producedByKernel[i] = true;
  }

  timings_.clear();
  for (size_t g : order_) {
    Kernel_& k = *kernels_[g];
    std::chrono::steady_clock::time_point start;
    if (profiling_) start = std::chrono::steady_clock::now();
    try {
      k.kernel->run(k.inputs, k.outputs);
    } catch (const std::exception& e) {
      rethrowWith(plan_.describeGroup(g) + ": " + plan_.groups[g].backend + " kernel failed: ", e);
    }
    if (profiling_) {
      auto end = std::chrono::steady_clock::now();
      timings_.push_back(
          {g, std::chrono::duration<double, std::micro>(start - epoch_).count(),
           std::chrono::duration<double, std::micro>(end - start).count(), runs_});
    }
  }

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
