#include "backends/backend_list.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "backends/onednn/onednn_precision.h"
#include "core/measure/measurer.h"
#ifdef COLLAGE_HAVE_CUDA
#include "backends/cublas/cublas_math_mode.h"
#endif

namespace collage {

// Each backend's folder defines its factory.
std::unique_ptr<Backend> createOneDnnBackend();
std::unique_ptr<Backend> createOneDnnBf16Backend();
std::unique_ptr<Backend> createOpenBlasBackend();
std::unique_ptr<Backend> createNativeBackend();
#ifdef COLLAGE_HAVE_CUDA
std::unique_ptr<Backend> createCudaFusionBackend();
std::unique_ptr<Backend> createCublasBackend();
std::unique_ptr<Backend> createCublasTf32Backend();
std::unique_ptr<Backend> createCudnnBackend();
std::string cudnnUnavailableReason();
std::string cublasUnavailableReason();
std::string cudaFusionUnavailableReason();
#endif

namespace {
// A built-in backend: its factory, and for a backend that needs a device,
// why it cannot run in this process (empty: it can).
struct Entry {
  std::string name;
  std::function<std::unique_ptr<Backend>()> create;
  std::function<std::string()> unavailableReason;
  // Set for a backend that trades precision for speed: what its results are
  // checked with. Such a backend is left out of the default set.
  std::optional<ReducedPrecision> reducedPrecision = std::nullopt;
};

std::string onednnBf16UnavailableReason() {
  return onednn::precisionUnavailableReason(onednn::Precision::Bf16);
}

const std::vector<Entry>& factories() {
  static const std::vector<Entry> list = {
      {"onednn", createOneDnnBackend, nullptr},
      // bf16's tolerance: the derivation and the measurements are in
      // backends/onednn/onednn_precision.cc (onednn::precisionTolerance).
      {"onednn_bf16", createOneDnnBf16Backend, onednnBf16UnavailableReason,
       ReducedPrecision{"bf16", onednn::precisionTolerance(onednn::Precision::Bf16),
                        "convolutions and matrix products read weights and activations in bf16 "
                        "(8 significant bits) and accumulate in float32",
                        onednn::precisionKernelError(onednn::Precision::Bf16)}},
      {"openblas", createOpenBlasBackend, nullptr},
      {"native", createNativeBackend, nullptr},
#ifdef COLLAGE_HAVE_CUDA
      {"cudnn", createCudnnBackend, cudnnUnavailableReason},
      {"cublas", createCublasBackend, cublasUnavailableReason},
      {"cublas_tf32", createCublasTf32Backend, cublasUnavailableReason,
       ReducedPrecision{"tf32", cublas::mathModeTolerance(cublas::MathMode::Tf32),
                        "matrix products round their inputs to TF32 (11 significant bits) and "
                        "accumulate in float32"}},
      {"cuda_fusion", createCudaFusionBackend, cudaFusionUnavailableReason},
#endif
  };
  return list;
}
}  // namespace

std::vector<std::string> builtinBackendNames() {
  std::vector<std::string> names;
  for (const Entry& e : factories())
    if (!e.unavailableReason || e.unavailableReason().empty()) names.push_back(e.name);
  return names;
}

std::vector<std::string> defaultBackendNames() {
  std::vector<std::string> names;
  for (const std::string& name : builtinBackendNames())
    if (!reducedPrecisionTolerance(name)) names.push_back(name);
  return names;
}

std::optional<Tolerance> reducedPrecisionTolerance(const std::string& name) {
  const std::optional<ReducedPrecision> r = reducedPrecisionOf(name);
  return r ? std::optional<Tolerance>(r->tolerance) : std::nullopt;
}

std::optional<ReducedPrecision> reducedPrecisionOf(const std::string& name) {
  for (const Entry& e : factories())
    if (e.name == name) return e.reducedPrecision;
  return std::nullopt;
}

std::vector<std::string> compiledBackendNames() {
  std::vector<std::string> names;
  for (const Entry& e : factories()) names.push_back(e.name);
  return names;
}

std::string backendUnavailableReason(const std::string& name) {
  for (const Entry& e : factories())
    if (e.name == name && e.unavailableReason) return e.unavailableReason();
  return "";
}

std::unique_ptr<Backend> createBackend(const std::string& name) {
  for (const Entry& e : factories())
    if (e.name == name) return e.create();
  return nullptr;
}

}  // namespace collage

namespace collage {

std::vector<BackendCapabilities> BackendSet::capabilities() const {
  std::vector<BackendCapabilities> caps;
  for (size_t i = 0; i < specs.size(); ++i)
    caps.push_back(BackendCapabilities{&specs[i], backends[i] ? backends[i]->codeRule() : nullptr});
  return caps;
}

HardwareFingerprint BackendSet::fingerprint(const Graph& graph) const {
  return measurementFingerprint(versions(), measurementProtocol(graph));
}

std::vector<BackendVersion> BackendSet::versions() const {
  std::vector<BackendVersion> out;
  for (size_t i = 0; i < specs.size(); ++i)
    out.emplace_back(specs[i].name, backends[i] ? backends[i]->version() : "");
  return out;
}

Backend* BackendSet::find(const std::string& name) const {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return backends[i].get();
  return nullptr;
}

BackendSet loadBackendSet(const std::vector<std::string>& names,
                          const std::string& userPatternsPath) {
  BackendSet set;
  std::vector<BackendSpec> all = loadAllSpecs(&set.warnings, userPatternsPath);
  std::vector<std::string> wanted = names.empty() ? defaultBackendNames() : names;
  for (const auto& name : wanted) {
    if (const std::string why = backendUnavailableReason(name); !why.empty())
      throw Error("backend '" + name + "' is built in but unavailable here: " + why);
    auto spec =
        std::find_if(all.begin(), all.end(), [&](const BackendSpec& s) { return s.name == name; });
    std::unique_ptr<Backend> backend = createBackend(name);
    if (spec == all.end() || !backend) {
      std::string known;
      for (const auto& n : builtinBackendNames()) known += (known.empty() ? "" : ", ") + n;
      std::string why =
          spec == all.end() ? "no spec file for it loaded" : "no such backend is built in";
      for (const auto& w : set.warnings) why += "\n  " + w;
      throw Error("backend '" + name + "': " + why + " (known backends: " + known + ")");
    }
    set.specs.push_back(*spec);
    set.backends.push_back(std::move(backend));
  }
  return set;
}

BackendSet loadBackendsForPlan(const Plan& plan, const Graph& graph, const std::string& modelPath,
                               const std::vector<std::string>& allowed,
                               std::vector<std::string>* warnings) {
  // Only what the plan uses is created: a backend costs its library's start-up.
  std::vector<std::string> names;
  for (const auto& g : plan.groups) {
    const bool isAllowed =
        allowed.empty() || std::find(allowed.begin(), allowed.end(), g.backend) != allowed.end();
    if (isAllowed && std::find(names.begin(), names.end(), g.backend) == names.end())
      names.push_back(g.backend);
  }
  // (loadBackendSet({}) would load every backend: none is allowed means none.)
  BackendSet set = names.empty() ? BackendSet{} : loadBackendSet(names);
  const HardwareFingerprint here = set.fingerprint(graph);
  // A group on a backend that was not loaded is refused here, with the list.
  std::vector<std::string> found = checkPlanAgainst(plan, graph, modelPath, set.versions(), &here);
  if (warnings) warnings->insert(warnings->end(), found.begin(), found.end());
  return set;
}

}  // namespace collage
