#include "backends/onednn/onednn_backend.h"

#include <dnnl.hpp>

#include "backends/onednn/composite_functions.h"
#include "backends/onednn/onednn_chain.h"
#include "backends/onednn/onednn_kernel.h"

namespace collage {

namespace {

// What oneDNN can run, as a pattern rule the generator expands on any graph:
// an anchor (Conv, MatMul, a pool, a normalisation, ...) or an elementwise op,
// followed by any chain its post-ops can express. The rule asks the chain
// analysis that compile() itself uses, so the rule and the lowering cannot
// disagree: a group is generated exactly when it would lower.
class OneDnnPatternRule final : public PatternRule {
 public:
  std::string name() const override { return "onednn"; }

  // Seeds: the nodes that lower alone.
  bool opRule(const Graph& graph, NodeId node) const override {
    return onednn::analyzeChain(KernelRequest::of(graph, NodeSet::of(graph.numNodes(), {node}))).ok();
  }
  // Members: elementwise ops (each a post-op, or part of a function written
  // out with several) and BatchNormalization (a per-channel scale and shift).
  bool memberRule(const Graph& graph, NodeId node) const override {
    const std::string& op = graph.node(node).op;
    return onednn::isScalarFunctionOp(op) || op == "BatchNormalization" || op == "Dropout";
  }
  std::optional<std::string> fusionRule(const Graph& graph, const NodeSet& group, NodeId,
                                        NodeId) const override {
    if (!onednn::analyzeChain(KernelRequest::of(graph, group)).ok()) return std::nullopt;
    return std::string("post_ops");
  }
};

class OneDnnBackend final : public Backend {
 public:
  OneDnnBackend() : context_(std::make_shared<onednn::Context>()) {}

  std::string name() const override { return "onednn"; }

  // Part of the measurement database's key: the library's version plus the
  // revision of our lowering, bumped when a kernel's speed changes so that old
  // measurements are not reused (2: sequences of chains, matmul eltwise after
  // the product and column panels; 3: Concat, folded Pads, one reorder per
  // group input shared by the chains reading it; 4: pools on plain inputs
  // run blocked; 5: eltwise chains after a convolution on plain memory run
  // as in-place eltwise steps; 6: regions: chains with several outputs, plain
  // intermediates viewed with other dims).
  std::string version() const override {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + " (" + v->hash + ") lowering 6";
  }

  CompileResult compile(const KernelRequest& request) override {
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

  // Region mode: any region whose nodes read as chains (each an anchor and
  // its post-ops, or elementwise ops alone) runs as one kernel that keeps
  // oneDNN's blocked layout between all of its chains; reorders happen only
  // at the region's edges and where a primitive wants another layout.
  bool compilesRegions() const override { return true; }
  std::string regionRefusal(const KernelRequest& region) const override {
    const onednn::ChainAnalysis analysis = onednn::analyzeChain(region);
    if (analysis.ok()) return {};
    const onednn::ChainSequence sequence = onednn::analyzeSequence(region);
    if (sequence.ok()) return {};
    return sequence.severalChains ? sequence.refusal : analysis.refusal;
  }

 private:
  std::shared_ptr<onednn::Context> context_;
  std::shared_ptr<const PatternRule> rule_ = std::make_shared<OneDnnPatternRule>();
};

}  // namespace

std::unique_ptr<Backend> createOneDnnBackend() { return std::make_unique<OneDnnBackend>(); }

std::string describeOneDnnKernel(const Kernel& kernel) {
  const auto* k = dynamic_cast<const onednn::OneDnnKernel*>(&kernel);
  return k ? k->describe() : std::string();
}

}  // namespace collage
