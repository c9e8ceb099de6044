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
#include <limits>
#include <optional>
#include <set>

#include "core/ir/error.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"
#include "core/ops/runtime_inputs.h"
#include "core/onnx/tensor_proto.h"

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

// Ops whose outputs are random: never folded even with constant inputs.
bool isNondeterministic(const std::string& op) {
  return op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" ||
         op == "RandomUniformLike" || op == "Multinomial" || op == "Bernoulli";
}

// Data inputs whose VALUES decide the output shape. Collage's shapes are
// static, so these must be constant (the node is then folded away).
std::vector<int> valueShapedInputs(const std::string& op) {
  if (op == "ConstantOfShape") return {0};
  if (op == "Range") return {0, 1, 2};
  return {};
}

// The op a default-domain node becomes in the canonical form.
std::string canonicalOp(const std::string& op) { return op == "Upsample" ? "Resize" : op; }

std::string label(const Node& node) { return "node '" + node.name + "' (" + node.op + "): "; }

// Prefixes a message with `prefix` unless it already names a node.
std::string withNode(const std::string& prefix, const std::string& what) {
  if (what.find("node '") != std::string::npos) return what;
  return prefix + what;
}

[[noreturn]] void rethrowWith(const std::string& prefix, const Error& e) {
  std::string what = withNode(prefix, e.what());
  if (dynamic_cast<const Unsupported*>(&e)) throw Unsupported(what);
  throw Error(what);
}

// Prefixes a message with the file name unless it already starts with it.
[[noreturn]] void rethrowWithPath(const std::string& path, const Error& e) {
  std::string what = e.what();
  if (what.rfind(path + ":", 0) != 0) what = path + ": " + what;
  if (dynamic_cast<const Unsupported*>(&e)) throw Unsupported(what);
  throw Error(what);
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

  void checkModel();
  void checkSupportedOps();
  void bindInputs();
  void addInitializers();
  std::vector<int> sortedNodes();
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
  bool foldShapeOrSize(const Node& node);
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
  // op label -> node names, in order of first appearance.
  std::vector<std::pair<std::string, std::vector<std::string>>> missing;
  const auto& nodes = model_.graph().node();
  for (int i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
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
  const auto& g = model_.graph();
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
  const auto& g = model_.graph();
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

std::vector<int> Importer::sortedNodes() {
  // ONNX requires topological order and the checker enforces it, but at
  // opset 18 the checker may have been skipped: sort (stably) to be safe.
  const auto& nodes = model_.graph().node();
  const size_t n = static_cast<size_t>(nodes.size());
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < n; ++i)
    for (const auto& o : nodes[i].output())
      if (!o.empty()) producer[o] = i;
  std::vector<std::vector<size_t>> succ(n);
  std::vector<int> indeg(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (const auto& in : nodes[i].input()) {
      auto it = producer.find(in);
      if (in.empty() || it == producer.end() || byName_.count(in)) continue;
      succ[it->second].push_back(i);
      ++indeg[i];
    }
  std::set<size_t> ready;
  for (size_t i = 0; i < n; ++i)
    if (!indeg[i]) ready.insert(i);
  std::vector<int> order;
  while (!ready.empty()) {
    size_t u = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(static_cast<int>(u));
    for (size_t s : succ[u])
      if (--indeg[s] == 0) ready.insert(s);
  }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i)
      if (indeg[i] > 0)
        throw Error("the graph has a cycle through node '" + nodes[static_cast<int>(i)].name() +
                    "' (" + nodes[static_cast<int>(i)].op_type() + ")");
  }
  return order;
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
      default:
        throw Unsupported(label(node) + "attribute '" + a.name() +
                          "' is a graph, sparse tensor or type; these are not supported");
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
    if (tt.shape().dim_size() != v.type.rank()) {
      ok = false;
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
  throw Error("tensor '" + v.name + "': the model declares " + declaredType + " but " +
              label(node) + "produces " + v.type.toString());
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
    if (!static_)
      throw Error(label(node) + "the shape of output '" + name +
                  "' depends on the run-time value of input '" + slot.attribute + "' ('" + input +
                  "'), and the model declares " +
                  (tt ? "it as " + declaredShapeToString(*tt) : std::string("no shape for it")) +
                  ": Collage plans with static shapes, so make '" + input +
                  "' a constant (an initializer, or computed from constants and static shapes) "
                  "or declare '" + name + "' with a static shape in the model's value_info");
    out.push_back(TensorType{elementTypeFromOnnx(tt->elem_type()), shape});
  }
  return out;
}

