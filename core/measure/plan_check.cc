#include "core/measure/plan_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/measure/kernel_check.h"
#include "core/ops/reference_executor.h"

namespace collage {
namespace {

std::string figure(const char* format, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Compares one output of a group rerun alone with the reference's value,
// into `e` (worst float error, the first wrong output, tie steps). `ties`:
// per element, whether a quantizer inside the group rounds the reference's
// value at a tie (empty: none does).
void compareGroupOutput(const std::string& name, const Tensor& got, const Tensor& expected,
                        const std::vector<bool>& ties, Tolerance tolerance, GroupError& e) {
  if (expected.isSequence()) return;
  if (isFloatingPoint(expected.elementType())) {
    const CompareResult c = compareTensors(got, expected, Tolerance{0, 0});
    double largest = 0;
    for (double x : expected.toDoubles()) largest = std::max(largest, std::fabs(x));
    const double scaled = largest > 0 ? c.maxAbsError / largest : c.maxAbsError;
    if (scaled >= e.scaledError) {
      e.scaledError = scaled;
      e.maxAbsError = c.maxAbsError;
      e.worstOutput = name;
    }
    if (e.wrong.empty() && !(c.maxAbsError <= tolerance.atol || scaled <= tolerance.rtol))
      e.wrong = "output '" + name + "': max abs error " + figure("%.3g", c.maxAbsError) + ", " +
                figure("%.3g", scaled) + " of its largest value, beyond rtol " + figure("%g", tolerance.rtol);
    return;
  }
  if (got.type() != expected.type()) {
    if (e.wrong.empty()) e.wrong = "output '" + name + "': " + compareTensors(got, expected).message;
    return;
  }
  const std::vector<int64_t> a = got.toInts(), b = expected.toInts();
  int64_t off = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (std::llabs(a[i] - b[i]) == 1 && i < ties.size() && ties[i]) {
      ++e.tieSteps;
      continue;
    }
    if (first < 0) first = static_cast<int64_t>(i);
    ++off;
  }
  if (off > 0 && e.wrong.empty())
    e.wrong = "output '" + name + "': " + std::to_string(off) + " of " + std::to_string(a.size()) +
              " integers differ, not at a rounding tie; first: element " + std::to_string(first) +
              ": got " + std::to_string(a[static_cast<size_t>(first)]) + ", expected " +
              std::to_string(b[static_cast<size_t>(first)]);
}

struct ReferenceWalk {
  std::vector<GroupError> groups;
  std::vector<QuantizerTies> ties;
};

// The reference node by node, each group rerun alone as soon as its last
// node has been evaluated, each value freed after its last reader.
// `known`: groups whose verdict the caller has (not rerun; left default).
ReferenceWalk walkReference(const Session& session, const std::vector<Tensor>& inputs, Tolerance tolerance,
                            const std::vector<bool>& known = {}) {
  const Graph& graph = session.graph();
  const size_t numValues = static_cast<size_t>(graph.numValues());
  const size_t numGroups = session.plan().groups.size();
  std::vector<Tensor> owned(numValues);
  std::vector<const Tensor*> at(numValues, nullptr);
  for (size_t i = 0; i < graph.inputs().size(); ++i) at[static_cast<size_t>(graph.inputs()[i])] = &inputs.at(i);
  for (ValueId v = 0; v < graph.numValues(); ++v)
    if (graph.value(v).isConstant()) at[static_cast<size_t>(v)] = &*graph.value(v).constant;

  // Readers left per value: nodes, and the groups that read or produce it.
  std::vector<int> readers(numValues, 0);
  for (NodeId n = 0; n < graph.numNodes(); ++n)
    for (ValueId v : graph.node(n).inputs)
      if (v != kNoValue) ++readers[static_cast<size_t>(v)];
  std::vector<std::vector<size_t>> groupsEndingAt(static_cast<size_t>(graph.numNodes()));
  // Tie masks kept for a group's integer output that a quantizer inside it
  // computes from a value computed inside it (from a group input the
  // kernel sees the reference's own x: then it must be exact).
  std::map<ValueId, std::vector<bool>> tieMasks;
  auto rerun = [&](size_t g) { return g >= known.size() || !known[g]; };
  for (size_t g = 0; g < numGroups; ++g) {
    if (!rerun(g)) continue;
    const KernelRequest& request = session.request(g);
    for (ValueId v : request.inputs) ++readers[static_cast<size_t>(v)];
    for (ValueId v : request.outputs) {
      ++readers[static_cast<size_t>(v)];
      const NodeId producer = graph.value(v).producer;
      const Node& node = graph.node(producer);
      if (isQuantizer(node) && node.outputs[0] == v && quantizesComputedFloats(graph, node) &&
          request.nodes.contains(graph.value(node.inputs[0]).producer))
        tieMasks[v] = {};
    }
    const std::vector<NodeId> members = request.members();
    groupsEndingAt[static_cast<size_t>(*std::max_element(members.begin(), members.end()))].push_back(g);
  }
  auto release = [&](ValueId v) {
    const size_t i = static_cast<size_t>(v);
    if (--readers[i] == 0 && !owned[i].empty()) {
      owned[i] = Tensor();
      at[i] = nullptr;
    }
  };

  ReferenceWalk walk;
  walk.groups.resize(numGroups);
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    const Node& node = graph.node(n);
    std::vector<const Tensor*> in;
    for (ValueId v : node.inputs) in.push_back(v == kNoValue ? nullptr : at[static_cast<size_t>(v)]);
    std::vector<Tensor> out = evaluateNode(node, in);
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const ValueId v = node.outputs[i];
      if (v == kNoValue) continue;
      owned[static_cast<size_t>(v)] = std::move(out[i]);
      at[static_cast<size_t>(v)] = &owned[static_cast<size_t>(v)];
    }
    if (quantizesComputedFloats(graph, node)) {
      std::vector<bool> near = nearRoundingTies(graph, n, at, tolerance);
      const int64_t count = std::count(near.begin(), near.end(), true);
      walk.ties.push_back({n, count, static_cast<int64_t>(near.size())});
      if (auto it = tieMasks.find(node.outputs[0]); it != tieMasks.end()) it->second = std::move(near);
    }
    for (ValueId v : node.inputs)
      if (v != kNoValue) release(v);

