#include "core/measure/plan_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
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

// Channels last ([N][spatial...][C]) against plain ([N][C][spatial...]):
// the element of the channels-last buffer that holds plain element i.
size_t channelsLastIndex(const Shape& shape, size_t i) {
  if (shape.size() < 3) return i;
  const size_t channels = static_cast<size_t>(shape[1]);
  size_t spatial = 1;
  for (size_t d = 2; d < shape.size(); ++d) spatial *= static_cast<size_t>(shape[d]);
  const size_t n = i / (channels * spatial), c = (i / spatial) % channels, s = i % spatial;
  return (n * spatial + s) * channels + c;
}

// A value as the Session holds it, read into plain memory; an empty tensor
// when it is in a layout only its backend knows.
Tensor readPlain(const TensorType& type, const std::optional<NativeLayout>& layout, void* data) {
  if (!layout) return Tensor::view(type, data).clone();
  if (!(*layout == channelsLastLayout(type.shape, type.elementType))) return Tensor();
  Tensor plain(type);
  const size_t size = elementSize(type.elementType), n = static_cast<size_t>(type.numElements());
  auto* to = static_cast<uint8_t*>(plain.raw());
  const auto* from = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i)
    std::memcpy(to + i * size, from + channelsLastIndex(type.shape, i) * size, size);
  return plain;
}

// A plain tensor in `layout` (nullopt: as it is; channels last: transposed).
Tensor inLayout(const Tensor& plain, const std::optional<NativeLayout>& layout) {
  if (!layout) return plain.clone();
  Tensor out(plain.type());
  const size_t size = elementSize(plain.elementType()),
               n = static_cast<size_t>(plain.numElements());
  auto* to = static_cast<uint8_t*>(out.raw());
  const auto* from = static_cast<const uint8_t*>(plain.raw());
  for (size_t i = 0; i < n; ++i)
    std::memcpy(to + channelsLastIndex(plain.shape(), i) * size, from + i * size, size);
  return out;
}

// Writes plain element i of a value the Session holds (see readPlain).
void writeElement(const TensorType& type, const std::optional<NativeLayout>& layout, void* data,
                  size_t i, const Tensor& from) {
  const size_t size = elementSize(type.elementType);
  const size_t at = layout ? channelsLastIndex(type.shape, i) : i;
  std::memcpy(static_cast<uint8_t*>(data) + at * size,
              static_cast<const uint8_t*>(from.raw()) + i * size, size);
}

