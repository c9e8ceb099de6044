#include "core/onnx/onnx_import.h"

#include <onnx/checker.h>
#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/wire_format_lite.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include "core/ir/error.h"
#include "core/ir/tensor_size.h"
#include "core/ops/control_flow_ops.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"
#include "core/ops/runtime_inputs.h"
#include "core/onnx/tensor_proto.h"
#include "core/onnx/topological_order.h"

namespace onnx::checker {
// Defined (and exported) by libonnx but not declared in its header: the
// checker with a caller-provided context, which lets external data be checked
// relative to the model's directory without parsing the file a second time.
void check_model(const ModelProto& model, CheckerContext& ctx);
}  // namespace onnx::checker

namespace collage {

bool isOnnxDefaultDomain(const std::string& domain) {
  return domain.empty() || domain == "ai.onnx";
}

namespace {

// The most bytes one tensor may have to be folded into a constant at
// import; a larger result stays a node, so that a model cannot make the
// import allocate without bound. Folding a weight (a transposed or
// dequantized embedding of a large language model is ~500 MiB) still fits.
constexpr size_t kMaxFoldedBytes = size_t{1} << 30;

// Ops whose outputs are random: never folded even with constant inputs.
bool isNondeterministic(const std::string& op) {
  return op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" ||
         op == "RandomUniformLike" || op == "Multinomial" || op == "Bernoulli";
}

// Data inputs whose VALUES decide the output shape (OpSchema::valueShapedInputs).
// Collage's shapes are static, so these must be constant (the node is then folded away).
std::vector<int> valueShapedInputs(const std::string& op) {
  const OpSchema* schema = OpRegistry::instance().find(op);
  return schema ? schema->valueShapedInputs : std::vector<int>{};
}

// The op a default-domain node becomes in the canonical form.
std::string canonicalOp(const std::string& op) { return op == "Upsample" ? "Resize" : op; }

std::string label(const Node& node) { return "node '" + node.name + "' (" + node.op + "): "; }

// Prefixes a message with `prefix` unless it already names a node.
std::string withNode(const std::string& prefix, const std::string& what) {
  if (what.find("node '") != std::string::npos) return what;
  return prefix + what;
}

// A node whose inferred types do not work at the bound input sizes (shape
// inference refused them), as opposed to a model that is wrong at any size
// (a missing value or attribute): an If's branch failing so may be one that
// is never taken at these sizes.
class ShapesDoNotFit : public Error {
 public:
  using Error::Error;
};

// Throws `what` as the same kind of error as `e`.
[[noreturn]] void rethrowAs(const Error& e, const std::string& what) {
  if (dynamic_cast<const Unsupported*>(&e)) throw Unsupported(what);
  if (dynamic_cast<const ShapesDoNotFit*>(&e)) throw ShapesDoNotFit(what);
  throw Error(what);
}

[[noreturn]] void rethrowWith(const std::string& prefix, const Error& e) {
  rethrowAs(e, withNode(prefix, e.what()));
}

// Prefixes a message with the file name unless it already starts with it.
[[noreturn]] void rethrowWithPath(const std::string& path, const Error& e) {
  std::string what = e.what();
  if (what.rfind(path + ":", 0) != 0) what = path + ": " + what;
  rethrowAs(e, what);
}

std::string declaredShapeToString(const onnx::TypeProto_Tensor& t) {
  if (!t.has_shape()) return "?";
  std::string s;
  for (int i = 0; i < t.shape().dim_size(); ++i) {
    const auto& d = t.shape().dim(i);
    if (i) s += 'x';
    if (d.has_dim_value())
      s += std::to_string(d.dim_value());
    else if (d.has_dim_param() && !d.dim_param().empty())
      s += d.dim_param();
    else
      s += '?';
  }
  return t.shape().dim_size() == 0 ? "scalar" : s;
}

// A constant tensor converted to the attribute type a ConstInput asks for.
Attribute constToAttribute(const Node& node, const std::string& attr, AttributeType type,
                           const Tensor& t) {
  auto ints = [&] {
    if (isFloatingPoint(t.elementType()))
      throw Error(label(node) + "input '" + attr + "' must be an integer tensor, got " +
                  t.type().toString());
    return t.toInts();
  };
  auto floats = [&] {
    std::vector<double> d = tensorToDoubles(t);
    return std::vector<float>(d.begin(), d.end());
  };
  switch (type) {
    case AttributeType::Ints:
      return ints();
    case AttributeType::Int: {
      auto v = ints();
      if (v.size() != 1)
        throw Error(label(node) + "input '" + attr + "' must hold one value, got " +
                    t.type().toString());
      return v[0];
    }
    case AttributeType::Floats:
      return floats();
    case AttributeType::Float: {
      auto v = floats();
      if (v.size() != 1)
        throw Error(label(node) + "input '" + attr + "' must hold one value, got " +
                    t.type().toString());
      return v[0];
    }
    case AttributeType::Tensor:
      return t;
    default:
      throw Error(label(node) + "input '" + attr + "' cannot become a " +
                  std::string(attributeTypeName(type)) + " attribute");
  }
}

// The constant-input slots of a canonical op at the given opset: position in
// the node as the model writes it, and the ConstInput (attribute) it becomes.
std::vector<ConstInput> constSlotsFor(const std::string& onnxOp, int64_t opset,
                                      const OpSchema& schema) {
  // Resize-10 and Upsample-9 take (X, scales): scales at position 1.
  if ((onnxOp == "Resize" && opset < 11) || onnxOp == "Upsample") {
    const ConstInput* scales = nullptr;
    for (const auto& c : schema.constInputs)
      if (c.attribute == "scales") scales = &c;
    return {ConstInput{1, "scales", scales ? scales->type : AttributeType::Floats}};
  }
  return schema.constInputs;
}

DeclaredInput declaredInputOf(const onnx::ValueInfoProto& info) {
  DeclaredInput d;
  d.name = info.name();
  const bool hasShape = info.type().has_tensor_type() && info.type().tensor_type().has_shape();
  d.rankKnown = hasShape;
  if (hasShape)
    for (const auto& dim : info.type().tensor_type().shape().dim()) {
      d.dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
      d.symbols.push_back(dim.has_dim_param() ? dim.dim_param() : std::string());
    }
  return d;
}

onnx::ModelProto loadModel(const std::string& path) {
  // Parsed straight from the file: no intermediate copy of the weights
  // (BERT-base is 435 MB).
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open (no such file or not readable)");
  google::protobuf::io::FileInputStream raw(fd);
  raw.SetCloseOnDelete(true);
  onnx::ModelProto model;
  const bool parsed = model.ParseFromZeroCopyStream(&raw);
  if (raw.GetErrno() != 0) throw Error(path + ": cannot read");
  if (!parsed || !model.has_graph())
    throw Error(path + ": not a valid ONNX model (truncated or corrupt protobuf)");
  return model;
}

class Importer {
 public:
  Importer(const std::string& path, const ImportOptions& options)
      : path_(path), options_(options) {
    dir_ = std::filesystem::path(path).parent_path().string();
  }

  Graph run();

  // A body (a graph attribute of `owner` in `parent`'s scope): its formal
  // inputs have the given types; names it does not define resolve in the
  // enclosing scopes (see "Control flow" below).
  Importer(Importer& parent, const onnx::GraphProto& body)
      : path_(parent.path_), dir_(parent.dir_), options_(parent.options_), opset_(parent.opset_),
        parent_(&parent), graph_(&body) {}
  Graph runBody(const std::vector<TensorType>& formals, const Node& owner, const std::string& attr);
  // The outer values (ids in the parent) the body reads, in input order.
  const std::vector<int>& captures() const { return captures_; }

 private:
  struct WValue {
    std::string name;
    TensorType type;
    std::optional<Tensor> constant;
    bool isInput = false;
    int producer = -1;  // index into nodes_
  };

