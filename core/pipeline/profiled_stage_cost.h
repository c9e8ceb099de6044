// A StageCostModel from a profiled run: each node's time, as a Session of
// one kernel per node times it (Session::setProfiling) on one device's
// cores, at each micro-batch size the partitioner may choose. A stage's
// compute is the sum of its nodes' medians at its share of the micro-batch;
// its weights are the constants its nodes read (each once), its activations
// the values its nodes make, at that share.
//
// Measured, not guessed: nothing here models a kernel's speed. It times
// in-process, on whatever else the machine runs (the measurement worker and
// its database, which time each kernel alone, are the next step:
// docs/pipeline.md).
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "core/ir/graph.h"
#include "core/pipeline/stage_cost.h"
#include "core/runtime/session.h"

namespace collage {

struct NodeProfile {
  std::vector<double> seconds;          // per node: median of the runs
  std::vector<double> activationBytes;  // per node: its outputs' bytes
};

// Times every node of `graph` (at one micro-batch size) with one kernel per
// node on `backend`, `runs` runs after one untimed run, on `threads` threads.
NodeProfile profileNodes(const Graph& graph, const std::string& backend,
                         const BackendLookup& backends, int threads, int runs);

class ProfiledStageCost : public StageCostModel {
 public:
  // `graph`: the model at any size (its constants and node order: every
  // profile's graph must have the same nodes, in the same order).
  explicit ProfiledStageCost(const Graph& graph);
  void add(int microBatch, NodeProfile profile);

  // +inf seconds when the share micro-batch/devices was not profiled.
  StageRunCost stage(const std::vector<int>& nodes, DeviceKind kind, int devices,
                     int microBatch) const override;

 private:
  std::vector<std::vector<ValueId>> constantsOf_;  // per node: the constants it reads
  std::vector<double> constantBytes_;              // per value
  std::map<int, NodeProfile> profiles_;
};

}  // namespace collage