    for (size_t g : groupsEndingAt[static_cast<size_t>(n)]) {
      const KernelRequest& request = session.request(g);
      GroupError& e = walk.groups[g];
      e.group = g;
      e.backend = session.plan().groups[g].backend;
      e.what = request.toString();
      // Compiled again rather than taken from the Session: there its inputs
      // and outputs may be in a backend's own layout or on a device.
      Backend* backend = session.groupBackend(g);
      if (session.groupDevice(g).type != DeviceType::CPU) {
        e.notRun = "runs on " + session.groupDevice(g).toString();
      } else if (CompileResult compiled = backend->compile(request); !compiled) {
        e.notRun = compiled.refusal;
      } else {
        std::vector<Tensor> kernelInputs;
        for (ValueId v : request.inputs) kernelInputs.push_back(at[static_cast<size_t>(v)]->clone());
        const std::vector<Tensor> outputs = runKernel(*compiled.kernel, request, kernelInputs);
        static const std::vector<bool> kNoTies;
        for (size_t i = 0; i < outputs.size(); ++i) {
          const ValueId v = request.outputs[i];
          auto mask = tieMasks.find(v);
          compareGroupOutput(graph.value(v).name, outputs[i], *at[static_cast<size_t>(v)],
                             mask == tieMasks.end() ? kNoTies : mask->second, tolerance, e);
        }
      }
      for (ValueId v : request.inputs) release(v);
      for (ValueId v : request.outputs) {
        tieMasks.erase(v);
        release(v);
      }
    }
    for (ValueId v : node.outputs)  // read by nothing
      if (v != kNoValue && readers[static_cast<size_t>(v)] == 0) {
        owned[static_cast<size_t>(v)] = Tensor();
        at[static_cast<size_t>(v)] = nullptr;
      }
  }
  return walk;
}

}  // namespace

std::vector<GroupError> groupErrors(const Session& session, const std::vector<Tensor>& inputs,
                                    Tolerance tolerance) {
  return walkReference(session, inputs, tolerance).groups;
}