  int addValue(const std::string& name, TensorType type) {
    if (byName_.count(name)) throw Error("tensor '" + name + "' is defined twice");
    values_.push_back(WValue{name, std::move(type), std::nullopt, false, -1});
    int id = static_cast<int>(values_.size() - 1);
    byName_[name] = id;
    return id;
  }
  std::string freshValueName(const std::string& base) {
    std::string name = base;
    for (int i = 1; byName_.count(name) || reservedNames_.count(name); ++i)
      name = base + "_" + std::to_string(i);
    return name;
  }
  std::string freshNodeName(const std::string& base) {
    std::string name = base;
    for (int i = 1; nodeNames_.count(name); ++i) name = base + "_" + std::to_string(i);
    nodeNames_.insert(name);
    return name;
  }

  const onnx::GraphProto& graph() const { return *graph_; }
  void checkModel();
  void checkSupportedOps();
  // The value of a name in this scope; an outer scope's value becomes a
  // captured input of this body (a constant is copied in). -1 if none.
  int resolve(const std::string& name);
  void importBodies(Node& node, const onnx::NodeProto& proto);
  std::shared_ptr<const Graph> importBody(const Node& node, const onnx::GraphProto& body,
                                          const std::string& attr,
                                          const std::vector<TensorType>& formals,
                                          std::vector<int>& captures, size_t slotBase);
  void inlineBranch(const Node& node, const Graph& branch, const std::vector<int>& captures);
  void patchLoopStaticShapes(const Node& node, std::vector<TensorType>& outTypes);
  [[noreturn]] void throwNotConstant(const std::string& message, const WValue& value) const;
  void bindInputs();
  void addInitializers();
  void nameNodes();
  void importNode(const onnx::NodeProto& proto, int index);
  void importConstantNode(const onnx::NodeProto& proto, const Node& node);
  AttributeMap convertAttributes(const onnx::NodeProto& proto, const Node& node);
  void rewriteLegacyForms(Node& node, const std::string& onnxOp);
  void rewriteLegacyBroadcast(Node& node);
  void applyConstInputs(Node& node, const std::string& onnxOp, const OpSchema& schema);
  void fillDefaults(Node& node, const OpSchema& schema);
  bool rewriteCoercedSoftmax(Node& node);
  void finishNode(Node node);
  bool foldFromStaticType(const Node& node);
  std::vector<TensorType> declaredOutputTypes(const Node& node, const ConstInput& slot);
  void checkDeclaredType(const Node& node, int value);
  Graph buildGraph();

  const std::string path_;
  std::string dir_;
  const ImportOptions& options_;
  onnx::ModelProto model_;
  int64_t opset_ = 0;

  std::vector<WValue> values_;
  std::map<std::string, int> byName_;
  std::set<std::string> reservedNames_;  // every tensor name the model uses
  std::vector<Node> nodes_;              // inputs/outputs index values_
  std::set<std::string> nodeNames_;
  std::vector<std::string> onnxNodeNames_;  // final name of each ONNX node, by index
  std::map<std::string, const onnx::TypeProto*> declared_;
  std::vector<std::string> inputOrder_;  // non-constant graph inputs

  // Bodies: the enclosing scope's importer, this body's proto, and the
  // outer values captured so far (parent ids; their inputs come last).
  Importer* parent_ = nullptr;
  const onnx::GraphProto* graph_ = nullptr;
  std::string scope_;  // "node 'If_0' (If): else_branch: " for notes from inside a body
  // Adds an import note, prefixed with the scope, once (a Loop's body may be
  // imported twice, its carried types widened).
  void note(const std::string& text) {
    if (!options_.notes) return;
    const std::string line = scope_ + text;
    if (std::find(options_.notes->begin(), options_.notes->end(), line) == options_.notes->end())
      options_.notes->push_back(line);
  }
  std::vector<int> captures_;
  std::vector<DynamicInputBinding> dynamicInputs_;
};

void Importer::checkModel() {
  onnx::checker::CheckerContext ctx;
  ctx.set_model_dir(dir_);
  try {
    onnx::checker::check_model(model_, ctx);
  } catch (const onnx::checker::ValidationError& e) {
    std::string what = e.what();
    // ONNX 1.12 knows opsets up to 17: at 18 it rejects the new signatures
    // (Reduce* axes inputs, Split num_outputs, ...) which we canonicalise ourselves.
    if (opset_ > 17 && (what.find("OpType:") != std::string::npos ||
                        what.find("opset") != std::string::npos ||
                        what.find("ir_version") != std::string::npos))
      return;
    throw Error(path_ + ": the ONNX checker rejects the model: " + what);
  } catch (const std::exception& e) {
    throw Error(path_ + ": the ONNX checker rejects the model: " + e.what());
  }
}

void Importer::checkSupportedOps() {
  // op label -> node names, in order of first appearance; nodes of bodies too.
  std::vector<std::pair<std::string, std::vector<std::string>>> missing;
  std::function<void(const onnx::GraphProto&)> visit = [&](const onnx::GraphProto& g) {
    const auto& nodes = g.node();
    for (int i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      for (const auto& a : n.attribute()) {
        if (a.has_g()) visit(a.g());
        for (const auto& sub : a.graphs()) visit(sub);
      }
      bool ok = isOnnxDefaultDomain(n.domain()) && isImportableOp(n.op_type(), options_.foldConstants);
      if (ok) continue;
      std::string op = isOnnxDefaultDomain(n.domain()) ? n.op_type() : n.domain() + "." + n.op_type();
      std::string name = n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name();
      auto it = std::find_if(missing.begin(), missing.end(), [&](auto& p) { return p.first == op; });
      if (it == missing.end()) {
        missing.push_back({op, {}});
        it = missing.end() - 1;
      }
      it->second.push_back(name);
    }
  };
  visit(graph());
  if (missing.empty()) return;
  std::string msg = path_ + ": unsupported ops: ";
  for (size_t i = 0; i < missing.size(); ++i) {
    if (i) msg += ", ";
    const auto& names = missing[i].second;
    msg += missing[i].first + (names.size() == 1 ? " (node " : " (nodes ");
    const size_t shown = std::min<size_t>(names.size(), 10);
    for (size_t k = 0; k < shown; ++k) msg += (k ? ", '" : "'") + names[k] + "'";
    if (names.size() > shown) msg += " and " + std::to_string(names.size() - shown) + " more";
    msg += ")";
  }
  throw Unsupported(msg);
}

void Importer::bindInputs() {
  const auto& g = graph();
  std::set<std::string> initNames;
  for (const auto& init : g.initializer()) initNames.insert(init.name());
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& in : g.input())
    if (!initNames.count(in.name())) inputs.push_back(&in);

  auto listInputs = [&] {
    std::string s;
    for (size_t i = 0; i < inputs.size(); ++i) s += (i ? ", " : "") + inputs[i]->name();
    return s.empty() ? std::string("none") : s;
  };
  auto isInput = [&](const std::string& name) {
    return std::any_of(inputs.begin(), inputs.end(), [&](auto* p) { return p->name() == name; });
  };
  for (const auto& [name, shape] : options_.inputShapes)
    if (!isInput(name))
      throw Error(path_ + ": a shape is bound to '" + name +
                  "', which is not an input of the model (inputs: " + listInputs() + ")");
  for (const auto& [name, tensor] : options_.constantInputs)
    if (!isInput(name))
      throw Error(path_ + ": a constant is bound to '" + name +
                  "', which is not an input of the model (inputs: " + listInputs() + ")");

