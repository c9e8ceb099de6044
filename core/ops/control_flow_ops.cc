// If, Loop and Scan (opset 9+ form): shape inference from the bodies'
// static types, and reference kernels that run the bodies (see
// control_flow_ops.h).
#include "core/ops/control_flow_ops.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

#include "core/ir/error.h"
#include "core/ir/tensor_size.h"
#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"

namespace collage {

namespace {
std::atomic<int64_t> gMaxLoopIterations{kDefaultMaxLoopIterations};
}  // namespace

int64_t maxLoopIterations() { return gMaxLoopIterations.load(); }
void setMaxLoopIterations(int64_t iterations) {
  COLLAGE_CHECK(iterations > 0, "the loop bound must be positive");
  gMaxLoopIterations.store(iterations);
}

std::optional<TensorType> joinTypes(const TensorType& a, const TensorType& b) {
  if (a == b) return a;
  if (!a.isSequence() || !b.isSequence() || a.elementType != b.elementType) return std::nullopt;
  TensorType out = a;
  if (a.sequenceLength != b.sequenceLength) out.sequenceLength = kUnknownLength;
  if (a.sequenceLength == 0) {
    out.shape = b.shape;
  } else if (b.sequenceLength != 0 && a.shape != b.shape) {
    return std::nullopt;
  }
  return out;
}

namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

// Every node input past the ONNX ones may be an outer value of a body.
constexpr int kMaxControlFlowInputs = std::numeric_limits<int>::max();

bool truthOf(const Node& node, const Tensor& t, const std::string& what) {
  if (t.isSequence() || t.numElements() != 1)
    throw Error(nodeLabel(node) + what + " must hold one value, got " + t.type().toString());
  if (t.elementType() == ElementType::Bool) return t.data<bool>()[0];
  return t.toDoubles()[0] != 0.0;
}

// A body's inputs for one run: its formal inputs, then the outer values it
// reads (the owning node's inputs at outerInputSlots).
std::vector<Tensor> bodyInputs(const Node& node, const std::string& attr, const Graph& body,
                               std::vector<Tensor> formals, const Inputs& in) {
  for (size_t k = 0; k < body.outerInputSlots.size(); ++k) {
    const auto slot = static_cast<size_t>(body.outerInputSlots[k]);
    const std::string& name = body.value(body.inputs()[formals.size()]).name;
    if (slot >= in.size() || !in[slot])
      throw Error(nodeLabel(node) + attr + " reads outer value '" + name +
                  "', which the node was not given");
    formals.push_back(*in[slot]);
  }
  return formals;
}

std::vector<Tensor> runBody(const Node& node, const std::string& attr,
                            const ReferenceExecutor& exec, const std::vector<Tensor>& inputs) {
  try {
    return exec.run(inputs);
  } catch (const AllocationLimitExceeded&) {
    throw;  // the importer's folding keeps the node
  } catch (const Unsupported& e) {
    throw Unsupported(nodeLabel(node) + attr + ": " + e.what());
  } catch (const Error& e) {
    throw Error(nodeLabel(node) + attr + ": " + e.what());
  }
}

// Stores a body's result as the node's output, checking it against the type
// shape inference gave (the plan's buffers have that size).
void setOutput(const Node& node, Tensor* out, const Tensor& value, const std::string& what) {
  if (!out) return;
  // A pre-allocated sequence is an empty one: its length says nothing.
  TensorType declared = out->type();
  if (declared.isSequence()) declared.sequenceLength = kUnknownLength;
  if (!acceptsType(declared, value.type()))
    throw Error(nodeLabel(node) + what + " is " + value.type().toString() + " at run time, " +
                out->type().toString() + " at import");
  *out = value;
}

std::string bodyValueName(const Graph& body, ValueId v) { return "'" + body.value(v).name + "'"; }

// What every op with a body shares: opaque to the backends (one kernel each),
// sequences allowed, and any number of inputs past its own (the outer
// values its body reads) and of outputs.
OpSchema bodyOpSchema(const char* name, int minInputs, int minOutputs) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Opaque;
  s.takesSequences = true;
  s.minInputs = minInputs;
  s.maxInputs = kMaxControlFlowInputs;
  s.minOutputs = minOutputs;
  s.maxOutputs = std::numeric_limits<int>::max();
  s.flops = zeroFlops;
  return s;
}

