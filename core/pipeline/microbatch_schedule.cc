#include "core/pipeline/microbatch_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/ir/error.h"

namespace collage {

MicroBatchSchedule scheduleMicroBatches(const StageGraph& plan, const Topology& topology,
                                        const PipeGraph& graph) {
  const int n = static_cast<int>(plan.stages.size());
  MicroBatchSchedule out;
  out.microBatch = plan.microBatch;
  out.stages.resize(n);
  std::vector<double> latency(n);
  for (int s = 0; s < n; ++s) {
    latency[s] = plan.stages[s].estimate.secondsPerMicroBatch();
    out.fullPeriodSeconds = std::max(out.fullPeriodSeconds, latency[s]);
  }
  // Offsets: stages are in a topological order, so producers come first.
  std::vector<std::vector<int>> consumers(n);
  for (const auto& [a, b] : plan.edges) {
    COLLAGE_CHECK(a < b && b < n, "stage edges point forward in the stage order");
    consumers[a].push_back(b);
    out.stages[b].startOffsetSeconds =
        std::max(out.stages[b].startOffsetSeconds, out.stages[a].startOffsetSeconds + latency[a]);
  }
  // (Edges are sorted by producer, so each producer's offset is final before
  // it is read: a producer's own producers have smaller indices.)
  out.periodSeconds = out.fullPeriodSeconds;
  for (int s = 0; s < n; ++s) {
    StageSlots& slot = out.stages[s];
    const PipelineStage& st = plan.stages[s];
    double release = slot.startOffsetSeconds + latency[s];
    for (int c : consumers[s])
      release = std::max(release, out.stages[c].startOffsetSeconds + latency[c]);
    out.fillSeconds = std::max(out.fillSeconds, slot.startOffsetSeconds + latency[s]);
    slot.holdSeconds = release - slot.startOffsetSeconds;
    // The relative slack only absorbs rounding in hold / period (a hold of
    // exactly two periods must need 2, not 3).
    slot.neededInFlight =
        out.fullPeriodSeconds > 0
            ? std::max(1,
                       static_cast<int>(std::ceil(slot.holdSeconds / out.fullPeriodSeconds - 1e-9)))
            : 1;
    slot.memoryLimitBytes = std::numeric_limits<double>::infinity();
    for (const auto& id : st.devices) {
      const PipeDevice* d = topology.find(id);
      if (!d)
        throw Error("pipeline: stage " + std::to_string(s) + " runs on \"" + id +
                    "\", which the topology does not list");
      slot.memoryLimitBytes = std::min(slot.memoryLimitBytes, d->memoryLimitBytes);
    }
    const double weights = st.estimate.weightBytes, perMicroBatch = st.estimate.activationBytes;
    if (weights + perMicroBatch > slot.memoryLimitBytes) {
      std::ostringstream e;
      e << "pipeline: no schedule fits: stage " << s << " [" << graph.names(st.nodes) << "] on ";
      for (size_t d = 0; d < st.devices.size(); ++d) e << (d ? ", " : "") << st.devices[d];
      e << " needs " << static_cast<long long>(weights + perMicroBatch)
        << " B per device for one micro-batch in flight (" << static_cast<long long>(weights)
        << " B of weights + " << static_cast<long long>(perMicroBatch)
        << " B of activations), but its memory limit is "
        << static_cast<long long>(slot.memoryLimitBytes) << " B";
      throw Error(e.str());
    }
    slot.inFlight = slot.neededInFlight;
    if (perMicroBatch > 0) {
      const double room = std::floor((slot.memoryLimitBytes - weights) / perMicroBatch);
      if (room < slot.inFlight) slot.inFlight = static_cast<int>(room);
    }
    slot.memoryBytes = weights + slot.inFlight * perMicroBatch;
    if (slot.inFlight < slot.neededInFlight)
      out.periodSeconds = std::max(out.periodSeconds, slot.holdSeconds / slot.inFlight);
  }
  return out;
}

std::string MicroBatchSchedule::toString() const {
  std::ostringstream out;
  out << "micro-batch " << microBatch << ", period " << periodSeconds << " s"
      << (full() ? " (full)" : " (memory-bound; full: " + std::to_string(fullPeriodSeconds) + " s)")
      << "\n";
  for (size_t s = 0; s < stages.size(); ++s) {
    const auto& st = stages[s];
    out << "  stage " << s << ": start " << st.startOffsetSeconds << " s, holds " << st.inFlight
        << "/" << st.neededInFlight << " micro-batches, " << st.memoryBytes << " B of "
        << st.memoryLimitBytes << " B\n";
  }
  return out.str();
}

}  // namespace collage
