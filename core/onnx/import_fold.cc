#include "core/onnx/import_fold.h"

#include "core/ir/tensor_size.h"
#include "core/ops/half_float.h"
#include "core/ops/reference_executor.h"
#include "core/ops/runtime_inputs.h"
#include "core/onnx/importer.h"

namespace collage::onnx_import {

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


// Canonical node (inputs mapped, attributes final): infer its output types,
// then fold it or keep it.
void Importer::finishNode(Node node) {
  if (options_.foldConstants && foldFromStaticType(node)) return;
  if (options_.foldConstants && foldWidenedWeight(node)) return;
  const OpSchema& schema = OpRegistry::instance().get(node.op);
  fillDefaults(node, schema);
  setOutputTypes(node, inferOutputTypes(node, schema));
  // Declared types are checked after folding: a folded value's type comes
  // from the computed tensor (ConstantOfShape's shape is only known then).
  if (tryFold(node)) return;
  for (ValueId v : node.outputs)
    if (v != kNoValue) checkDeclaredType(node, v);
  const int index = static_cast<int>(nodes_.size());
  for (ValueId v : node.outputs)
    if (v != kNoValue) values_[static_cast<size_t>(v)].producer = index;
  nodes_.push_back(std::move(node));
}

// Computes a node whose inputs are all constant; true if its outputs are
// now constants (and the node is gone).
bool Importer::tryFold(const Node& node) {
  if (!options_.foldConstants || isNondeterministic(node.op)) return false;
  for (ValueId v : node.inputs)
    if (v != kNoValue && !values_[static_cast<size_t>(v)].constant) return false;
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
  if (!out) return false;
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i] == kNoValue) continue;
    WValue& val = values_[static_cast<size_t>(node.outputs[i])];
    val.constant = std::move((*out)[i]);
    val.type = val.constant->type();
    checkDeclaredType(node, node.outputs[i]);
  }
  return true;
}
// Exporters that keep a model's weights in float16 (or bfloat16) write each
// one as an initializer followed by Cast(to=float). No kernel computes in
// those types, so the weight becomes the float32 constant here, converted
// once. Widening is exact (every float16 and bfloat16 value is a float32), so
// the model computes what it did. This comes before the Cast's type checks:
// the reference Cast does not take bfloat16, and its generic fold would
// refuse the node rather than keep it. A Cast of a computed tensor is not
// this: its input is no constant, and it stays a node.
bool Importer::foldWidenedWeight(const Node& node) {
  if (node.op != "Cast" || node.inputs.size() != 1 || node.inputs[0] == kNoValue ||
      node.outputs.size() != 1 || node.outputs[0] == kNoValue)
    return false;
  if (elementTypeFromOnnx(static_cast<int32_t>(node.attrs.getInt("to", 0))) != ElementType::Float32)
    return false;
  const std::optional<Tensor>& weight = values_[static_cast<size_t>(node.inputs[0])].constant;
  if (!weight) return false;
  const ElementType from = weight->elementType();
  if (from != ElementType::Float16 && from != ElementType::BFloat16) return false;
  Tensor widened(ElementType::Float32, weight->shape());
  const uint16_t* bits = weight->data<uint16_t>();
  float* out = widened.data<float>();
  for (int64_t i = 0; i < weight->numElements(); ++i)
    out[i] = from == ElementType::Float16 ? halfToFloat(bits[i]) : bfloat16ToFloat(bits[i]);
  WValue& val = values_[static_cast<size_t>(node.outputs[0])];
  val.type = widened.type();
  val.constant = std::move(widened);
  checkDeclaredType(node, node.outputs[0]);
  return true;
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

}  // namespace collage::onnx_import
