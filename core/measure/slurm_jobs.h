// SlurmJobs: a Slurm job array submitted, watched and cancelled through
// Slurm's own commands (sbatch, squeue, scancel). Slurm places the tasks on
// the nodes that have the constraint, retries and cancels them; nothing here
// queues or schedules anything itself.
//
//   submitArray ──sbatch --parsable --array=0-N──▶ "1234"
//   poll        ──squeue -h -r -j 1234 -o "%K %T %N"──▶ per task: state, node
//   cancel      ──scancel 1234
//
// A job that has left the queue (finished, failed or cancelled) is simply
// absent from squeue: whether each task did its work is for the caller to
// learn from what the task wrote (the cluster may have no accounting, so
// sacct is not asked).
//
// Waiting (SlurmJobs::wait) has a deadline, and every way out of it other
// than the job leaving the queue cancels the job: a deadline that passes (a
// drained constraint leaves the tasks pending for ever), squeue failing, an
// exception, Ctrl-C. An array is never left to run on unobserved.
//
// Each command is looked up on PATH, or taken from COLLAGE_SBATCH,
// COLLAGE_SQUEUE, COLLAGE_SCANCEL: a test points these at a stand-in that
// runs the tasks locally (tests/e2e/slurm_standin/).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace collage {

class CancellationToken;

struct SlurmCommands {
  std::string sbatch = "sbatch";
  std::string squeue = "squeue";
  std::string scancel = "scancel";
  // The defaults, each replaced by its environment variable when set.
  static SlurmCommands fromEnvironment();
};

struct SlurmArrayRequest {
  std::string script;      // run by every task; $SLURM_ARRAY_TASK_ID says which
  int tasks = 0;           // --array=0-(tasks-1)
  std::string constraint;  // --constraint: the node feature the tasks need
  bool exclusive = true;   // --exclusive: a task has its node to itself (timings)
  std::string jobName;     // --job-name
  std::string output;      // --output, e.g. "dir/task-%a.log"
  std::string workDir;     // --chdir
  // Added to the environment sbatch is started with; sbatch passes its
  // environment on to the tasks (--export=ALL, Slurm's default), so a
  // database URL travels this way rather than in a file, and without its
  // password (a value libpq reads as a connection string loses it here):
  // the tasks read that by libpq's means.
  std::vector<std::pair<std::string, std::string>> environment;
};

// One task of an array as squeue lists it.
struct SlurmTaskState {
  std::string state;  // "PENDING", "RUNNING", "COMPLETING", ...
  std::string node;   // empty while pending
};

struct SlurmJobState {
  bool inQueue = false;  // false once every task has left the queue
  // Task index -> state, for the tasks squeue lists one by one; a pending
  // range ("4-7") counts in `pending` only.
  std::map<int, SlurmTaskState> tasks;
  int pending = 0;
  int running = 0;
  std::string toString() const;  // "2 running, 3 pending"
};

// How SlurmJobs::wait waits.
struct SlurmWaitOptions {
  double pollSeconds = 2;      // between two squeue calls
  double deadlineSeconds = 0;  // from the call; 0: no deadline
  // At the deadline: cancel the job (the default), or leave it running for
  // a later reader of what its tasks write (the job is then the caller's
  // to cancel in the end).
  bool cancelAtDeadline = true;
  // squeue failing this many times in a row ends the wait (an Error, the
  // job cancelled); a single failure (the controller busy a moment) does not.
  int squeueFailures = 3;
};

enum class SlurmWaitEnd {
  LeftQueue,  // every task has left the queue
  Cancelled,  // `cancel` was set: the job was cancelled
  Deadline,   // the deadline passed (the job cancelled unless told otherwise)
};

struct SlurmWaitResult {
  SlurmWaitEnd end = SlurmWaitEnd::LeftQueue;
  SlurmJobState last;       // squeue's last answer
  bool jobCancelled = false;  // scancel was run and succeeded
  std::string cancelProblem;  // scancel's error, when it failed
};

class SlurmJobs {
 public:
  explicit SlurmJobs(SlurmCommands commands = SlurmCommands::fromEnvironment());

  // The job id sbatch gives. Throws Error with sbatch's own message (an
  // unknown constraint, no controller, ...) and the command line.
  std::string submitArray(const SlurmArrayRequest& request) const;
  // Throws Error when squeue itself fails (other than for a job id that the
  // controller has already forgotten: that job is no longer in the queue).
  SlurmJobState poll(const std::string& jobId) const;
  // scancel; throws Error with its message.
  void cancel(const std::string& jobId) const;
  // Polls until the job leaves the queue, `cancel` is set or the deadline
  // passes; `progress` is called after each answer of squeue. The job is
  // cancelled (scancel) on every way out but the first (and the deadline
  // with cancelAtDeadline false), an exception included: squeue failing
  // squeueFailures times in a row, or `progress` throwing, cancels the job
  // and throws Error saying so.
  SlurmWaitResult wait(const std::string& jobId, const SlurmWaitOptions& options,
                       const CancellationToken* cancel,
                       const std::function<void(const SlurmJobState&)>& progress = {}) const;

  const SlurmCommands& commands() const { return commands_; }

 private:
  SlurmCommands commands_;
};

// Writes `text` to `path` through a temporary file and a rename, so a task
// on another node never reads half a job file.
void writeFileAtomically(const std::string& path, const std::string& text);
// `s` quoted for a POSIX shell (a job script's arguments).
std::string shellQuoted(const std::string& s);

// What an array task reads first: its index (`given`, the --task flag, when
// set; else Slurm's SLURM_ARRAY_TASK_ID) and its job file's text. Error
// naming `command` when there is no index, or the file when it cannot be read.
struct ArrayTaskStart {
  int index = -1;
  std::string jobText;
};
ArrayTaskStart startArrayTask(const std::string& command, const std::string& given,
                              const std::string& jobFile);

// The result of running a command to its end, stdout and stderr together.
struct CommandOutput {
  int exitCode = -1;  // 127 when it could not be started
  std::string output;
};
// Runs argv (argv[0] looked up on PATH) with `environment` added, waits for it.
CommandOutput runCommand(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& environment = {});

}  // namespace collage
