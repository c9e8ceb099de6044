// The Importer: the state one import builds up, shared by the steps that
// each live in their own file. Internal to core/onnx (onnx_import.h is the
// public face).
//
// Invariant: values_ only grows, and a value's id is its index there for the
// whole import; byName_ names each value once. A node enters nodes_ only
// through finishNode(), canonical and typed; a value with a constant is never
// an output of a node in nodes_ (it was folded).
//
//   onnx_import.cc          run(): load, check, then node by node in
//                           topological order, then buildGraph()
//     import_parse          the file -> values: inputs, initializers,
//                           attributes, Constant nodes
//     import_canonicalise   an ONNX node of any opset -> the canonical form
//     import_infer          a canonical node -> static output types
//     import_fold           constant inputs -> constant outputs (no node)
//     import_subgraphs      If/Loop/Scan/SequenceMap bodies, a constant If
//                           inlined, outer values captured
#pragma once

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "core/ir/graph.h"
#include "core/ops/op_registry.h"
#include "core/onnx/onnx_import.h"

namespace collage::onnx_import {

// "node 'Add_3' (Add): ", the prefix of every message about a node.
std::string label(const Node& node);
// Prefixes a message with `prefix` unless it already names a node.
std::string withNode(const std::string& prefix, const std::string& what);
// Throws `what` as the same kind of error as `e` (Unsupported, ShapesDoNotFit or Error).
[[noreturn]] void rethrowAs(const Error& e, const std::string& what);
[[noreturn]] void rethrowWith(const std::string& prefix, const Error& e);
// Prefixes a message with the file name unless it already starts with it.
[[noreturn]] void rethrowWithPath(const std::string& path, const Error& e);
// The name a node of `opType` in `domain` has in the Graph and the op
// registry: the op type in the default domain, "domain.opType" elsewhere
// (ONNX Runtime's contrib ops: "com.microsoft.QLinearAdd"). A node of another
// domain imports only if the registry knows its qualified name; an unknown
// one is reported under that name ("unsupported ops: com.microsoft.X").
std::string qualifiedOpName(const std::string& domain, const std::string& opType);

class Importer {
 public:
  Importer(const std::string& path, const ImportOptions& options)
      : path_(path), options_(options) {
    dir_ = std::filesystem::path(path).parent_path().string();
  }

  Graph run();

  // A body (a graph attribute of `owner` in `parent`'s scope): its formal
  // inputs have the given types; names it does not define resolve in the
  // enclosing scopes (import_subgraphs.h).
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

  // onnx_import.cc: the walk over the graph.
  void readDeclarations();
  void nameNodes();
  void importNode(const onnx::NodeProto& proto, int index);
  Graph buildGraph();

  // import_parse.cc
  void checkModel();
  void checkSupportedOps();
  void bindInputs();
  Shape boundShape(const onnx::ValueInfoProto& input);
  void addInitializers();
  AttributeMap convertAttributes(const onnx::NodeProto& proto, const Node& node);
  void importConstantNode(const onnx::NodeProto& proto, const Node& node);

  // import_canonicalise.cc
  void rewriteLegacyForms(Node& node, const std::string& onnxOp);
  void rewriteLegacyBroadcast(Node& node);
  void applyConstInputs(Node& node, const std::string& onnxOp, const OpSchema& schema);
  void fillDefaults(Node& node, const OpSchema& schema);
  bool rewriteCoercedSoftmax(Node& node);

  // import_infer.cc
  std::vector<TensorType> inferOutputTypes(const Node& node, const OpSchema& schema);
  void setOutputTypes(const Node& node, const std::vector<TensorType>& outTypes);
  std::vector<TensorType> declaredOutputTypes(const Node& node, const ConstInput& slot);
  void checkDeclaredType(const Node& node, int value);

  // import_fold.cc: finishNode is where every node ends, typed, then folded or kept.
  void finishNode(Node node);
  bool foldFromStaticType(const Node& node);
  bool foldWidenedWeight(const Node& node);
  bool tryFold(const Node& node);

  // import_subgraphs.cc
  // The value of a name in this scope; an outer scope's value becomes a
  // captured input of this body (a constant is copied in). -1 if none.
  int resolve(const std::string& name);
  void importBodies(Node& node, const onnx::NodeProto& proto);
  // One per op with bodies; each adds to `b`. importIfBodies clears node.op
  // when it inlined the branch of a constant condition instead.
  struct Bodies;
  void importIfBodies(Node& node, Bodies& b);
  void importLoopBody(Node& node, Bodies& b);
  void importSequenceMapBody(Node& node, Bodies& b);
  void importScanBody(Node& node, Bodies& b);
  std::shared_ptr<const Graph> importBody(const Node& node, const onnx::GraphProto& body,
                                          const std::string& attr,
                                          const std::vector<TensorType>& formals,
                                          std::vector<int>& captures, size_t slotBase);
  void inlineBranch(const Node& node, const Graph& branch, const std::vector<int>& captures);
  void patchLoopStaticShapes(const Node& node, std::vector<TensorType>& outTypes);
  [[noreturn]] void throwNotConstant(const std::string& message, const WValue& value) const;

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

}  // namespace collage::onnx_import
