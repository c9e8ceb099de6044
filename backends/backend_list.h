// The built-in backends. Adding a backend: a folder under backends/, its spec
// file under resources/backends/, and one line in backend_list.cc.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/tensor_compare.h"
#include "core/runtime/backend.h"

namespace collage {

// What a reduced-precision backend declares: the precision the user allows
// by name (`--allow-precision bf16`), the tolerance its results are checked
// with against the float32 reference, and its arithmetic in words (for
// `run --verify` and `explain`).
struct ReducedPrecision {
  std::string precision;  // "bf16", "tf32"
  Tolerance tolerance;
  std::string arithmetic;  // "weights and activations in bf16, float32 accumulation"
  // How far one of its kernels alone may err, as a fraction of its output's
  // largest |value| (GroupError::scaledError): what tells a wrong kernel
  // from rounding when the whole plan's tolerance is loose. 0: not declared.
  double kernelError = 0;
};

// Names of every built-in backend that can run in this process, in the
// default priority order: the CUDA backends are left out without a device,
// so the default set (and what measurements are keyed by) is then the CPU's.
std::vector<std::string> builtinBackendNames();
// The set used when none is named (`optimize`, the app, the API): the
// available backends that compute in float32 as the reference does. A
// reduced-precision backend (cublas_tf32, onednn_bf16) is used only when
// named or its precision allowed (reduced_precision.h), so a plan
// nobody asked to trade precision for speed still matches the reference and
// ONNX Runtime to float32 reordering.
std::vector<std::string> defaultBackendNames();
// The tolerance a reduced-precision backend's results are checked with (its
// declared loss of precision); nullopt for a float32 backend, checked as the
// reference is.
std::optional<Tolerance> reducedPrecisionTolerance(const std::string& name);
// All that a reduced-precision backend declares; nullopt for a float32 one.
std::optional<ReducedPrecision> reducedPrecisionOf(const std::string& name);
// Every backend compiled into this build, available or not.
std::vector<std::string> compiledBackendNames();
// Why a compiled-in backend cannot run here ("no CUDA device (...)"); empty
// when it can, or when no backend has that name.
std::string backendUnavailableReason(const std::string& name);
// Creates a backend by name (also an unavailable one: its rule and spec can
// be inspected, its compile() refuses); nullptr if there is none of that name.
std::unique_ptr<Backend> createBackend(const std::string& name);

}  // namespace collage

#include "core/patterns/backend_spec.h"
#include "core/patterns/candidate.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/plan/plan.h"

namespace collage {

// A chosen set of backends: their specs (user patterns merged), the backend
// objects, and what enumeration needs. Shared by the CLI and the app.
struct BackendSet {
  std::vector<BackendSpec> specs;
  std::vector<std::unique_ptr<Backend>> backends;  // same order as specs
  std::vector<std::string> warnings;               // spec files that did not load

  std::vector<BackendCapabilities> capabilities() const;
  // This machine's fingerprint with these backends' library versions, in set
  // order, and how kernels of `graph` are measured: the key under which
  // their measurements are stored (measurementFingerprint).
  HardwareFingerprint fingerprint(const Graph& graph) const;
  Backend* find(const std::string& name) const;
  // (name, version) of each backend, in set order: what plans record and
  // checkPlanAgainst compares.
  std::vector<BackendVersion> versions() const;
};

// Loads the named backends (defaultBackendNames() when `names` is empty). An
// unknown name or a backend whose spec did not load is an Error listing the
// known ones.
BackendSet loadBackendSet(const std::vector<std::string>& names = {},
                          const std::string& userPatternsPath = UserPatternStore::defaultPath());

// What `collage run --plan` and the public API (api/) share to run a plan:
// loads the backends the plan's groups name and checks the plan against the
// model and them (checkPlanAgainst, with this machine's fingerprint). With a
// non-empty `allowed`, only those backends may be loaded: a group on another
// one is an Error naming it. Usable-but-suspect findings (other backend
// versions, another machine) are returned in `warnings`; the caller decides
// whether they refuse the plan.
BackendSet loadBackendsForPlan(const Plan& plan, const Graph& graph, const std::string& modelPath,
                               const std::vector<std::string>& allowed,
                               std::vector<std::string>* warnings);

}  // namespace collage