// ---- If

void addIf(OpRegistry& r) {
  OpSchema s = bodyOpSchema("If", 1, 1);
  s.attributes = {{"then_branch", AttributeType::Graph, std::nullopt, true},
                  {"else_branch", AttributeType::Graph, std::nullopt, true},
                  {kUnrunnableBranch, AttributeType::String, std::nullopt, false},
                  {kUnrunnableReason, AttributeType::String, std::nullopt, false}};
  s.infer = [](const Node& node, const Types& in) {
    if (in.empty() || in[0].isSequence() || in[0].numElements() != 1)
      throw Error(nodeLabel(node) + "the condition must hold one value, got " +
                  (in.empty() ? std::string("nothing") : in[0].toString()));
    const Graph& thenG = node.attrs.getGraph("then_branch");
    const Graph& elseG = node.attrs.getGraph("else_branch");
    if (thenG.outputs().size() != elseG.outputs().size())
      throw Error(nodeLabel(node) + "then_branch has " + std::to_string(thenG.outputs().size()) +
                  " outputs, else_branch " + std::to_string(elseG.outputs().size()));
    Types out;
    for (size_t i = 0; i < thenG.outputs().size(); ++i) {
      const Value& t = thenG.value(thenG.outputs()[i]);
      const Value& e = elseG.value(elseG.outputs()[i]);
      auto joined = joinTypes(t.type, e.type);
      if (!joined)
        throw Error(
            nodeLabel(node) + "output #" + std::to_string(i) + ": then_branch gives '" + t.name +
            "' as " + t.type.toString() + " but else_branch gives '" + e.name + "' as " +
            e.type.toString() +
            "; with a condition known only at run time both must have the same static type (a "
            "condition that is a graph input can be bound to a constant, --input-value "
            "NAME=true or false, to keep one branch)");
      out.push_back(*joined);
    }
    return out;
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const bool cond = truthOf(node, *in[0], "the condition");
    const std::string attr = cond ? "then_branch" : "else_branch";
    if (node.attrs.getString(kUnrunnableBranch, "") == attr)
      throw Error(nodeLabel(node) + attr + " cannot run at the input sizes bound at import: " +
                  node.attrs.getString(kUnrunnableReason, ""));
    const Graph& body = node.attrs.getGraph(attr);
    ReferenceExecutor exec(body);
    std::vector<Tensor> results = runBody(node, attr, exec, bodyInputs(node, attr, body, {}, in));
    for (size_t i = 0; i < out.size() && i < results.size(); ++i)
      setOutput(node, out[i], results[i],
                attr + " output " + bodyValueName(body, body.outputs()[i]));
  };
  r.add(std::move(s));
}

// ---- Stacking slices (Loop's and Scan's scan outputs, Scan's inputs)

// The slice of t at `index` along `axis` (that axis removed).
Tensor sliceAlong(const Tensor& t, int64_t axis, int64_t index) {
  Shape shape = t.shape();
  const size_t a = static_cast<size_t>(axis);
  int64_t outer = 1;
  for (size_t i = 0; i < a; ++i) outer *= shape[i];
  const int64_t len = shape[a];
  shape.erase(shape.begin() + axis);
  Tensor out(t.elementType(), shape);
  const size_t inner = static_cast<size_t>(numElements(Shape(shape.begin() + axis, shape.end()))) *
                       elementSize(t.elementType());
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    if (inner) std::memcpy(dst + o * inner, src + (o * len + index) * inner, inner);
  return out;
}

// Slices of one type stacked along `axis` of the result: slice k goes to
// position positions[k].
Tensor stackAlong(const std::vector<Tensor>& slices, const std::vector<int64_t>& positions,
                  int64_t axis, const TensorType& sliceType) {
  Shape shape = sliceType.shape;
  const int64_t len = static_cast<int64_t>(slices.size());
  shape.insert(shape.begin() + axis, len);
  Tensor out(sliceType.elementType, shape);
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= sliceType.shape[static_cast<size_t>(i)];
  const size_t inner = static_cast<size_t>(numElements(
                           Shape(sliceType.shape.begin() + axis, sliceType.shape.end()))) *
                       elementSize(sliceType.elementType);
  char* dst = static_cast<char*>(out.raw());
  for (size_t k = 0; k < slices.size(); ++k) {
    const char* src = static_cast<const char*>(slices[k].raw());
    for (int64_t o = 0; o < outer; ++o)
      if (inner) std::memcpy(dst + (o * len + positions[k]) * inner, src + o * inner, inner);
  }
  return out;
}

