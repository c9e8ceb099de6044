#include "core/pipeline/pipeline_runtime.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "core/ir/error.h"
#include "core/ir/threading.h"
#include "core/pipeline/stage_queue.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;
// One stage edge's micro-batches, in order.
using TensorQueue = StageQueue<std::vector<Tensor>>;

std::string joinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// Sets the calling thread's count and OpenMP team size for a scope, then
// restores them (building a stage's kernels on the caller's thread).
class ScopedThreads {
 public:
  explicit ScopedThreads(int threads) : ompBefore_(omp_get_max_threads()) {
    setThisThreadCount(threads);
    omp_set_num_threads(threads);
  }
  ~ScopedThreads() {
    setThisThreadCount(0);
    omp_set_num_threads(ompBefore_);
  }

 private:
  int ompBefore_;
};

}  // namespace

struct PipelineRuntime::Stage {
  WiredStage wired;
  std::vector<int> cpus;
  int threads = 1;
  BackendLookup backends;
  std::unique_ptr<Session> session;
  std::vector<TensorQueue*> inEdges;   // per wired.inEdges
  std::vector<TensorQueue*> outQueues;  // per wired.outEdges
  std::vector<std::unique_ptr<TensorQueue>> ownedQueues;  // the queues into it
  size_t capacity = 2;
};

std::map<std::string, std::vector<int>> assignCores(const Topology& topology) {
  std::vector<int> allowed;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) allowed.push_back(c);
  } else {
    for (int c = 0; c < hardwareCores(); ++c) allowed.push_back(c);
  }
  std::map<std::string, std::vector<int>> out;
  size_t next = 0;
  for (const PipeDevice& d : topology.devices()) {
    if (d.kind != DeviceKind::Cpu)
      throw Error("pipeline: device \"" + d.id + "\" is a " + deviceKindName(d.kind) +
                  "; the in-process runtime runs CPU devices only, so far");
    if (next + static_cast<size_t>(d.cores) > allowed.size())
      throw Error("pipeline: device \"" + d.id + "\" needs " + std::to_string(d.cores) +
                  " core(s), but this machine lets the process run on " +
                  std::to_string(allowed.size()) + " core(s) (" + joinInts(allowed) + "), " +
                  std::to_string(next) + " of them taken by the devices before it");
    out[d.id] = std::vector<int>(allowed.begin() + static_cast<long>(next),
                                 allowed.begin() + static_cast<long>(next + d.cores));
    next += static_cast<size_t>(d.cores);
  }
  return out;
}

std::string PipelineRuntime::stageName(size_t stage) const {
  return stageDisplayName(stage, stages_.at(stage)->wired.devices);
}

const Graph& PipelineRuntime::stageGraph(size_t stage) const { return *stages_.at(stage)->wired.graph; }
const Plan& PipelineRuntime::stagePlan(size_t stage) const { return stages_.at(stage)->wired.plan; }

