#include "backends/native/native_backend.h"

#include <omp.h>

#include "backends/native/native_lowering.h"
#include "core/patterns/pattern_rule.h"
#include "core/ir/threading.h"

namespace collage {

namespace {

// Most nodes one fused kernel takes: beyond this the pattern generator's
// groups stop growing (a decomposed LayerNorm with its residual is 11).
constexpr int kMaxFusedNodes = 16;

class NativeBackend : public Backend {
 public:
  std::string name() const override { return "native"; }
  // Part of the measurement database's key: bumped when a kernel's speed
  // changes, so that old measurements are not reused (0.2: direct pooling;
  // 0.3: an elementwise pass streams the longest run of contiguous dims).
  std::string version() const override {
    return "native 0.3 (OpenMP " + std::to_string(_OPENMP) + ")";
  }
  BackendKind kind() const override { return BackendKind::GraphLibrary; }

  CompileResult compile(const KernelRequest& request) override {
    return native::compileGroup(request, threadCount());
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
  // elementwise). This rule adds what the styles cannot say: any group whose
  // every node a fused pass evaluates, such as a Reshape feeding a Softmax,
  // or a GlobalAveragePool (an Anchor by kind, a reduction here) followed by
  // a Flatten. Groups both rules produce are kept once.
  std::shared_ptr<const PatternRule> codeRule() const override {
    return std::make_shared<FunctionPatternRule>(
        "native",
        [](const Graph& g, NodeId n) { return native::inlineRefusal(g, n).empty(); },
        [](const Graph& g, const NodeSet& group, NodeId, NodeId) -> std::optional<std::string> {
          if (group.count() > kMaxFusedNodes) return std::nullopt;
          bool ok = true;
          group.forEach([&](NodeId n) { ok = ok && native::inlineRefusal(g, n).empty(); });
          if (!ok) return std::nullopt;
          return std::string("fused_pass");
        });
  }
};

}  // namespace

std::unique_ptr<Backend> createNativeBackend() { return std::make_unique<NativeBackend>(); }

std::string describeNativeKernel(const Kernel& kernel) { return native::describeKernel(kernel); }

}  // namespace collage
