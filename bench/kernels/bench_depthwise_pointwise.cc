// bench_depthwise_pointwise: the native depthwise-pointwise kernel
// (backends/native/native_depthwise_pointwise.h) against the two oneDNN
// kernels it replaces, run one after the other, on a face detector's block
// (24 channels at 64x64, 5x5 depthwise, 1x1 to 24 or 28 channels, Relu on
// the residual where the channels agree). Prints each way's median and
// checks the fused result against the pair's.
//
//   bench_depthwise_pointwise [--iterations N] [--threads T]
//
// Figures depend on the machine and its load: time on a quiet machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/backend_list.h"
#include "backends/native/native_backend.h"
#include "core/ir/threading.h"
#include "core/measure/kernel_check.h"
#include "core/ops/op_registry.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;
using Ints = std::vector<int64_t>;

AttributeMap attrs(std::initializer_list<std::pair<std::string, Attribute>> list) {
  AttributeMap m;
  for (const auto& [k, v] : list) m.set(k, v);
  return m;
}

// Nodes typed by the registry's shape inference, constants seeded.
class Builder {
 public:
  ValueId input(const Shape& s) { return g.addInput(fresh("x"), {ElementType::Float32, s}); }
  ValueId constant(const Shape& s) {
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    std::vector<float> v(static_cast<size_t>(numElements(s)));
    for (float& x : v) x = u(rng);
    return g.addConstant(fresh("c"), Tensor::fromFloats(s, v));
  }
  NodeId op(const std::string& name, std::vector<ValueId> ins, AttributeMap attrs = {}) {
    const OpSchema& schema = OpRegistry::instance().get(name);
    for (const AttributeSpec& a : schema.attributes)
      if (!attrs.has(a.name) && a.defaultValue) attrs.set(a.name, *a.defaultValue);
    Node n{fresh(name), name, attrs, ins, {0}};
    std::vector<TensorType> types;
    for (ValueId v : ins) types.push_back(g.value(v).type);
    n.outputs = {g.addValue(fresh("t"), inferNode(n, types).at(0))};
    last = n.outputs[0];
    return g.addNode(n);
  }
  Graph g;
  ValueId last = kNoValue;

 private:
  std::string fresh(const std::string& base) { return base + std::to_string(count_++); }
  std::mt19937 rng{7};
  int count_ = 0;
};

struct Timed {
  double medianUs = 0;
  std::vector<Tensor> outputs;
};

// Runs `kernels` in order, each on the previous one's outputs, `iterations` times.
Timed timeChain(std::vector<std::pair<Kernel*, KernelRequest>>& kernels, std::vector<Tensor> inputs,
                int iterations) {
  Timed t;
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    std::vector<Tensor> values = inputs;
    const auto start = Clock::now();
    for (auto& [kernel, request] : kernels) values = runKernel(*kernel, request, values);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    t.outputs = values;
  }
  std::sort(us.begin(), us.end());
  t.medianUs = us[us.size() / 2];
  return t;
}

int run(int argc, char** argv) {
  int iterations = 50, threads = threadCount();
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--iterations") == 0) iterations = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--threads") == 0) threads = std::max(1, std::atoi(argv[++i]));
  }
  setThreadCount(threads);
  std::unique_ptr<Backend> native = createBackend("native"), onednn = createBackend("onednn");
  if (!native || !onednn) {
    std::fprintf(stderr, "bench_depthwise_pointwise: native or onednn backend missing\n");
    return 1;
  }
  std::printf("threads %d, %d iterations, medians\n", threads, iterations);
  for (int64_t m : {24, 28}) {
    Builder b;
    const int64_t c = 24;
    const ValueId x = b.input({1, c, 64, 64});
    const NodeId dw = b.op("Conv", {x, b.constant({c, 1, 5, 5}), b.constant({c})},
                           attrs({{"group", c}, {"pads", Ints{2, 2, 2, 2}}, {"kernel_shape", Ints{5, 5}}}));
    const ValueId d = b.last;
    std::vector<NodeId> pwNodes{b.op("Conv", {d, b.constant({m, c, 1, 1}), b.constant({m})})};
    if (m == c) {
      pwNodes.push_back(b.op("Add", {b.last, x}));
      pwNodes.push_back(b.op("Relu", {b.last}));
    }
    b.g.markOutput(b.last);
    b.g.finalize();
    const Graph& g = b.g;
    NodeSet all(g.numNodes()), first(g.numNodes()), second(g.numNodes());
    first.insert(dw);
    for (NodeId n = 0; n < g.numNodes(); ++n) (n == dw ? first : second).insert(n), all.insert(n);
    const KernelRequest fusedReq = KernelRequest::of(g, all), dwReq = KernelRequest::of(g, first),
                        pwReq = KernelRequest::of(g, second);
    CompileResult fused = native->compile(fusedReq);
    CompileResult k1 = onednn->compile(dwReq), k2 = onednn->compile(pwReq);
    if (!fused || !k1 || !k2) {
      std::fprintf(stderr, "refused: %s %s %s\n", fused.refusal.c_str(), k1.refusal.c_str(), k2.refusal.c_str());
      return 1;
    }
    std::vector<Tensor> inputs{Tensor(g.value(x).type)};
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < inputs[0].numElements(); ++i) inputs[0].data<float>()[i] = u(rng);
    // oneDNN's pointwise kernel reads the depthwise output (and x for the residual).
    std::vector<std::pair<Kernel*, KernelRequest>> fusedChain{{fused.kernel.get(), fusedReq}};
    const Timed a = timeChain(fusedChain, inputs, iterations);
    std::vector<std::pair<Kernel*, KernelRequest>> dwOnly{{k1.kernel.get(), dwReq}};
    const Timed t1 = timeChain(dwOnly, inputs, iterations);
    std::vector<Tensor> pwInputs;
    for (ValueId v : pwReq.inputs) pwInputs.push_back(v == d ? t1.outputs[0] : inputs[0]);
    std::vector<std::pair<Kernel*, KernelRequest>> pwOnly{{k2.kernel.get(), pwReq}};
    const Timed t2 = timeChain(pwOnly, pwInputs, iterations);
    const CompareResult same = compareTensors(a.outputs[0], t2.outputs[0], Tolerance{1e-3, 1e-4});
    std::printf("24ch 64x64 dw5x5 -> pw %ld%s: native fused %.1f us, onednn dw %.1f + pw %.1f = %.1f us; %s\n",
                static_cast<long>(m), m == c ? " + residual + relu" : "", a.medianUs, t1.medianUs, t2.medianUs,
                t1.medianUs + t2.medianUs, same.ok ? "results agree" : ("results differ: " + same.message).c_str());
    std::printf("  %s\n", describeNativeKernel(*fused.kernel).c_str());
    if (!same.ok) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace collage

int main(int argc, char** argv) { return collage::run(argc, argv); }