  for (const auto* in : inputs) {
    const std::string& name = in->name();
    if (auto c = options_.constantInputs.find(name); c != options_.constantInputs.end()) {
      int id = addValue(name, c->second.type());
      values_[id].constant = c->second;
      continue;
    }
    if (!in->type().has_tensor_type())
      throw Unsupported("input '" + name + "' is not a tensor (sequences, maps and optionals are not supported)");
    const auto& tt = in->type().tensor_type();
    ElementType et = elementTypeFromOnnx(tt.elem_type());
    if (tt.elem_type() == 0) throw Error("input '" + name + "' has no element type");
    if (et == ElementType::Undefined)
      throw Unsupported("input '" + name + "': element type code " +
                        std::to_string(tt.elem_type()) + " is not supported");
    if (et == ElementType::String)
      throw Unsupported("input '" + name + "' is a string tensor; string tensors are not supported");
    auto bound = options_.inputShapes.find(name);
    Shape shape;
    if (!tt.has_shape()) {
      if (bound == options_.inputShapes.end())
        throw Error("input '" + name +
                    "' has no shape (unknown rank): bind one, e.g. --input-shape " + name +
                    "=1x3x224x224");
      shape = bound->second;
    } else {
      const int rank = tt.shape().dim_size();
      if (bound != options_.inputShapes.end()) {
        const Shape& b = bound->second;
        bool agrees = static_cast<int>(b.size()) == rank;
        for (int i = 0; agrees && i < rank; ++i) {
          const auto& d = tt.shape().dim(i);
          if (d.has_dim_value() && d.dim_value() != b[i]) agrees = false;
        }
        if (!agrees)
          throw Error("input '" + name + "': the bound shape " + shapeToString(b) +
                      " contradicts the model's shape " + declaredShapeToString(tt));
        shape = b;
      } else {
        for (int i = 0; i < rank; ++i) {
          const auto& d = tt.shape().dim(i);
          shape.push_back(d.has_dim_value() ? d.dim_value() : options_.defaultDim);
        }
      }
    }
    for (int64_t d : shape)
      if (d < 0) throw Error("input '" + name + "' has a negative dimension " + shapeToString(shape));
    int id = addValue(name, TensorType{et, shape});
    values_[id].isInput = true;
    inputOrder_.push_back(name);
    if (auto d = dynamicInputBinding(declaredInputOf(*in), options_)) dynamicInputs_.push_back(*d);
  }
}

void Importer::addInitializers() {
  const auto& g = graph();
  if (g.sparse_initializer_size() > 0)
    throw Unsupported("sparse initializer '" + g.sparse_initializer(0).values().name() +
                      "' is not supported");
  for (const auto& init : g.initializer()) {
    if (byName_.count(init.name()))
      throw Error("initializer '" + init.name() + "' is defined twice");
    Tensor t = tensorFromProto(init, dir_);
    int id = addValue(init.name(), t.type());
    values_[id].constant = std::move(t);
  }
}

AttributeMap Importer::convertAttributes(const onnx::NodeProto& proto, const Node& node) {
  AttributeMap attrs;
  for (const auto& a : proto.attribute()) {
    if (!a.ref_attr_name().empty())
      throw Error(label(node) + "attribute '" + a.name() +
                  "' refers to a function attribute outside a function");
    auto type = a.type();
    if (type == onnx::AttributeProto::UNDEFINED) {  // very old models: guess from the fields
      if (a.has_f()) type = onnx::AttributeProto::FLOAT;
      else if (a.has_i()) type = onnx::AttributeProto::INT;
      else if (a.has_s()) type = onnx::AttributeProto::STRING;
      else if (a.has_t()) type = onnx::AttributeProto::TENSOR;
      else if (a.floats_size()) type = onnx::AttributeProto::FLOATS;
      else if (a.ints_size()) type = onnx::AttributeProto::INTS;
      else if (a.strings_size()) type = onnx::AttributeProto::STRINGS;
    }
    switch (type) {
      case onnx::AttributeProto::FLOAT: attrs.set(a.name(), a.f()); break;
      case onnx::AttributeProto::INT: attrs.set(a.name(), static_cast<int64_t>(a.i())); break;
      case onnx::AttributeProto::STRING: attrs.set(a.name(), a.s()); break;
      case onnx::AttributeProto::FLOATS:
        attrs.set(a.name(), std::vector<float>(a.floats().begin(), a.floats().end()));
        break;
      case onnx::AttributeProto::INTS:
        attrs.set(a.name(), std::vector<int64_t>(a.ints().begin(), a.ints().end()));
        break;
      case onnx::AttributeProto::STRINGS:
        attrs.set(a.name(), std::vector<std::string>(a.strings().begin(), a.strings().end()));
        break;
      case onnx::AttributeProto::TENSOR:
        try {
          attrs.set(a.name(), tensorFromProto(a.t(), dir_));
        } catch (const Error& e) {
          rethrowWith(label(node) + "attribute '" + a.name() + "': ", e);
        }
        break;
      case onnx::AttributeProto::GRAPH:
        if (hasBody(node.op)) break;  // importBodies() imports it once the node's inputs are known
        throw Unsupported(label(node) + "attribute '" + a.name() +
                          "' is a graph; only If, Loop, Scan and SequenceMap bodies are supported");
      default:
        throw Unsupported(label(node) + "attribute '" + a.name() +
                          "' is a list of graphs, a sparse tensor or a type; these are not supported");
    }
  }
  return attrs;
}

void Importer::importConstantNode(const onnx::NodeProto& proto, const Node& node) {
  if (proto.output_size() != 1 || proto.output(0).empty())
    throw Error(label(node) + "a Constant has exactly one output");
  std::optional<Tensor> t;
  for (const auto& a : proto.attribute()) {
    const std::string& n = a.name();
    if (n == "value") {
      try {
        t = tensorFromProto(a.t(), dir_);
      } catch (const Error& e) {
        rethrowWith(label(node), e);
      }
    } else if (n == "value_float") t = Tensor::scalarFloat(a.f());
    else if (n == "value_floats")
      t = Tensor::fromFloats({a.floats_size()}, std::vector<float>(a.floats().begin(), a.floats().end()));
    else if (n == "value_int") t = Tensor::fromInts({}, {a.i()});
    else if (n == "value_ints")
      t = Tensor::fromInts({a.ints_size()}, std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    else if (n == "sparse_value" || n == "value_string" || n == "value_strings")
      throw Unsupported(label(node) + "Constant with '" + n + "' is not supported");
  }
  if (!t) throw Error(label(node) + "Constant without a value");
  int id = addValue(proto.output(0), t->type());
  values_[id].constant = std::move(*t);
  checkDeclaredType(node, id);
}

// Before opset 7, binary ops broadcast only B onto A, aligned at `axis`
// (default: trailing) when broadcast=1. Padding B's shape with trailing 1s
// gives the same result under numpy broadcasting.
void Importer::rewriteLegacyBroadcast(Node& node) {
  const int64_t broadcast = node.attrs.getInt("broadcast", 0);
  const bool hasAxis = node.attrs.has("axis");
  const int64_t axisAttr = node.attrs.getInt("axis", 0);
  node.attrs.erase("broadcast");
  node.attrs.erase("axis");
  if (!broadcast || !hasAxis || node.inputs.size() != 2 || node.inputs[0] == kNoValue ||
      node.inputs[1] == kNoValue)
    return;
  const int64_t rankA = values_[static_cast<size_t>(node.inputs[0])].type.rank();
  const Shape shapeB = values_[static_cast<size_t>(node.inputs[1])].type.shape;
  const int64_t rankB = static_cast<int64_t>(shapeB.size());
  const int64_t axis = axisAttr < 0 ? axisAttr + rankA : axisAttr;
  if (axis < 0 || axis + rankB > rankA)
    throw Error(label(node) + "legacy broadcast of " + shapeToString(shapeB) + " at axis " +
                std::to_string(axisAttr) + " does not fit rank " + std::to_string(rankA));
  const int64_t trailing = rankA - axis - rankB;
  if (trailing == 0) return;
  Shape padded = shapeB;
  padded.insert(padded.end(), static_cast<size_t>(trailing), 1);
  const ValueId b = node.inputs[1];
  const std::string name = freshValueName(values_[static_cast<size_t>(b)].name + "/broadcast_" +
                                          std::to_string(axis));
  if (values_[static_cast<size_t>(b)].constant) {
    Tensor t = values_[static_cast<size_t>(b)].constant->reshaped(padded);
    int id = addValue(name, t.type());
    values_[static_cast<size_t>(id)].constant = std::move(t);
    node.inputs[1] = id;
    return;
  }
  if (!OpRegistry::instance().find("Reshape"))
    throw Unsupported(label(node) + "legacy broadcast needs Reshape, which is not registered");
  int id = addValue(name, {});
  Node reshape;
  reshape.name = freshNodeName(node.name + "/broadcast_reshape");
  reshape.op = "Reshape";
  reshape.attrs.set("shape", std::vector<int64_t>(padded.begin(), padded.end()));
  reshape.inputs = {b};
  reshape.outputs = {id};
  finishNode(std::move(reshape));
  node.inputs[1] = id;
}

void Importer::rewriteLegacyForms(Node& node, const std::string& onnxOp) {
  if (opset_ < 7 && node.attrs.has("broadcast")) rewriteLegacyBroadcast(node);
  if (onnxOp == "PRelu" && opset_ < 7 && node.inputs.size() == 2 && node.inputs[0] != kNoValue &&
      node.inputs[1] != kNoValue) {
    // PRelu-6 applies a 1-D slope per channel (axis 1), as Caffe did.
    const Shape& x = values_[static_cast<size_t>(node.inputs[0])].type.shape;
    const Shape& slope = values_[static_cast<size_t>(node.inputs[1])].type.shape;
    if (x.size() >= 2 && slope.size() == 1 && slope[0] == x[1] && slope[0] != 1) {
      node.attrs.set("broadcast", int64_t{1});
      node.attrs.set("axis", int64_t{1});
      rewriteLegacyBroadcast(node);
    }
  }
  if (onnxOp == "Upsample" || (onnxOp == "Resize" && opset_ < 11)) {
    // Upsample-9 and Resize-10 scale with asymmetric coordinates and take the
    // floor of the source index for nearest: say so explicitly, since the
    // Resize-11+ defaults (half_pixel, round_prefer_floor) differ.
    node.op = "Resize";
    node.attrs.set("coordinate_transformation_mode", std::string("asymmetric"));
    node.attrs.set("nearest_mode", std::string("floor"));
    if (!node.attrs.has("mode")) node.attrs.set("mode", std::string("nearest"));
  } else if (onnxOp == "Pad" && opset_ < 11) {
    if (const Attribute* v = node.attrs.find("value")) {
      node.attrs.set("constant_value", *v);
      node.attrs.erase("value");
    }
  } else if (onnxOp == "BatchNormalization") {
    node.attrs.erase("spatial");
    node.attrs.erase("consumed_inputs");
    node.attrs.erase("is_test");
  } else if (onnxOp == "Dropout") {
    node.attrs.erase("is_test");
  } else if (onnxOp == "RoiAlign" && opset_ < 16) {
    // RoiAlign-10 had no coordinate_transformation_mode and did not shift
    // by half a pixel; opset 16's default (half_pixel) would.
    if (!node.attrs.has("coordinate_transformation_mode"))
      node.attrs.set("coordinate_transformation_mode", std::string("output_half_pixel"));
  } else if (onnxOp == "Gemm" && opset_ < 7) {
    node.attrs.erase("broadcast");  // Gemm-7 broadcasts C unidirectionally, as numpy
  }
}

void Importer::applyConstInputs(Node& node, const std::string& onnxOp, const OpSchema& schema) {
  std::vector<ConstInput> slots = constSlotsFor(onnxOp, opset_, schema);
  // Slots fed by a run-time tensor, at their canonical position: they stay
  // inputs (runtime_inputs.h), after the data inputs.
  std::vector<std::pair<int, ValueId>> runtime;
  if (!slots.empty()) {
    int first = std::numeric_limits<int>::max();
    for (const auto& c : slots) {
      first = std::min(first, c.index);
      if (c.index >= static_cast<int>(node.inputs.size())) continue;
      ValueId v = node.inputs[static_cast<size_t>(c.index)];
      if (v == kNoValue) continue;  // absent optional input
      const WValue& val = values_[static_cast<size_t>(v)];
      if (!val.constant) {
        // Resize-10's scales sit at position 1, the canonical roi's.
        int canonical = c.index;
        for (const auto& sc : schema.constInputs)
          if (sc.attribute == c.attribute) canonical = sc.index;
        runtime.emplace_back(canonical, v);
        continue;
      }
      node.attrs.set(c.attribute, constToAttribute(node, c.attribute, c.type, *val.constant));
    }
    if (first < static_cast<int>(node.inputs.size())) {
      for (size_t i = static_cast<size_t>(first); i < node.inputs.size(); ++i) {
        bool isSlot = std::any_of(slots.begin(), slots.end(),
                                  [&](const ConstInput& c) { return c.index == static_cast<int>(i); });
        if (!isSlot && node.inputs[i] != kNoValue)
          throw Error(label(node) + "has " + std::to_string(node.inputs.size()) +
                      " inputs; input " + std::to_string(i) + " is not expected");
      }
      node.inputs.resize(static_cast<size_t>(first));
    }
  }
  while (!node.inputs.empty() && node.inputs.back() == kNoValue) node.inputs.pop_back();
  const int n = static_cast<int>(node.inputs.size());
  if (n < schema.minInputs || n > schema.maxInputs)
    throw Error(label(node) + "has " + std::to_string(n) + " data inputs, expected " +
                (schema.minInputs == schema.maxInputs
                     ? std::to_string(schema.minInputs)
                     : std::to_string(schema.minInputs) + " to " + std::to_string(schema.maxInputs)));
  for (const auto& [index, v] : runtime) {
    if (node.inputs.size() <= static_cast<size_t>(index))
      node.inputs.resize(static_cast<size_t>(index) + 1, kNoValue);
    node.inputs[static_cast<size_t>(index)] = v;
  }
}

void Importer::fillDefaults(Node& node, const OpSchema& schema) {
  const std::vector<const ConstInput*> runtime = runtimeInputsOf(schema, node);
  for (const auto& spec : schema.attributes) {
    if (node.attrs.has(spec.name)) continue;
    const bool atRunTime = std::any_of(runtime.begin(), runtime.end(),
                                       [&](const ConstInput* c) { return c->attribute == spec.name; });
    if (spec.defaultValue)
      node.attrs.set(spec.name, *spec.defaultValue);
    else if (spec.required && !atRunTime)
      throw Error(label(node) + "missing required attribute '" + spec.name + "'");
  }
}

// Softmax, LogSoftmax and Hardmax before opset 13 flatten the input to 2D at
// `axis` (default 1) and normalise each row. Where axis is not the last axis
// that differs from the opset-13 meaning, so the node becomes
// Reshape(2D) -> op(axis=-1) -> Reshape(back). Returns true if it rewrote.
bool Importer::rewriteCoercedSoftmax(Node& node) {
  const int64_t axisAttr = node.attrs.getInt("axis", 1);
  if (node.inputs.empty() || node.inputs[0] == kNoValue) return false;
  const Shape shape = values_[static_cast<size_t>(node.inputs[0])].type.shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = axisAttr < 0 ? axisAttr + rank : axisAttr;
  if (axis < 0 || axis > rank)
    throw Error(label(node) + "axis " + std::to_string(axisAttr) + " is out of range for rank " +
                std::to_string(rank));
  if (axis == rank - 1 || rank == 0) {
    node.attrs.set("axis", int64_t{-1});
    return false;
  }
  const OpSchema* reshape = OpRegistry::instance().find("Reshape");
  if (!reshape)
    throw Unsupported(label(node) + "opset-" + std::to_string(opset_) + " " + node.op +
                      " over axis " + std::to_string(axisAttr) + " needs Reshape, which is not registered");
  std::string shapeAttr = "shape";
  for (const auto& c : reshape->constInputs) shapeAttr = c.attribute;
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < rank; ++i) (i < axis ? rows : cols) *= shape[static_cast<size_t>(i)];
  const ValueId out = node.outputs.empty() ? kNoValue : node.outputs[0];
  if (out == kNoValue) return false;

  const std::string base = node.name;
  int flat = addValue(freshValueName(base + "/flat_2d"), {});
  int soft = addValue(freshValueName(base + "/" + node.op + "_2d"), {});

  Node in;
  in.name = freshNodeName(base + "/reshape_2d");
  in.op = "Reshape";
  in.attrs.set(shapeAttr, std::vector<int64_t>{rows, cols});
  in.inputs = {node.inputs[0]};
  in.outputs = {flat};
  finishNode(std::move(in));

  Node mid = node;
  mid.attrs.set("axis", int64_t{-1});
  mid.inputs = {flat};
  mid.outputs = {soft};
  finishNode(std::move(mid));

  Node back;
  back.name = freshNodeName(base + "/reshape_back");
  back.op = "Reshape";
  back.attrs.set(shapeAttr, std::vector<int64_t>(shape.begin(), shape.end()));
  back.inputs = {soft};
  back.outputs = {out};
  finishNode(std::move(back));
  return true;
}

void Importer::checkDeclaredType(const Node& node, int value) {
  const WValue& v = values_[static_cast<size_t>(value)];
  auto it = declared_.find(v.name);
  if (it == declared_.end() || !it->second->has_tensor_type()) return;
  const auto& tt = it->second->tensor_type();
  bool ok = true;
  if (tt.elem_type() != 0 && elementTypeFromOnnx(tt.elem_type()) != v.type.elementType) ok = false;
  if (tt.has_shape()) {
    // A shape without one dim value is only the exporter's own inference,
    // which may read an op otherwise than ONNX Runtime does and Collage
    // follows (SplitToSequence's keepdims, sequence_ops.cc): its rank is a
    // hint, as for ONNX Runtime, which only warns when a run disagrees.
    bool anyDimValue = false;
    for (const auto& d : tt.shape().dim()) anyDimValue = anyDimValue || d.has_dim_value();
    if (tt.shape().dim_size() != v.type.rank()) {
      ok = !anyDimValue;
    } else {
      for (int i = 0; i < tt.shape().dim_size(); ++i) {
        const auto& d = tt.shape().dim(i);
        if (d.has_dim_value() && d.dim_value() != v.type.shape[static_cast<size_t>(i)]) ok = false;
      }
    }
  }
  if (ok) return;
  std::string declaredType =
      (tt.elem_type() ? std::string(elementTypeName(elementTypeFromOnnx(tt.elem_type()))) : "?") +
      "[" + declaredShapeToString(tt) + "]";
  const std::string what = "tensor '" + v.name + "': the model declares " + declaredType + " but " +
                           label(node) + "produces " + v.type.toString();
  // In a body the exporter's declarations come from the sizes it traced
  // with; at other input sizes a branch may compute other shapes, and it may
  // be a branch that never runs at those sizes (a speech model's 8 kHz
  // branch fed 16 kHz frames). ONNX Runtime merges such declarations
  // leniently, with a warning; so does Collage, with a note. The inferred
  // type stands, and the reference kernel checks every run's real shapes.
  if (parent_) {
    note(what + " (kept the inferred type, as ONNX Runtime does)");
    return;
  }
  throw Error(what);
}

// The output types of a node whose output shapes depend on the run-time
// value of `slot`: Collage plans with static shapes, so they must be what
// the model declares (graph outputs or value_info); the reference kernel
// checks at run time that the values agree.
std::vector<TensorType> Importer::declaredOutputTypes(const Node& node, const ConstInput& slot) {
  const std::string input = values_[static_cast<size_t>(node.inputs[static_cast<size_t>(slot.index)])].name;
  std::vector<TensorType> out;
  for (ValueId v : node.outputs) {
    if (v == kNoValue) {
      out.emplace_back();
      continue;
    }
    const std::string& name = values_[static_cast<size_t>(v)].name;
    auto it = declared_.find(name);
    const onnx::TypeProto_Tensor* tt =
        it != declared_.end() && it->second->has_tensor_type() ? &it->second->tensor_type() : nullptr;
    bool static_ = tt && tt->elem_type() != 0 && tt->has_shape() &&
                   elementTypeFromOnnx(tt->elem_type()) != ElementType::Undefined;
    Shape shape;
    for (int i = 0; static_ && i < tt->shape().dim_size(); ++i) {
      const auto& d = tt->shape().dim(i);
      if (!d.has_dim_value() || d.dim_value() < 0) static_ = false;
      else shape.push_back(d.dim_value());
    }
    if (!static_) {
      const std::string message =
          label(node) + "the shape of output '" + name + "' depends on the run-time value of input '" +
          slot.attribute + "' ('" + input + "'), and the model declares " +
          (tt ? "it as " + declaredShapeToString(*tt) : std::string("no shape for it"));
      // Inside a body the value may change with every iteration: no binding
      // or declaration fixes that, so it is a case not covered, not a fault.
      if (parent_)
        throw Unsupported(message + " (inside a body, where it may change with every iteration)");
      throw Error(message + ": Collage plans with static shapes, so make '" + input +
                  "' a constant (an initializer, or computed from constants and static shapes) "
                  "or declare '" + name + "' with a static shape in the model's value_info");
    }
    out.push_back(TensorType{elementTypeFromOnnx(tt->elem_type()), shape});
  }
  return out;
}

// Shape and Size depend only on the (static) type of their input, and so
// does SequenceLength when the sequence's length is known at import (a
// loop's trip count often is one).
bool Importer::foldFromStaticType(const Node& node) {
  if (node.op != "Shape" && node.op != "Size" && node.op != "SequenceLength") return false;
  if (node.inputs.size() != 1 || node.inputs[0] == kNoValue || node.outputs.size() != 1 ||
      node.outputs[0] == kNoValue)
    throw Error(label(node) + "expects one input and one output");
  const TensorType& type = values_[static_cast<size_t>(node.inputs[0])].type;
  const Shape& shape = type.shape;
  Tensor t;
  if (node.op == "SequenceLength") {
    if (!type.isSequence() || type.sequenceLength == kUnknownLength) return false;
    t = Tensor::fromInts({}, {type.sequenceLength});
  } else if (node.op == "Size") {
    t = Tensor::fromInts({}, {numElements(shape)});
  } else {
    const int64_t rank = static_cast<int64_t>(shape.size());
    auto clampAxis = [&](int64_t a) {
      if (a < 0) a += rank;
      return std::clamp<int64_t>(a, 0, rank);
    };
    const int64_t start = clampAxis(node.attrs.getInt("start", 0));
    const int64_t end = clampAxis(node.attrs.getInt("end", rank));
    std::vector<int64_t> dims;
    for (int64_t i = start; i < end; ++i) dims.push_back(shape[static_cast<size_t>(i)]);
    t = Tensor::fromInts({static_cast<int64_t>(dims.size())}, dims);
  }
  WValue& out = values_[static_cast<size_t>(node.outputs[0])];
  out.type = t.type();
  out.constant = std::move(t);
  checkDeclaredType(node, node.outputs[0]);
  return true;
}

// Canonical node (inputs mapped, attributes final): infer its output types,
// then fold it or keep it.
void Importer::finishNode(Node node) {
  if (options_.foldConstants && foldFromStaticType(node)) return;
  const OpSchema& schema = OpRegistry::instance().get(node.op);
  fillDefaults(node, schema);
  std::vector<TensorType> inTypes;
  for (ValueId v : node.inputs) {
    inTypes.push_back(v == kNoValue ? TensorType{} : values_[static_cast<size_t>(v)].type);
    if (inTypes.back().isSequence() && !schema.takesSequences)
      throw Error(label(node) + "input '" + values_[static_cast<size_t>(v)].name + "' is a " +
                  inTypes.back().toString() + "; " + node.op + " takes tensors");
  }
  std::vector<TensorType> outTypes;
  if (const ConstInput* slot = shapeDecidingRuntimeInput(schema, node)) {
    outTypes = declaredOutputTypes(node, *slot);
  } else {
    try {
      outTypes = schema.infer(node, inTypes);
    } catch (const Unsupported& e) {
      rethrowWith(label(node), e);
    } catch (const Error& e) {
      throw ShapesDoNotFit(withNode(label(node), e.what()));
    }
  }
  if (node.op == "Loop") patchLoopStaticShapes(node, outTypes);
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i] == kNoValue) continue;
    if (i >= outTypes.size())
      throw Error(label(node) + "has " + std::to_string(node.outputs.size()) +
                  " outputs, the op defines " + std::to_string(outTypes.size()));
    WValue& out = values_[static_cast<size_t>(node.outputs[i])];
    const auto bytes = checkedByteSize(outTypes[i].shape, outTypes[i].elementType);
    if (!bytes)
      throw Error(label(node) + "output '" + out.name + "' would be " + outTypes[i].toString() +
                  ": a negative dim or more bytes than 64 bits count (check the shapes the "
                  "model gives this node)");
    out.type = outTypes[i];
  }
  // Declared types are checked after folding: a folded value's type comes
  // from the computed tensor (ConstantOfShape's shape is only known then).
  bool foldable = options_.foldConstants && !isNondeterministic(node.op);
  for (ValueId v : node.inputs)
    if (v != kNoValue && !values_[static_cast<size_t>(v)].constant) foldable = false;
  if (foldable) {
    std::vector<const Tensor*> in;
    for (ValueId v : node.inputs)
      in.push_back(v == kNoValue ? nullptr : &*values_[static_cast<size_t>(v)].constant);
    std::optional<std::vector<Tensor>> out;
    try {
      // A huge result (ConstantOfShape or Expand to a large shape) stays a
      // node: computed when the plan runs, not held in the graph.
      ScopedAllocationLimit limit(kMaxFoldedBytes);
      out = evaluateNode(node, in);
    } catch (const AllocationLimitExceeded& e) {
      // ConstantOfShape, Range, ...: only computing the result gives its shape.
      if (!valueShapedInputs(node.op).empty())
        throw Error(label(node) + "its result is too large to compute at import (" + e.what() +
                    "), and only computing it tells its shape");
    } catch (const Unsupported&) {
      // The kernel cannot compute it here; keep the node (a backend may).
    } catch (const Error& e) {
      rethrowWith(label(node) + "while folding constants: ", e);
    }
    if (out) {
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        if (node.outputs[i] == kNoValue) continue;
        WValue& val = values_[static_cast<size_t>(node.outputs[i])];
        val.constant = std::move((*out)[i]);
        val.type = val.constant->type();
        checkDeclaredType(node, node.outputs[i]);
      }
      return;
    }
  }
  for (ValueId v : node.outputs)
    if (v != kNoValue) checkDeclaredType(node, v);
  const int index = static_cast<int>(nodes_.size());
  for (ValueId v : node.outputs)
    if (v != kNoValue) values_[static_cast<size_t>(v)].producer = index;
  nodes_.push_back(std::move(node));
}

