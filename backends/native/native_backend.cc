#include "backends/native/native_backend.h"

#include <omp.h>

#include "backends/native/native_attention.h"
#include "backends/native/native_byte_table.h"
#include "backends/native/native_depthwise_pointwise.h"
#include "backends/native/native_lowering.h"
#include "backends/native/native_reference_group.h"
#include "backends/native/native_steps.h"
#include "core/patterns/pattern_rule.h"
#include "core/ir/threading.h"

namespace collage {

namespace {

// Most nodes one fused kernel takes: beyond this the pattern generator's
// groups stop growing (a decomposed LayerNorm with its residual is 11).
constexpr int kMaxFusedNodes = 16;

bool anyTouchesSequence(const Graph& g, const NodeSet& group) {
  bool any = false;
  group.forEach([&](NodeId n) { any = any || native::touchesSequence(g, n); });
  return any;
}

// The backend's rule in code. Fused passes: any group whose every node a
// fused pass evaluates, such as a Reshape feeding a Softmax, or a
// GlobalAveragePool (an Anchor by kind, a reduction here) followed by a
// Flatten. Sequences: each set of nodes linked by sequence values
// (SequenceEmpty -> Loop -> ConcatFromSequence), as one whole group, since a
// sequence cannot cross a kernel boundary (native_reference_group.h).
// Attention: each MatMul -> [scale] -> [additive mask | select] -> Softmax
// (last axis) -> MatMul, alone and with its head split/merge views and KV
// head repeats (native_attention.h), which the fused attention kernel runs,
// or with at most 4 query rows (a decode step against its cache) the decode
// attention kernel (native_decode_attention.h). Depthwise-pointwise: each
// depthwise Conv -> 1x1 Conv with their epilogues, and with the residual Add
// after them (native_depthwise_pointwise.h).
class NativeCodeRule : public PatternRule {
 public:
  std::string name() const override { return "native"; }
  bool opRule(const Graph& g, NodeId n) const override { return native::inlineRefusal(g, n).empty(); }
  std::optional<std::string> fusionRule(const Graph& g, const NodeSet& group, NodeId,
                                        NodeId) const override {
    if (group.count() > kMaxFusedNodes) return std::nullopt;
    bool ok = true;
    group.forEach([&](NodeId n) { ok = ok && native::inlineRefusal(g, n).empty(); });
    if (!ok) return std::nullopt;
    return std::string("fused_pass");
  }
  std::vector<std::pair<NodeSet, std::string>> wholeGroups(const Graph& g) const override {
    std::vector<std::pair<NodeSet, std::string>> out;
    for (NodeSet& group : native::sequenceGroups(g)) out.emplace_back(std::move(group), "sequence_group");
    for (auto& [group, label] : native::attentionGroups(g)) out.emplace_back(std::move(group), std::move(label));
    for (auto& [group, label] : native::depthwisePointwiseGroups(g))
      out.emplace_back(std::move(group), std::move(label));
    for (auto& [group, label] : native::quantizedJoinGroups(g)) out.emplace_back(std::move(group), std::move(label));
    return out;
  }
};

class NativeBackend : public Backend {
 public:
  std::string name() const override { return "native"; }
  // Part of the measurement database's key: bumped when a kernel's speed
  // changes, so that old measurements are not reused (0.2: direct pooling;
  // 0.3: an elementwise pass streams the longest run of contiguous dims;
  // 0.4: attention as one kernel; 0.5: int8 products on a blocked int8
  // GEMM, vectorised quantise / dequantise; 0.6: QuantizeLinear and
  // DequantizeLinear fused into elementwise passes; 0.7: attention with at
  // most 4 query rows on the decode kernel, KV heads repeated in place;
  // 0.8: a constant-zero Pad fused into passes as a view with zeros,
  // depthwise -> pointwise Conv as one kernel, QuantizeLinear multiplying
  // by the scale's reciprocal where the product decides the integer, an
  // 8-bit pass (a QDQ join) as a table lookup; 0.9: MatMuls of few rows
  // split by columns over the threads, so stored one-thread timings of
  // decode projections are measured again; 0.10: exp without subnormals
  // and causal tiles skipped at run time, so a masked attention stored at
  // 18x its time is measured again; 0.11: the decode attention prefetches
  // its cache, 9 % off a 32k step).
  std::string version() const override {
    return "native 0.11 (OpenMP " + std::to_string(_OPENMP) + ")";
  }
  BackendKind kind() const override { return BackendKind::GraphLibrary; }

  CompileResult compile(const KernelRequest& request) override {
    if (std::string why = native::sequenceBoundaryRefusal(request); !why.empty())
      return CompileResult::refuse(why);
    if (anyTouchesSequence(*request.graph, request.nodes))
      return native::compileReferenceGroup(request);
    // A Softmax between two MatMuls is the attention kernel's to take or refuse.
    if (native::isAttentionGroup(*request.graph, request.nodes))
      return native::compileAttention(request, threadCount());
    // So is a Conv feeding a Conv the depthwise-pointwise kernel's.
    if (native::isDepthwisePointwiseGroup(*request.graph, request.nodes))
      return native::compileDepthwisePointwise(request, threadCount());
    return native::compileGroup(request, threadCount());
  }

  // The nodes a kernel leaves to the registry's scalar loops, for the
  // estimate made before measuring (core/measure/reference_skips.h): all of a
  // sequence group's (it runs on the reference executor); of a fused group,
  // the nodes no pass evaluates and no vectorised step runs. An attention
  // group is its own kernel.
  NodeSet referenceNodes(const KernelRequest& request) const override {
    const Graph& g = *request.graph;
    if (anyTouchesSequence(g, request.nodes)) return request.nodes;
    NodeSet out(g.numNodes());
    if (native::isAttentionGroup(g, request.nodes) || native::isDepthwisePointwiseGroup(g, request.nodes))
      return out;
    request.nodes.forEach([&](NodeId n) {
      if (!native::inlineRefusal(g, n).empty() && native::runsOnReferenceLoops(g, n)) out.insert(n);
    });
    return out;
  }

  // As a graph library it takes any region whose every node a fused pass
  // evaluates (elementwise, injective and reduction ops): the region runs as
  // the fewest passes over memory, materialising only what it must.
  bool compilesRegions() const override { return true; }
  std::string regionRefusal(const KernelRequest& region) const override {
    std::string why;
    region.nodes.forEach([&](NodeId n) {
      if (why.empty()) {
        const std::string r = native::inlineRefusal(*region.graph, n);
        if (!r.empty()) why = "node '" + region.graph->node(n).name + "': " + r;
      }
    });
    return why;
  }

  // The spec's declarative [rule] names fusion styles of one kind each
  // (elementwise only, injective and elementwise, reductions and
  // elementwise). NativeCodeRule adds what the styles cannot say. Groups
  // both rules produce are kept once.
  std::shared_ptr<const PatternRule> codeRule() const override {
    return std::make_shared<NativeCodeRule>();
  }
};

}  // namespace

std::unique_ptr<Backend> createNativeBackend() { return std::make_unique<NativeBackend>(); }

std::string describeNativeKernel(const Kernel& kernel) {
  if (std::string a = native::describeAttentionKernel(kernel); !a.empty()) return a;
  if (std::string d = native::describeDepthwisePointwiseKernel(kernel); !d.empty()) return d;
  return native::describeKernel(kernel);
}

}  // namespace collage
