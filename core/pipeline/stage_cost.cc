#include "core/pipeline/stage_cost.h"

#include <algorithm>

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

StageEstimate estimateStage(const StageCostModel& cost, const Topology& topology,
                            const std::vector<int>& nodes, DeviceKind kind, int devices,
                            int microBatch, double receivedBytesPerSample) {
  COLLAGE_CHECK(!nodes.empty() && std::is_sorted(nodes.begin(), nodes.end()),
                "a stage's nodes must be sorted and non-empty");
  COLLAGE_CHECK(devices >= 1 && microBatch % devices == 0,
                "a stage's micro-batch must split evenly over its devices");
  const StageRunCost run = cost.stage(nodes, kind, devices, microBatch);
  StageEstimate e;
  e.computeSeconds = run.seconds;
  e.transferSeconds = topology.slowestLinkInto(kind).seconds(receivedBytesPerSample * microBatch);
  e.weightBytes = run.weightBytes;
  e.activationBytes = run.activationBytes;
  e.microBatch = microBatch;
  return e;
}

}  // namespace collage