// Node names must be unique: explicit names are kept (the first of a
// duplicate), empty ones become op + "_" + index.
void Importer::nameNodes() {
  const auto& nodes = graph().node();
  onnxNodeNames_.assign(static_cast<size_t>(nodes.size()), "");
  for (int i = 0; i < nodes.size(); ++i)
    if (!nodes[i].name().empty() && nodeNames_.insert(nodes[i].name()).second)
      onnxNodeNames_[static_cast<size_t>(i)] = nodes[i].name();
  for (int i = 0; i < nodes.size(); ++i) {
    if (!onnxNodeNames_[static_cast<size_t>(i)].empty()) continue;
    const std::string base = nodes[i].name().empty()
                                 ? nodes[i].op_type() + "_" + std::to_string(i)
                                 : nodes[i].name() + "_" + std::to_string(i);
    onnxNodeNames_[static_cast<size_t>(i)] = freshNodeName(base);
  }
}

void Importer::importNode(const onnx::NodeProto& proto, int index) {
  Node node;
  node.name = onnxNodeNames_[static_cast<size_t>(index)];
  node.op = proto.op_type();
  const std::string onnxOp = proto.op_type();

  if (onnxOp == "Constant") {
    importConstantNode(proto, node);
    return;
  }
  node.attrs = convertAttributes(proto, node);
  for (const auto& in : proto.input()) {
    if (in.empty()) {
      node.inputs.push_back(kNoValue);
      continue;
    }
    const int id = resolve(in);
    if (id < 0)
      throw Error(label(node) + "reads tensor '" + in + "', which no node, input or initializer " +
                  (parent_ ? "of the body or an enclosing graph defines" : "defines"));
    node.inputs.push_back(id);
  }
  for (const auto& out : proto.output())
    node.outputs.push_back(out.empty() ? kNoValue : addValue(out, {}));
  while (!node.outputs.empty() && node.outputs.back() == kNoValue) node.outputs.pop_back();

  rewriteLegacyForms(node, onnxOp);
  if (options_.foldConstants && (node.op == "Shape" || node.op == "Size")) {
    finishNode(std::move(node));
    return;
  }
  const OpSchema& schema = OpRegistry::instance().get(node.op);
  applyConstInputs(node, onnxOp, schema);
  if (hasBody(node.op)) {
    importBodies(node, proto);  // may inline a constant If instead
    if (node.op.empty()) return;
  }
  for (int i : valueShapedInputs(node.op)) {
    if (i >= static_cast<int>(node.inputs.size()) || node.inputs[static_cast<size_t>(i)] == kNoValue)
      continue;
    const WValue& val = values_[static_cast<size_t>(node.inputs[static_cast<size_t>(i)])];
    if (!val.constant)
      throwNotConstant(label(node) + "the output shape depends on the values of input " +
                           std::to_string(i) + " ('" + val.name +
                           "'), which must be a constant: an initializer, a Constant, or computed "
                           "from them and static shapes",
                       val);
  }
  const bool coerced2d =
      (node.op == "Softmax" || node.op == "LogSoftmax" || node.op == "Hardmax") && opset_ < 13;
  if (coerced2d && rewriteCoercedSoftmax(node)) return;
  finishNode(std::move(node));
}