// Compares one output of a group rerun alone with the reference's value,
// into `e` (worst float error, the first wrong output, tie steps). `ties`:
// per element, whether a quantizer inside the group rounds the reference's
// value near a tie (empty: none does).
void compareGroupOutput(const std::string& name, const Tensor& got, const Tensor& expected,
                        const std::vector<bool>& ties, GroupError& e) {
  if (expected.isSequence()) return;
  if (isFloatingPoint(expected.elementType())) {
    const CompareResult c = compareScaled(got, expected, e.bound);
    if (c.scaledError >= e.scaledError) {
      e.scaledError = c.scaledError;
      e.maxAbsError = c.maxAbsError;
      e.worstOutput = name;
    }
    if (e.wrong.empty() && !c.ok)
      e.wrong = "output '" + name + "': max abs error " + figure("%.3g", c.maxAbsError) + ", " +
                figure("%.3g", c.scaledError) + " of its largest value, beyond the " +
                figure("%g", e.bound) + " its backend is held to";
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

// The reference's values, evaluated node by node, each freed after its last
// reader (`readers` counts them; the caller adds its own).
struct ReferenceValues {
  const Graph& graph;
  std::vector<Tensor> owned;
  std::vector<const Tensor*> at;
  std::vector<int> readers;

  ReferenceValues(const Graph& g, const std::vector<Tensor>& inputs)
      : graph(g),
        owned(static_cast<size_t>(g.numValues())),
        at(static_cast<size_t>(g.numValues()), nullptr),
        readers(static_cast<size_t>(g.numValues()), 0) {
    for (size_t i = 0; i < g.inputs().size(); ++i)
      at[static_cast<size_t>(g.inputs()[i])] = &inputs.at(i);
    for (ValueId v = 0; v < g.numValues(); ++v)
      if (g.value(v).isConstant()) at[static_cast<size_t>(v)] = &*g.value(v).constant;
    for (NodeId n = 0; n < g.numNodes(); ++n)
      for (ValueId v : g.node(n).inputs)
        if (v != kNoValue) ++readers[static_cast<size_t>(v)];
  }
  void evaluate(NodeId n) {
    const Node& node = graph.node(n);
    std::vector<const Tensor*> in;
    for (ValueId v : node.inputs)
      in.push_back(v == kNoValue ? nullptr : at[static_cast<size_t>(v)]);
    std::vector<Tensor> out = evaluateNode(node, in);
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const ValueId v = node.outputs[i];
      if (v == kNoValue) continue;
      owned[static_cast<size_t>(v)] = std::move(out[i]);
      at[static_cast<size_t>(v)] = &owned[static_cast<size_t>(v)];
    }
  }
  // After node n's own use of its inputs (call once it is evaluated).
  void releaseInputsOf(NodeId n) {
    for (ValueId v : graph.node(n).inputs)
      if (v != kNoValue) release(v);
    for (ValueId v : graph.node(n).outputs)  // read by nothing
      if (v != kNoValue && readers[static_cast<size_t>(v)] == 0) drop(v);
  }
  void release(ValueId v) {
    if (--readers[static_cast<size_t>(v)] == 0) drop(v);
  }
  void drop(ValueId v) {
    const size_t i = static_cast<size_t>(v);
    if (owned[i].empty()) return;
    owned[i] = Tensor();
    at[i] = nullptr;
  }
};

struct ReferenceWalk {
  std::vector<GroupError> groups;
  std::vector<QuantizerTies> ties;
};

// The reference node by node, each group rerun alone as soon as its last
// node has been evaluated, each value freed after its last reader.
// `known`: groups whose verdict the caller has (not rerun; left default).
ReferenceWalk walkReference(const Session& session, const std::vector<Tensor>& inputs,
                            double planBound, const std::vector<bool>& known = {}) {
  const Graph& graph = session.graph();
  const size_t numGroups = session.plan().groups.size();
  ReferenceValues ref(graph, inputs);
  std::vector<std::vector<size_t>> groupsEndingAt(static_cast<size_t>(graph.numNodes()));
  // Tie masks kept for a group's integer output that a quantizer inside it
  // computes from a value computed inside it (from a group input the
  // kernel sees the reference's own x: then it must be exact).
  std::map<ValueId, std::vector<bool>> tieMasks;
  auto rerun = [&](size_t g) { return g >= known.size() || !known[g]; };
  for (size_t g = 0; g < numGroups; ++g) {
    if (!rerun(g)) continue;
    const KernelRequest& request = session.request(g);
    for (ValueId v : request.inputs) ++ref.readers[static_cast<size_t>(v)];
    for (ValueId v : request.outputs) {
      ++ref.readers[static_cast<size_t>(v)];
      const NodeId producer = graph.value(v).producer;
      const Node& node = graph.node(producer);
      if (isQuantizer(node) && node.outputs[0] == v && quantizesComputedFloats(graph, node) &&
          request.nodes.contains(graph.value(node.inputs[0]).producer))
        tieMasks[v] = {};
    }
    const std::vector<NodeId> members = request.members();
    groupsEndingAt[static_cast<size_t>(*std::max_element(members.begin(), members.end()))].push_back(g);
  }

  ReferenceWalk walk;
  walk.groups.resize(numGroups);
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    const Node& node = graph.node(n);
    ref.evaluate(n);
    if (quantizesComputedFloats(graph, node)) {
      std::vector<bool> near = nearRoundingTies(graph, n, ref.at, planBound);
      const int64_t count = std::count(near.begin(), near.end(), true);
      walk.ties.push_back({n, count, static_cast<int64_t>(near.size())});
      if (auto it = tieMasks.find(node.outputs[0]); it != tieMasks.end()) it->second = std::move(near);
    }
    ref.releaseInputsOf(n);

    for (size_t g : groupsEndingAt[static_cast<size_t>(n)]) {
      const KernelRequest& request = session.request(g);
      GroupError& e = walk.groups[g];
      e.group = g;
      e.backend = session.plan().groups[g].backend;
      e.what = request.toString();
      // Compiled again rather than taken from the Session (its kernel reads
      // and writes the Session's buffers, maybe on a device), and switched to
      // the layouts its values pass in within the plan (Session::valueLayout:
      // a native elementwise pass iterating channels last runs other code
      // than over plain memory): the reference's inputs go in converted, its
      // outputs come back to plain memory to be compared.
      Backend* backend = session.groupBackend(g);
      e.bound = groupBound(backend);
      std::vector<std::optional<NativeLayout>> inLayouts, outLayouts;
      bool knownLayouts = true;  // channels last or plain: we can convert
      auto layoutOf = [&](ValueId v) {
        const std::optional<NativeLayout>& l = session.valueLayout(v);
        const TensorType& t = graph.value(v).type;
        if (l && !(*l == channelsLastLayout(t.shape, t.elementType))) knownLayouts = false;
        return l;
      };
      for (ValueId v : request.inputs) inLayouts.push_back(layoutOf(v));
      for (ValueId v : request.outputs) outLayouts.push_back(layoutOf(v));
      if (session.groupDevice(g).type != DeviceType::CPU) {
        e.notRun = "runs on " + session.groupDevice(g).toString();
      } else if (CompileResult compiled = backend->compile(request); !compiled) {
        e.notRun = compiled.refusal;
      } else {
        // A backend's own layout (oneDNN's blocked ones) we cannot convert
        // into: such a kernel is rerun in plain memory.
        if (!knownLayouts) {
          inLayouts.assign(inLayouts.size(), std::nullopt);
          outLayouts.assign(outLayouts.size(), std::nullopt);
        }
        for (size_t i = 0; i < inLayouts.size(); ++i)
          if (inLayouts[i]) compiled.kernel->useNativeInputLayout(i);
        for (size_t o = 0; o < outLayouts.size(); ++o)
          if (outLayouts[o]) compiled.kernel->useNativeOutputLayout(o);
        std::vector<Tensor> kernelInputs;
        for (size_t i = 0; i < request.inputs.size(); ++i)
          kernelInputs.push_back(
              inLayout(*ref.at[static_cast<size_t>(request.inputs[i])], inLayouts[i]));
        std::vector<Tensor> outputs = runKernel(*compiled.kernel, request, kernelInputs);
        static const std::vector<bool> kNoTies;
        for (size_t i = 0; i < outputs.size(); ++i) {
          const ValueId v = request.outputs[i];
          if (outLayouts[i])
            outputs[i] = readPlain(graph.value(v).type, outLayouts[i], outputs[i].raw());
          auto mask = tieMasks.find(v);
          compareGroupOutput(graph.value(v).name, outputs[i], *ref.at[static_cast<size_t>(v)],
                             mask == tieMasks.end() ? kNoTies : mask->second, e);
        }
        auto switched = [](const std::optional<NativeLayout>& l) { return l.has_value(); };
        if (!e.wrong.empty() && (std::any_of(inLayouts.begin(), inLayouts.end(), switched) ||
                                 std::any_of(outLayouts.begin(), outLayouts.end(), switched)))
          e.wrong += " (run in the layouts it runs in within the plan: channels last)";
      }
      for (ValueId v : request.inputs) ref.release(v);
      for (ValueId v : request.outputs) {
        tieMasks.erase(v);
        ref.release(v);
      }
    }
  }
  return walk;
}