// ---- Loop

struct LoopShape {
  size_t carried = 0;  // N
  size_t scans = 0;    // K
};

LoopShape loopShape(const Node& node, const Graph& body) {
  const int32_t formal = body.numFormalInputs();
  if (formal < 2)
    throw Error(nodeLabel(node) + "the body has " + std::to_string(formal) +
                " inputs; a Loop body takes the iteration number, the condition and the "
                "loop-carried values");
  LoopShape s;
  s.carried = static_cast<size_t>(formal - 2);
  const size_t bodyOuts = body.outputs().size();
  if (bodyOuts < 1 + s.carried)
    throw Error(nodeLabel(node) + "the body returns " + std::to_string(bodyOuts) + " values for " +
                std::to_string(s.carried) +
                " loop-carried ones: it must return the condition, then each carried value");
  s.scans = bodyOuts - 1 - s.carried;
  return s;
}

void addLoop(OpRegistry& r) {
  OpSchema s =
      bodyOpSchema("Loop", 0, 0);  // M and cond are optional, and there may be no carried value
  s.attributes = {{"body", AttributeType::Graph, std::nullopt, true}};
  s.infer = [](const Node& node, const Types& in) {
    const Graph& body = node.attrs.getGraph("body");
    const LoopShape ls = loopShape(node, body);
    if (in.size() < 2 + ls.carried)
      throw Error(nodeLabel(node) + "the body takes " + std::to_string(ls.carried) +
                  " loop-carried values, the node gives " +
                  std::to_string(in.size() < 2 ? 0 : in.size() - 2));
    for (int i = 0; i < 2; ++i)
      if (in[static_cast<size_t>(i)].elementType != ElementType::Undefined &&
          (in[static_cast<size_t>(i)].isSequence() ||
           in[static_cast<size_t>(i)].numElements() != 1))
        throw Error(nodeLabel(node) + (i == 0 ? "the trip count" : "the condition") +
                    " must hold one value, got " + in[static_cast<size_t>(i)].toString());
    Types out;
    for (size_t j = 0; j < ls.carried; ++j) {
      const Value& formal = body.value(body.inputs()[2 + j]);
      const Value& result = body.value(body.outputs()[1 + j]);
      if (!acceptsType(formal.type, in[2 + j]))
        throw Error(nodeLabel(node) + "loop-carried value #" + std::to_string(j) + " is " +
                    in[2 + j].toString() + " but the body takes '" + formal.name + "' as " +
                    formal.type.toString());
      if (!acceptsType(formal.type, result.type))
        throw Error(nodeLabel(node) + "loop-carried value #" + std::to_string(j) +
                    ": the body takes '" + formal.name + "' as " + formal.type.toString() +
                    " but returns '" + result.name + "' as " + result.type.toString() +
                    "; a carried value must keep its type across iterations");
      out.push_back(formal.type);
    }
    for (size_t k = 0; k < ls.scans; ++k) {
      const Value& v = body.value(body.outputs()[1 + ls.carried + k]);
      if (v.type.isSequence())
        throw Unsupported(nodeLabel(node) + "scan output '" + v.name + "' is a sequence");
      TensorType t = v.type;
      t.shape.insert(t.shape.begin(), 0);  // placeholder: one row per iteration
      out.push_back(t);
    }
    return out;
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Graph& body = node.attrs.getGraph("body");
    const LoopShape ls = loopShape(node, body);
    const bool hasTrip = in.size() > 0 && in[0];
    const bool hasCond = in.size() > 1 && in[1];
    const int64_t trip = hasTrip ? in[0]->toInts().at(0) : 0;
    bool cond = hasCond ? truthOf(node, *in[1], "the condition") : true;
    std::vector<Tensor> carried;
    for (size_t j = 0; j < ls.carried; ++j) carried.push_back(*in[2 + j]);
    std::vector<std::vector<Tensor>> scans(ls.scans);
    ReferenceExecutor exec(body);
    const int64_t limit = maxLoopIterations();
    int64_t i = 0;
    for (; (!hasTrip || i < trip) && (!hasCond || cond); ++i) {
      if (i >= limit)
        throw Error(nodeLabel(node) + "stopped after " + std::to_string(limit) +
                    " iterations (the loop bound, kDefaultMaxLoopIterations): " +
                    (hasTrip ? "the trip count is " + std::to_string(trip)
                             : std::string("it has no trip count")) +
                    (hasCond ? " and its condition is still true" : "") +
                    "; a loop that never ends is an error in the model");
      std::vector<Tensor> formals = {Tensor::fromInts({}, {i}), Tensor(ElementType::Bool, {})};
      formals[1].data<bool>()[0] = cond;
      for (const Tensor& c : carried) formals.push_back(c);
      std::vector<Tensor> res = runBody(node, "body (iteration " + std::to_string(i) + ")", exec,
                                        bodyInputs(node, "body", body, std::move(formals), in));
      if (hasCond) cond = truthOf(node, res[0], "the body's condition output");
      for (size_t j = 0; j < ls.carried; ++j) {
        const Value& formal = body.value(body.inputs()[2 + j]);
        if (!acceptsType(formal.type, res[1 + j].type()))
          throw Error(nodeLabel(node) + "iteration " + std::to_string(i) + ": the body returns " +
                      bodyValueName(body, body.outputs()[1 + j]) + " as " +
                      res[1 + j].type().toString() + " for loop-carried '" + formal.name + "' (" +
                      formal.type.toString() + ")");
        carried[j] = std::move(res[1 + j]);
      }
      for (size_t k = 0; k < ls.scans; ++k) {
        Tensor& slice = res[1 + ls.carried + k];
        auto& rows = scans[k];
        if (!rows.empty() && rows.front().type() != slice.type())
          throw Error(nodeLabel(node) + "iteration " + std::to_string(i) + ": scan output " +
                      bodyValueName(body, body.outputs()[1 + ls.carried + k]) + " is " +
                      slice.type().toString() + ", it was " + rows.front().type().toString());
        rows.push_back(std::move(slice));
      }
    }
    for (size_t j = 0; j < ls.carried && j < out.size(); ++j)
      setOutput(node, out[j], carried[j], "loop-carried output #" + std::to_string(j));
    for (size_t k = 0; k < ls.scans && ls.carried + k < out.size(); ++k) {
      Tensor* o = out[ls.carried + k];
      if (!o) continue;
      const TensorType sliceType = body.value(body.outputs()[1 + ls.carried + k]).type;
      std::vector<int64_t> positions(scans[k].size());
      for (size_t p = 0; p < positions.size(); ++p) positions[p] = static_cast<int64_t>(p);
      Tensor stacked = stackAlong(scans[k], positions, 0, sliceType);
      // The import fixed the row count (staticLoopIterations); a run that
      // disagrees would overflow the plan's buffer.
      if (o->shape().empty() || (o->shape()[0] != 0 && o->type() != stacked.type()))
        throw Error(nodeLabel(node) + "scan output #" + std::to_string(k) + " has " +
                    std::to_string(i) + " rows at run time, " + o->type().toString() +
                    " at import");
      *o = std::move(stacked);
    }
  };
  r.add(std::move(s));
}

