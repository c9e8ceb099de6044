#include "core/pipeline/stage_cost.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/ir/error.h"

namespace collage {

double receivedBytesPerSample(const PipeGraph& graph, const std::vector<int>& nodes) {
  double bytes = 0;
  for (const auto& e : graph.edges())
    if (std::binary_search(nodes.begin(), nodes.end(), e.to) &&
        !std::binary_search(nodes.begin(), nodes.end(), e.from))
      bytes += e.bytesPerSample;
  return bytes;
}

double chainReceivedBytesPerSample(const PipeGraph& graph, const std::vector<int>& chainPosition,
                                   int firstPosition) {
  double bytes = 0;
  for (const auto& e : graph.edges())
    if (chainPosition[e.from] < firstPosition && chainPosition[e.to] >= firstPosition)
      bytes += e.bytesPerSample;
  return bytes;
}

double handOverSeconds(const LinkCost& link, int queues) {
  return queues > 0 && std::isfinite(link.latencyS) ? queues * link.latencyS : 0;
}

int queuesAtMost(const PipeGraph& graph, const std::vector<int>& nodes) {
  std::set<int> producers, consumers;
  for (const auto& e : graph.edges()) {
    const bool from = std::binary_search(nodes.begin(), nodes.end(), e.from);
    const bool to = std::binary_search(nodes.begin(), nodes.end(), e.to);
    if (to && !from) producers.insert(e.from);
    if (from && !to) consumers.insert(e.to);
  }
  return static_cast<int>(producers.size() + consumers.size());
}

StageEstimate estimateStage(const StageCostModel& cost, const Topology& topology,
                            const std::vector<int>& nodes, DeviceKind kind, int devices,
                            int microBatch, double receivedBytesPerSample, int queues) {
  COLLAGE_CHECK(!nodes.empty() && std::is_sorted(nodes.begin(), nodes.end()),
                "a stage's nodes must be sorted and non-empty");
  COLLAGE_CHECK(devices >= 1 && microBatch % devices == 0,
                "a stage's micro-batch must split evenly over its devices");
  const StageRunCost run = cost.stage(nodes, kind, devices, microBatch);
  StageEstimate e;
  e.computeSeconds = run.seconds;
  const LinkCost link = topology.slowestLinkInto(kind);
  // Every other stage holds a device of its own, and feeds this one or is
  // fed by it, not both (stages are acyclic): no more queues than that.
  const int others = static_cast<int>(topology.devices().size()) - devices;
  e.handOverSeconds = handOverSeconds(link, std::max(0, std::min(queues, others)));
  // The link's latency is the hand-over's; the bytes cross at its bandwidth.
  const double bytes = receivedBytesPerSample * microBatch;
  e.transferSeconds = bytes > 0 ? bytes / link.bandwidthBytesPerS : 0;
  e.weightBytes = run.weightBytes;
  e.activationBytes = run.activationBytes;
  e.microBatch = microBatch;
  return e;
}

}  // namespace collage