Graph Importer::buildGraph() {
  const auto& g = graph();
  std::vector<int> outputs;
  for (const auto& o : g.output()) {
    // A body may return an outer value as it is.
    const int id = parent_ ? resolve(o.name()) : (byName_.count(o.name()) ? byName_.at(o.name()) : -1);
    if (id < 0)
      throw Error("graph output '" + o.name() + "' is not produced by any node");
    outputs.push_back(id);
  }
  // Keep only what reaches an output (Dropout masks, unused shape branches).
  std::vector<char> liveValue(values_.size(), 0), liveNode(nodes_.size(), 0);
  std::vector<int> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    if (liveValue[static_cast<size_t>(v)]) continue;
    liveValue[static_cast<size_t>(v)] = 1;
    int p = values_[static_cast<size_t>(v)].producer;
    if (p < 0 || liveNode[static_cast<size_t>(p)]) continue;
    liveNode[static_cast<size_t>(p)] = 1;
    for (ValueId in : nodes_[static_cast<size_t>(p)].inputs)
      if (in != kNoValue) stack.push_back(in);
  }

  Graph graph;
  std::vector<ValueId> map(values_.size(), kNoValue);
  for (const auto& name : inputOrder_) {
    int v = byName_.at(name);
    map[static_cast<size_t>(v)] = graph.addInput(name, values_[static_cast<size_t>(v)].type);
  }
  for (size_t v = 0; v < values_.size(); ++v)
    if (liveValue[v] && values_[v].constant)
      map[v] = graph.addConstant(values_[v].name, *values_[v].constant);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (!liveNode[n]) continue;
    Node node = nodes_[n];
    for (ValueId& in : node.inputs)
      if (in != kNoValue) in = map[static_cast<size_t>(in)];
    for (ValueId& out : node.outputs) {
      if (out == kNoValue) continue;
      const WValue& w = values_[static_cast<size_t>(out)];
      map[static_cast<size_t>(out)] = graph.addValue(w.name, w.type);
      out = map[static_cast<size_t>(out)];
    }
    graph.addNode(std::move(node));
  }
  for (int v : outputs) graph.markOutput(map[static_cast<size_t>(v)]);
  graph.finalize();
  graph.name = g.name();
  for (const auto& o : model_.opset_import())
    graph.opsetImports[isOnnxDefaultDomain(o.domain()) ? "" : o.domain()] = o.version();
  graph.sourcePath = path_;
  if (options_.notes)
    for (const auto& d : dynamicInputs_) options_.notes->push_back(d.note());
  return graph;
}

