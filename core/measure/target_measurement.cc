#include "core/measure/target_measurement.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/ir/error.h"
#include "core/ir/graph.h"
#include "core/ir/hashing.h"
#include "core/measure/measurement_db.h"
#include "core/measure/connection_string.h"
#include "core/measure/shared_store.h"
#include "core/measure/slurm_jobs.h"
#include "core/patterns/candidate_signature.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace collage {

namespace {

json fingerprintJson(const HardwareFingerprint& f) {
  return {{"cpu_vendor", f.cpuVendor}, {"cpu_model", f.cpuModel},
          {"isa_flags", f.isaFlags},   {"cores", f.cores},
          {"threads", f.threads},      {"library_versions", f.libraryVersions}};
}

HardwareFingerprint fingerprintOf(const json& j) {
  HardwareFingerprint f;
  f.cpuVendor = j.value("cpu_vendor", "");
  f.cpuModel = j.value("cpu_model", "");
  f.isaFlags = j.value("isa_flags", "");
  f.cores = j.value("cores", 0);
  f.threads = j.value("threads", 0);
  f.libraryVersions = j.value("library_versions", "");
  return f;
}

json parse(const std::string& text, const std::string& path) {
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    throw Error(path + ": not a collage job file (" + e.what() + ")");
  }
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The file that remembers a target's fingerprint for a model and backend set.
std::string rememberedPath(const TargetMeasurementOptions& o) {
  std::string key = o.constraint + "\n" + sha256File(o.modelPath);
  for (const auto& s : o.inputShapes) key += "\n" + s;
  for (const auto& b : o.backends) key += "\nbackend " + b;
  // The versions too: a fingerprint remembered for other versions would
  // find their measurements, and nothing would be measured after an upgrade.
  for (const auto& [name, version] : o.versions) key += "\nversion " + name + "=" + version;
  return (fs::path(o.workDir) / "targets" / (stableHashHex(key) + ".json")).string();
}

}  // namespace

std::string TargetJob::toJson() const {
  json batchesJson = json::array();
  for (const auto& batch : batches) {
    json b = json::array();
    for (const auto& k : batch) b.push_back({{"backend", k.backend}, {"nodes", k.nodes}});
    batchesJson.push_back(b);
  }
  return json{{"model", modelPath},   {"input_shapes", inputShapes},
              {"backends", backends}, {"timeout_s", timeoutSeconds},
              {"store", store},       {"batches", batchesJson}}
      .dump(1);
}

TargetJob TargetJob::fromJson(const std::string& text, const std::string& path) {
  const json j = parse(text, path);
  TargetJob job;
  try {
    job.modelPath = j.at("model").get<std::string>();
    job.inputShapes = j.value("input_shapes", std::vector<std::string>{});
    job.backends = j.value("backends", std::vector<std::string>{});
    job.timeoutSeconds = j.value("timeout_s", 60.0);
    job.store = j.value("store", "");
    for (const auto& b : j.at("batches")) {
      std::vector<TargetKernel> batch;
      for (const auto& k : b)
        batch.push_back(TargetKernel{k.at("backend").get<std::string>(),
                                     k.at("nodes").get<std::vector<NodeId>>()});
      job.batches.push_back(std::move(batch));
    }
  } catch (const json::exception& e) {
    throw Error(path + ": not a collage job file (" + e.what() + ")");
  }
  return job;
}

std::string TargetTaskReport::toJson() const {
  json v = json::array();
  for (const auto& [name, version] : versions) v.push_back({{"name", name}, {"version", version}});
  return json{{"task", task},
              {"node", node},
              {"state", state},
              {"message", message},
              {"fingerprint", fingerprintJson(fingerprint)},
              {"versions", v},
              {"kernels", kernels},
              {"measured", measured},
              {"cached", cached},
              {"failed", failed}}
      .dump(1);
}

