// The optimize flow shared by the app (and available to any front end):
// enumerate candidates, cost them (database first, then an isolated worker),
// measure switching costs, run the op-level optimizer, build the plan. The
// CLI's `optimize` command is the same flow with terminal output; the app
// runs this on a worker thread and watches it through the SearchObserver.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/candidate.h"
#include "core/candidate_costs.h"
#include "core/graph.h"
#include "core/measurement.h"
#include "core/plan.h"
#include "core/search_events.h"

namespace collage {

struct OptimizationJobOptions {
  std::string modelPath;
  std::vector<std::string> inputShapes;  // "name=1x3x224x224", as on the command line
  // The backends, as backends/backend_list.h's BackendSet gives them (core
  // never names a backend): what enumeration needs, and name -> version.
  std::vector<BackendCapabilities> capabilities;
  // (name, version) in the BackendSet's order, which the hardware
  // fingerprint follows (so the app and the CLI share database entries).
  std::vector<BackendVersion> versions;
  std::string dbPath;                    // empty = MeasurementDb::defaultPath()
  bool noDb = false;
  double timeoutSeconds = 60;
  // argv prefix of the measurement worker: {"/path/to/collage"}; the job adds
  // "--threads N measure-worker model [--input-shape s]...".
  std::string workerExecutable;
};

struct OptimizationResult {
  bool hasPlan = false;   // false when cancelled before every candidate had a cost
  bool cancelled = false;
  Plan plan;
  CandidateSet candidates;
  std::vector<Measurement> measurements;  // per candidate
  std::vector<int32_t> chosen;            // candidate index per plan group
  CostingReport report;
  std::vector<std::string> warnings;
};

// Runs the whole flow on `graph` (imported from options.modelPath with the
// same input shapes). Throws Error for a model no backend set can cover.
OptimizationResult runOptimizationJob(const Graph& graph, const OptimizationJobOptions& options,
                                      SearchObserver* observer, const CancellationToken* cancel);

// The argv that starts a measurement worker for this job.
std::vector<std::string> optimizationWorkerCommand(const OptimizationJobOptions& options);

}  // namespace collage