PipelineRuntime::PipelineRuntime(const Graph& graph, const StageGraph& stageGraph,
                                 const Topology& topology, const StageBackendsFactory& backends,
                                 PipelineRuntimeOptions options)
    : graph_(graph), microBatch_(std::max(1, stageGraph.microBatch)), options_(std::move(options)) {
  std::vector<WiredStage> wired =
      wireStages(graph, stageGraph, options_.plan, options_.backend);
  const std::map<std::string, std::vector<int>> cores = assignCores(topology);
  for (size_t s = 0; s < wired.size(); ++s) {
    auto stage = std::make_unique<Stage>();
    stage->wired = std::move(wired[s]);
    for (const std::string& d : stage->wired.devices) {
      auto it = cores.find(d);
      if (it == cores.end())
        throw Error("pipeline: stage " + std::to_string(s) + " runs on device \"" + d +
                    "\", which the topology does not list");
      stage->cpus.insert(stage->cpus.end(), it->second.begin(), it->second.end());
    }
    stage->threads = static_cast<int>(stage->cpus.size());
    stage->capacity = s < options_.inFlight.size() && options_.inFlight[s] > 0
                          ? static_cast<size_t>(options_.inFlight[s])
                          : 2;
    stages_.push_back(std::move(stage));
  }

  // One queue per stage edge, owned by its consumer and sized by its
  // in-flight count.
  for (auto& stage : stages_)
    for (size_t e = 0; e < stage->wired.inEdges.size(); ++e) {
      stage->ownedQueues.push_back(std::make_unique<TensorQueue>(stage->capacity));
      stage->inEdges.push_back(stage->ownedQueues.back().get());
    }
  for (auto& stage : stages_)
    for (const StageSend& oe : stage->wired.outEdges) {
      const Stage& consumer = *stages_[oe.consumer];
      const auto& from = consumer.wired.inEdges;
      const size_t e = static_cast<size_t>(
          std::find(from.begin(), from.end(), stage->wired.index) - from.begin());
      stage->outQueues.push_back(consumer.inEdges.at(e));
    }

  // The Sessions, compiled with each stage's thread count (native kernels
  // size their work for it when compiled).
  for (auto& stage : stages_) {
    stage->backends = backends();
    ScopedThreads threads(stage->threads);
    try {
      stage->session =
          std::make_unique<Session>(*stage->wired.graph, stage->wired.plan, stage->backends);
    } catch (const Error& e) {
      throw Error("pipeline: " + stageName(stage->wired.index) + ": " + e.what());
    }
  }
}

PipelineRuntime::~PipelineRuntime() = default;

