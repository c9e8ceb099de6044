#include "core/pipeline/pipeline_simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "core/ir/error.h"
#include "core/pipeline/stage_cost.h"

namespace collage {

namespace {

std::string stageLabel(const StageGraph& stages, int s) {
  std::string out = "stage " + std::to_string(s) + " [";
  const auto& devices = stages.stages[s].devices;
  for (size_t d = 0; d < devices.size(); ++d) out += (d ? ", " : "") + devices[d];
  return out + "]";
}

// One stage edge: its bytes per micro-batch and the link it crosses.
struct SimEdge {
  int from = 0, to = 0;
  double bytes = 0;
  LinkCost link;                 // the slowest pair between the two stages' devices
  std::pair<std::string, std::string> linkKey;  // empty ids: no link (same devices)
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The queues the runtime wires: one per pair of stages a value crosses
// (the stage graph's order-only edges constrain nothing at run time), each
// with its bytes per micro-batch and the slowest link between the two
// stages' devices. Errors name the stage with a device the topology lacks,
// the node in no stage, the queue that points backward.
struct Wiring {
  std::vector<SimEdge> edges;
  std::vector<std::vector<int>> inEdges, outEdges;  // by stage: indices into edges
};

Wiring wireQueues(const StageGraph& stages, const PipeGraph& graph, const Topology& topology) {
  const int n = static_cast<int>(stages.stages.size());
  for (int s = 0; s < n; ++s) {
    const PipelineStage& st = stages.stages[s];
    if (st.devices.empty()) throw Error("pipeline simulator: " + stageLabel(stages, s) + " has no device");
    for (const auto& id : st.devices)
      if (!topology.find(id))
        throw Error("pipeline simulator: " + stageLabel(stages, s) + " runs on \"" + id +
                    "\", which the topology does not list");
  }
  // Which stage each node is in, for the bytes on a stage edge.
  std::vector<int> stageOf(graph.size(), -1);
  for (int s = 0; s < n; ++s)
    for (int v : stages.stages[s].nodes)
      if (v >= 0 && v < graph.size()) stageOf[v] = s;
  Wiring w;
  w.inEdges.resize(n);
  w.outEdges.resize(n);
  for (int v = 0; v < graph.size(); ++v)
    if (stageOf[v] < 0)
      throw Error("pipeline simulator: the node '" + graph.name(v) + "' is in no stage");
  std::set<std::pair<int, int>> pairs;
  for (const PipeEdge& pe : graph.edges())
    if (stageOf[pe.from] != stageOf[pe.to]) pairs.insert({stageOf[pe.from], stageOf[pe.to]});
  for (const auto& [a, b] : pairs) {
    if (a > b)
      throw Error("pipeline simulator: the stage edge (" + std::to_string(a) + ", " +
                  std::to_string(b) + ") does not point forward in the stage order");
    SimEdge e;
    e.from = a;
    e.to = b;
    for (const PipeEdge& pe : graph.edges())
      if (stageOf[pe.from] == a && stageOf[pe.to] == b)
        e.bytes += pe.bytesPerSample * stages.microBatch;
    double worst = -1;
    for (const auto& x : stages.stages[a].devices)
      for (const auto& y : stages.stages[b].devices) {
        if (x == y) continue;
        const LinkCost c = topology.link(x, y);
        const double t = c.seconds(e.bytes);
        if (t > worst) {
          worst = t;
          e.link = c;
          e.linkKey = std::minmax(x, y);
        }
      }
    if (worst < 0) e.link = LinkCost{};  // every pair shares a device: free
    w.inEdges[b].push_back(static_cast<int>(w.edges.size()));
    w.outEdges[a].push_back(static_cast<int>(w.edges.size()));
    w.edges.push_back(e);
  }
  return w;
}

}  // namespace

std::vector<double> queueHandOverSeconds(const StageGraph& stages, const PipeGraph& graph,
                                         const Topology& topology) {
  const Wiring w = wireQueues(stages, graph, topology);
  std::vector<double> out(stages.stages.size(), 0);
  for (const SimEdge& e : w.edges) {
    out[e.from] += handOverSeconds(e.link, 1);
    out[e.to] += handOverSeconds(e.link, 1);
  }
  return out;
}

SimulationReport simulatePipeline(const StageGraph& stages, const PipeGraph& graph,
                                  const Topology& topology, const SimulationOptions& options) {
  const int n = static_cast<int>(stages.stages.size());
  const int mCount = std::max(0, options.microBatches);
  SimulationReport out;
  out.microBatches = mCount;
  out.microBatch = stages.microBatch;
  out.stages.resize(n);

  const Wiring wiring = wireQueues(stages, graph, topology);
  const std::vector<SimEdge>& edges = wiring.edges;
  const std::vector<std::vector<int>>& inEdges = wiring.inEdges;
  const std::vector<std::vector<int>>& outEdges = wiring.outEdges;
  std::vector<double> compute(n), capacity(n), handOver(n, 0), ready(n, 0);
  for (int s = 0; s < n; ++s) {
    const PipelineStage& st = stages.stages[s];
    compute[s] = static_cast<size_t>(s) < options.computeSeconds.size()
                     ? options.computeSeconds[s]
                     : st.estimate.computeSeconds;
    if (!(compute[s] >= 0) || std::isinf(compute[s]))
      throw Error("pipeline simulator: " + stageLabel(stages, s) + " has compute time " +
                  std::to_string(compute[s]) + " s per micro-batch; it must be finite and >= 0");
    if (static_cast<size_t>(s) < options.handOverSeconds.size())
      handOver[s] = options.handOverSeconds[s];
    if (static_cast<size_t>(s) < options.startSeconds.size()) ready[s] = options.startSeconds[s];
    if (!(handOver[s] >= 0) || std::isinf(handOver[s]) || !(ready[s] >= 0) || std::isinf(ready[s]))
      throw Error("pipeline simulator: " + stageLabel(stages, s) + " has hand-over " +
                  std::to_string(handOver[s]) + " s per micro-batch and start " +
                  std::to_string(ready[s]) + " s; both must be finite and >= 0");
    capacity[s] = static_cast<size_t>(s) < options.inFlight.size() && options.inFlight[s] > 0
                      ? options.inFlight[s]
                      : 2;
  }
  // Event times, by (edge or stage, micro-batch).
  std::vector<std::vector<double>> arrival(edges.size(), std::vector<double>(mCount, 0));
  std::vector<std::vector<double>> popped(edges.size(), std::vector<double>(mCount, 0));
  std::vector<double> stageFree = ready;  // after the pushes of its previous micro-batch
  std::map<std::string, double> deviceFree;
  std::map<std::pair<std::string, std::string>, double> linkFree;
  for (int s = 0; s < n; ++s) {
    out.stages[s].starts.assign(mCount, 0);
    out.stages[s].finishes.assign(mCount, 0);
  }
  for (int m = 0; m < mCount; ++m) {
    for (int s = 0; s < n; ++s) {
      const PipelineStage& st = stages.stages[s];
      double t = stageFree[s];
      for (int e : inEdges[s]) {  // pops in edge order
        if (arrival[e][m] > t) t += options.polling.end(arrival[e][m] - t);
        popped[e][m] = t;
      }
      for (const auto& id : st.devices) t = std::max(t, deviceFree[id]);
      double c = compute[s];
      if (static_cast<size_t>(s) < options.computeSecondsByMicroBatch.size() &&
          static_cast<size_t>(m) < options.computeSecondsByMicroBatch[s].size())
        c = options.computeSecondsByMicroBatch[s][m];
      if (!(c >= 0) || std::isinf(c))
        throw Error("pipeline simulator: " + stageLabel(stages, s) + " has compute time " +
                    std::to_string(c) + " s for micro-batch " + std::to_string(m) +
                    "; it must be finite and >= 0");
      const double finish = t + c;
      out.stages[s].starts[m] = t;
      out.stages[s].finishes[m] = finish;
      out.stages[s].busySeconds += c;
      for (const auto& id : st.devices) deviceFree[id] = finish;
      // Pushes in edge order; each waits for a slot in the consumer's queue:
      // it holds `capacity` micro-batches, so m waits for m - capacity's pop.
      double p = finish + handOver[s];
      for (int e : outEdges[s]) {
        const SimEdge& edge = edges[e];
        const int freedBy = m - static_cast<int>(capacity[edge.to]);
        // A producer blocked on a full queue sleeps; the consumer's pop wakes
        // it, which costs the link's latency (a queue's wake-up in process,
        // the message that frees the window over MPI).
        if (freedBy >= 0 && popped[e][freedBy] > p)
          p += options.polling.end(popped[e][freedBy] + edge.link.latencyS - p);
        double sent = p;
        if (!edge.linkKey.first.empty() && edge.bytes > 0) {
          double& busyUntil = linkFree[edge.linkKey];
          double begin = std::max(p, busyUntil);
          // The consumer starts waiting for m once done with m - 1.
          if (options.transferWhenReceiverWaits) begin = std::max(begin, stageFree[edge.to]);
          busyUntil = begin + edge.bytes / edge.link.bandwidthBytesPerS;
          sent = busyUntil + edge.link.latencyS;
        }
        arrival[e][m] = sent;
      }
      stageFree[s] = p;
    }
  }

  // The report.
  std::vector<double> latencies, lastFinish(mCount, 0);
  // From the run's start (time 0): a stage without inputs starts there
  // unless it is not yet ready, which the makespan counts, as a wall clock.
  double last = 0;
  if (mCount > 0)
    for (int s = 0; s < n; ++s) last = std::max(last, stageFree[s]);
  for (int m = 0; m < mCount; ++m) {
    double a = 0, b = 0;
    for (int s = 0; s < n; ++s) {
      const double st = out.stages[s].starts[m], fi = out.stages[s].finishes[m];
      a = s ? std::min(a, st) : st;
      b = s ? std::max(b, fi) : fi;
    }
    if (n == 0) continue;
    latencies.push_back(b - a);
    lastFinish[m] = b;
    last = std::max(last, b);
  }
  out.makespanSeconds = last;
  const double samples = static_cast<double>(mCount) * stages.microBatch;
  out.samplesPerSecond = out.makespanSeconds > 0 ? samples / out.makespanSeconds : 0;
  if (mCount >= 2) {
    const int half = mCount / 2;
    const double span = lastFinish[mCount - 1] - lastFinish[half - 1];
    out.steadySamplesPerSecond =
        span > 0 ? static_cast<double>(mCount - half) * stages.microBatch / span : 0;
  } else {
    out.steadySamplesPerSecond = out.samplesPerSecond;
  }
  out.medianLatencySeconds = median(latencies);
  out.maxLatencySeconds = latencies.empty() ? 0 : *std::max_element(latencies.begin(), latencies.end());
  for (int s = 0; s < n; ++s)
    out.stages[s].busyShare =
        out.makespanSeconds > 0 ? out.stages[s].busySeconds / out.makespanSeconds : 0;
  for (const PipeDevice& d : topology.devices()) {
    SimulatedDevice sd;
    sd.id = d.id;
    sd.memoryLimitBytes = d.memoryLimitBytes;
    for (int s = 0; s < n; ++s) {
      const auto& st = stages.stages[s];
      if (std::find(st.devices.begin(), st.devices.end(), d.id) == st.devices.end()) continue;
      sd.memoryBytes += st.estimate.weightBytes + capacity[s] * st.estimate.activationBytes;
    }
    out.devices.push_back(sd);
  }
  return out;
}

SimulationReport simulateDataParallel(const std::vector<StageGraph>& replicas,
                                      const PipeGraph& graph, const Topology& topology,
                                      int microBatches,
                                      const std::vector<SimulationOptions>& options) {
  if (replicas.empty()) throw Error("simulating data parallel: no replica");
  const size_t count = replicas.size();
  SimulationReport out;
  out.microBatches = std::max(0, microBatches);
  out.microBatch = replicas.front().microBatch;
  std::vector<double> latencies;
  std::map<std::string, double> memory;
  double samples = 0;
  for (size_t r = 0; r < count; ++r) {
    SimulationOptions o = r < options.size() ? options[r] : SimulationOptions{};
    o.microBatches = out.microBatches / static_cast<int>(count) +
                     (static_cast<int>(r) < out.microBatches % static_cast<int>(count) ? 1 : 0);
    const SimulationReport one = simulatePipeline(replicas[r], graph, topology, o);
    samples += static_cast<double>(o.microBatches) * replicas[r].microBatch;
    out.makespanSeconds = std::max(out.makespanSeconds, one.makespanSeconds);
    out.steadySamplesPerSecond += one.steadySamplesPerSecond;
    for (int m = 0; m < o.microBatches && !one.stages.empty(); ++m) {
      double first = one.stages[0].starts[m], last = one.stages[0].finishes[m];
      for (const SimulatedStage& st : one.stages) {
        first = std::min(first, st.starts[m]);
        last = std::max(last, st.finishes[m]);
      }
      latencies.push_back(last - first);
    }
    out.stages.insert(out.stages.end(), one.stages.begin(), one.stages.end());
    for (const SimulatedDevice& d : one.devices) memory[d.id] += d.memoryBytes;
  }
  out.samplesPerSecond = out.makespanSeconds > 0 ? samples / out.makespanSeconds : 0;
  out.medianLatencySeconds = median(latencies);
  out.maxLatencySeconds =
      latencies.empty() ? 0 : *std::max_element(latencies.begin(), latencies.end());
  for (SimulatedStage& st : out.stages)
    st.busyShare = out.makespanSeconds > 0 ? st.busySeconds / out.makespanSeconds : 0;
  for (const PipeDevice& d : topology.devices())
    out.devices.push_back({d.id, memory[d.id], d.memoryLimitBytes});
  return out;
}

std::string SimulationReport::toString() const {
  std::ostringstream o;
  char line[256];
  std::snprintf(line, sizeof line,
                "simulated: %d micro-batch(es) of %d sample(s) in %.4g s: %.1f samples/s (steady "
                "%.1f), latency per sample median %.3f ms, max %.3f ms\n",
                microBatches, microBatch, makespanSeconds, samplesPerSecond,
                steadySamplesPerSecond, medianLatencySeconds * 1e3, maxLatencySeconds * 1e3);
  o << line;
  for (size_t s = 0; s < stages.size(); ++s) {
    std::snprintf(line, sizeof line, "  stage %zu: busy %.1f%% (%.4g s)\n", s,
                  stages[s].busyShare * 100, stages[s].busySeconds);
    o << line;
  }
  for (const auto& d : devices) {
    std::snprintf(line, sizeof line, "  device %s: %.4g B%s\n", d.id.c_str(), d.memoryBytes,
                  std::isinf(d.memoryLimitBytes)
                      ? ""
                      : (" of " + std::to_string(static_cast<long long>(d.memoryLimitBytes)) + " B").c_str());
    o << line;
  }
  return o.str();
}

}  // namespace collage
