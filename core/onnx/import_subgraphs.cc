#include "core/onnx/import_subgraphs.h"

#include "core/ops/control_flow_ops.h"
#include "core/onnx/import_infer.h"
#include "core/onnx/import_parse.h"
#include "core/onnx/importer.h"

namespace collage::onnx_import {

// ---- Control flow: bodies (graph attributes) and the constant If.

int Importer::resolve(const std::string& name) {
  if (auto it = byName_.find(name); it != byName_.end()) return it->second;
  if (!parent_) return -1;
  const int outer = parent_->resolve(name);
  if (outer < 0) return -1;
  const WValue& o = parent_->values_[static_cast<size_t>(outer)];
  if (o.constant) {  // a copy, so that the body folds with it
    const int id = addValue(name, o.type);
    values_[static_cast<size_t>(id)].constant = o.constant;
    return id;
  }
  const int id = addValue(name, o.type);
  values_[static_cast<size_t>(id)].isInput = true;
  inputOrder_.push_back(name);
  captures_.push_back(outer);
  return id;
}

// The body may declare its inputs; what it declares must match what the
// node passes (a Loop's carried value, a Scan's state or slice).
void checkBodyInput(const Node& owner, const std::string& attr, const onnx::ValueInfoProto& in,
                    const TensorType& t) {
  if (in.type().has_tensor_type() && !t.isSequence()) {
    const auto& tt = in.type().tensor_type();
    bool ok = tt.elem_type() == 0 || elementTypeFromOnnx(tt.elem_type()) == t.elementType;
    if (tt.has_shape()) {
      ok = ok && tt.shape().dim_size() == t.rank();
      for (int d = 0; ok && d < tt.shape().dim_size(); ++d)
        if (tt.shape().dim(d).has_dim_value() &&
            tt.shape().dim(d).dim_value() != t.shape[static_cast<size_t>(d)])
          ok = false;
    }
    if (!ok)
      throw Error(label(owner) + attr + " declares input '" + in.name() + "' as " +
                  declaredTypeToString(tt) + " but the node passes " + t.toString());
  } else if (in.type().has_tensor_type() != !t.isSequence() && in.type().value_case() != 0) {
    throw Error(label(owner) + attr + " declares input '" + in.name() + "' as " +
                (t.isSequence() ? "a tensor" : "a sequence") + " but the node passes " + t.toString());
  }
}

Graph Importer::runBody(const std::vector<TensorType>& formals, const Node& owner,
                        const std::string& attr) {
  const auto& g = graph();
  scope_ = parent_->scope_ + label(owner) + attr + ": ";
  if (g.input_size() != static_cast<int>(formals.size()))
    throw Error(label(owner) + attr + " takes " + std::to_string(g.input_size()) +
                " inputs, the node gives it " + std::to_string(formals.size()));
  readDeclarations();
  // A Loop's iteration number and condition are declared loosely by some
  // exporters ([1] for a scalar): their types are the spec's, unchecked.
  const int unchecked = owner.op == "Loop" ? 2 : 0;
  for (int i = 0; i < g.input_size(); ++i) {
    const auto& in = g.input(i);
    const TensorType& t = formals[static_cast<size_t>(i)];
    if (i >= unchecked) checkBodyInput(owner, attr, in, t);
    const int id = addValue(in.name(), t);
    values_[static_cast<size_t>(id)].isInput = true;
    inputOrder_.push_back(in.name());
  }
  addInitializers();
  nameNodes();
  for (int n = 0; n < g.node_size(); ++n) importNode(g.node(n), n);
  Graph body = buildGraph();
  body.name = g.name();
  return body;
}

std::shared_ptr<const Graph> Importer::importBody(const Node& node, const onnx::GraphProto& proto,
                                                  const std::string& attr,
                                                  const std::vector<TensorType>& formals,
                                                  std::vector<int>& captures, size_t slotBase) {
  Importer child(*this, proto);
  Graph body;
  try {
    body = child.runBody(formals, node, attr);
  } catch (const Error& e) {
    // Name the owner first: "node 'If_25' (If): then_branch: node 'Add_3' (Add): ...".
    const std::string prefix = label(node) + attr + ": ";
    std::string what = e.what();
    if (what.rfind(prefix, 0) != 0 && what.rfind(label(node), 0) != 0) what = prefix + what;
    rethrowAs(e, what);
  }
  // Each captured outer value is one node input (shared between bodies).
  for (int outer : child.captures()) {
    auto it = std::find(captures.begin(), captures.end(), outer);
    if (it == captures.end()) it = captures.insert(captures.end(), outer);
    body.outerInputSlots.push_back(static_cast<int32_t>(slotBase + static_cast<size_t>(it - captures.begin())));
  }
  return std::make_shared<const Graph>(std::move(body));
}

// What importing a node's bodies collects: its graph attributes by name,
// the bodies imported so far, and the outer values they capture (node
// inputs after the node's own).
struct Importer::Bodies {
  std::map<std::string, const onnx::GraphProto*> protos;
  size_t explicitInputs = 0;
  std::vector<int> captures;
  std::vector<std::pair<std::string, std::shared_ptr<const Graph>>> graphs;
  const Node& node;
  const std::vector<WValue>& values;