// ---- Scan (opset 9+: no batch axis, no sequence_lens)

struct ScanShape {
  size_t state = 0;     // N
  size_t scanIns = 0;   // M
  size_t scanOuts = 0;  // K
  std::vector<int64_t> inAxes, inDirs, outAxes, outDirs;
  int64_t length = 0;  // iterations
};

ScanShape scanShape(const Node& node, const Graph& body, const Types& in) {
  ScanShape s;
  const int64_t m = node.attrs.getInt("num_scan_inputs");
  const int32_t formal = body.numFormalInputs();
  if (m < 1 || m > formal)
    throw Error(nodeLabel(node) + "num_scan_inputs is " + std::to_string(m) +
                " but the body takes " + std::to_string(formal) + " inputs");
  s.scanIns = static_cast<size_t>(m);
  s.state = static_cast<size_t>(formal) - s.scanIns;
  if (body.outputs().size() < s.state)
    throw Error(nodeLabel(node) + "the body returns " + std::to_string(body.outputs().size()) +
                " values for " + std::to_string(s.state) + " state values");
  s.scanOuts = body.outputs().size() - s.state;
  if (in.size() < s.state + s.scanIns)
    throw Error(nodeLabel(node) + "the body takes " + std::to_string(s.state + s.scanIns) +
                " inputs, the node gives " + std::to_string(in.size()));
  auto list = [&](const char* attr, size_t n) {
    std::vector<int64_t> v = node.attrs.getInts(attr, std::vector<int64_t>(n, 0));
    if (v.size() != n)
      throw Error(nodeLabel(node) + attr + " has " + std::to_string(v.size()) +
                  " entries, expected " + std::to_string(n));
    return v;
  };
  s.inAxes = list("scan_input_axes", s.scanIns);
  s.inDirs = list("scan_input_directions", s.scanIns);
  s.outAxes = list("scan_output_axes", s.scanOuts);
  s.outDirs = list("scan_output_directions", s.scanOuts);
  for (size_t j = 0; j < s.scanIns; ++j) {
    const TensorType& t = in[s.state + j];
    if (t.isSequence() || t.rank() < 1)
      throw Error(nodeLabel(node) + "scan input #" + std::to_string(j) + " is " + t.toString() +
                  "; it needs at least one axis to scan");
    s.inAxes[j] = normalizeAxis(node, s.inAxes[j], t.rank());
    const int64_t len = t.shape[static_cast<size_t>(s.inAxes[j])];
    if (j == 0)
      s.length = len;
    else if (len != s.length)
      throw Error(nodeLabel(node) + "scan input #" + std::to_string(j) + " has " +
                  std::to_string(len) + " steps along axis " + std::to_string(s.inAxes[j]) +
                  ", scan input #0 has " + std::to_string(s.length));
  }
  for (size_t k = 0; k < s.scanOuts; ++k) {
    const TensorType& t = body.value(body.outputs()[s.state + k]).type;
    s.outAxes[k] = normalizeAxis(node, s.outAxes[k], t.rank() + 1);
  }
  return s;
}