Graph Importer::run() {
  model_ = loadModel(path_);
  graph_ = &model_.graph();
  bool hasDefault = false;
  for (const auto& o : model_.opset_import())
    if (isOnnxDefaultDomain(o.domain()) && !hasDefault) {
      hasDefault = true;
      opset_ = o.version();
    }
  const int64_t minOpset = options_.allowLegacyOpsets ? kMinLegacyOnnxOpset : kMinOnnxOpset;
  if (hasDefault && (opset_ < minOpset || opset_ > kMaxOnnxOpset))
    throw Unsupported(path_ + ": default-domain opset " + std::to_string(opset_) +
                      " is not supported (supported: " + std::to_string(minOpset) + " to " +
                      std::to_string(kMaxOnnxOpset) + ")");
  try {
    sortNodesTopologically(*model_.mutable_graph());  // before the checker, which demands the order
  } catch (const Error& e) {
    throw Error(path_ + ": " + e.what());
  }
  checkModel();
  checkSupportedOps();
  try {
    const auto& g = graph();
    for (const auto& vi : g.value_info()) declared_[vi.name()] = &vi.type();
    for (const auto& vi : g.output()) declared_[vi.name()] = &vi.type();
    for (const auto& n : g.node())
      for (const auto& o : n.output()) reservedNames_.insert(o);
    bindInputs();
    addInitializers();
    nameNodes();
    for (int n = 0; n < g.node_size(); ++n) {
      try {
        importNode(g.node(n), n);
      } catch (const Unsupported&) {
        throw;
      } catch (const Error& e) {
        // Sizes bound by default (1) are a likely cause of a shape error deep
        // in the graph: say which inputs were bound so.
        std::string hints;
        for (const auto& d : dynamicInputs_)
          if (d.byDefault) hints += d.hint();
        if (hints.empty()) throw;
        throw Error(e.what() + hints);
      }
    }
    return buildGraph();
  } catch (const Error& e) {
    rethrowWithPath(path_, e);
  }
}

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

