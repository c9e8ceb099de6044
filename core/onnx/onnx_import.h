// ONNX import into the core Graph, on Debian's libonnx (protobuf) with ONNX's
// own checker. Produces a graph with a static TensorType on every value:
//  - dynamic dimensions of the inputs are bound from ImportOptions::inputShapes
//    ("name=1x3x224x224") or set to defaultDim;
//  - initializers (and external-data tensors read from beside the model) and
//    Constant nodes become constant Values;
//  - shape subgraphs (Shape, Gather, Concat, ConstantOfShape, ...) are folded
//    into constants by running the reference kernels on constant inputs;
//  - parameters passed as constant tensor inputs become attributes (see
//    op_registry.h, "Canonical form"), and ONNX defaults are filled in.
// Every user-caused problem is an Error naming the file and the node or tensor.
#pragma once

#include <map>
#include <string>
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
};

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
// True if the importer can take a default-domain node of this op: the op (or
// the op it is rewritten to, e.g. Upsample -> Resize) is registered, or the
// importer itself resolves it (Constant; Shape and Size when folding).
bool isImportableOp(const std::string& op, bool foldConstants = true);
// ONNX input positions of a default-domain `op` at `opset` that must be
// constant: they become attributes, or their values decide the output shape
// (ConstantOfShape, Range: such nodes are folded). Lets a test harness bind such graph
// inputs with ImportOptions::constantInputs.
std::vector<int> constInputSlots(const std::string& op, int64_t opset);

}  // namespace collage
