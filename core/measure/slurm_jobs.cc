#include "core/measure/slurm_jobs.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <thread>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/ir/error.h"
#include "core/ir/search_events.h"
#include "core/measure/connection_string.h"

extern char** environ;

namespace collage {

SlurmCommands SlurmCommands::fromEnvironment() {
  SlurmCommands c;
  if (const char* v = std::getenv("COLLAGE_SBATCH"); v && *v) c.sbatch = v;
  if (const char* v = std::getenv("COLLAGE_SQUEUE"); v && *v) c.squeue = v;
  if (const char* v = std::getenv("COLLAGE_SCANCEL"); v && *v) c.scancel = v;
  return c;
}

CommandOutput runCommand(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& environment) {
  CommandOutput out;
  if (argv.empty()) return out;
  // The environment: ours, with `environment` replacing or adding entries.
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [name, value] : environment)
      if (entry.compare(0, name.size() + 1, name + "=") == 0) replaced = true;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [name, value] : environment) env.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  int fds[2];
  // Close-on-exec: a command that leaves a process behind (sbatch's stand-in
  // does) must not keep our end open, or the read below never ends.
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error("cannot create a pipe to run '" + argv[0] + "'");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    out.exitCode = 127;
    out.output = "cannot run '" + argv[0] + "': " + std::strerror(rc);
    return out;
  }
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n > 0) {
      out.output.append(buffer, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

namespace {

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string commandLine(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  return line;
}

// How many tasks squeue's %K names: "3", or a pending range "[4-7%2]",
// "4-7,9" (1 for anything unreadable: the job is in the queue all the same).
int tasksIn(std::string index) {
  index.erase(
      std::remove_if(index.begin(), index.end(), [](char c) { return c == '[' || c == ']'; }),
      index.end());
  index = index.substr(0, index.find('%'));
  int count = 0;
  std::istringstream parts(index);
  for (std::string part; std::getline(parts, part, ',');) {
    const size_t dash = part.find('-');
    try {
      count += dash == std::string::npos
                   ? 1
                   : std::stoi(part.substr(dash + 1)) - std::stoi(part.substr(0, dash)) + 1;
    } catch (const std::exception&) {
      count += 1;
    }
  }
  return std::max(count, 1);
}

}  // namespace

std::string SlurmJobState::toString() const {
  if (!inQueue) return "left the queue";
  return std::to_string(running) + " running, " + std::to_string(pending) + " pending";
}

SlurmJobs::SlurmJobs(SlurmCommands commands) : commands_(std::move(commands)) {}

std::string SlurmJobs::submitArray(const SlurmArrayRequest& request) const {
  if (request.tasks <= 0) throw Error("a Slurm job array needs at least one task");
  std::vector<std::string> argv{commands_.sbatch, "--parsable",
                                "--array=0-" + std::to_string(request.tasks - 1)};
  if (!request.constraint.empty()) argv.push_back("--constraint=" + request.constraint);
  if (request.exclusive) argv.push_back("--exclusive");
  if (!request.jobName.empty()) argv.push_back("--job-name=" + request.jobName);
  if (!request.output.empty()) argv.push_back("--output=" + request.output);
  if (!request.workDir.empty()) argv.push_back("--chdir=" + request.workDir);
  argv.push_back(request.script);
  // A database password never travels in a job's environment, whoever asks:
  // the tasks read it by libpq's means (~/.pgpass, PGPASSFILE, PGPASSWORD).
  std::vector<std::pair<std::string, std::string>> environment = request.environment;
  for (auto& [name, value] : environment)
    if (const ConnectionString c(value); c.isUri() || (c.parses() && c.hasPassword()))
      value = c.withoutPassword();
  const CommandOutput r = runCommand(argv, environment);
  // --parsable prints "jobid" or "jobid;cluster".
  std::string id = trimmed(r.output);
  if (const size_t nl = id.rfind('\n'); nl != std::string::npos) id = id.substr(nl + 1);
  id = id.substr(0, id.find(';'));
  const bool numeric = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
  if (r.exitCode != 0 || !numeric)
    throw Error("sbatch could not submit the job array (" + commandLine(argv) + "): " +
                (trimmed(r.output).empty() ? "exit status " + std::to_string(r.exitCode)
                                           : trimmed(r.output)));
  return id;
}

SlurmJobState SlurmJobs::poll(const std::string& jobId) const {
  // -r: one line per array task; %K the task index (or a range while
  // pending), %T its state, %N its node.
  const std::vector<std::string> argv{commands_.squeue, "-h", "-r", "-j", jobId, "-o", "%K %T %N"};
  const CommandOutput r = runCommand(argv);
  SlurmJobState s;
  if (r.exitCode != 0) {
    // A job the controller has already purged is reported as invalid: it
    // has left the queue.
    if (r.output.find("Invalid job id") != std::string::npos) return s;
    throw Error("squeue could not report Slurm job " + jobId + " (" + commandLine(argv) +
                "): " + trimmed(r.output));
  }
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string index, state, node;
    if (!(fields >> index >> state)) continue;
    fields >> node;
    s.inQueue = true;
    const int count = tasksIn(index);
    (state == "PENDING" ? s.pending : s.running) += count;
    if (index.find_first_not_of("0123456789") == std::string::npos)
      s.tasks[std::stoi(index)] = SlurmTaskState{state, node};
  }
  return s;
}

void SlurmJobs::cancel(const std::string& jobId) const {
  const std::vector<std::string> argv{commands_.scancel, jobId};
  const CommandOutput r = runCommand(argv);
  if (r.exitCode != 0)
    throw Error("scancel could not cancel Slurm job " + jobId + ": " + trimmed(r.output));
}

SlurmWaitResult SlurmJobs::wait(const std::string& jobId, const SlurmWaitOptions& options,
                                const CancellationToken* cancel,
                                const std::function<void(const SlurmJobState&)>& progress) const {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  const auto cancelled = [&] { return cancel && cancel->cancelled(); };
  const auto pastDeadline = [&] {
    return options.deadlineSeconds > 0 && elapsed() >= options.deadlineSeconds;
  };
  SlurmWaitResult result;
  const auto cancelJob = [&] {
    try {
      this->cancel(jobId);
      result.jobCancelled = true;
    } catch (const Error& e) {
      result.cancelProblem = e.what();
    }
  };
  int failures = 0;
  try {
    for (;;) {
      bool answered = false;
      try {
        result.last = poll(jobId);
        answered = true;
        failures = 0;
      } catch (const Error&) {
        // Ctrl-C at a terminal reaches squeue too: a poll it cut short is
        // the cancel, not a cluster failure.
        if (!cancelled() && ++failures >= std::max(1, options.squeueFailures)) throw;
      }
      if (cancelled()) {
        result.end = SlurmWaitEnd::Cancelled;
        cancelJob();
        return result;
      }
      if (answered) {
        if (progress) progress(result.last);
        if (!result.last.inQueue) {
          result.end = SlurmWaitEnd::LeftQueue;
          return result;
        }
      }
      if (pastDeadline()) {
        result.end = SlurmWaitEnd::Deadline;
        if (options.cancelAtDeadline) cancelJob();
        return result;
      }
      const auto until = Clock::now() + std::chrono::milliseconds(
                                            static_cast<int64_t>(options.pollSeconds * 1000));
      while (Clock::now() < until && !cancelled() && !pastDeadline())
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& e) {
    // Not left to run on unobserved: whatever ended the wait, the job goes.
    cancelJob();
    throw Error(std::string(e.what()) +
                (result.jobCancelled ? "; Slurm job " + jobId + " was cancelled (scancel)"
                                     : "; Slurm job " + jobId +
                                           " could not be cancelled either: " + result.cancelProblem));
  }
}

void writeFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) throw Error("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot write " + path + ": " + ec.message());
}

std::string shellQuoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

ArrayTaskStart startArrayTask(const std::string& command, const std::string& given,
                              const std::string& jobFile) {
  std::string index = given;
  if (index.empty())
    if (const char* v = std::getenv("SLURM_ARRAY_TASK_ID")) index = v;
  ArrayTaskStart start;
  try {
    start.index = std::stoi(index);
  } catch (const std::exception&) {
  }
  if (start.index < 0)
    throw Error(command + ": no task index (--task, or SLURM_ARRAY_TASK_ID from Slurm)");
  std::ifstream in(jobFile);
  if (!in) throw Error(jobFile + ": cannot read the job file");
  std::stringstream text;
  text << in.rdbuf();
  start.jobText = text.str();
  return start;
}

}  // namespace collage
