#include "core/pipeline/measured_stage_cost.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/ir/error.h"
#include "core/patterns/candidate.h"

namespace collage {

NodeProfile measureNodes(const Graph& graph, const std::string& backend,
                         const std::string& backendVersion, MeasurementDb* db,
                         const HardwareFingerprint& fingerprint, const MeasureFn& measure,
                         CostingReport* report) {
  CandidateSet candidates(graph.numNodes());
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    Candidate c;
    c.nodes = NodeSet::of(graph.numNodes(), {n});
    c.backend = backend;
    c.origin = "rule:op";
    candidates.add(c);
  }
  CandidateCoster coster(
      graph, db, fingerprint, [&](const std::string&) { return backendVersion; }, measure);
  CostingReport costs;
  const std::vector<Measurement> m = coster.costAll(candidates, {}, nullptr, nullptr, &costs);
  if (report) *report = costs;
  NodeProfile p;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const NodeId n = candidates[i].nodes.first();
    if (m[i].status != MeasurementStatus::Ok)
      throw Error(
          "pipeline: node " + graph.node(n).name + " (" + graph.node(n).op + ") on " + backend +
          " could not be measured: " + (m[i].message.empty() ? m[i].toString() : m[i].message));
  }
  p.seconds.assign(static_cast<size_t>(graph.numNodes()), 0);
  p.activationBytes.assign(static_cast<size_t>(graph.numNodes()), 0);
  for (size_t i = 0; i < candidates.size(); ++i) {
    const NodeId n = candidates[i].nodes.first();
    p.seconds[static_cast<size_t>(n)] = m[i].medianNs * 1e-9;
    double bytes = 0;
    for (ValueId v : graph.node(n).outputs)
      if (v != kNoValue) bytes += static_cast<double>(graph.value(v).type.byteSize());
    p.activationBytes[static_cast<size_t>(n)] = bytes;
  }
  return p;
}

LinkCost measureInProcessLink(size_t bytes, int rounds) {
  using Clock = std::chrono::steady_clock;
  // Latency: a value handed to another thread and back, spinning on an
  // atomic (what a queue's wake-up costs at best), median round trip / 2.
  std::atomic<int> turn{0};
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    int seen = 0;
    while (!stop.load(std::memory_order_acquire)) {
      const int t = turn.load(std::memory_order_acquire);
      if (t != seen && (t & 1)) {
        turn.store(t + 1, std::memory_order_release);
        seen = t + 1;
      } else {
        std::this_thread::yield();
      }
    }
  });
  std::vector<double> trips;
  for (int r = 0; r < std::max(1, rounds); ++r) {
    const int start = turn.load();
    const Clock::time_point t0 = Clock::now();
    turn.store(start + 1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != start + 2) std::this_thread::yield();
    trips.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  stop = true;
  echo.join();
  std::sort(trips.begin(), trips.end());
  // Bandwidth: the fastest of a few copies (the first pays page faults).
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    const Clock::time_point t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > 0) best = std::max(best, static_cast<double>(bytes) / s);
    a[static_cast<size_t>(r) % bytes] = b[bytes - 1 - static_cast<size_t>(r) % bytes];
  }
  LinkCost c;
  c.latencyS = trips[trips.size() / 2] / 2;
  c.bandwidthBytesPerS = best > 0 ? best : 1e9;
  return c;
}

}  // namespace collage