struct Replay {
  std::vector<Tensor> outputs;
  int64_t substituted = 0;
  // The first group (in the order the plan runs) whose outputs depart from
  // the reference's beyond the plan's bound once the ties are put back.
  std::string departs;
};

// Runs the Session again, evaluating the reference alongside it group by
// group (in the Session's order, each value freed after its last reader),
// and after each kernel puts the reference's values back where a quantizer
// rounds near a tie:
//  - at the quantizer's output, when a group hands it over: elements near a
//    tie that are one step off;
//  - at its input x, when the quantizer sits inside a later group that reads
//    x: elements near a tie whose float is within the plan's bound of the
//    reference's;
//  - a group that is right alone (`rightAlone`) and rounds near a tie
//    between two of its own nodes: its outputs, which that tie decides.
// Then compares the group's outputs with the reference's.
Replay replay(Session& session, const std::vector<Tensor>& inputs, double planBound,
              const std::vector<bool>& rightAlone) {
  const Graph& graph = session.graph();
  ReferenceValues ref(graph, inputs);
  const size_t numGroups = session.plan().groups.size();
  std::vector<int> groupOf(static_cast<size_t>(graph.numNodes()), -1);
  for (size_t g = 0; g < numGroups; ++g)
    for (NodeId n : session.request(g).members())
      groupOf[static_cast<size_t>(n)] = static_cast<int>(g);
  // The graph outputs are kept to the end; each group's outputs until compared.
  for (ValueId v : graph.outputs()) ++ref.readers[static_cast<size_t>(v)];

  Replay result;
  auto afterKernel = [&](size_t g, const std::vector<DLTensor*>& outputs) {
    const KernelRequest& request = session.request(g);
    const std::vector<NodeId> members = request.members();
    std::vector<ValueId> kept;  // values of this group released at the end
    for (ValueId v : request.outputs) {
      ++ref.readers[static_cast<size_t>(v)];
      kept.push_back(v);
    }
    bool internalTie = false;
    for (NodeId n : members) {
      ref.evaluate(n);
      const Node& node = graph.node(n);
      if (quantizesComputedFloats(graph, node) &&
          groupOf[static_cast<size_t>(graph.value(node.inputs[0]).producer)] ==
              static_cast<int>(g) &&
          std::find(request.outputs.begin(), request.outputs.end(), node.outputs[0]) ==
              request.outputs.end()) {
        const std::vector<bool> near = nearRoundingTies(graph, n, ref.at, planBound);
        internalTie = internalTie || std::count(near.begin(), near.end(), true) > 0;
      }
      // The group's own quantizers: their outputs that it hands over.
      if (quantizesComputedFloats(graph, node)) {
        const auto it = std::find(request.outputs.begin(), request.outputs.end(), node.outputs[0]);
        if (it != request.outputs.end() && session.groupDevice(g).type == DeviceType::CPU) {
          const size_t o = static_cast<size_t>(it - request.outputs.begin());
          const ValueId y = node.outputs[0];
          const TensorType& type = graph.value(y).type;
          const std::optional<NativeLayout>& layout = session.valueLayout(y);
          const Tensor got = readPlain(type, layout, outputs[o]->data);
          if (!got.empty()) {
            const std::vector<bool> near = nearRoundingTies(graph, n, ref.at, planBound);
            const Tensor& want = *ref.at[static_cast<size_t>(y)];
            const std::vector<int64_t> a = got.toInts(), b = want.toInts();
            for (size_t i = 0; i < near.size(); ++i)
              if (near[i] && std::llabs(a[i] - b[i]) == 1) {
                writeElement(type, layout, outputs[o]->data, i, want);
                ++result.substituted;
              }
          }
        }
      }
    }
    // Inputs x of quantizers in later groups, that this group hands over.
    for (size_t o = 0; o < request.outputs.size() && session.groupDevice(g).type == DeviceType::CPU;
         ++o) {
      const ValueId x = request.outputs[o];
      for (NodeId q : graph.value(x).consumers) {
        const Node& node = graph.node(q);
        const int qg = groupOf[static_cast<size_t>(q)];
        if (!quantizesComputedFloats(graph, node) || node.inputs[0] != x ||
            qg == static_cast<int>(g))
          continue;
        const KernelRequest& later = session.request(static_cast<size_t>(qg));
        if (std::find(later.outputs.begin(), later.outputs.end(), node.outputs[0]) !=
            later.outputs.end())
          continue;  // put back at its output instead
        // The quantizer's reference outputs, for its ties (a
        // DynamicQuantizeLinear's scale is one).
        std::vector<const Tensor*> in;
        for (ValueId v : node.inputs)
          in.push_back(v == kNoValue ? nullptr : ref.at[static_cast<size_t>(v)]);
        bool missing = false;
        for (size_t i = 0; i < in.size(); ++i)
          missing = missing || (node.inputs[i] != kNoValue && !in[i]);
        if (missing) continue;  // its scale is computed elsewhere: not put back
        std::vector<Tensor> qOut = evaluateNode(node, in);
        std::vector<const Tensor*> at = ref.at;
        for (size_t i = 0; i < node.outputs.size(); ++i)
          if (node.outputs[i] != kNoValue) at[static_cast<size_t>(node.outputs[i])] = &qOut[i];
        const std::vector<bool> near = nearRoundingTies(graph, q, at, planBound);
        const TensorType& type = graph.value(x).type;
        const std::optional<NativeLayout>& layout = session.valueLayout(x);
        const Tensor got = readPlain(type, layout, outputs[o]->data);
        if (got.empty()) continue;
        const Tensor& want = *ref.at[static_cast<size_t>(x)];
        const CompareResult c = compareScaled(got, want, planBound);
        const std::vector<double> a = got.toDoubles(), b = want.toDoubles();
        // A DynamicQuantizeLinear takes its scale and zero point from its
        // input's range: where another summation order moved an extreme, every
        // element is divided by another scale, and values that lie near no tie
        // of the reference's scale cross one. The reference's extremes are put
        // back too (seen on a dynamic-int8 detector: 204 of 51,200 outputs of a
        // fused quantizer + ConvInteger one step off, its inputs within 1e-7).
        std::vector<bool> extreme(near.size(), false);
        if (node.op == "DynamicQuantizeLinear") {
          double lo = 0, hi = 0;  // the spec's range includes 0
          for (double v : b) lo = std::min(lo, v), hi = std::max(hi, v);
          for (size_t i = 0; i < extreme.size(); ++i)
            extreme[i] = b[i] == lo || b[i] == hi || a[i] < lo || a[i] > hi;
        }
        for (size_t i = 0; i < near.size(); ++i)
          if ((near[i] || extreme[i]) && a[i] != b[i] && std::fabs(a[i] - b[i]) <= planBound * c.scale) {
            writeElement(type, layout, outputs[o]->data, i, want);
            ++result.substituted;
          }
      }
    }
    // Compare (and, for a group right alone with a tie between its own
    // nodes, put back) its outputs.
    if (session.groupDevice(g).type == DeviceType::CPU) {
      for (size_t o = 0; o < request.outputs.size(); ++o) {
        const ValueId v = request.outputs[o];
        const TensorType& type = graph.value(v).type;
        if (type.isSequence()) continue;
        const std::optional<NativeLayout>& layout = session.valueLayout(v);
        const Tensor got = readPlain(type, layout, outputs[o]->data);
        const Tensor& want = *ref.at[static_cast<size_t>(v)];
        if (got.empty()) continue;
        const CompareResult c = compareScaled(got, want, planBound);
        if (c.ok) continue;
        if (internalTie && g < rightAlone.size() && rightAlone[g]) {
          for (size_t i = 0; i < static_cast<size_t>(want.numElements()); ++i)
            writeElement(type, layout, outputs[o]->data, i, want);
          result.substituted += c.mismatches;
          continue;
        }
        if (result.departs.empty())
          result.departs =
              "group " + std::to_string(g + 1) + " on " + session.plan().groups[g].backend + " (" +
              request.toString() + "): its output '" + graph.value(v).name +
              "' departs from the reference's though its inputs matched (the reference's values "
              "put back at rounding ties): " +
              c.message;
      }
    }
    for (NodeId n : members) ref.releaseInputsOf(n);
    for (ValueId v : kept) ref.release(v);
  };
  result.outputs = session.run(inputs, afterKernel);
  return result;
}

}  // namespace

