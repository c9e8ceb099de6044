// Optimising from a program: what `collage optimize` does (enumerate the
// candidates, take their costs from the measurement database or measure them
// in an isolated worker process, measure switching costs, find the cheapest
// placement, check it end to end against the single-backend baselines), with
// progress reported to a callback instead of a terminal.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "collage/export.h"
#include "collage/model.h"
#include "collage/plan.h"

namespace collage::api {

struct OptimizeProgress {
  std::string stage;  // "measure" (kernels), "search" (op-level DP steps)
  int done = 0;       // measure: candidates with a cost; search: steps
  int total = 0;      // measure: candidates needing one; search: 0 (unknown)
  int measured = 0;   // measure: measured now (the rest came from the database)
  double elapsedSeconds = 0;
  std::string current;  // what is being measured: "onednn Conv+Relu"
};

struct OptimizeOptions {
  std::vector<std::string> backends;  // empty = every built-in backend
  std::string dbPath;                 // measurement database; "" = the default one
  bool useDb = true;                  // false: measure everything, store nothing
  double timeoutSeconds = 60;         // a kernel measurement taking longer is killed
  // Called on the optimizing thread; return false to stop (optimize() then
  // throws Error "cancelled").
  std::function<bool(const OptimizeProgress&)> progress;
};

// Measurements run in worker processes of the `collage` executable, found
// next to this library (an installed tree) or in the build tree;
// $COLLAGE_CLI overrides. Error when none is found.
COLLAGE_API Plan optimize(const Model& model, const OptimizeOptions& options = {});

}  // namespace collage::api
