// Optimising from a program: what `collage optimize` does (enumerate the
// candidates, take their costs from the measurement database or measure them
// in an isolated worker process, measure switching costs, find the cheapest
// placement, check it end to end against the single-backend baselines, then
// search whole plans at the graph level), with progress reported to a
// callback instead of a terminal.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "collage/export.h"
#include "collage/model.h"
#include "collage/plan.h"

namespace collage::api {

struct OptimizeProgress {
  // "measure" (kernels), "search" (op-level DP steps), "graph-level"
  // (generations of the graph-level search)
  std::string stage;
  int done = 0;       // measure: candidates with a cost; search: steps; graph-level: generations
  int total = 0;      // measure: candidates needing one; search: 0 (unknown)
  int measured = 0;   // measure: measured now (the rest came from the database)
  double elapsedSeconds = 0;
  std::string current;  // what is being measured: "onednn Conv+Relu"
};

struct OptimizeOptions {
  std::vector<std::string> backends;  // empty = every built-in backend that computes in float32
  // Reduced precisions the plan may trade for speed where measured faster
  // ("bf16": onednn_bf16; "tf32": cublas_tf32), added to `backends` as
  // `collage optimize --allow-precision` does; empty = float32 only.
  std::vector<std::string> allowPrecisions;
  std::string dbPath;                 // measurement database (a file, or postgresql://... with the
                                      // default file as its cache); "" = the default one
  bool useDb = true;                  // false: measure everything, store nothing
  double timeoutSeconds = 60;         // a kernel measurement taking longer is killed
  // After the op-level plan, the graph-level search hands runs of groups to
  // graph libraries as regions, measured end to end, until it saturates or
  // the budget is spent; false stops at the op-level plan (`--op-level`).
  bool graphLevel = true;
  double graphLevelBudgetSeconds = 300;
  // Called on the optimizing thread; return false to stop (optimize() then
  // throws Error "cancelled").
  std::function<bool(const OptimizeProgress&)> progress;
};

// Measurements run in worker processes of the `collage` executable, found
// next to this library (an installed tree) or in the build tree;
// $COLLAGE_CLI overrides. Error when none is found.
COLLAGE_API Plan optimize(const Model& model, const OptimizeOptions& options = {});

}  // namespace collage::api