std::vector<std::vector<Tensor>> PipelineRuntime::run(
    const std::vector<std::vector<Tensor>>& microBatches, PipelineRunReport* report) {
  const size_t count = microBatches.size();
  for (size_t m = 0; m < count; ++m)
    if (microBatches[m].size() != graph_.inputs().size())
      throw Error("pipeline: micro-batch " + std::to_string(m) + " has " +
                  std::to_string(microBatches[m].size()) + " inputs; " + graph_.name + " takes " +
                  std::to_string(graph_.inputs().size()));
  // Fresh queues for this run (a stopped run leaves its own closed).
  for (auto& stage : stages_)
    for (size_t q = 0; q < stage->ownedQueues.size(); ++q) {
      TensorQueue* old = stage->ownedQueues[q].get();
      stage->ownedQueues[q] = std::make_unique<TensorQueue>(stage->capacity);
      TensorQueue* fresh = stage->ownedQueues[q].get();
      for (auto& in : stage->inEdges)
        if (in == old) in = fresh;
      for (auto& other : stages_)
        for (auto& q : other->outQueues)
          if (q == old) q = fresh;
    }

  std::vector<std::vector<Tensor>> results(count, std::vector<Tensor>(graph_.outputs().size()));
  const size_t n = stages_.size();
  std::vector<std::vector<Clock::time_point>> starts(n, std::vector<Clock::time_point>(count)),
      finishes(n, std::vector<Clock::time_point>(count));
  std::vector<double> busy(n, 0), waiting(n, 0), alive(n, 0);
  std::vector<Clock::time_point> threadStarts(n);
  // For the wake-up (PipelineRunReport::wakeUpSeconds): when each queue got
  // each micro-batch (after its producer's push), and when its consumer's
  // pop began and returned. Each vector is written by one thread; the
  // threads only look keys up (at(): no data race on the map itself).
  std::map<const TensorQueue*, std::vector<Clock::time_point>> pushedAt, popBegan, popDone;
  for (auto& stage : stages_)
    for (auto& q : stage->ownedQueues) {
      pushedAt[q.get()].resize(count);
      popBegan[q.get()].resize(count);
      popDone[q.get()].resize(count);
    }
  std::vector<int64_t> done(n, 0);
  std::mutex failureMutex;
  std::string failure;
  auto stopAll = [&](const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(failureMutex);
      if (failure.empty()) failure = why;
    }
    for (auto& stage : stages_)
      for (auto& q : stage->ownedQueues) q->close();
  };

  auto work = [&](size_t s) {
    Stage& stage = *stages_[s];
    size_t m = 0;
    try {
      if (options_.pin) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c : stage.cpus) CPU_SET(c, &set);
        const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        if (rc != 0)
          throw Error("cannot pin its thread to cpus " + joinInts(stage.cpus) + " (error " +
                      std::to_string(rc) + ")");
      }
      setThisThreadCount(stage.threads);
      omp_set_num_threads(stage.threads);
      // Where the thread's time goes besides Session::run: blocked in a
      // queue (waiting for a producer, or a full consumer: the simulator
      // models both) or its own hand-over work (the rest): see
      // StageRunReport.
      threadStarts[s] = Clock::now();
      struct Alive {
        double& seconds;
        Clock::time_point from;
        ~Alive() { seconds = std::chrono::duration<double>(Clock::now() - from).count(); }
      } life{alive[s], threadStarts[s]};
      auto timed = [&](auto&& call) {
        const Clock::time_point t0 = Clock::now();
        const bool ok = call();
        waiting[s] += std::chrono::duration<double>(Clock::now() - t0).count();
        return ok;
      };
      std::vector<std::vector<Tensor>> received(stage.inEdges.size());
      std::vector<Tensor> inputs(stage.wired.inputs.size());
      for (; m < count; ++m) {
        for (size_t e = 0; e < stage.inEdges.size(); ++e)
          if (!timed([&] {
                popBegan.at(stage.inEdges[e])[m] = Clock::now();
                const bool ok = stage.inEdges[e]->pop(received[e]);
                popDone.at(stage.inEdges[e])[m] = Clock::now();
                return ok;
              }))
            return;  // stopped elsewhere
        for (size_t i = 0; i < stage.wired.inputs.size(); ++i) {
          const StageInputSource& src = stage.wired.inputs[i];
          inputs[i] = src.graphInput >= 0 ? microBatches[m][static_cast<size_t>(src.graphInput)]
                                          : received[src.edge][src.slot];
        }
        starts[s][m] = Clock::now();
        std::vector<Tensor> outputs = stage.session->run(inputs);
        finishes[s][m] = Clock::now();
        busy[s] += std::chrono::duration<double>(finishes[s][m] - starts[s][m]).count();
        ++done[s];
        for (const auto& [position, index] : stage.wired.modelOutputs)
          results[m][index] = outputs[position];
        for (size_t e = 0; e < stage.wired.outEdges.size(); ++e) {
          const StageSend& oe = stage.wired.outEdges[e];
          std::vector<Tensor> send;
          send.reserve(oe.outputs.size());
          for (size_t p : oe.outputs) send.push_back(outputs[p]);
          if (!timed([&] {
                const bool ok = stage.outQueues[e]->push(std::move(send));
                pushedAt.at(stage.outQueues[e])[m] = Clock::now();
                return ok;
              }))
            return;
        }
      }
    } catch (const std::exception& e) {
      stopAll("pipeline: " + stageName(s) + " failed on micro-batch " + std::to_string(m) + ": " +
              e.what());
    } catch (...) {
      stopAll("pipeline: " + stageName(s) + " failed on micro-batch " + std::to_string(m));
    }
  };

  const Clock::time_point begin = Clock::now();
  {
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (size_t s = 0; s < n; ++s) threads.emplace_back(work, s);
    for (auto& t : threads) t.join();
  }
  const double wall = std::chrono::duration<double>(Clock::now() - begin).count();
  if (!failure.empty()) throw Error(failure);

  if (report) {
    PipelineRunReport r;
    r.microBatches = static_cast<int>(count);
    r.microBatch = microBatch_;
    r.wallSeconds = wall;
    r.samplesPerSecond = wall > 0 ? static_cast<double>(count) * microBatch_ / wall : 0;
    std::vector<double> latencies;
    for (size_t m = 0; m < count; ++m) {
      Clock::time_point first = starts[0][m], last = finishes[0][m];
      for (size_t s = 1; s < n; ++s) {
        first = std::min(first, starts[s][m]);
        last = std::max(last, finishes[s][m]);
      }
      latencies.push_back(std::chrono::duration<double>(last - first).count());
    }
    std::sort(latencies.begin(), latencies.end());
    if (!latencies.empty()) {
      r.medianLatencySeconds = latencies[latencies.size() / 2];
      r.maxLatencySeconds = latencies.back();
    }
    std::vector<double> wakeUps;
    for (const auto& [q, pushed] : pushedAt)
      for (size_t m = 0; m < count; ++m)
        if (popBegan.at(q)[m] < pushed[m])  // the consumer slept until the push
          wakeUps.push_back(
              std::max(0.0, std::chrono::duration<double>(popDone.at(q)[m] - pushed[m]).count()));
    std::sort(wakeUps.begin(), wakeUps.end());
    r.wakeUps = static_cast<int>(wakeUps.size());
    if (!wakeUps.empty()) r.wakeUpSeconds = wakeUps[wakeUps.size() / 2];
    for (size_t s = 0; s < n; ++s) {
      StageRunReport sr;
      sr.devices = stages_[s]->wired.devices;
      sr.cpus = options_.pin ? stages_[s]->cpus : std::vector<int>{};
      sr.threads = stages_[s]->threads;
      sr.groups = static_cast<int>(stages_[s]->wired.plan.groups.size());
      sr.busySeconds = busy[s];
      sr.busyShare = wall > 0 ? busy[s] / wall : 0;
      sr.microBatches = done[s];
      sr.waitSeconds = waiting[s];
      for (int64_t m = 0; m < done[s]; ++m)
        sr.microBatchSeconds.push_back(
            std::chrono::duration<double>(finishes[s][m] - starts[s][m]).count());
      sr.handOverSeconds = std::max(0.0, alive[s] - busy[s] - waiting[s]);
      sr.startSeconds = std::chrono::duration<double>(threadStarts[s] - begin).count();
      for (int64_t m = 0; m < done[s]; ++m) {
        sr.starts.push_back(std::chrono::duration<double>(starts[s][m] - begin).count());
        sr.finishes.push_back(std::chrono::duration<double>(finishes[s][m] - begin).count());
      }
      const StageMemory memory = stageMemoryOf(stages_[s]->wired, stages_[s]->session->peakBytes(),
                                               static_cast<int>(stages_[s]->capacity));
      sr.weightBytes = memory.weightBytes;
      sr.activationBytes = memory.activationBytes;
      r.stages.push_back(std::move(sr));
    }
    *report = std::move(r);
  }
  return results;
}