  const onnx::GraphProto& body(const std::string& attr) const {
    auto it = protos.find(attr);
    if (it == protos.end()) throw Error(label(node) + "missing required attribute '" + attr + "'");
    return *it->second;
  }
  TensorType typeOf(ValueId v) const {
    return v == kNoValue ? TensorType{} : values[static_cast<size_t>(v)].type;
  }
};

std::map<std::string, const onnx::GraphProto*> graphAttributes(const onnx::NodeProto& proto) {
  std::map<std::string, const onnx::GraphProto*> bodies;
  for (const auto& a : proto.attribute())
    if (a.type() == onnx::AttributeProto::GRAPH || a.has_g()) bodies[a.name()] = &a.g();
  return bodies;
}

void Importer::importBodies(Node& node, const onnx::NodeProto& proto) {
  Bodies b{graphAttributes(proto), static_cast<size_t>(proto.input_size()), {}, {}, node, values_};
  // The node's ONNX inputs keep their positions; the captured outer values follow.
  node.inputs.resize(b.explicitInputs, kNoValue);
  if (node.op == "If") {
    importIfBodies(node, b);
    if (node.op.empty()) return;  // inlined
  } else if (node.op == "Loop") {
    importLoopBody(node, b);
  } else if (node.op == "SequenceMap") {
    importSequenceMapBody(node, b);
  } else {
    importScanBody(node, b);
  }
  for (auto& [attr, g] : b.graphs) node.attrs.set(attr, g);
  for (int outer : b.captures) node.inputs.push_back(outer);
}

void Importer::importIfBodies(Node& node, Bodies& b) {
  if (b.explicitInputs != 1 || node.inputs[0] == kNoValue)
    throw Error(label(node) + "takes exactly one input, the condition");
  const WValue& cond = values_[static_cast<size_t>(node.inputs[0])];
  if (options_.foldConstants && cond.constant) {
    // Known at import: only the branch taken exists.
    const Tensor& c = *cond.constant;
    if (c.isSequence() || c.numElements() != 1)
      throw Error(label(node) + "the condition must hold one value, got " + c.type().toString());
    const std::string attr = c.toDoubles()[0] != 0.0 ? "then_branch" : "else_branch";
    std::vector<int> branchCaptures;
    auto branch = importBody(node, b.body(attr), attr, {}, branchCaptures, 0);
    inlineBranch(node, *branch, branchCaptures);
    node.op.clear();  // tells importNode the node is gone
    return;
  }
  // A branch may not type at the bound input sizes (a speech model's
  // 8 kHz branch fed 16 kHz frames, whose RNN then sees a rank it cannot
  // take). ONNX Runtime never checks a branch that is not taken, and fails
  // only if it is. So does Collage: the If keeps the branch that types,
  // and a run that takes the other fails with the reason.
  std::string unrunnable, why;
  for (const char* attr : {"then_branch", "else_branch"}) {
    try {
      b.graphs.emplace_back(attr, importBody(node, b.body(attr), attr, {}, b.captures, b.explicitInputs));
    } catch (const ShapesDoNotFit& e) {
      // Neither branch types at these sizes: the first reason, still
      // size-dependent for an If around this one.
      if (!unrunnable.empty()) throw ShapesDoNotFit(why);
      unrunnable = attr;
      why = e.what();
    }
  }
  if (!unrunnable.empty()) {
    b.graphs.emplace_back(unrunnable, b.graphs.front().second);  // stands in, with the same types
    node.attrs.set(kUnrunnableBranch, unrunnable);
    node.attrs.set(kUnrunnableReason, why);
    note(why + ": so " + unrunnable +
         " cannot run at the bound input sizes, and runs that take it fail, as in ONNX Runtime");
  }
}

void Importer::importLoopBody(Node& node, Bodies& b) {
  if (b.explicitInputs < 2)
    throw Error(label(node) + "has " + std::to_string(b.explicitInputs) +
                " inputs; a Loop takes the trip count and the condition (either may be empty), "
                "then its loop-carried values");
  // Carried values enter with their initial types; a sequence that grows
  // in the body gets a length-unknown type and the body is imported again.
  std::vector<TensorType> formals = {TensorType{ElementType::Int64, {}},
                                     TensorType{ElementType::Bool, {}}};
  for (size_t i = 2; i < b.explicitInputs; ++i) {
    if (node.inputs[i] == kNoValue)
      throw Error(label(node) + "loop-carried input " + std::to_string(i - 2) + " is empty");
    formals.push_back(b.typeOf(node.inputs[i]));
  }
  const size_t carried = b.explicitInputs - 2;
  std::shared_ptr<const Graph> g;
  for (int pass = 0;; ++pass) {
    std::vector<int> trial = b.captures;
    g = importBody(node, b.body("body"), "body", formals, trial, b.explicitInputs);
    if (g->outputs().size() < 1 + carried)
      throw Error(label(node) + "the body returns " + std::to_string(g->outputs().size()) +
                  " values; a Loop with " + std::to_string(carried) +
                  " loop-carried values needs the condition and " + std::to_string(carried) +
                  " carried values first");
    bool changed = false;
    for (size_t j = 0; j < carried; ++j) {
      const Value& result = g->value(g->outputs()[1 + j]);
      const TensorType& in = formals[2 + j];
      if (acceptsType(in, result.type)) continue;
      auto joined = joinTypes(in, result.type);
      if (!joined || pass >= 2)
        throw Error(label(node) + "loop-carried '" + values_[static_cast<size_t>(node.inputs[2 + j])].name +
                    "' enters as " + in.toString() + " but the body returns '" + result.name +
                    "' as " + result.type.toString() +
                    "; a loop-carried value must keep its type across iterations");
      formals[2 + j] = *joined;
      changed = true;
    }
    if (!changed) {
      b.captures = std::move(trial);
      break;
    }
  }
  b.graphs.emplace_back("body", g);
}

void Importer::importSequenceMapBody(Node& node, Bodies& b) {
  // The body runs once per element: it sees one element of each sequence
  // input, and each tensor input whole.
  std::vector<TensorType> formals;
  for (size_t i = 0; i < b.explicitInputs; ++i) {
    if (node.inputs[i] == kNoValue) throw Error(label(node) + "input " + std::to_string(i) + " is empty");
    const TensorType t = b.typeOf(node.inputs[i]);
    if (i == 0 && !t.isSequence())
      throw Error(label(node) + "input '" + values_[static_cast<size_t>(node.inputs[0])].name +
                  "' is " + t.toString() + "; the first input of a SequenceMap is a sequence");
    formals.push_back(t.elementTensorType());
  }
  b.graphs.emplace_back("body", importBody(node, b.body("body"), "body", formals, b.captures, b.explicitInputs));
}

void Importer::importScanBody(Node& node, Bodies& b) {
  const int64_t numScanInputs = node.attrs.getInt("num_scan_inputs", -1);
  if (opset_ < 9)
    throw Unsupported(label(node) + "the opset-8 Scan (with a batch axis and sequence_lens) is not supported");
  if (numScanInputs < 1 || static_cast<size_t>(numScanInputs) > b.explicitInputs)
    throw Error(label(node) + "num_scan_inputs is " + std::to_string(numScanInputs) + " for " +
                std::to_string(b.explicitInputs) + " inputs");
  const size_t state = b.explicitInputs - static_cast<size_t>(numScanInputs);
  std::vector<int64_t> axes = node.attrs.getInts("scan_input_axes",
                                                 std::vector<int64_t>(static_cast<size_t>(numScanInputs), 0));
  if (axes.size() != static_cast<size_t>(numScanInputs))
    throw Error(label(node) + "scan_input_axes has " + std::to_string(axes.size()) +
                " entries for " + std::to_string(numScanInputs) + " scan inputs");
  std::vector<TensorType> formals;
  for (size_t i = 0; i < b.explicitInputs; ++i) {
    if (node.inputs[i] == kNoValue) throw Error(label(node) + "input " + std::to_string(i) + " is empty");
    TensorType t = b.typeOf(node.inputs[i]);
    if (i >= state) {  // the body sees one slice: the scanned axis removed
      const std::string& name = values_[static_cast<size_t>(node.inputs[i])].name;
      int64_t axis = axes[i - state];
      if (t.isSequence() || t.rank() == 0)
        throw Error(label(node) + "scan input '" + name + "' is " + t.toString() +
                    "; it needs an axis to scan");
      if (axis < -t.rank() || axis >= t.rank())
        throw Error(label(node) + "scan axis " + std::to_string(axis) + " is out of range for '" +
                    name + "' (" + t.toString() + ")");
      if (axis < 0) axis += t.rank();
      t.shape.erase(t.shape.begin() + axis);
    }
    formals.push_back(t);
  }
  b.graphs.emplace_back("body", importBody(node, b.body("body"), "body", formals, b.captures, b.explicitInputs));
}

// The branch of a constant If becomes part of this graph: its nodes are
// added as if they were the If's, its outputs are the If's outputs.
void Importer::inlineBranch(const Node& node, const Graph& branch, const std::vector<int>& captures) {
  if (branch.outputs().size() != node.outputs.size())
    throw Error(label(node) + "the branch taken returns " + std::to_string(branch.outputs().size()) +
                " values for " + std::to_string(node.outputs.size()) + " outputs");
  std::vector<ValueId> map(static_cast<size_t>(branch.numValues()), kNoValue);
  for (size_t k = 0; k < branch.outerInputSlots.size(); ++k)
    map[static_cast<size_t>(branch.inputs()[k])] = captures[static_cast<size_t>(branch.outerInputSlots[k])];
  // The branch's own outputs are produced under the If's output names; an
  // output that the branch takes from elsewhere (an outer value, a
  // constant, another output) goes through an Identity.
  std::vector<std::pair<ValueId, ValueId>> aliases;  // (branch value, If output)
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const ValueId b = branch.outputs()[i];
    const ValueId out = node.outputs[i];
    if (out == kNoValue) continue;
    if (map[static_cast<size_t>(b)] == kNoValue && branch.value(b).producer != kNoNode)
      map[static_cast<size_t>(b)] = out;
    else
      aliases.emplace_back(b, out);
  }
  for (ValueId v = 0; v < branch.numValues(); ++v) {
    const Value& val = branch.value(v);
    if (val.isConstant() && map[static_cast<size_t>(v)] == kNoValue) {
      const int id = addValue(freshValueName(val.name), val.type);
      values_[static_cast<size_t>(id)].constant = val.constant;
      map[static_cast<size_t>(v)] = id;
    }
  }
  for (const Node& bn : branch.nodes()) {
    Node copy = bn;
    copy.name = freshNodeName(bn.name);
    for (ValueId& in : copy.inputs)
      if (in != kNoValue) in = map[static_cast<size_t>(in)];
    for (ValueId& out : copy.outputs) {
      if (out == kNoValue) continue;
      if (map[static_cast<size_t>(out)] == kNoValue)
        map[static_cast<size_t>(out)] = addValue(freshValueName(branch.value(out).name), {});
      out = map[static_cast<size_t>(out)];
    }
    finishNode(std::move(copy));
  }
  for (auto [b, out] : aliases) {
    Node id;
    id.name = freshNodeName(node.name + "/" + branch.value(b).name);
    id.op = "Identity";
    id.inputs = {map[static_cast<size_t>(b)]};
    id.outputs = {out};
    finishNode(std::move(id));
  }
}

