// importOnnx(): the walk over a model, one node at a time in topological
// order, each through the steps that importer.h lists (parse, canonicalise,
// infer, fold, subgraphs), then the graph built from what reaches an output.
// Also the vocabulary of the import's messages: every error about a node
// starts with label(node), and one about the file with its path.
#include "core/onnx/import_last_row.h"
#include "core/onnx/onnx_import.h"

#include "core/onnx/import_canonicalise.h"
#include "core/onnx/import_fold.h"
#include "core/onnx/import_infer.h"
#include "core/onnx/import_parse.h"
#include "core/onnx/importer.h"
#include "core/onnx/topological_order.h"
#include "core/ops/control_flow_ops.h"

namespace collage {

bool isOnnxDefaultDomain(const std::string& domain) {
  return domain.empty() || domain == "ai.onnx";
}

}  // namespace collage

namespace collage::onnx_import {

std::string qualifiedOpName(const std::string& domain, const std::string& opType) {
  return isOnnxDefaultDomain(domain) ? opType : domain + "." + opType;
}

std::string label(const Node& node) { return "node '" + node.name + "' (" + node.op + "): "; }

std::string withNode(const std::string& prefix, const std::string& what) {
  if (what.find("node '") != std::string::npos) return what;
  return prefix + what;
}

[[noreturn]] void rethrowAs(const Error& e, const std::string& what) {
  if (dynamic_cast<const Unsupported*>(&e)) throw Unsupported(what);
  if (dynamic_cast<const ShapesDoNotFit*>(&e)) throw ShapesDoNotFit(what);
  throw Error(what);
}

[[noreturn]] void rethrowWith(const std::string& prefix, const Error& e) {
  rethrowAs(e, withNode(prefix, e.what()));
}

[[noreturn]] void rethrowWithPath(const std::string& path, const Error& e) {
  std::string what = e.what();
  if (what.rfind(path + ":", 0) != 0) what = path + ": " + what;
  rethrowAs(e, what);
}

// The types the graph declares for its values (checked against what the
// import infers), and every name its nodes produce (kept free for them).
void Importer::readDeclarations() {
  const auto& g = graph();
  for (const auto& vi : g.value_info()) declared_[vi.name()] = &vi.type();
  for (const auto& vi : g.output()) declared_[vi.name()] = &vi.type();
  for (const auto& n : g.node())
    for (const auto& o : n.output()) reservedNames_.insert(o);
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
  node.op = qualifiedOpName(proto.domain(), proto.op_type());
  const std::string onnxOp = node.op;

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
  // A DequantizeLinear of a computed tensor read by several nodes gets one
  // copy per reader, as ONNX Runtime's QDQ handling does: a QDQ node unit is
  // DequantizeLinear -> op, so each reader (a Conv, a residual Add, the
  // query, key and value MatMuls) can be grouped with its own dequantizer
  // into one integer kernel. Copies are named "<name>/copy<k>".
  std::vector<int> liveReaders(values_.size(), 0);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (!liveNode[n]) continue;
    std::set<ValueId> read(nodes_[n].inputs.begin(), nodes_[n].inputs.end());
    for (ValueId in : read)
      if (in != kNoValue) ++liveReaders[static_cast<size_t>(in)];
  }
  std::set<int> outputSet(outputs.begin(), outputs.end());
  auto copiedPerReader = [&](const Node& node) {
    if (parent_ || node.op != "DequantizeLinear" || node.outputs.empty()) return false;
    const int out = node.outputs[0];
    return !values_[static_cast<size_t>(node.inputs[0])].constant && liveReaders[static_cast<size_t>(out)] > 1 &&
           !outputSet.count(out);
  };
  std::map<int, std::vector<ValueId>> copiesLeft;  // a copied value -> the copies not yet read
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (!liveNode[n]) continue;
    Node node = nodes_[n];
    std::map<int, ValueId> taken;  // one copy per reader, however often it reads it
    for (ValueId& in : node.inputs) {
      if (in == kNoValue) continue;
      auto copies = copiesLeft.find(in);
      if (copies == copiesLeft.end()) {
        in = map[static_cast<size_t>(in)];
        continue;
      }
      auto [it, fresh] = taken.emplace(in, kNoValue);
      if (fresh) {
        it->second = copies->second.back();
        copies->second.pop_back();
      }
      in = it->second;
    }
    if (copiedPerReader(nodes_[n])) {
      const int out = nodes_[n].outputs[0];
      const WValue& w = values_[static_cast<size_t>(out)];
      std::vector<ValueId>& copies = copiesLeft[out];
      for (int k = liveReaders[static_cast<size_t>(out)] - 1; k >= 0; --k) {
        Node copy = node;
        const std::string suffix = k == 0 ? "" : "/copy" + std::to_string(k);
        copy.name += suffix;
        copy.outputs = {graph.addValue(w.name + suffix, w.type)};
        copies.push_back(copy.outputs[0]);
        if (k == 0) map[static_cast<size_t>(out)] = copy.outputs[0];
        graph.addNode(std::move(copy));
      }
      continue;
    }
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
    readDeclarations();
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

}  // namespace collage::onnx_import

namespace collage {

Graph importOnnx(const std::string& path, const ImportOptions& options) {
  onnx_import::Importer importer(path, options);
  Graph graph = importer.run();
  for (const std::string& output : options.lastRowOutputs) {
    const std::string why = keepLastRow(graph, output);
    if (!why.empty() && options.notes)
      options.notes->push_back("output '" + output + "' is computed at every row: " + why);
  }
  return graph;
}

}  // namespace collage
