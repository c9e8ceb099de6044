// Summary figures of an imported model, for `collage inspect` and the GUI.
#pragma once

#include <map>
#include <string>

#include "core/ir/graph.h"

namespace collage {

struct ModelStats {
  int32_t numNodes = 0;
  std::map<std::string, int32_t> opCounts;  // op type -> count
  double totalFlops = 0;                    // multiply-add = 2
  int64_t parameterBytes = 0;               // constants' bytes
  int64_t parameterCount = 0;               // constants' elements
};

ModelStats computeModelStats(const Graph& graph);
// "4.09 GFLOP", "97.5 MiB": human-readable units.
std::string formatFlops(double flops);
std::string formatBytes(double bytes);

// What `collage inspect` prints (and the public API's Model::summary()):
// the model's path and graph name, opsets, inputs and outputs with their
// types, node count, FLOPs, parameters and one line per op type.
std::string describeModel(const Graph& graph, const std::string& modelPath);

}  // namespace collage
