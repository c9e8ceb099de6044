#include "core/onnx/import_parse.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/wire_format_lite.h>
#include <onnx/checker.h>
#include <unistd.h>

#include <functional>

#include "core/ops/control_flow_ops.h"
#include "core/onnx/importer.h"
#include "core/onnx/tensor_proto.h"

namespace onnx::checker {
// Defined (and exported) by libonnx but not declared in its header: the
// checker with a caller-provided context, which lets external data be checked
// relative to the model's directory without parsing the file a second time.
void check_model(const ModelProto& model, CheckerContext& ctx);
}  // namespace onnx::checker

namespace collage::onnx_import {

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

std::string declaredTypeToString(const onnx::TypeProto_Tensor& t) {
  return (t.elem_type() ? std::string(elementTypeName(elementTypeFromOnnx(t.elem_type()))) : "?") +
         "[" + declaredShapeToString(t) + "]";
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
      const std::string op = qualifiedOpName(n.domain(), n.op_type());
      if (isImportableOp(op, options_.foldConstants)) continue;
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
      // Of the declared type: a graph built for one type must not read another.
      const ElementType declared = in->type().has_tensor_type()
                                       ? elementTypeFromOnnx(in->type().tensor_type().elem_type())
                                       : ElementType::Undefined;
      if (declared != ElementType::Undefined && declared != c->second.elementType())
        throw Error(path_ + ": the constant bound to input '" + name + "' is " +
                    std::string(elementTypeName(c->second.elementType())) + ", the input is " +
                    std::string(elementTypeName(declared)));
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
    const Shape shape = boundShape(*in);
    for (int64_t d : shape)
      if (d < 0) throw Error("input '" + name + "' has a negative dimension " + shapeToString(shape));
    int id = addValue(name, TensorType{et, shape});
    values_[id].isInput = true;
    inputOrder_.push_back(name);
    if (auto d = dynamicInputBinding(declaredInputOf(*in), options_)) dynamicInputs_.push_back(*d);
  }
}

// The static shape of a tensor input: the binding if there is one (it must
// agree with every dim the model fixes), else the declared dims with
// defaultDim for each dynamic one.
Shape Importer::boundShape(const onnx::ValueInfoProto& input) {
  const std::string& name = input.name();
  const auto& tt = input.type().tensor_type();
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
  return shape;
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

}  // namespace collage::onnx_import

namespace collage {

using onnx_import::declaredInputOf;

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