void addScan(OpRegistry& r) {
  OpSchema s = bodyOpSchema("Scan", 1, 1);
  s.attributes = {{"body", AttributeType::Graph, std::nullopt, true},
                  {"num_scan_inputs", AttributeType::Int, std::nullopt, true},
                  {"scan_input_axes", AttributeType::Ints, std::nullopt},
                  {"scan_input_directions", AttributeType::Ints, std::nullopt},
                  {"scan_output_axes", AttributeType::Ints, std::nullopt},
                  {"scan_output_directions", AttributeType::Ints, std::nullopt}};
  s.infer = [](const Node& node, const Types& in) {
    const Graph& body = node.attrs.getGraph("body");
    const ScanShape ss = scanShape(node, body, in);
    Types out;
    for (size_t j = 0; j < ss.state; ++j) {
      const Value& formal = body.value(body.inputs()[j]);
      const Value& result = body.value(body.outputs()[j]);
      if (!acceptsType(formal.type, in[j]))
        throw Error(nodeLabel(node) + "state value #" + std::to_string(j) + " is " +
                    in[j].toString() + " but the body takes '" + formal.name + "' as " +
                    formal.type.toString());
      if (!acceptsType(formal.type, result.type))
        throw Error(nodeLabel(node) + "state value #" + std::to_string(j) + ": the body takes '" +
                    formal.name + "' as " + formal.type.toString() + " but returns '" +
                    result.name + "' as " + result.type.toString() +
                    "; a state value must keep its type");
      out.push_back(formal.type);
    }
    for (size_t k = 0; k < ss.scanOuts; ++k) {
      const Value& v = body.value(body.outputs()[ss.state + k]);
      if (v.type.isSequence())
        throw Unsupported(nodeLabel(node) + "scan output '" + v.name + "' is a sequence");
      TensorType t = v.type;
      t.shape.insert(t.shape.begin() + ss.outAxes[k], ss.length);
      out.push_back(t);
    }
    return out;
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Graph& body = node.attrs.getGraph("body");
    Types types;
    for (const Tensor* t : in) types.push_back(t ? t->type() : TensorType{});
    const ScanShape ss = scanShape(node, body, types);
    std::vector<Tensor> state;
    for (size_t j = 0; j < ss.state; ++j) state.push_back(*in[j]);
    std::vector<std::vector<Tensor>> scans(ss.scanOuts);
    ReferenceExecutor exec(body);
    for (int64_t t = 0; t < ss.length; ++t) {
      std::vector<Tensor> formals = state;
      for (size_t j = 0; j < ss.scanIns; ++j) {
        const int64_t index = ss.inDirs[j] ? ss.length - 1 - t : t;
        formals.push_back(sliceAlong(*in[ss.state + j], ss.inAxes[j], index));
      }
      std::vector<Tensor> res = runBody(node, "body (step " + std::to_string(t) + ")", exec,
                                        bodyInputs(node, "body", body, std::move(formals), in));
      for (size_t j = 0; j < ss.state; ++j) state[j] = std::move(res[j]);
      for (size_t k = 0; k < ss.scanOuts; ++k) {
        const TensorType& want = body.value(body.outputs()[ss.state + k]).type;
        if (res[ss.state + k].type() != want)
          throw Error(nodeLabel(node) + "step " + std::to_string(t) + ": scan output " +
                      bodyValueName(body, body.outputs()[ss.state + k]) + " is " +
                      res[ss.state + k].type().toString() + ", expected " + want.toString());
        scans[k].push_back(std::move(res[ss.state + k]));
      }
    }
    for (size_t j = 0; j < ss.state && j < out.size(); ++j)
      setOutput(node, out[j], state[j], "state output #" + std::to_string(j));
    for (size_t k = 0; k < ss.scanOuts && ss.state + k < out.size(); ++k) {
      if (!out[ss.state + k]) continue;
      std::vector<int64_t> positions(scans[k].size());
      for (size_t p = 0; p < positions.size(); ++p)
        positions[p] =
            ss.outDirs[k] ? ss.length - 1 - static_cast<int64_t>(p) : static_cast<int64_t>(p);
      setOutput(node, out[ss.state + k],
                stackAlong(scans[k], positions, ss.outAxes[k],
                           body.value(body.outputs()[ss.state + k]).type),
                "scan output #" + std::to_string(k));
    }
  };
  r.add(std::move(s));
}

