// ONNX import into the core Graph, on Debian's libonnx (protobuf) with ONNX's
// own checker. Produces a graph with a static TensorType on every value:
//  - dynamic dimensions of the inputs are bound from ImportOptions::inputShapes
//    ("name=1x3x224x224") or set to defaultDim;
//  - initializers (and external-data tensors read from beside the model) and
//    Constant nodes become constant Values;
//  - shape subgraphs (Shape, Gather, Concat, ConstantOfShape, ...) are folded
//    into constants by running the reference kernels on constant inputs;
//  - parameters passed as constant tensor inputs become attributes (see
//    op_registry.h, "Canonical form"), and ONNX defaults are filled in;
//    run-time ones stay inputs (core/ops/runtime_inputs.h), and where their
//    values decide an output shape that shape is the model's declaration;
//  - each dynamic input gets a note saying how it was bound, and a shape
//    error the default binding may have caused says so.
// Every user-caused problem is an Error naming the file and the node or tensor.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"

namespace collage {

struct ImportOptions {
  std::map<std::string, Shape> inputShapes;  // bindings for inputs with dynamic dims
  int64_t defaultDim = 1;                    // for dynamic dims with no binding
  // Graph inputs to bind to known values; they become constants (the
  // conformance runner binds shape-like inputs such as Reshape's shape this way).
  std::map<std::string, Tensor> constantInputs;
  bool foldConstants = true;
  // Also accept default-domain opsets 6 to 8, canonicalised to opset 9's
  // forms (legacy binary-op broadcast, Gemm's broadcast attribute). On by
  // default: exporters and model collections still hold such models and ONNX
  // Runtime runs them; the node conformance suite's older cases cover it.
  bool allowLegacyOpsets = true;
  // Outputs computed at the last index of their second-to-last axis only
  // (import_last_row.h): a decoder's prompt pass, whose logits generating
  // reads at the last position alone. An output the rewrite cannot take
  // stays whole, with a note saying why.
  std::vector<std::string> lastRowOutputs;
  // Receives what the import chose that the user may want to know, one line
  // each (a dynamic input and the sizes it was bound to: DynamicInputBinding::note),
  // for front ends to show; may be null.
  std::vector<std::string>* notes = nullptr;
};

// A binding word "NAME@last" (the words a model's bindings travel in to the
// measurement workers, beside "name=1x128" and "name:=true"): output NAME at
// its last row only (ImportOptions::lastRowOutputs).
inline constexpr std::string_view kLastRowBinding = "@last";
// The output a "NAME@last" word names; empty for any other word.
inline std::string lastRowOutputOf(std::string_view word) {
  if (word.size() <= kLastRowBinding.size() || !word.ends_with(kLastRowBinding)) return {};
  return std::string(word.substr(0, word.size() - kLastRowBinding.size()));
}

// Default-domain opsets the importer canonicalises.
inline constexpr int64_t kMinOnnxOpset = 9;
inline constexpr int64_t kMaxOnnxOpset = 18;
inline constexpr int64_t kMinLegacyOnnxOpset = 6;  // with ImportOptions::allowLegacyOpsets

// Parses "name=1x3x224x224"; throws Error on bad text.
std::pair<std::string, Shape> parseInputShapeBinding(const std::string& text);

// Throws Error for a file that cannot be read, is not a valid model, fails
// ONNX's checker, or uses an opset out of range; Unsupported (an Error) for
// ops, element types or attribute kinds Collage does not cover: the message
// lists every unsupported op with its nodes.
Graph importOnnx(const std::string& path, const ImportOptions& options = {});

// A graph input as the file declares it (initializers listed as inputs are
// left out). dims[i] is the size, or -1 for a dynamic dimension whose symbol
// ("batch", or "" when unnamed) is symbols[i]; a rank-unknown input has
// rankKnown false.
struct DeclaredInput {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<std::string> symbols;
  bool rankKnown = true;
  bool isDynamic() const;
};

// An input with dynamic dimensions and the sizes the import gives them.
struct DynamicInputBinding {
  std::string input;
  std::vector<std::string> symbols;  // of the dynamic dims, in order ("?" when unnamed)
  std::vector<int64_t> sizes;        // the size each dynamic dim is bound to
  std::string declared;              // the declared shape with symbols: "Nx3xT"
  bool byDefault = true;             // no --input-shape binding: ImportOptions::defaultDim

  // "input 'x' has dynamic dims [N, T]: bound to 1x1 by default; bind them
  // with --input-shape x=Nx3xT" (the import note front ends show).
  std::string note() const;
  // " (input 'x' had dynamic dims [N, T] bound by default to 1x1: bind them
  // with --input-shape x=Nx3xT)", appended to a shape error the binding may cause.
  std::string hint() const;
};

// How `input` is bound under `options`; nullopt unless it has a declared
// rank and a dynamic dim.
std::optional<DynamicInputBinding> dynamicInputBinding(const DeclaredInput& input,
                                                       const ImportOptions& options);

// The model's graph inputs, read without loading its weights (the reader
// skips initializer data), so a front end can ask for dynamic dimensions
// before the import. Throws Error for a file that is not a model.
std::vector<DeclaredInput> readDeclaredInputs(const std::string& path);

// Reads/writes a serialized onnx.TensorProto (the format of ONNX's test data
// input_0.pb / output_0.pb). `name` receives the tensor's name if non-null.
Tensor readTensorProtoFile(const std::string& path, std::string* name = nullptr);
void writeTensorProtoFile(const std::string& path, const Tensor& tensor, const std::string& name);

// True for the ONNX default domain ("" or "ai.onnx").
bool isOnnxDefaultDomain(const std::string& domain);
// True if the importer can take a node of this op: the op (or the op it is
// rewritten to, e.g. Upsample -> Resize) is registered, or the importer
// itself resolves it (Constant; Shape and Size when folding). A node outside
// the default domain is asked about as "domain.op" ("com.microsoft.QLinearAdd").
bool isImportableOp(const std::string& op, bool foldConstants = true);
// ONNX input positions of a default-domain `op` at `opset` whose values decide
// an output shape: parameters that become attributes when constant (Reshape's
// shape, Pad's pads; not Clip's min, which may be a run-time tensor), and
// ConstantOfShape's and Range's inputs (such nodes are folded). Collage plans
// with static shapes, so a run-time tensor there needs the output shape
// declared; this lets a test harness bind such graph inputs with
// ImportOptions::constantInputs instead.
std::vector<int> constInputSlots(const std::string& op, int64_t opset);

}  // namespace collage
