#include "backends/onednn/onednn_backend.h"

#include <dnnl.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "backends/onednn/composite_functions.h"
#include "backends/onednn/onednn_chain.h"
#include "backends/onednn/onednn_int8.h"
#include "backends/onednn/onednn_int8_kernel.h"
#include "backends/onednn/onednn_kernel.h"
#include "core/ops/runtime_inputs.h"

namespace collage {

namespace {

// What oneDNN can run, as a pattern rule the generator expands on any graph:
// an anchor (Conv, MatMul, a pool, a normalisation, ...) or an elementwise op,
// followed by any chain its post-ops can express; and, since one kernel can
// run several chains keeping oneDNN's layout between them, a series of such
// chains, or a block of parallel ones (grown from a fork). The rule asks the
// chain and sequence analyses that compile() itself uses, so the rule and the
// lowering cannot disagree: a group is generated exactly when it would lower.
class OneDnnPatternRule final : public PatternRule {
 public:
  // The most chains a generated group runs one after another (its longest
  // path counted in anchors). It bounds the candidates a series of anchors
  // makes (each anchor starts one series per length), while admitting a block
  // whose longest branch is this deep; larger regions are the graph-level
  // search's (core/search/graph_level_search.h).
  static constexpr int kMaxChainsInSeries = 5;

  // onednn and onednn_bf16 share the rule: bf16 changes the arithmetic of
  // a group, never which groups lower.
  explicit OneDnnPatternRule(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }

  // Seeds: the nodes that lower alone.
  bool opRule(const Graph& graph, NodeId node) const override {
    const KernelRequest request = KernelRequest::of(graph, NodeSet::of(graph.numNodes(), {node}));
    if (onednn::isInt8Group(request)) return onednn::analyzeInt8(request).ok();
    return onednn::analyzeChain(request).ok();
  }
  // Members: elementwise ops (each a post-op, or part of a function written
  // out with several), BatchNormalization (a per-channel scale and shift),
  // and, for a series or a block, any node that lowers alone and a Pad that
  // folds into the anchor after it.
  bool memberRule(const Graph& graph, NodeId node) const override {
    const std::string& op = graph.node(node).op;
    return onednn::isScalarFunctionOp(op) || onednn::isInt8MemberOp(op) ||
           op == "BatchNormalization" || op == "Dropout" ||
           op == "Pad" ||
           opRule(graph, node);
  }
  std::optional<std::string> fusionRule(const Graph& graph, const NodeSet& group, NodeId seed,
                                        NodeId) const override {
    const KernelRequest request = KernelRequest::of(graph, group);
    // Quantized groups (onednn_int8.h): one integer product and its float
    // tail (grown through a prefix that lowers only with its product).
    if (onednn::isInt8Group(request)) {
      const onednn::Int8Analysis a = onednn::analyzeInt8(request);
      return a.ok() || a.prefix ? std::optional<std::string>("int8") : std::nullopt;
    }
    if (onednn::analyzeChain(request).ok()) return std::string("post_ops");
    // Several chains: a series from an anchor, or a block grown from a fork
    // (the fork is not a member). A series from an elementwise op would only
    // split what the anchor after it takes as post-ops.
    const bool fromFork = !group.contains(seed);
    if (!fromFork && !isAnchor(graph, seed)) return std::nullopt;
    if (chainsInSeries(graph, group) > kMaxChainsInSeries) return std::nullopt;
    if (!onednn::analyzeSequence(request).ok()) return std::nullopt;
    return std::string(fromFork ? "block" : "series");
  }
  bool growsFromForks() const override { return true; }
  // A constant-zero Pad folds into the Conv or AveragePool after it (the
  // chain's padding), but it lowers alone to nothing, so it seeds no growth,
  // and growth from the anchor never reaches back to it: the spec's
  // pad_conv pattern names only the pair. The rule names the pair grown on
  // through each node's sole consumer while the fusion rule accepts it, so
  // the Pad before a depthwise Conv (tf2onnx's SAME with stride 2) runs
  // with the Conv's post-ops, and as the first chain of a series.
  std::vector<std::pair<NodeSet, std::string>> wholeGroups(const Graph& graph) const override {
    std::vector<std::pair<NodeSet, std::string>> out;
    for (NodeId pad = 0; pad < graph.numNodes(); ++pad) {
      if (graph.node(pad).op != "Pad") continue;
      // A Pad whose value or pads come at run time folds into no padding
      // (compile refuses it, runtimeInputRefusal): not named either.
      if (!runtimeInputsOf(graph.node(pad)).empty()) continue;
      NodeSet group(graph.numNodes());
      group.insert(pad);
      NodeId tail = pad, anchor = kNoNode;
      for (int added = 0; added < 4 * kMaxChainsInSeries; ++added) {
        const Node& node = graph.node(tail);
        if (node.outputs.empty() || node.outputs[0] == kNoValue) break;
        const Value& result = graph.value(node.outputs[0]);
        if (result.consumers.size() != 1 || result.isGraphOutput) break;
        const NodeId next = result.consumers[0];
        if (!memberRule(graph, next)) break;
        if (anchor == kNoNode) anchor = next;
        group.insert(next);
        const std::optional<std::string> fusion = fusionRule(graph, group, anchor, next);
        if (!fusion) break;
        if (emitsGroup(graph, group, anchor, next)) out.emplace_back(group, "fusion:pad_" + *fusion);
        tail = next;
      }
    }
    return out;
  }
  // A group of several chains whose last chain could still take the next
  // node as a post-op is not measured: that node, left out, would run as a
  // kernel of its own on a reordered tensor, which the larger group saves.
  bool emitsGroup(const Graph& graph, const NodeSet& group, NodeId seed,
                  NodeId sink) const override {
    const KernelRequest request = KernelRequest::of(graph, group);
    if (onednn::isInt8Group(request)) return onednn::analyzeInt8(request).ok();
    if (onednn::analyzeChain(request).ok()) return true;
    if (request.outputs.size() != 1) return true;
    const Value& result = graph.value(request.outputs[0]);
    if (result.consumers.size() != 1 || result.isGraphOutput) return true;
    const NodeId next = result.consumers[0];
    if (isAnchor(graph, next) || !memberRule(graph, next)) return true;
    NodeSet larger = group;
    larger.insert(next);
    return !onednn::analyzeSequence(KernelRequest::of(graph, larger)).ok();
  }

