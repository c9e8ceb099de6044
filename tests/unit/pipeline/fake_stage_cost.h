// A deterministic StageCostModel: a test double only. The product feeds the
// partitioner measured costs (Collage's plan of the sub-graph, timed on the
// device kind at the micro-batch size); this one adds up per-node numbers so
// that tests can compute the expected answers by hand or by brute force.
#pragma once

#include <limits>
#include <vector>

#include "core/pipeline/stage_cost.h"

namespace collage {

struct FakeNodeCost {
  double cpuSecondsPerSample = 1;
  double gpuSecondsPerSample = std::numeric_limits<double>::infinity();  // inf: no GPU kernel
  double weightBytes = 0;
  double activationBytesPerSample = 0;
};

class FakeStageCost : public StageCostModel {
 public:
  std::vector<FakeNodeCost> nodes;
  double overheadSecondsPerMicroBatch = 0;  // a launch cost, so micro-batch size matters
  double dataParallelEfficiency = 1;        // d devices run d * efficiency times faster (d > 1)

  StageRunCost stage(const std::vector<int>& ids, DeviceKind kind, int devices,
                     int microBatch) const override {
    double perSample = 0, weights = 0, activations = 0;
    for (int v : ids) {
      const FakeNodeCost& c = nodes.at(v);
      perSample += kind == DeviceKind::Gpu ? c.gpuSecondsPerSample : c.cpuSecondsPerSample;
      weights += c.weightBytes;
      activations += c.activationBytesPerSample;
    }
    const double speedup = devices > 1 ? devices * dataParallelEfficiency : 1;
    StageRunCost r;
    r.seconds = overheadSecondsPerMicroBatch + perSample * microBatch / speedup;
    r.weightBytes = weights;
    r.activationBytes = activations * microBatch / devices;
    return r;
  }
};

}  // namespace collage
