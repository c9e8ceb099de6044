#include "backends/onednn/onednn_backend.h"

#include <dnnl.hpp>

#include "backends/onednn/onednn_chain.h"
#include "backends/onednn/onednn_kernel.h"

namespace collage {

namespace {

class OneDnnBackend final : public Backend {
 public:
  OneDnnBackend() : context_(std::make_shared<onednn::Context>()) {}

  std::string name() const override { return "onednn"; }

  // Part of the measurement database's key: the library's version plus the
  // revision of our lowering, bumped when a kernel's speed changes so that old
  // measurements are not reused (2: sequences of chains, matmul eltwise after
  // the product and column panels; 3: Concat, folded Pads, one reorder per
  // group input shared by the chains reading it; 4: pools on plain inputs
  // run blocked).
  std::string version() const override {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + " (" + v->hash + ") lowering 4";
  }

  CompileResult compile(const KernelRequest& request) override {
    const onednn::ChainAnalysis analysis = onednn::analyzeChain(request);
    if (!analysis.ok()) {
      // Several anchors: one kernel running their chains in sequence.
      const onednn::ChainSequence sequence = onednn::analyzeSequence(request);
      if (sequence.ok()) return onednn::lowerSequence(context_, sequence);
      if (!sequence.severalAnchors) return CompileResult::refuse(analysis.refusal);
      return CompileResult::refuse(analysis.refusal + " (as a sequence of chains: " +
                                   sequence.refusal + ")");
    }
    return onednn::lowerChain(context_, request, analysis.chain);
  }

 private:
  std::shared_ptr<onednn::Context> context_;
};

}  // namespace

std::unique_ptr<Backend> createOneDnnBackend() { return std::make_unique<OneDnnBackend>(); }

std::string describeOneDnnKernel(const Kernel& kernel) {
  const auto* k = dynamic_cast<const onednn::OneDnnKernel*>(&kernel);
  return k ? k->describe() : std::string();
}

}  // namespace collage