 private:
  std::string name_;

  static bool isAnchor(const Graph& graph, NodeId node) {
    const std::string& op = graph.node(node).op;
    return onednn::isAnchorOp(op) && op != "BatchNormalization";
  }
  // The longest path through `group` counted in anchors that compute (a
  // Concat only places its inputs side by side, as the join of a block).
  static int chainsInSeries(const Graph& graph, const NodeSet& group) {
    std::map<NodeId, int> depth;  // members in topological order: producers first
    int deepest = 0;
    group.forEach([&](NodeId n) {
      int d = 0;
      for (ValueId v : graph.node(n).inputs) {
        if (v == kNoValue) continue;
        auto it = depth.find(graph.value(v).producer);
        if (it != depth.end()) d = std::max(d, it->second);
      }
      depth[n] = d + (isAnchor(graph, n) && graph.node(n).op != "Concat" ? 1 : 0);
      deepest = std::max(deepest, depth[n]);
    });
    return deepest;
  }
};

class OneDnnBackend final : public Backend {
 public:
  // `precision`: what convolutions and matrix products compute in
  // (onednn_precision.h); each precision is a backend of its own.
  explicit OneDnnBackend(onednn::Precision precision)
      : context_(std::make_shared<onednn::Context>()),
        rule_(std::make_shared<OneDnnPatternRule>(onednn::backendName(precision))) {
    context_->precision = precision;
  }

  std::string name() const override { return onednn::backendName(context_->precision); }

  // Part of the measurement database's key: the library's version plus the
  // revision of our lowering, bumped when a kernel's speed changes so that old
  // measurements are not reused (2: sequences of chains, matmul eltwise after
  // the product and column panels; 3: Concat, folded Pads, one reorder per
  // group input shared by the chains reading it; 4: pools on plain inputs
  // run blocked; 5: eltwise chains after a convolution on plain memory run
  // as in-place eltwise steps; 6: regions: chains with several outputs, plain
  // intermediates viewed with other dims; 7: written-out functions fitted to float32
  // rounding, so a tiny bias is kept; a chain of identities runs as a copy;
  // 8: pools in the convolutions' layout (nhwc with AVX-512), pointwise convs
  // blocked where that layout is channels last; 9: int8 products
  // (onednn_int8.h): the dynamic quantization chain, QLinear ops and QDQ
  // groups as single kernels, the requantisation epilogue 16 lanes at a
  // time over the convolution's own accumulator layout; 10: int8 kernels
  // offer their u8/s8 source and requantized result in the convolution's
  // layout, so what "@native-layouts" measured of them changed; 11:
  // reorders between channels-last and plain memory as our own transposes,
  // channels_transpose.h; 12: a pool's post-op operands of its result's
  // shape reordered into its blocked or channels-last destination, which
  // oneDNN's JIT pooling read as plain; 13: a QDQ group may end in its
  // QuantizeLinear and write u8/s8, the quantization as post-ops; the
  // quantizer multiplies by the reciprocal where that gives the division's
  // integers, core/ops/requantize.h).
  std::string version() const override {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + " (" + v->hash + ") lowering 13" +
           (context_->precision == onednn::Precision::F32
                ? ""
                : " " + onednn::precisionName(context_->precision));
  }