TargetTaskReport TargetTaskReport::fromJson(const std::string& text, const std::string& path) {
  const json j = parse(text, path);
  TargetTaskReport r;
  try {
    r.task = j.value("task", 0);
    r.node = j.value("node", "");
    r.state = j.value("state", "");
    r.message = j.value("message", "");
    if (j.contains("fingerprint")) r.fingerprint = fingerprintOf(j.at("fingerprint"));
    if (j.contains("versions"))
      for (const auto& v : j.at("versions"))
        r.versions.emplace_back(v.at("name").get<std::string>(),
                                v.at("version").get<std::string>());
    r.kernels = j.value("kernels", 0);
    r.measured = j.value("measured", 0);
    r.cached = j.value("cached", 0);
    r.failed = j.value("failed", 0);
  } catch (const json::exception& e) {
    throw Error(path + ": not a task report (" + e.what() + ")");
  }
  return r;
}

std::string TargetTaskReport::path(const std::string& runDir, int task) {
  return (fs::path(runDir) / ("task-" + std::to_string(task) + ".json")).string();
}

void TargetTaskReport::write(const std::string& runDir) const {
  writeFileAtomically(path(runDir, task), toJson());
}

std::optional<TargetTaskReport> TargetTaskReport::read(const std::string& runDir, int task) {
  const std::string p = path(runDir, task);
  const std::string text = readText(p);
  if (text.empty()) return std::nullopt;
  try {
    return fromJson(text, p);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::string defaultTargetWorkDir() {
  if (const char* v = std::getenv("COLLAGE_SLURM_WORK_DIR"); v && *v) return v;
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v && *v)
    return std::string(v) + "/collage-studio/slurm";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/collage-studio/slurm";
}

TargetMeasurementResult measureOnTarget(const Graph& graph, const CandidateSet& candidates,
                                        const std::vector<bool>& needed, MeasurementDb& db,
                                        const TargetMeasurementOptions& options,
                                        SearchObserver* observer, const CancellationToken* cancel) {
  const auto say = [observer](const std::string& text) {
    if (observer) observer->onLog(text);
  };
  TargetMeasurementResult result;
  std::error_code ec;
  fs::create_directories(fs::path(options.workDir) / "targets", ec);
  if (ec) throw Error("cannot create the Slurm work dir " + options.workDir + ": " + ec.message());

  // What the target is already known to be, from an earlier job.
  std::optional<TargetTaskReport> remembered;
  const std::string rememberedFile = rememberedPath(options);
  if (const std::string text = readText(rememberedFile); !text.empty()) {
    try {
      remembered = TargetTaskReport::fromJson(text, rememberedFile);
    } catch (const Error&) {
    }
  }
  std::map<std::string, std::string> knownVersions;
  if (remembered)
    for (const auto& [name, version] : remembered->versions) knownVersions[name] = version;

  // One kernel per (backend, signature): the store's unit.
  std::vector<TargetKernel> kernels;
  std::map<std::pair<std::string, std::string>, bool> seen;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!needed.empty() && !needed[i]) continue;
    const Candidate& c = candidates[i];
    const std::string hash = candidateSignature(graph, c.nodes).hash;
    if (!seen.emplace(std::make_pair(c.backend, hash), true).second) continue;
    if (remembered &&
        db.find(remembered->fingerprint, MeasurementKey{c.backend, knownVersions[c.backend], hash}))
      continue;
    kernels.push_back(TargetKernel{c.backend, c.nodes.members()});
  }
  if (remembered) {
    result.fingerprint = remembered->fingerprint;
    result.versions = remembered->versions;
  }
  if (kernels.empty() && !remembered) return result;  // nothing to measure
  if (kernels.empty()) {
    say("target " + options.constraint +
        ": every kernel is in the shared store already (fingerprint " +
        remembered->fingerprint.id() + "); nothing submitted to Slurm");
    return result;
  }

  // The run folder: the job file, the script, the tasks' reports and logs.
  const std::string pattern = (fs::path(options.workDir) / "run-XXXXXX").string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back(0);
  if (!mkdtemp(name.data()))
    throw Error("cannot create a run folder in the Slurm work dir " + options.workDir);
  result.runDir = fs::absolute(name.data()).string();

  TargetJob job;
  job.modelPath = fs::absolute(options.modelPath).string();
  job.inputShapes = options.inputShapes;
  job.backends = options.backends;
  job.timeoutSeconds = options.timeoutSeconds;
  job.store = SharedMeasurementStore::redacted(options.dbUrl);
  const size_t batchSize = static_cast<size_t>(std::max(1, options.batchSize));
  for (size_t i = 0; i < kernels.size(); i += batchSize)
    job.batches.emplace_back(
        kernels.begin() + static_cast<std::ptrdiff_t>(i),
        kernels.begin() + static_cast<std::ptrdiff_t>(std::min(kernels.size(), i + batchSize)));
  const std::string jobFile = result.runDir + "/job.json";
  writeFileAtomically(jobFile, job.toJson());
  const std::string script = result.runDir + "/job.sh";
  writeFileAtomically(script, "#!/bin/sh\n# collage optimize --target " + options.constraint +
                              ": one batch of kernels per array task, measured on its node.\n"
                              "exec " +
                              shellQuoted(options.collageExecutable) + " measure-batch " +
                              shellQuoted(jobFile) + " --task \"$SLURM_ARRAY_TASK_ID\"\n");
  fs::permissions(script, fs::perms::owner_all, fs::perm_options::add, ec);

  result.kernels = static_cast<int>(kernels.size());
  result.tasks = static_cast<int>(job.batches.size());
  const SlurmJobs slurm;
  SlurmArrayRequest request;
  request.script = script;
  request.tasks = result.tasks;
  request.constraint = options.constraint;
  request.jobName = "collage-measure";
  request.output = result.runDir + "/task-%a.log";
  request.workDir = result.runDir;
  // Without the password: the tasks read it by libpq's means.
  const ConnectionString store(options.dbUrl);
  request.environment = {{kTargetDbVariable, store.withoutPassword()}};
  if (store.hasPassword())
    say(std::string("the tasks get the store's URL without its password: ") +
        ConnectionString::passwordAdvice() + " on the nodes");
  try {
    result.jobId = slurm.submitArray(request);
  } catch (const Error&) {
    fs::remove_all(result.runDir, ec);  // nothing ran: nothing to read
    throw;
  }
  say("submitted " + std::to_string(result.kernels) + " kernels to Slurm job " + result.jobId +
      " (" + std::to_string(result.tasks) + " tasks, --constraint=" + options.constraint +
      "; files in " + result.runDir + ")");

  // Wait for the job to leave the queue, at most deadlineSeconds; Ctrl-C
  // (the cancel token), the deadline, squeue failing or anything thrown
  // cancels it (SlurmJobs::wait): the array never runs on unobserved.
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const auto progress = [&](const SlurmJobState& state) {
    if (!observer) return;
    int doneTasks = 0, doneKernels = 0, measured = 0, cached = 0, failed = 0;
    for (int t = 0; t < result.tasks; ++t)
      if (auto r = TargetTaskReport::read(result.runDir, t); r && r->state == "done") {
        ++doneTasks;
        doneKernels += r->kernels;
        measured += r->measured;
        cached += r->cached;
        failed += r->failed;
      }
    MeasureProgressEvent e;
    e.total = result.kernels;
    e.done = doneKernels;
    e.measured = measured;
    e.cached = cached;
    e.failed = failed;
    e.elapsedSeconds = elapsed();
    // Short: the bar shows 40 characters of it.
    e.current = "Slurm job " + result.jobId + ": " + std::to_string(doneTasks) + "/" +
                std::to_string(result.tasks) + " done" +
                (state.running > 0 ? ", " + std::to_string(state.running) + " running" : "");
    observer->onMeasureProgress(e);
  };
  SlurmWaitOptions waitOptions;
  waitOptions.pollSeconds = options.pollSeconds;
  waitOptions.deadlineSeconds = options.deadlineSeconds;
  const SlurmWaitResult waited = slurm.wait(result.jobId, waitOptions, cancel, progress);
  if (!waited.cancelProblem.empty()) result.problems.push_back(waited.cancelProblem);
  if (waited.end == SlurmWaitEnd::Cancelled) {
    result.cancelled = true;
    if (waited.jobCancelled)
      say("cancelled Slurm job " + result.jobId + " (scancel); what its tasks stored is kept");
  }
  if (waited.end == SlurmWaitEnd::Deadline) {
    const SlurmJobState& last = waited.last;
    throw Error("Slurm job " + result.jobId + " (--constraint=" + options.constraint +
                ") did not finish within " + std::to_string(static_cast<int64_t>(options.deadlineSeconds)) +
                " s (--target-timeout); " +
                (waited.jobCancelled ? "it was cancelled (scancel)"
                                     : "cancelling it failed: " + waited.cancelProblem) +
                ". At the deadline " + last.toString() +
                (last.running == 0 && last.pending > 0
                     ? ": no task had started; are the constraint's nodes drained, down or busy "
                       "(sinfo --format='%N %f %t')?"
                     : "") +
                " What its tasks measured is kept in the store; the job's files: " + result.runDir);
  }

  // What each task did, and which fingerprint the target has: the one most
  // tasks report (a constraint should name one kind of machine; if it names
  // several, the others' measurements stay in the store under their own).
  std::map<std::string, std::pair<int, TargetTaskReport>> byFingerprint;
  for (int t = 0; t < result.tasks; ++t) {
    const std::optional<TargetTaskReport> r = TargetTaskReport::read(result.runDir, t);
    const std::string log = result.runDir + "/task-" + std::to_string(t) + ".log";
    const std::string who = "Slurm job " + result.jobId + " task " + std::to_string(t);
    if (r && !r->fingerprint.cpuModel.empty()) {
      auto& [count, report] = byFingerprint[r->fingerprint.id()];
      if (count++ == 0) report = *r;
    }
    if (r && r->state == "done") {
      result.measured += r->measured;
      result.cached += r->cached;
      result.failed += r->failed;
      continue;
    }
    if (result.cancelled) continue;
    if (!r)
      result.problems.push_back(who + " ended without starting its batch of " +
                                std::to_string(job.batches[static_cast<size_t>(t)].size()) +
                                " kernels (its log: " + log + ")");
    else if (r->state == "failed")
      result.problems.push_back(who + " on node " + r->node + " failed: " + r->message +
                                " (its log: " + log + ")");
    else
      result.problems.push_back(
          who + " on node " + r->node +
          " stopped mid-batch (killed, cancelled or out of time); what it stored is "
          "kept (its log: " +
          log + ")");
  }
  int most = 0;
  for (const auto& [id, entry] : byFingerprint)
    if (entry.first > most) {
      most = entry.first;
      result.fingerprint = entry.second.fingerprint;
      result.versions = entry.second.versions;
    }
  if (byFingerprint.size() > 1)
    result.problems.push_back(
        "the nodes of --constraint=" + options.constraint + " are of " +
        std::to_string(byFingerprint.size()) + " kinds; the plan is made for the most common (" +
        result.fingerprint->cpuModel + ", fingerprint " + result.fingerprint->id() + ")");
  if (most > 0) {
    TargetTaskReport keep = byFingerprint.begin()->second.second;
    for (const auto& [id, entry] : byFingerprint)
      if (entry.first == most) keep = entry.second;
    keep.state = "remembered";
    writeFileAtomically(rememberedFile, keep.toJson());
  }
  // The folder stays where something needs reading.
  if (result.problems.empty() && !result.cancelled) {
    fs::remove_all(result.runDir, ec);
    result.runDir.clear();
  }
  return result;
}

}  // namespace collage
