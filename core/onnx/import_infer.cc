#include "core/onnx/import_infer.h"

#include "core/ir/tensor_size.h"
#include "core/ops/runtime_inputs.h"
#include "core/onnx/import_parse.h"
#include "core/onnx/importer.h"
#include "core/onnx/tensor_proto.h"

namespace collage::onnx_import {

// The output types shape inference gives (or the declared ones, where a
// run-time input decides them). An inference error is ShapesDoNotFit: at
// other input sizes the node might type.
std::vector<TensorType> Importer::inferOutputTypes(const Node& node, const OpSchema& schema) {
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
  return outTypes;
}

// Gives each output its type; a size past 64 bits (or negative) is the
// model's fault, said before anything allocates.
void Importer::setOutputTypes(const Node& node, const std::vector<TensorType>& outTypes) {
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
  const std::string what = "tensor '" + v.name + "': the model declares " + declaredTypeToString(tt) + " but " +
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

}  // namespace collage::onnx_import