Graph Importer::runBody(const std::vector<TensorType>& formals, const Node& owner,
                        const std::string& attr) {
  const auto& g = graph();
  scope_ = parent_->scope_ + label(owner) + attr + ": ";
  if (g.input_size() != static_cast<int>(formals.size()))
    throw Error(label(owner) + attr + " takes " + std::to_string(g.input_size()) +
                " inputs, the node gives it " + std::to_string(formals.size()));
  for (const auto& vi : g.value_info()) declared_[vi.name()] = &vi.type();
  for (const auto& vi : g.output()) declared_[vi.name()] = &vi.type();
  for (const auto& n : g.node())
    for (const auto& o : n.output()) reservedNames_.insert(o);
  // A Loop's iteration number and condition are declared loosely by some
  // exporters ([1] for a scalar): their types are the spec's, unchecked.
  const int unchecked = owner.op == "Loop" ? 2 : 0;
  for (int i = 0; i < g.input_size(); ++i) {
    const auto& in = g.input(i);
    const TensorType& t = formals[static_cast<size_t>(i)];
    // The body may declare its inputs; what it declares must match what the
    // node passes (a Loop's carried value, a Scan's state or slice).
    if (i < unchecked) {
    } else if (in.type().has_tensor_type() && !t.isSequence()) {
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
                    (tt.elem_type() ? std::string(elementTypeName(elementTypeFromOnnx(tt.elem_type())))
                                    : std::string("?")) +
                    "[" + declaredShapeToString(tt) + "] but the node passes " + t.toString());
    } else if (in.type().has_tensor_type() != !t.isSequence() && in.type().value_case() != 0) {
      throw Error(label(owner) + attr + " declares input '" + in.name() + "' as " +
                  (t.isSequence() ? "a tensor" : "a sequence") + " but the node passes " + t.toString());
    }
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

void Importer::importBodies(Node& node, const onnx::NodeProto& proto) {
  std::map<std::string, const onnx::GraphProto*> bodies;
  for (const auto& a : proto.attribute())
    if (a.type() == onnx::AttributeProto::GRAPH || a.has_g()) bodies[a.name()] = &a.g();
  auto body = [&](const std::string& attr) -> const onnx::GraphProto& {
    auto it = bodies.find(attr);
    if (it == bodies.end()) throw Error(label(node) + "missing required attribute '" + attr + "'");
    return *it->second;
  };
  auto typeOf = [&](ValueId v) {
    return v == kNoValue ? TensorType{} : values_[static_cast<size_t>(v)].type;
  };
  // The node's ONNX inputs keep their positions; the captured outer values follow.
  size_t explicitInputs = static_cast<size_t>(proto.input_size());
  node.inputs.resize(explicitInputs, kNoValue);
  std::vector<int> captures;
  std::vector<std::pair<std::string, std::shared_ptr<const Graph>>> graphs;

  if (node.op == "If") {
    if (explicitInputs != 1 || node.inputs[0] == kNoValue)
      throw Error(label(node) + "takes exactly one input, the condition");
    const WValue& cond = values_[static_cast<size_t>(node.inputs[0])];
    if (options_.foldConstants && cond.constant) {
      // Known at import: only the branch taken exists.
      const Tensor& c = *cond.constant;
      if (c.isSequence() || c.numElements() != 1)
        throw Error(label(node) + "the condition must hold one value, got " + c.type().toString());
      const std::string attr = c.toDoubles()[0] != 0.0 ? "then_branch" : "else_branch";
      std::vector<int> branchCaptures;
      auto branch = importBody(node, body(attr), attr, {}, branchCaptures, 0);
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
        graphs.emplace_back(attr, importBody(node, body(attr), attr, {}, captures, explicitInputs));
      } catch (const ShapesDoNotFit& e) {
        // Neither branch types at these sizes: the first reason, still
        // size-dependent for an If around this one.
        if (!unrunnable.empty()) throw ShapesDoNotFit(why);
        unrunnable = attr;
        why = e.what();
      }
    }
    if (!unrunnable.empty()) {
      graphs.emplace_back(unrunnable, graphs.front().second);  // stands in, with the same types
      node.attrs.set(kUnrunnableBranch, unrunnable);
      node.attrs.set(kUnrunnableReason, why);
      note(why + ": so " + unrunnable +
           " cannot run at the bound input sizes, and runs that take it fail, as in ONNX Runtime");
    }
  } else if (node.op == "Loop") {
    if (explicitInputs < 2)
      throw Error(label(node) + "has " + std::to_string(explicitInputs) +
                  " inputs; a Loop takes the trip count and the condition (either may be empty), "
                  "then its loop-carried values");
    // Carried values enter with their initial types; a sequence that grows
    // in the body gets a length-unknown type and the body is imported again.
    std::vector<TensorType> formals = {TensorType{ElementType::Int64, {}},
                                       TensorType{ElementType::Bool, {}}};
    for (size_t i = 2; i < explicitInputs; ++i) {
      if (node.inputs[i] == kNoValue)
        throw Error(label(node) + "loop-carried input " + std::to_string(i - 2) + " is empty");
      formals.push_back(typeOf(node.inputs[i]));
    }
    const size_t carried = explicitInputs - 2;
    std::shared_ptr<const Graph> g;
    for (int pass = 0;; ++pass) {
      std::vector<int> trial = captures;
      g = importBody(node, body("body"), "body", formals, trial, explicitInputs);
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
        captures = std::move(trial);
        break;
      }
    }
    graphs.emplace_back("body", g);
  } else if (node.op == "SequenceMap") {
    // The body runs once per element: it sees one element of each sequence
    // input, and each tensor input whole.
    std::vector<TensorType> formals;
    for (size_t i = 0; i < explicitInputs; ++i) {
      if (node.inputs[i] == kNoValue) throw Error(label(node) + "input " + std::to_string(i) + " is empty");
      const TensorType t = typeOf(node.inputs[i]);
      if (i == 0 && !t.isSequence())
        throw Error(label(node) + "input '" + values_[static_cast<size_t>(node.inputs[0])].name +
                    "' is " + t.toString() + "; the first input of a SequenceMap is a sequence");
      formals.push_back(t.elementTensorType());
    }
    graphs.emplace_back("body", importBody(node, body("body"), "body", formals, captures, explicitInputs));
  } else {  // Scan
    const int64_t numScanInputs = node.attrs.getInt("num_scan_inputs", -1);
    if (opset_ < 9)
      throw Unsupported(label(node) + "the opset-8 Scan (with a batch axis and sequence_lens) is not supported");
    if (numScanInputs < 1 || static_cast<size_t>(numScanInputs) > explicitInputs)
      throw Error(label(node) + "num_scan_inputs is " + std::to_string(numScanInputs) + " for " +
                  std::to_string(explicitInputs) + " inputs");
    const size_t state = explicitInputs - static_cast<size_t>(numScanInputs);
    std::vector<int64_t> axes = node.attrs.getInts("scan_input_axes",
                                                   std::vector<int64_t>(static_cast<size_t>(numScanInputs), 0));
    if (axes.size() != static_cast<size_t>(numScanInputs))
      throw Error(label(node) + "scan_input_axes has " + std::to_string(axes.size()) +
                  " entries for " + std::to_string(numScanInputs) + " scan inputs");
    std::vector<TensorType> formals;
    for (size_t i = 0; i < explicitInputs; ++i) {
      if (node.inputs[i] == kNoValue) throw Error(label(node) + "input " + std::to_string(i) + " is empty");
      TensorType t = typeOf(node.inputs[i]);
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
    graphs.emplace_back("body", importBody(node, body("body"), "body", formals, captures, explicitInputs));
  }
  for (auto& [attr, g] : graphs) node.attrs.set(attr, g);
  for (int outer : captures) node.inputs.push_back(outer);
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

}  // namespace