std::string PipelineRunReport::toString() const {
  char line[512];
  std::snprintf(
      line, sizeof line,
      "pipeline: %d micro-batch(es) of %d sample(s) in %.3f s: %.1f samples/s, latency per sample "
      "median %.3f ms, max %.3f ms\n",
      microBatches, microBatch, wallSeconds, samplesPerSecond, medianLatencySeconds * 1e3,
      maxLatencySeconds * 1e3);
  std::string out = line;
  if (wakeUps > 0) {
    std::snprintf(line, sizeof line, "  queues: wake-up median %.3f ms (%d pop(s) waited)\n",
                  wakeUpSeconds * 1e3, wakeUps);
    out += line;
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    std::string devices;
    for (const auto& d : stages[s].devices) devices += (devices.empty() ? "" : ", ") + d;
    std::snprintf(
        line, sizeof line,
        "  stage %zu [%s] cpus %s, %d thread(s), %d kernel(s): busy %.1f%% (%.3f s), blocked "
        "%.3f s, hand-over %.3f ms per micro-batch\n",
        s, devices.c_str(),
        stages[s].cpus.empty() ? "(not pinned)" : joinInts(stages[s].cpus).c_str(),
        stages[s].threads, stages[s].groups, stages[s].busyShare * 100, stages[s].busySeconds,
        stages[s].waitSeconds,
        stages[s].microBatches > 0 ? stages[s].handOverSeconds / stages[s].microBatches * 1e3 : 0);
    out += line;
  }
  return out;
}

}  // namespace collage
