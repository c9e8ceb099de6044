#include "collage/optimize.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>

#include "api/api_internal.h"
#include "backends/backend_list.h"
#include "backends/reduced_precision.h"
#include "core/ir/install_paths.h"
#include "core/search/optimization_job.h"

namespace collage::api {

namespace {

// The `collage` executable that measurement workers run: $COLLAGE_CLI, else
// the installed tree's (next to this library), else the build tree's.
std::string workerExecutable() {
  if (const char* env = std::getenv("COLLAGE_CLI"); env && *env) return env;
  if (auto installed = findInstalledPath(COLLAGE_INSTALL_BINDIR "/collage")) return *installed;
#ifdef COLLAGE_BUILD_CLI
  std::error_code ec;
  if (std::filesystem::exists(COLLAGE_BUILD_CLI, ec)) return COLLAGE_BUILD_CLI;
#endif
  throw api::Error("cannot find the 'collage' executable that measures kernels (looked next to " +
                   thisBinaryPath() + "); set COLLAGE_CLI to its path");
}

// The job's events as OptimizeProgress; the callback's "stop" (or its
// exception, kept to be rethrown once the job has wound down) cancels the job.
class ProgressRelay : public SearchObserver {
 public:
  explicit ProgressRelay(const OptimizeOptions& options) : options_(options) {}

  void onMeasureProgress(const MeasureProgressEvent& e) override {
    OptimizeProgress p;
    p.stage = "measure";
    p.done = e.done;
    p.total = e.total;
    p.measured = e.measured;
    p.elapsedSeconds = e.elapsedSeconds;
    p.current = e.current;
    relay(p);
  }
  void onSearchStep(const SearchStepEvent& e) override {
    OptimizeProgress p;
    p.stage = e.search == "graph-level" ? "graph-level" : "search";
    p.done = e.step;
    p.elapsedSeconds = elapsed();
    relay(p);
  }

  CancellationToken cancel;
  std::exception_ptr failure;

 private:
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void relay(const OptimizeProgress& p) {
    if (!options_.progress || cancel.cancelled()) return;
    try {
      if (!options_.progress(p)) cancel.cancel();
    } catch (...) {
      failure = std::current_exception();
      cancel.cancel();
    }
  }
  const OptimizeOptions& options_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

Plan optimize(const Model& model, const OptimizeOptions& options) {
  ProgressRelay relay(options);
  // The callback's own exception goes back to the caller as it is (outside
  // translateErrors, which would make it an api::Error).
  std::optional<Plan> plan = translateErrors([&]() -> std::optional<Plan> {
    BackendSet set = loadBackendSet(withAllowedPrecisions(options.backends, options.allowPrecisions));
    OptimizationJobOptions job;
    job.modelPath = model.path();
    for (const auto& [name, shape] : model.impl().inputShapes)
      job.inputShapes.push_back(name + "=" + shapeToString(shape));
    for (const std::string& value : model.impl().valueBindings) job.inputShapes.push_back(value);
    job.capabilities = set.capabilities();
    job.versions = set.versions();
    job.dbPath = options.dbPath;
    job.noDb = !options.useDb;
    job.timeoutSeconds = options.timeoutSeconds;
    job.workerExecutable = workerExecutable();
    // The op-level plan is run end to end against the baselines, as the CLI does.
    job.backends = [&set](const std::string& n) { return set.find(n); };
    job.graphLevel = options.graphLevel;
    job.graphLevelOptions.evolution.budgetSeconds = options.graphLevelBudgetSeconds;
    OptimizationResult result = runOptimizationJob(model.impl().graph, job, &relay, &relay.cancel);
    if (relay.failure) return std::nullopt;
    if (result.cancelled || !result.hasPlan)
      throw api::Error("optimize " + model.path() + ": cancelled before a plan was found");
    result.plan.createdBy = "collage API (" + result.plan.createdBy + ")";
    return wrapPlan(std::move(result.plan));
  });
  if (relay.failure) std::rethrow_exception(relay.failure);
  return *plan;
}

}  // namespace collage::api