bool isImportableOp(const std::string& op, bool foldConstants) {
  if (op == "Constant") return true;
  if (foldConstants && (op == "Shape" || op == "Size")) return true;
  return OpRegistry::instance().find(canonicalOp(op)) != nullptr;
}

std::vector<int> constInputSlots(const std::string& op, int64_t opset) {
  const OpSchema* schema = OpRegistry::instance().find(canonicalOp(op));
  if (!schema) return {};
  // A Loop's trip count and condition decide how many rows its scan outputs have.
  if (op == "Loop") return {0, 1};
  std::vector<int> out = valueShapedInputs(canonicalOp(op));
  // A slot that only changes values (Clip's min) may be a run-time tensor.
  for (const auto& c : constSlotsFor(op, opset, *schema))
    if (c.decidesShape) out.push_back(c.index);
  return out;
}

std::pair<std::string, Shape> parseInputShapeBinding(const std::string& text) {
  const size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 > text.size())
    throw Error("bad input shape binding '" + text + "': expected NAME=DIMS, e.g. input_ids=1x128");
  std::string name = text.substr(0, eq);
  std::string dims = text.substr(eq + 1);
  if (dims.empty())
    throw Error("bad input shape binding '" + text + "': no dimensions after '='");
  try {
    return {name, parseShape(dims)};
  } catch (const Error& e) {
    throw Error("bad input shape binding '" + text + "': " + e.what());
  }
}

Graph importOnnx(const std::string& path, const ImportOptions& options) {
  Importer importer(path, options);
  return importer.run();
}

// ---- Declared inputs without the weights.

bool DeclaredInput::isDynamic() const {
  return !rankKnown || std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; });
}

namespace {

std::string joined(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

std::string sizesText(const std::vector<int64_t>& sizes) {
  std::vector<std::string> parts;
  for (int64_t d : sizes) parts.push_back(std::to_string(d));
  return joined(parts, "x");
}

}  // namespace

std::optional<DynamicInputBinding> dynamicInputBinding(const DeclaredInput& input,
                                                       const ImportOptions& options) {
  if (!input.rankKnown || !input.isDynamic()) return std::nullopt;
  DynamicInputBinding b;
  b.input = input.name;
  auto bound = options.inputShapes.find(input.name);
  b.byDefault = bound == options.inputShapes.end();
  std::vector<std::string> declared;
  for (size_t i = 0; i < input.dims.size(); ++i) {
    if (input.dims[i] >= 0) {
      declared.push_back(std::to_string(input.dims[i]));
      continue;
    }
    const std::string symbol =
        i < input.symbols.size() && !input.symbols[i].empty() ? input.symbols[i] : "?";
    declared.push_back(symbol);
    b.symbols.push_back(symbol);
    if (b.byDefault)
      b.sizes.push_back(options.defaultDim);
    else if (i < bound->second.size())
      b.sizes.push_back(bound->second[i]);
  }
  b.declared = joined(declared, "x");
  return b;
}

std::string DynamicInputBinding::note() const {
  std::string s = "input '" + input + "' has dynamic dims [" + joined(symbols, ", ") +
                  "]: bound to " + sizesText(sizes);
  if (!byDefault) return s + " by --input-shape";
  return s + " by default; bind them with --input-shape " + input + "=" + declared;
}

std::string DynamicInputBinding::hint() const {
  return " (input '" + input + "' had dynamic dims [" + joined(symbols, ", ") +
         "] bound by default to " + sizesText(sizes) + ": bind them with --input-shape " + input +
         "=" + declared + ")";
}

namespace {

using google::protobuf::internal::WireFormatLite;

constexpr int kModelGraphField = 7;         // ModelProto.graph
constexpr int kGraphInitializerField = 5;   // GraphProto.initializer
constexpr int kGraphInputField = 11;        // GraphProto.input
constexpr int kTensorNameField = 8;         // TensorProto.name

bool isLengthDelimited(uint32_t tag) {
  return WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
}

// Calls onField(fieldNumber, tag) for each field of the message that ends at
// the current limit; onField consumes the field or returns false to skip it.
template <typename OnField>
bool scanMessage(google::protobuf::io::CodedInputStream& in, OnField onField) {
  for (uint32_t tag; (tag = in.ReadTag()) != 0;) {
    int field = WireFormatLite::GetTagFieldNumber(tag);
    bool consumed = false;
    if (isLengthDelimited(tag)) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return false;
      auto limit = in.PushLimit(static_cast<int>(length));
      consumed = onField(field, in);
      if (!consumed && !in.Skip(static_cast<int>(length))) return false;
      if (in.BytesUntilLimit() != 0 && !in.Skip(in.BytesUntilLimit())) return false;
      in.PopLimit(limit);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
  return in.ConsumedEntireMessage();
}

}  // namespace

std::vector<DeclaredInput> readDeclaredInputs(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open (no such file or not readable)");
  std::vector<onnx::ValueInfoProto> inputs;
  std::set<std::string> initializerNames;
  bool sawGraph = false, ok = false;
  {
    google::protobuf::io::FileInputStream raw(fd);
    raw.SetCloseOnDelete(true);
    google::protobuf::io::CodedInputStream in(&raw);
    ok = scanMessage(in, [&](int field, google::protobuf::io::CodedInputStream& model) {
      if (field != kModelGraphField) return false;
      sawGraph = true;
      return scanMessage(model, [&](int gfield, google::protobuf::io::CodedInputStream& graph) {
        if (gfield == kGraphInputField) {
          std::string bytes;
          if (!graph.ReadString(&bytes, graph.BytesUntilLimit())) return false;
          onnx::ValueInfoProto info;
          if (!info.ParseFromString(bytes)) return false;
          inputs.push_back(std::move(info));
          return true;
        }
        if (gfield == kGraphInitializerField) {
          return scanMessage(graph, [&](int tfield, google::protobuf::io::CodedInputStream& tensor) {
            if (tfield != kTensorNameField) return false;
            std::string name;
            if (!tensor.ReadString(&name, tensor.BytesUntilLimit())) return false;
            initializerNames.insert(std::move(name));
            return true;
          });
        }
        return false;
      });
    });
  }
  if (!ok || !sawGraph) throw Error(path + ": not a valid ONNX model (truncated or corrupt protobuf)");
  std::vector<DeclaredInput> out;
  for (const auto& info : inputs) {
    if (initializerNames.count(info.name())) continue;
    out.push_back(declaredInputOf(info));
  }
  return out;
}

}  // namespace collage