// ---- SequenceMap: the body once per element of the first input; every
// other input gives the body its element at the same position if it is a
// sequence (of the same length), or itself whole if it is a tensor. Each
// body output becomes a sequence of the per-element results.

void addSequenceMap(OpRegistry& r) {
  OpSchema s = bodyOpSchema("SequenceMap", 1, 1);
  s.attributes = {{"body", AttributeType::Graph, std::nullopt, true}};
  s.infer = [](const Node& node, const Types& in) {
    const Graph& body = node.attrs.getGraph("body");
    const auto explicitInputs = static_cast<size_t>(body.numFormalInputs());
    if (in.empty() || !in[0].isSequence())
      throw Error(nodeLabel(node) + "the first input must be a sequence");
    for (size_t i = 1; i < explicitInputs && i < in.size(); ++i)
      if (in[i].isSequence() && in[i].sequenceLength != in[0].sequenceLength &&
          in[i].sequenceLength != kUnknownLength && in[0].sequenceLength != kUnknownLength)
        throw Error(nodeLabel(node) + "input " + std::to_string(i) + " is " + in[i].toString() +
                    " but input 0 is " + in[0].toString() +
                    ": sequences must have the same length");
    Types out;
    for (ValueId v : body.outputs()) {
      const TensorType& t = body.value(v).type;
      if (t.isSequence())
        throw Unsupported(nodeLabel(node) + "body output '" + body.value(v).name +
                          "' is a sequence (a sequence of sequences)");
      out.push_back(TensorType::sequenceOf(t, in[0].sequenceLength));
    }
    return out;
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Graph& body = node.attrs.getGraph("body");
    const auto explicitInputs = static_cast<size_t>(body.numFormalInputs());
    const size_t n = in[0]->items().size();
    for (size_t i = 1; i < explicitInputs; ++i)
      if (in[i]->isSequence() && in[i]->items().size() != n)
        throw Error(nodeLabel(node) + "input " + std::to_string(i) + " holds " +
                    std::to_string(in[i]->items().size()) + " tensors, input 0 holds " +
                    std::to_string(n) + ": sequences must have the same length");
    std::vector<std::vector<Tensor>> results(body.outputs().size());
    ReferenceExecutor exec(body);
    for (size_t e = 0; e < n; ++e) {
      std::vector<Tensor> formals;
      for (size_t i = 0; i < explicitInputs; ++i)
        formals.push_back(in[i]->isSequence() ? in[i]->items()[e] : *in[i]);
      std::vector<Tensor> res = runBody(node, "body (element " + std::to_string(e) + ")", exec,
                                        bodyInputs(node, "body", body, std::move(formals), in));
      for (size_t k = 0; k < res.size() && k < results.size(); ++k)
        results[k].push_back(std::move(res[k]));
    }
    for (size_t k = 0; k < results.size() && k < out.size(); ++k) {
      const TensorType element = body.value(body.outputs()[k]).type;
      setOutput(node, out[k], Tensor::sequence(element, std::move(results[k])),
                "output #" + std::to_string(k));
    }
  };
  r.add(std::move(s));
}

