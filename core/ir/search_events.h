// How the optimizers report progress, and how they are cancelled. The GUI
// turns these events into queued Qt signals; the CLI into a progress bar.
// Events carry values only (no pointers into the search), so an observer may
// copy them to another thread.
#pragma once

#include <atomic>
#include <string>

namespace collage {

struct MeasureProgressEvent {
  int total = 0;      // candidates that need a cost
  int done = 0;       // have one (cached + measured + invalid)
  int cached = 0;     // came from the database
  int measured = 0;   // measured now
  int failed = 0;     // invalid, failed or timed out
  double elapsedSeconds = 0;
  double etaSeconds = -1;  // -1 when unknown
  std::string current;     // "onednn Conv+Relu" being measured
};

// One step of a search: a DP expansion batch, or a generation of the
// evolutionary search. Generic so that any search can drive the same chart.
struct SearchStepEvent {
  std::string search;   // "op-level", "graph-level", ...
  int step = 0;         // generation / expansion batch
  int evaluations = 0;  // states or genomes evaluated so far
  double bestCostNs = 0;
  double meanCostNs = 0;  // of the current frontier / population
  double elapsedSeconds = 0;
  int cacheHits = 0;             // evaluations answered from a cache or the database
  double timeLeftSeconds = -1;   // of the search's budget; -1 when it has none
  bool bestChanged = false;      // a new best was found in this step
  double bestRelative = 0;       // the best over where the search started (0: not known)
};

class SearchObserver {
 public:
  virtual ~SearchObserver() = default;
  virtual void onMeasureProgress(const MeasureProgressEvent&) {}
  virtual void onSearchStep(const SearchStepEvent&) {}
  virtual void onLog(const std::string&) {}
};

// Set from any thread; the search checks it between steps and stops with its
// best result so far.
class CancellationToken {
 public:
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  void reset() { cancelled_.store(false); }

 private:
  std::atomic<bool> cancelled_{false};
};

}  // namespace collage
