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
#include "core/rewrite/equivalence_check.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

std::string joinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// One stage edge's micro-batches, in order. close() wakes everyone: a
// waiting push or pop then returns false (the pipeline is stopping).
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}
  bool push(std::vector<Tensor> item) {
    std::unique_lock<std::mutex> lock(mutex_);
    notFull_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    notEmpty_.notify_one();
    return true;
  }
  bool pop(std::vector<Tensor>& item) {
    std::unique_lock<std::mutex> lock(mutex_);
    notEmpty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (closed_) return false;
    item = std::move(items_.front());
    items_.pop_front();
    notFull_.notify_one();
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    notEmpty_.notify_all();
    notFull_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex mutex_;
  std::condition_variable notEmpty_, notFull_;
  std::deque<std::vector<Tensor>> items_;
  bool closed_ = false;
};

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

// Where a stage's input comes from: the model's input `index`, or the
// `slot`-th tensor of what producer stage `stage` sends it.
struct InputSource {
  int graphInput = -1;
  size_t edge = 0;  // index into the stage's inEdges
  size_t slot = 0;
};

struct PipelineRuntime::Stage {
  size_t index = 0;
  std::vector<std::string> devices;
  std::vector<int> cpus;
  int threads = 1;
  std::unique_ptr<Graph> graph;
  Plan plan;
  BackendLookup backends;
  std::unique_ptr<Session> session;
  std::vector<InputSource> inputs;  // per stage graph input
  // Edges out: (consumer stage, the stage-graph output positions it gets).
  struct OutEdge {
    size_t consumer = 0;
    std::vector<size_t> outputs;
    BoundedQueue* queue = nullptr;
  };
  std::vector<OutEdge> outEdges;
  std::vector<BoundedQueue*> inEdges;
  // Model outputs made here: (stage output position, model output index).
  std::vector<std::pair<size_t, size_t>> modelOutputs;
  std::vector<std::unique_ptr<BoundedQueue>> ownedQueues;  // the queues into it
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

Plan restrictPlan(const Plan& plan, const std::vector<std::string>& nodes) {
  const std::set<std::string> inside(nodes.begin(), nodes.end());
  Plan out;
  out.modelPath = plan.modelPath;
  out.modelSha256 = plan.modelSha256;
  out.backends = plan.backends;
  for (const PlanGroup& g : plan.groups) {
    std::vector<std::string> in;
    for (const std::string& n : g.nodes)
      if (inside.count(n)) in.push_back(n);
    if (in.empty()) continue;
    if (in.size() == g.nodes.size()) {
      out.groups.push_back(g);
      out.groups.back().candidate.reset();
      continue;
    }
    for (const std::string& n : in) {
      PlanGroup one;
      one.nodes = {n};
      one.backend = g.backend;
      one.pattern = "rule:op";
      one.origin = PlanOrigin::User;
      out.groups.push_back(std::move(one));
    }
  }
  return out;
}

std::string PipelineRuntime::stageName(size_t stage) const {
  std::string devices;
  for (const auto& d : stages_.at(stage)->devices) devices += (devices.empty() ? "" : ", ") + d;
  return "stage " + std::to_string(stage) + " [" + devices + "]";
}

const Graph& PipelineRuntime::stageGraph(size_t stage) const { return *stages_.at(stage)->graph; }
const Plan& PipelineRuntime::stagePlan(size_t stage) const { return stages_.at(stage)->plan; }

PipelineRuntime::PipelineRuntime(const Graph& graph, const StageGraph& stageGraph,
                                 const Topology& topology, const StageBackendsFactory& backends,
                                 PipelineRuntimeOptions options)
    : graph_(graph), microBatch_(std::max(1, stageGraph.microBatch)), options_(std::move(options)) {
  if (stageGraph.stages.empty()) throw Error("pipeline: the stage graph has no stages");
  if (!options_.plan && options_.backend.empty())
    throw Error("pipeline: give a plan or a backend for the stages");
  const size_t numNodes = static_cast<size_t>(graph.numNodes());
  // Which stage runs each node.
  std::vector<int> stageOf(numNodes, -1);
  for (size_t s = 0; s < stageGraph.stages.size(); ++s)
    for (int n : stageGraph.stages[s].nodes) {
      if (n < 0 || static_cast<size_t>(n) >= numNodes)
        throw Error("pipeline: stage " + std::to_string(s) + " names node " + std::to_string(n) +
                    ", but " + graph.name + " has " + std::to_string(numNodes) + " nodes");
      if (stageOf[static_cast<size_t>(n)] >= 0)
        throw Error("pipeline: node " + graph.node(n).name + " is in stage " +
                    std::to_string(stageOf[static_cast<size_t>(n)]) + " and in stage " +
                    std::to_string(s));
      stageOf[static_cast<size_t>(n)] = static_cast<int>(s);
    }
  for (size_t n = 0; n < numNodes; ++n)
    if (stageOf[n] < 0)
      throw Error("pipeline: node " + graph.node(static_cast<NodeId>(n)).name + " is in no stage");

  const std::map<std::string, std::vector<int>> cores = assignCores(topology);
  for (size_t s = 0; s < stageGraph.stages.size(); ++s) {
    auto stage = std::make_unique<Stage>();
    stage->index = s;
    stage->devices = stageGraph.stages[s].devices;
    if (stage->devices.empty())
      throw Error("pipeline: stage " + std::to_string(s) + " has no device");
    for (const std::string& d : stage->devices) {
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

  // Each stage's sub-graph: its nodes, with the values other stages or the
  // caller read as outputs.
  std::vector<bool> isModelOutput(static_cast<size_t>(graph.numValues()), false);
  for (ValueId v : graph.outputs()) isModelOutput[static_cast<size_t>(v)] = true;
  for (ValueId v : graph.outputs())
    if (graph.value(v).producer == kNoNode)
      throw Error("pipeline: output '" + graph.value(v).name +
                  "' is a model input or constant; no stage makes it");
  std::vector<std::vector<std::string>> outputNames(stages_.size());
  for (size_t s = 0; s < stages_.size(); ++s) {
    std::vector<std::string> names;
    for (int n : stageGraph.stages[s].nodes) names.push_back(graph.node(n).name);
    std::vector<int> sorted = stageGraph.stages[s].nodes;
    std::sort(sorted.begin(), sorted.end());
    for (int n : sorted)
      for (ValueId v : graph.node(n).outputs) {
        if (v == kNoValue) continue;
        bool readOutside = isModelOutput[static_cast<size_t>(v)];
        for (NodeId c : graph.value(v).consumers)
          if (stageOf[static_cast<size_t>(c)] != static_cast<int>(s)) readOutside = true;
        if (readOutside) outputNames[s].push_back(graph.value(v).name);
      }
    Stage& stage = *stages_[s];
    try {
      stage.graph = std::make_unique<Graph>(extractRegion(graph, names, outputNames[s]));
    } catch (const Error& e) {
      throw Error("pipeline: " + stageName(s) + ": its sub-graph: " + e.what());
    }
    stage.graph->name = graph.name + " (" + stageName(s) + ")";
    stage.plan = options_.plan ? restrictPlan(*options_.plan, names)
                               : singleNodePlan(*stage.graph, options_.backend);
  }

  // Wiring: where each stage input comes from, one queue per stage edge.
  for (size_t s = 0; s < stages_.size(); ++s) {
    Stage& stage = *stages_[s];
    std::map<size_t, size_t> edgeOf;  // producer stage -> index into inEdges
    for (ValueId rv : stage.graph->inputs()) {
      const std::string& name = stage.graph->value(rv).name;
      const std::optional<ValueId> v = graph.findValue(name);
      if (!v)
        throw Error("pipeline: " + stageName(s) + " reads '" + name + "', which " + graph.name +
                    " lacks");
      InputSource src;
      const NodeId producer = graph.value(*v).producer;
      if (producer == kNoNode) {
        const auto& ins = graph.inputs();
        auto at = std::find(ins.begin(), ins.end(), *v);
        if (at == ins.end())
          throw Error("pipeline: " + stageName(s) + " reads '" + name +
                      "', which is neither made by a node nor an input");
        src.graphInput = static_cast<int>(at - ins.begin());
      } else {
        const size_t from = static_cast<size_t>(stageOf[static_cast<size_t>(producer)]);
        Stage& prod = *stages_[from];
        auto e = edgeOf.find(from);
        if (e == edgeOf.end()) {
          stage.ownedQueues.push_back(std::make_unique<BoundedQueue>(stage.capacity));
          stage.inEdges.push_back(stage.ownedQueues.back().get());
          prod.outEdges.push_back({s, {}, stage.inEdges.back()});
          e = edgeOf.emplace(from, stage.inEdges.size() - 1).first;
        }
        Stage::OutEdge* out = nullptr;
        for (auto& oe : prod.outEdges)
          if (oe.consumer == s) out = &oe;
        const auto& pnames = outputNames[from];
        const size_t position =
            static_cast<size_t>(std::find(pnames.begin(), pnames.end(), name) - pnames.begin());
        src.edge = e->second;
        src.slot = out->outputs.size();
        out->outputs.push_back(position);
      }
      stage.inputs.push_back(src);
    }
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const ValueId v = graph.outputs()[i];
    const size_t s = static_cast<size_t>(stageOf[static_cast<size_t>(graph.value(v).producer)]);
    const auto& names = outputNames[s];
    const size_t position = static_cast<size_t>(
        std::find(names.begin(), names.end(), graph.value(v).name) - names.begin());
    stages_[s]->modelOutputs.push_back({position, i});
  }

  // The Sessions, compiled with each stage's thread count (native kernels
  // size their work for it when compiled).
  for (auto& stage : stages_) {
    stage->backends = backends();
    ScopedThreads threads(stage->threads);
    try {
      stage->session = std::make_unique<Session>(*stage->graph, stage->plan, stage->backends);
    } catch (const Error& e) {
      throw Error("pipeline: " + stageName(stage->index) + ": " + e.what());
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
      BoundedQueue* old = stage->ownedQueues[q].get();
      stage->ownedQueues[q] = std::make_unique<BoundedQueue>(stage->capacity);
      BoundedQueue* fresh = stage->ownedQueues[q].get();
      for (auto& in : stage->inEdges)
        if (in == old) in = fresh;
      for (auto& other : stages_)
        for (auto& oe : other->outEdges)
          if (oe.queue == old) oe.queue = fresh;
    }

  std::vector<std::vector<Tensor>> results(count, std::vector<Tensor>(graph_.outputs().size()));
  const size_t n = stages_.size();
  std::vector<std::vector<Clock::time_point>> starts(n, std::vector<Clock::time_point>(count)),
      finishes(n, std::vector<Clock::time_point>(count));
  std::vector<double> busy(n, 0);
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
      std::vector<std::vector<Tensor>> received(stage.inEdges.size());
      std::vector<Tensor> inputs(stage.inputs.size());
      for (; m < count; ++m) {
        for (size_t e = 0; e < stage.inEdges.size(); ++e)
          if (!stage.inEdges[e]->pop(received[e])) return;  // stopped elsewhere
        for (size_t i = 0; i < stage.inputs.size(); ++i) {
          const InputSource& src = stage.inputs[i];
          inputs[i] = src.graphInput >= 0 ? microBatches[m][static_cast<size_t>(src.graphInput)]
                                          : received[src.edge][src.slot];
        }
        starts[s][m] = Clock::now();
        std::vector<Tensor> outputs = stage.session->run(inputs);
        finishes[s][m] = Clock::now();
        busy[s] += std::chrono::duration<double>(finishes[s][m] - starts[s][m]).count();
        ++done[s];
        for (const auto& [position, index] : stage.modelOutputs)
          results[m][index] = outputs[position];
        for (auto& oe : stage.outEdges) {
          std::vector<Tensor> send;
          send.reserve(oe.outputs.size());
          for (size_t p : oe.outputs) send.push_back(outputs[p]);
          if (!oe.queue->push(std::move(send))) return;
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
    for (size_t s = 0; s < n; ++s) {
      StageRunReport sr;
      sr.devices = stages_[s]->devices;
      sr.cpus = options_.pin ? stages_[s]->cpus : std::vector<int>{};
      sr.threads = stages_[s]->threads;
      sr.groups = static_cast<int>(stages_[s]->plan.groups.size());
      sr.busySeconds = busy[s];
      sr.busyShare = wall > 0 ? busy[s] / wall : 0;
      sr.microBatches = done[s];
      r.stages.push_back(std::move(sr));
    }
    *report = std::move(r);
  }
  return results;
}

std::string PipelineRunReport::toString() const {
  char line[256];
  std::snprintf(
      line, sizeof line,
      "pipeline: %d micro-batch(es) of %d sample(s) in %.3f s: %.1f samples/s, latency per sample "
      "median %.3f ms, max %.3f ms\n",
      microBatches, microBatch, wallSeconds, samplesPerSecond, medianLatencySeconds * 1e3,
      maxLatencySeconds * 1e3);
  std::string out = line;
  for (size_t s = 0; s < stages.size(); ++s) {
    std::string devices;
    for (const auto& d : stages[s].devices) devices += (devices.empty() ? "" : ", ") + d;
    std::snprintf(
        line, sizeof line,
        "  stage %zu [%s] cpus %s, %d thread(s), %d kernel(s): busy %.1f%% (%.3f s)\n", s,
        devices.c_str(), stages[s].cpus.empty() ? "(not pinned)" : joinInts(stages[s].cpus).c_str(),
        stages[s].threads, stages[s].groups, stages[s].busyShare * 100, stages[s].busySeconds);
    out += line;
  }
  return out;
}

}  // namespace collage
