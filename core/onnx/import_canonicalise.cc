#include "core/onnx/import_canonicalise.h"

#include <limits>


#include "core/ops/runtime_inputs.h"
#include "core/onnx/import_fold.h"
#include "core/onnx/importer.h"
#include "core/onnx/tensor_proto.h"

namespace collage::onnx_import {

std::string canonicalOp(const std::string& op) { return op == "Upsample" ? "Resize" : op; }


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

}  // namespace collage::onnx_import

namespace collage {

using onnx_import::canonicalOp;
using onnx_import::constSlotsFor;
using onnx_import::valueShapedInputs;

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

}  // namespace collage