// True if the body's condition output is true whenever its condition input is.
bool bodyKeepsConditionTrue(const Graph& body) {
  if (body.outputs().empty() || body.numFormalInputs() < 2) return false;
  ValueId v = body.outputs()[0];
  const ValueId condIn = body.inputs()[1];
  for (int hops = 0; hops < 64; ++hops) {  // through Identity chains
    if (v == condIn) return true;
    const Value& val = body.value(v);
    if (val.isConstant()) {
      const Tensor& t = *val.constant;
      return !t.isSequence() && t.numElements() == 1 && t.toDoubles()[0] != 0.0;
    }
    if (val.producer == kNoNode) return false;
    const Node& p = body.node(val.producer);
    if (p.op != "Identity" || p.inputs.empty()) return false;
    v = p.inputs[0];
  }
  return false;
}

}  // namespace

std::optional<int64_t> staticLoopIterations(const Node& loop, const Tensor* tripCount,
                                            const Tensor* condition, bool hasTripCount,
                                            bool hasCondition) {
  if (hasCondition) {
    if (!condition) return std::nullopt;
    if (condition->isSequence() || condition->numElements() != 1) return std::nullopt;
    if (condition->toDoubles()[0] == 0.0) return 0;
  }
  if (!hasTripCount || !tripCount || tripCount->isSequence() || tripCount->numElements() != 1)
    return std::nullopt;
  const int64_t m = std::max<int64_t>(0, tripCount->toInts()[0]);
  if (hasCondition && !bodyKeepsConditionTrue(loop.attrs.getGraph("body"))) return std::nullopt;
  return m;
}

std::optional<int64_t> loopSequenceGrowth(const Graph& body, size_t carried) {
  if (static_cast<size_t>(body.numFormalInputs()) < 2 + carried + 1 ||
      body.outputs().size() < 2 + carried)
    return std::nullopt;
  const ValueId formal = body.inputs()[2 + carried];
  ValueId v = body.outputs()[1 + carried];
  int64_t growth = 0;
  // Each hop removes a node, so the walk ends within the body's node count.
  for (size_t hops = 0; hops <= body.nodes().size(); ++hops) {
    if (v == formal) return growth;
    const Value& val = body.value(v);
    if (val.producer == kNoNode) return std::nullopt;
    const Node& p = body.node(val.producer);
    if (p.inputs.empty() || p.inputs[0] == kNoValue) return std::nullopt;
    if (p.op == "SequenceInsert")
      ++growth;
    else if (p.op == "SequenceErase")
      --growth;
    else if (p.op != "Identity")
      return std::nullopt;
    v = p.inputs[0];
  }
  return std::nullopt;
}

bool hasBody(const std::string& op) {
  return op == "If" || op == "Loop" || op == "Scan" || op == "SequenceMap";
}

void registerControlFlowOps(OpRegistry& r) {
  addIf(r);
  addLoop(r);
  addScan(r);
  addSequenceMap(r);
}

}  // namespace collage