PlanCheck checkPlan(Session& session, const std::vector<Tensor>& inputs, const PlanCheckOptions& options) {
  const Graph& graph = session.graph();
  PlanCheck check;
  check.outputs = session.run(inputs);
  std::vector<Tensor> computed;
  if (!options.expected) computed = ReferenceExecutor(graph).run(inputs);
  const std::vector<Tensor>& expected = options.expected ? *options.expected : computed;
  std::vector<std::string> differing;
  for (size_t i = 0; i < check.outputs.size(); ++i) {
    CompareResult c = compareTensors(check.outputs[i], expected[i], options.tolerance);
    if (!c.ok) differing.push_back("output '" + graph.value(graph.outputs()[i]).name + "': " + c.message);
    check.comparisons.push_back(std::move(c));
  }
  if (differing.empty() && !options.eachKernel) {
    check.ok = true;
    return check;
  }
  // Kernels rerun for an earlier plan keep their verdict (options.memo).
  const size_t numGroups = session.plan().groups.size();
  std::vector<std::string> keys(numGroups);
  std::vector<bool> known(numGroups, false);
  const std::string within = figure("%g", options.tolerance.rtol) + "," + figure("%g", options.tolerance.atol);
  bool allKnown = options.memo && options.memo->ties.count(within) > 0;
  for (size_t g = 0; g < numGroups; ++g) {
    const PlanGroup& group = session.plan().groups[g];
    keys[g] = within + "|" + group.backend;
    for (const std::string& node : group.nodes) keys[g] += "|" + node;
    known[g] = options.memo && options.memo->kernels.count(keys[g]) > 0;
    allKnown = allKnown && known[g];
  }
  ReferenceWalk walk;
  if (allKnown) {
    walk.groups.resize(numGroups);
    walk.ties = options.memo->ties.at(within);
  } else {
    walk = walkReference(session, inputs, options.tolerance, known);
  }
  for (size_t g = 0; g < numGroups && options.memo; ++g) {
    if (known[g]) {
      walk.groups[g] = options.memo->kernels.at(keys[g]);
      walk.groups[g].group = g;
    } else {
      options.memo->kernels[keys[g]] = walk.groups[g];
    }
  }
  if (options.memo) options.memo->ties[within] = walk.ties;
  check.groups = std::move(walk.groups);
  check.ties = std::move(walk.ties);
  if (differing.empty()) {
    check.ok = true;
    return check;
  }
  std::vector<std::string> wrongKernels;
  for (const GroupError& e : check.groups)
    if (!e.wrong.empty())
      wrongKernels.push_back("group " + std::to_string(e.group + 1) + " on " + e.backend + " (" + e.what +
                             "), rerun alone on the reference's inputs: " + e.wrong);
  size_t notRerun = 0;
  for (const GroupError& e : check.groups) notRerun += e.notRun.empty() ? 0 : 1;
  int64_t nearTies = 0, quantized = 0;
  int atTies = 0;
  for (const QuantizerTies& t : check.ties) {
    nearTies += t.nearTies;
    quantized += t.elements;
    atTies += t.nearTies > 0 ? 1 : 0;
  }
  if (wrongKernels.empty() && notRerun == 0 && nearTies > 0) {
    check.ok = true;
    check.tiesNote = "the outputs differ from the reference's beyond float32 rounding, yet every kernel rerun "
                     "alone on the reference's inputs matches it (integers exactly): " +
                     std::to_string(nearTies) + " of " + std::to_string(quantized) + " values quantized at " +
                     std::to_string(atTies) + " quantizer(s) of computed floats lie within " +
                     "the float tolerance of a rounding tie, where another summation order rounds to the "
                     "neighbouring step and the layers after inherit it (docs/quantized.md)";
    return check;
  }
  check.problems = differing;
  check.problems.insert(check.problems.end(), wrongKernels.begin(), wrongKernels.end());
  if (wrongKernels.empty() && notRerun > 0)
    check.problems.push_back(std::to_string(notRerun) + " group(s) could not be rerun alone (" +
                             "on a device, or refused); the others match the reference");
  else if (wrongKernels.empty())
    check.problems.push_back(
        "every kernel alone matches the reference, and no quantizer rounds a value at a tie: the "
        "difference arises between kernels (a value handed over wrongly?)");
  return check;
}

}  // namespace collage