  CompileResult compile(const KernelRequest& request) override {
    // The int8 products are integer arithmetic whatever the precision; the
    // float32 backend runs them, a reduced-precision one would only measure
    // the same kernel again.
    const bool f32 = context_->precision == onednn::Precision::F32;
    if (onednn::isInt8Group(request)) {
      if (!f32)
        return CompileResult::refuse("int8 products run on the " +
                                     onednn::backendName(onednn::Precision::F32) + " backend");
      const onednn::Int8Analysis int8 = onednn::analyzeInt8(request);
      if (!int8.ok()) return CompileResult::refuse(int8.refusal);
      return onednn::lowerInt8(context_, request, int8.product);
    }
    // A float product reading a DequantizeLinear's result, with int8 weights: int8.
    if (const onednn::Int8Analysis int8 = onednn::analyzeDequantizedInput(request); f32 && int8.ok())
      return onednn::lowerInt8(context_, request, int8.product);
    // Primitive descriptors take parameters (eltwise bounds, pads, scales)
    // when they are created, not when they run.
    if (std::string why = runtimeInputRefusal(*request.graph, request.members(), "oneDNN");
        !why.empty())
      return CompileResult::refuse(why);
    const onednn::ChainAnalysis analysis = onednn::analyzeChain(request);
    if (!analysis.ok()) {
      // Several anchors: one kernel running their chains in sequence.
      const onednn::ChainSequence sequence = onednn::analyzeSequence(request);
      if (sequence.ok()) return onednn::lowerSequence(context_, sequence);
      if (!sequence.severalChains) return CompileResult::refuse(analysis.refusal);
      return CompileResult::refuse(analysis.refusal + " (as a sequence of chains: " +
                                   sequence.refusal + ")");
    }
    return onednn::lowerChain(context_, request, analysis.chain);
  }

  std::shared_ptr<const PatternRule> codeRule() const override { return rule_; }

  std::optional<Tolerance> reducedPrecisionTolerance() const override {
    if (context_->precision == onednn::Precision::F32) return std::nullopt;
    return onednn::precisionTolerance(context_->precision);
  }
  double reducedPrecisionKernelError() const override {
    return onednn::precisionKernelError(context_->precision);
  }

  // Region mode: any region whose nodes read as chains (each an anchor and
  // its post-ops, or elementwise ops alone) runs as one kernel that keeps
  // oneDNN's blocked layout between all of its chains; reorders happen only
  // at the region's edges and where a primitive wants another layout.
  bool compilesRegions() const override { return true; }
  std::string regionRefusal(const KernelRequest& region) const override {
    if (std::string why = runtimeInputRefusal(*region.graph, region.members(), "oneDNN");
        !why.empty())
      return why;
    if (onednn::isInt8Group(region)) return onednn::analyzeInt8(region).refusal;
    const onednn::ChainAnalysis analysis = onednn::analyzeChain(region);
    if (analysis.ok()) return {};
    const onednn::ChainSequence sequence = onednn::analyzeSequence(region);
    if (sequence.ok()) return {};
    return sequence.severalChains ? sequence.refusal : analysis.refusal;
  }

 private:
  std::shared_ptr<onednn::Context> context_;
  std::shared_ptr<const PatternRule> rule_;
};

}  // namespace

std::unique_ptr<Backend> createOneDnnBackend() {
  return std::make_unique<OneDnnBackend>(onednn::Precision::F32);
}

std::unique_ptr<Backend> createOneDnnBf16Backend() {
  return std::make_unique<OneDnnBackend>(onednn::Precision::Bf16);
}

std::string describeOneDnnKernel(const Kernel& kernel) {
  const auto* k = dynamic_cast<const onednn::OneDnnKernel*>(&kernel);
  return k ? k->describe() : onednn::describeInt8Kernel(kernel);
}

}  // namespace collage