double sessionPlanBound(const Session& session) {
  double bound = kFloat32Bound;
  for (size_t g = 0; g < session.plan().groups.size(); ++g)
    if (const Backend* backend = session.groupBackend(g))
      if (const std::optional<Tolerance> declared = backend->reducedPrecisionTolerance())
        bound = std::max(bound, scaledBound(*declared));
  return bound;
}

std::vector<GroupError> groupErrors(const Session& session, const std::vector<Tensor>& inputs) {
  return walkReference(session, inputs, sessionPlanBound(session)).groups;
}

PlanCheck checkPlan(Session& session, const std::vector<Tensor>& inputs, const PlanCheckOptions& options) {
  const Graph& graph = session.graph();
  PlanCheck check;
  check.outputBound = options.outputBound > 0 ? options.outputBound : sessionPlanBound(session);
  check.outputs = session.run(inputs);
  std::vector<Tensor> computed;
  if (!options.expected) computed = ReferenceExecutor(graph).run(inputs);
  const std::vector<Tensor>& expected = options.expected ? *options.expected : computed;
  std::vector<std::string> differing;
  for (size_t i = 0; i < check.outputs.size(); ++i) {
    CompareResult c = compareScaled(check.outputs[i], expected[i], check.outputBound);
    if (!c.ok) differing.push_back("output '" + graph.value(graph.outputs()[i]).name + "': " + c.message);
    check.comparisons.push_back(std::move(c));
  }
  // A plan's loose reduced-precision bound cannot vouch for its float32
  // groups (nor its reduced ones for their own kernel bound): rerun them all.
  const bool reduced = sessionPlanBound(session) > kFloat32Bound;
  if (differing.empty() && !options.eachKernel && !reduced) {
    check.ok = true;
    return check;
  }
  // Kernels rerun for an earlier plan keep their verdict (options.memo).
  const size_t numGroups = session.plan().groups.size();
  std::vector<std::string> keys(numGroups);
  std::vector<bool> known(numGroups, false);
  const std::string within = figure("%g", check.outputBound);
  bool allKnown = options.memo && options.memo->ties.count(within) > 0;
  for (size_t g = 0; g < numGroups; ++g) {
    const PlanGroup& group = session.plan().groups[g];
    keys[g] = figure("%g", groupBound(session.groupBackend(g))) + "|" + group.backend;
    for (const std::string& node : group.nodes) keys[g] += "|" + node;
    // Rerun in its layouts in the plan: another plan may switch it otherwise.
    const KernelRequest& request = session.request(g);
    for (const std::vector<ValueId>* values : {&request.inputs, &request.outputs})
      for (ValueId v : *values)
        if (const std::optional<NativeLayout>& l = session.valueLayout(v)) keys[g] += "|" + l->name;
    known[g] = options.memo && options.memo->kernels.count(keys[g]) > 0;
    allKnown = allKnown && known[g];
  }
  ReferenceWalk walk;
  if (allKnown) {
    walk.groups.resize(numGroups);
    walk.ties = options.memo->ties.at(within);
  } else {
    walk = walkReference(session, inputs, check.outputBound, known);
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

  // Each group alone within its own backend's bound, whatever the outputs.
  std::vector<std::string> wrongKernels;
  std::vector<bool> rightAlone(numGroups, false);
  size_t notRerun = 0;
  for (const GroupError& e : check.groups) {
    if (!e.wrong.empty())
      wrongKernels.push_back("group " + std::to_string(e.group + 1) + " on " + e.backend + " (" + e.what +
                             "), rerun alone on the reference's inputs: " + e.wrong);
    notRerun += e.notRun.empty() ? 0 : 1;
    rightAlone[e.group] = e.wrong.empty() && e.notRun.empty();
  }
  if (differing.empty() && wrongKernels.empty()) {
    check.ok = true;
    return check;
  }
  check.problems = differing;
  check.problems.insert(check.problems.end(), wrongKernels.begin(), wrongKernels.end());
  if (!wrongKernels.empty()) return check;
  if (notRerun > 0) {
    check.problems.push_back(std::to_string(notRerun) + " group(s) could not be rerun alone (" +
                             "on a device, or refused); the others match the reference");
    return check;
  }
  int64_t nearTies = 0, quantized = 0;
  int atTies = 0;
  for (const QuantizerTies& t : check.ties) {
    nearTies += t.nearTies;
    quantized += t.elements;
    atTies += t.nearTies > 0 ? 1 : 0;
  }
  if (nearTies == 0) {
    check.problems.push_back(
        "every kernel alone matches the reference, and no quantizer rounds a value near a tie: the "
        "difference arises between kernels (a value handed over wrongly?)");
    return check;
  }
  // Shown, not assumed: the plan again with the reference's values at the ties.
  Replay r = replay(session, inputs, check.outputBound, rightAlone);
  check.substituted = r.substituted;
  bool replayOk = true;
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    CompareResult c = compareScaled(r.outputs[i], expected[i], check.outputBound);
    replayOk = replayOk && c.ok;
    check.replayed.push_back(std::move(c));
  }
  if (replayOk) {
    check.ok = true;
    check.problems.clear();
    check.tiesNote =
        "the outputs differ from the reference's beyond the plan's bound, yet every kernel rerun "
        "alone on the reference's inputs matches it (integers exactly), and the plan replayed with "
        "the reference's values put back at " +
        std::to_string(r.substituted) +
        " value(s) near rounding ties matches it too: " + std::to_string(nearTies) + " of " +
        std::to_string(quantized) + " values quantized at " + std::to_string(atTies) +
        " quantizer(s) of computed floats lie near a tie, where another summation order rounds to "
        "the neighbouring step and the layers after inherit it (docs/quantized.md)";
    return check;
  }
  check.problems.push_back(r.departs.empty()
                               ? "every kernel alone matches the reference, but the plan replayed "
                                 "with the reference's values put "
                                 "back at " +
                                     std::to_string(r.substituted) +
                                     " value(s) near rounding ties still differs: the "
                                     "ties do not explain the difference"
                               : "the ties do not explain the difference: " + r.departs);
  return check;
}

}  // namespace collage
