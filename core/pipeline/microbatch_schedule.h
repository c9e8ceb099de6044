// The micro-batch scheduler (thesis ch. 3, §3.6), forward only: how many
// micro-batches each stage of a StageGraph keeps in flight, so that the
// pipeline stays full within every device's memory.
//
// Steady state, period P = the slowest stage's time per micro-batch. A stage
// starts micro-batch m at offset + m·P, where its offset is when its last
// producer finishes micro-batch 0 (the fill). Its activations for one
// micro-batch live from its start until the last of its consumers has
// finished with them (a sink: until it finishes):
//
//   x ─▶ a1 ─▶ a2 ─┐          b's output waits for a2's at the join, so b
//   └──▶ b ────────┴─▶ join   holds ceil(hold / P) = 3 micro-batches where a
//                              stage of a chain holds 2.
//
// needed = ceil(hold / P) micro-batches keep the stage from stalling. When
// its memory holds fewer (weights + n · activations <= its devices' smallest
// limit), the stage runs with the most that fit, and a buffer comes free only
// every hold / n seconds: the period grows to that, and the schedule says so
// (full() is false). When not even one micro-batch fits, no schedule exists:
// an error names the stage and the bytes it needs.
//
// A value, not control flow: the runtime and the simulator read it, a test
// checks it, the app can draw it.
#pragma once

#include <string>
#include <vector>

#include "core/pipeline/stage_partitioner.h"
#include "core/pipeline/topology.h"

namespace collage {

struct StageSlots {
  double startOffsetSeconds = 0;  // when micro-batch 0 starts, from an empty pipeline
  double holdSeconds = 0;         // how long one micro-batch's activations stay
  int neededInFlight = 1;         // ceil(hold / full period)
  int inFlight = 1;               // what memory allows, at most `neededInFlight`
  double memoryBytes = 0;         // per device with `inFlight` micro-batches
  double memoryLimitBytes = 0;    // the smallest limit among the stage's devices
};

struct MicroBatchSchedule {
  int microBatch = 1;
  double fullPeriodSeconds = 0;    // between micro-batches when every stage has what it needs
  double periodSeconds = 0;        // between micro-batches with the in-flight counts memory allows
  double fillSeconds = 0;          // micro-batch 0 from the first start to the last finish
  std::vector<StageSlots> stages;  // by stage index of the StageGraph

  bool full() const { return periodSeconds == fullPeriodSeconds; }
  double timePerSample() const { return periodSeconds / microBatch; }
  std::string toString() const;
};

// Throws collage::Error naming the stage, its devices and the bytes it needs
// when one micro-batch in flight already exceeds its memory.
MicroBatchSchedule scheduleMicroBatches(const StageGraph& plan, const Topology& topology,
                                        const PipeGraph& graph);

}  // namespace collage
