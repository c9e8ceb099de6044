// The op registry: for every op Collage understands, its OpKind, its
// attributes with their ONNX defaults, shape inference, FLOP count and the
// reference kernel that is the ground truth for every backend.
//
// Canonical form. ONNX passes some parameters as constant tensor inputs in
// newer opsets and as attributes in older ones (Reshape's shape, Slice's
// starts/ends, Clip's min/max, Squeeze's axes, ...). When such an input is
// constant (after folding), the importer turns it into an attribute named as
// the ONNX input is named and drops the input. Every kernel, backend and
// pattern therefore sees one form whatever the opset: Reshape has one input
// and an `shape` attribute, Clip has `min`/`max`. ONNX also allows a
// run-time tensor there: the node then keeps that input at its position
// (runtime_inputs.h), the reference kernels read it, and backends that need
// the constant refuse the node.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/attribute.h"
#include "core/ir/error.h"
#include "core/ir/graph.h"
#include "core/ir/op_kind.h"
#include "core/ir/tensor.h"

namespace collage {

// Thrown by shape inference or a reference kernel for a case the op set does
// not cover (an element type, an attribute value). The conformance runner
// counts these as skipped; anywhere else it is an ordinary Error.
class Unsupported : public Error {
 public:
  explicit Unsupported(const std::string& message) : Error(message) {}
};

struct AttributeSpec {
  std::string name;
  AttributeType type;
  std::optional<Attribute> defaultValue;  // filled in at import when absent
  bool required = false;
};

// A tensor input that becomes attribute `attribute` when it is constant (a
// run-time tensor stays an input: runtime_inputs.h).
struct ConstInput {
  int index;              // input position in the newest opset
  std::string attribute;  // canonical attribute name
  AttributeType type;     // Ints (int tensors) or Floats/Float (float tensors) or Int
  // Whether its value decides an output shape (Pad's pads: yes; Clip's min:
  // no). A run-time tensor in such a slot needs the output shape declared.
  bool decidesShape = true;
};

// Output types from input types (absent optional inputs have an Undefined type).
// Throws Error for inconsistent shapes, Unsupported for uncovered cases.
using InferFn = std::function<std::vector<TensorType>(const Node&, const std::vector<TensorType>&)>;
// Computes outputs (pre-allocated with the inferred types; nullptr for absent
// outputs) from inputs (nullptr for absent optional inputs).
using ReferenceFn =
    std::function<void(const Node&, const std::vector<const Tensor*>&, const std::vector<Tensor*>&)>;
// Floating-point operations (a multiply-add counts 2).
using FlopsFn = std::function<double(const Node&, const std::vector<TensorType>& inputs,
                                     const std::vector<TensorType>& outputs)>;

struct OpSchema {
  std::string name;
  OpKind kind = OpKind::Opaque;
  int minInputs = 1;  // data inputs, after ConstInputs are removed
  int maxInputs = 1;
  int minOutputs = 1;
  int maxOutputs = 1;
  std::vector<AttributeSpec> attributes;
  std::vector<ConstInput> constInputs;
  // Data inputs whose VALUES decide an output's shape (Range's limits,
  // NonZero's condition, Unique's input): shapes are static, so the importer
  // requires them to be constant and the node is folded. infer returns a
  // placeholder of the right rank with zero-sized dimensions and the
  // reference kernel replaces the output with one of the real shape.
  std::vector<int> valueShapedInputs;
  InferFn infer;
  ReferenceFn reference;
  FlopsFn flops;  // optional: default counts one op per output element
  // Reads or writes sequence values (tensor.h): the Sequence ops, the
  // control-flow ops, Identity. Any other op given a sequence is an Error.
  bool takesSequences = false;

  const AttributeSpec* findAttribute(const std::string& attr) const;
  const ConstInput* findConstInput(int index) const;
};

class OpRegistry {
 public:
  // The registry with every built-in op (built once, thread-safe).
  static const OpRegistry& instance();

  void add(OpSchema schema);
  const OpSchema* find(const std::string& op) const;
  // Throws Error naming the op.
  const OpSchema& get(const std::string& op) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, OpSchema> schemas_;
};

// Convenience wrappers over the registry for one node of a graph.
OpKind opKindOf(const std::string& op);
std::vector<TensorType> inferNode(const Node& node, const std::vector<TensorType>& inputs);
double flopsOf(const Graph& graph, NodeId node);

// Registration entry points, one per op family (core/ops/*.cc).
void registerElementwiseOps(OpRegistry& r);
void registerReductionOps(OpRegistry& r);
void registerShapeOps(OpRegistry& r);
void registerConvOps(OpRegistry& r);
void registerMatMulOps(OpRegistry& r);
void registerPoolOps(OpRegistry& r);
void registerNormalizationOps(OpRegistry& r);
void registerMiscOps(OpRegistry& r);
void registerSpatialOps(OpRegistry& r);
void registerControlFlowOps(OpRegistry& r);  // control_flow_ops.cc
void registerSequenceOps(OpRegistry& r);     // sequence_ops.cc
void registerIndexOps(OpRegistry& r);
void registerLossOps(OpRegistry& r);
void registerRecurrentOps(OpRegistry& r);
void registerDetectionOps(OpRegistry& r);
void registerSamplingOps(OpRegistry& r);
void registerQuantizeOps(OpRegistry& r);
void registerQLinearContribOps(OpRegistry& r);  // com.microsoft QLinear*, qlinear_contrib_ops.cc
void registerEinsumOps(OpRegistry& r);
void registerSignalOps(OpRegistry& r);
void registerRandomOps(OpRegistry& r);
void registerLayoutOps(OpRegistry& r);

}  // namespace collage