// A value that must be constant is not. In the model's graph, binding an
// input may fix that (an Error saying how). Inside a body the value may
// change with every iteration and no binding makes it constant: a case
// Collage does not cover (Unsupported), not a fault of the model.
void Importer::throwNotConstant(const std::string& message, const WValue& value) const {
  if (parent_)
    throw Unsupported(message + " (inside a body, where it may change with every iteration)");
  throw Error(message + (value.isInput ? " (it is a graph input: bind it to a value)" : ""));
}

// The Loop outputs whose shape depends on the number of iterations: a scan
// output has one row per iteration (shape inference leaves a placeholder of
// 0 rows), and a carried sequence that every iteration grows by the same
// count (`outs.append(y)`, loopSequenceGrowth) ends with a length the import
// can tell, which a ConcatFromSequence after the loop needs.
void Importer::patchLoopStaticShapes(const Node& node, std::vector<TensorType>& outTypes) {
  const Graph& body = node.attrs.getGraph("body");
  const size_t carried = static_cast<size_t>(body.numFormalInputs() - 2);
  auto input = [&](size_t i) -> const WValue* {
    return i < node.inputs.size() && node.inputs[i] != kNoValue ? &values_[static_cast<size_t>(node.inputs[i])]
                                                                 : nullptr;
  };
  const WValue* trip = input(0);
  const WValue* cond = input(1);
  const auto rows = staticLoopIterations(node, trip && trip->constant ? &*trip->constant : nullptr,
                                         cond && cond->constant ? &*cond->constant : nullptr,
                                         trip != nullptr, cond != nullptr);
  for (size_t j = 0; rows && j < carried && j < outTypes.size(); ++j) {
    TensorType& t = outTypes[j];
    const WValue* init = input(2 + j);
    if (!t.isSequence() || t.sequenceLength != kUnknownLength || !init ||
        !init->type.isSequence() || init->type.sequenceLength == kUnknownLength)
      continue;
    const auto growth = loopSequenceGrowth(body, j);
    int64_t added = 0, length = 0;
    if (!growth || __builtin_mul_overflow(*rows, *growth, &added) ||
        __builtin_add_overflow(init->type.sequenceLength, added, &length) || length < 0)
      continue;  // left unknown; a run that erases past the start fails there
    t.sequenceLength = length;
  }
  if (outTypes.size() <= carried) return;
  if (!rows) {
    std::string scanName = "#0";
    if (carried < node.outputs.size() && node.outputs[carried] != kNoValue)
      scanName = "'" + values_[static_cast<size_t>(node.outputs[carried])].name + "'";
    throw Error(label(node) + "scan output " + scanName +
                " has one row per iteration, and the number of iterations is known only at run "
                "time (" +
                (!trip ? std::string("no trip count")
                       : trip->constant ? std::string("trip count ") + std::to_string(trip->constant->toInts()[0])
                                        : "trip count '" + trip->name + "' is not a constant") +
                (cond ? (cond->constant ? ", a condition the body may turn false"
                                        : ", condition '" + cond->name + "' is not a constant")
                      : std::string()) +
                "); Collage needs static shapes: give the Loop a constant trip count and a "
                "condition that stays true, or bind the inputs to values");
  }
  for (size_t k = carried; k < outTypes.size(); ++k) outTypes[k].shape.at(0) = *rows;
}

}  // namespace collage::onnx_import
