// Measuring a model's kernels on the machines of a Slurm constraint
// (`collage optimize --target C --db postgresql://...`), not on this one.
//
//   optimize ── run folder in the shared work dir: job.json (the batches), job.sh
//      │  sbatch --parsable --array=0-N --constraint=C --exclusive job.sh
//      ▼
//   task i, on a node with feature C:  collage measure-batch job.json --task i
//      ├─ task-i.json: its node, fingerprint and backend versions (at once),
//      │               then "done" with its counts, or "failed" with why
//      └─ each kernel of batch i: the store first, else the isolated worker,
//         appended at once to the shared store under the node's fingerprint
//   optimize ── polls squeue until the job has left the queue, reads the
//               task files: the target's fingerprint, and which tasks did
//               not finish (named, with their node and log)
//
// The tasks measure through the same CandidateCoster as a local run, so two
// tasks (or a task and an engineer) never measure a kernel twice, and a task
// killed mid-batch loses only the kernel it was timing. Slurm places, retries
// and cancels the tasks; PostgreSQL stores what they measure. The database
// URL reaches the tasks through sbatch's environment (COLLAGE_TARGET_DB),
// never through a file in the shared folder, and without its password: each
// task reads that by libpq's means (~/.pgpass, PGPASSFILE, PGPASSWORD).
//
// Which kernels are missing on the target is only known once its
// fingerprint is: after the first job for a (constraint, model, backends
// and their versions), the fingerprint is remembered in the work dir
// (targets/), and later runs submit only the kernels the store lacks for it
// (none: no job at all). A new version of a backend is a new key: its first
// run submits a job, whose tasks report the fingerprint of the new versions.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/hardware_fingerprint.h"
#include "core/ir/search_events.h"
#include "core/patterns/candidate.h"

namespace collage {

class Graph;
class MeasurementDb;

using TargetBackendVersions = std::vector<std::pair<std::string, std::string>>;  // (name, version)

// --target-timeout's default: an hour for a job, from submission to its
// last task, queueing included.
inline constexpr double kDefaultTargetTimeoutSeconds = 3600;

// The environment variable that carries the store's URL to the tasks.
inline constexpr const char* kTargetDbVariable = "COLLAGE_TARGET_DB";

// One kernel to measure: a backend and the graph's node indices (the task
// imports the same model with the same input shapes, so indices agree).
struct TargetKernel {
  std::string backend;
  std::vector<NodeId> nodes;
};

// job.json: what every task of the array needs.
struct TargetJob {
  std::string modelPath;  // absolute: the nodes see the same path
  std::vector<std::string> inputShapes;
  std::vector<std::string> backends;  // the optimizer's backend set, by name
  double timeoutSeconds = 60;         // per kernel, as --timeout
  std::string store;                  // the store's URL without its password (messages)
  std::vector<std::vector<TargetKernel>> batches;  // one per task

  std::string toJson() const;
  // Throws Error naming `path` when the text is not a job file.
  static TargetJob fromJson(const std::string& text, const std::string& path);
};

// task-<i>.json: what a task says about itself, rewritten as it goes.
struct TargetTaskReport {
  int task = 0;
  std::string node;     // the host name it ran on
  std::string state;    // "running", "done", "failed"
  std::string message;  // why it failed
  HardwareFingerprint fingerprint;
  TargetBackendVersions versions;  // the node's backend versions (the store's keys)
  int kernels = 0, measured = 0, cached = 0, failed = 0;

  std::string toJson() const;
  static TargetTaskReport fromJson(const std::string& text, const std::string& path);
  static std::string path(const std::string& runDir, int task);
  // Written to a temporary file and renamed, so a reader never sees half.
  void write(const std::string& runDir) const;
  static std::optional<TargetTaskReport> read(const std::string& runDir, int task);
};

struct TargetMeasurementOptions {
  std::string constraint;         // the node feature (--constraint)
  std::string workDir;            // shared by this machine and the nodes; a run folder goes inside
  std::string collageExecutable;  // the `collage` the tasks run (same path on the nodes)
  std::string dbUrl;              // the shared store (postgresql://...)
  std::string modelPath;
  std::vector<std::string> inputShapes;
  std::vector<std::string> backends;
  // This collage's backends' versions ((name, version); the tasks run the
  // same collage on the nodes): part of the key the target's fingerprint is
  // remembered under, so that after an upgrade the old versions' timings
  // and verdicts are not taken for the target's.
  TargetBackendVersions versions;
  double timeoutSeconds = 60;
  int batchSize = 16;      // kernels per task
  double pollSeconds = 2;  // between two squeue calls
  // How long the job may take from its submission, queueing included
  // (--target-timeout): past it the job is cancelled and measureOnTarget
  // throws. A constraint whose nodes are drained never runs a task; without
  // a deadline `optimize` would wait for ever. 0: no deadline.
  double deadlineSeconds = kDefaultTargetTimeoutSeconds;
};

struct TargetMeasurementResult {
  std::string jobId;   // empty when nothing had to be submitted
  std::string runDir;  // the job's files and the tasks' logs (kept when a task failed)
  int kernels = 0;     // distinct kernels submitted
  int tasks = 0;
  std::optional<HardwareFingerprint> fingerprint;  // the target's, from the tasks (or remembered)
  TargetBackendVersions versions;                  // the target's backend versions
  int measured = 0, cached = 0, failed = 0;        // the finished tasks' counts
  std::vector<std::string>
      problems;  // one line per task that did not finish, naming job, task, node, log
  bool cancelled = false;
};

// The default shared work dir: $COLLAGE_SLURM_WORK_DIR, else
// $XDG_CACHE_HOME/collage-studio/slurm (~/.cache/...; on a cluster the
// home folder is usually shared with the nodes).
std::string defaultTargetWorkDir();

// Submits the distinct kernels of `candidates` (those `needed`, all when
// empty) that the store lacks on the target as one job array, waits for it
// (progress through `observer`, the job id in its line), and says what came
// back. On `cancel` the job is cancelled (scancel) and the result says so.
// Throws Error when sbatch or squeue fail, or when the job is not done by
// options.deadlineSeconds; the job is cancelled then (SlurmJobs::wait).
TargetMeasurementResult measureOnTarget(const Graph& graph, const CandidateSet& candidates,
                                        const std::vector<bool>& needed, MeasurementDb& db,
                                        const TargetMeasurementOptions& options,
                                        SearchObserver* observer, const CancellationToken* cancel);

}  // namespace collage