// Shape and Size depend only on the (static) type of their input.
bool Importer::foldShapeOrSize(const Node& node) {
  if (node.op != "Shape" && node.op != "Size") return false;
  if (node.inputs.size() != 1 || node.inputs[0] == kNoValue || node.outputs.size() != 1 ||
      node.outputs[0] == kNoValue)
    throw Error(label(node) + "expects one input and one output");
  const Shape& shape = values_[static_cast<size_t>(node.inputs[0])].type.shape;
  Tensor t;
  if (node.op == "Size") {
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
  if (options_.foldConstants && foldShapeOrSize(node)) return;
  const OpSchema& schema = OpRegistry::instance().get(node.op);
  fillDefaults(node, schema);
  std::vector<TensorType> inTypes;
  for (ValueId v : node.inputs)
    inTypes.push_back(v == kNoValue ? TensorType{} : values_[static_cast<size_t>(v)].type);
  std::vector<TensorType> outTypes;
  if (const ConstInput* slot = shapeDecidingRuntimeInput(schema, node)) {
    outTypes = declaredOutputTypes(node, *slot);
  } else {
    try {
      outTypes = schema.infer(node, inTypes);
    } catch (const Error& e) {
      rethrowWith(label(node), e);
    }
  }
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i] == kNoValue) continue;
    if (i >= outTypes.size())
      throw Error(label(node) + "has " + std::to_string(node.outputs.size()) +
                  " outputs, the op defines " + std::to_string(outTypes.size()));
    values_[static_cast<size_t>(node.outputs[i])].type = outTypes[i];
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
      out = evaluateNode(node, in);
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
  const auto& nodes = model_.graph().node();
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
    auto it = byName_.find(in);
    if (it == byName_.end())
      throw Error(label(node) + "reads tensor '" + in +
                  "', which no node, input or initializer defines");
    node.inputs.push_back(it->second);
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
  for (int i : valueShapedInputs(node.op)) {
    if (i >= static_cast<int>(node.inputs.size()) || node.inputs[static_cast<size_t>(i)] == kNoValue)
      continue;
    const WValue& val = values_[static_cast<size_t>(node.inputs[static_cast<size_t>(i)])];
    if (!val.constant)
      throw Error(label(node) + "the output shape depends on the values of input " +
                  std::to_string(i) + " ('" + val.name +
                  "'), which must be a constant: an initializer, a Constant, or computed from "
                  "them and static shapes" +
                  (val.isInput ? std::string(" (it is a graph input: bind it to a value)") : ""));
  }
  const bool coerced2d =
      (node.op == "Softmax" || node.op == "LogSoftmax" || node.op == "Hardmax") && opset_ < 13;
  if (coerced2d && rewriteCoercedSoftmax(node)) return;
  finishNode(std::move(node));
}

Graph Importer::buildGraph() {
  const auto& g = model_.graph();
  std::vector<int> outputs;
  for (const auto& o : g.output()) {
    auto it = byName_.find(o.name());
    if (it == byName_.end())
      throw Error("graph output '" + o.name() + "' is not produced by any node");
    outputs.push_back(it->second);
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
  checkModel();
  checkSupportedOps();
  try {
    const auto& g = model_.graph();
    for (const auto& vi : g.value_info()) declared_[vi.name()] = &vi.type();
    for (const auto& vi : g.output()) declared_[vi.name()] = &vi.type();
    for (const auto& n : g.node())
      for (const auto& o : n.output()) reservedNames_.insert(o);
    bindInputs();
    addInitializers();
    nameNodes();
    for (int n : sortedNodes()) {
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

}  // namespace

bool isImportableOp(const std::string& op, bool foldConstants) {
  if (op == "Constant") return true;
  if (foldConstants && (op == "Shape" || op == "Size")) return true;
  return OpRegistry::instance().find(canonicalOp(op)) != nullptr;
}

std::vector<int> constInputSlots(const std::string& op, int64_t opset) {
  const OpSchema* schema = OpRegistry::instance().find(canonicalOp(op));
  if (!schema) return {};
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
