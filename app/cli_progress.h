// A SearchObserver for the terminal: a one-line progress bar on stderr while
// measuring (done/total, cached, ETA), a line per generation of the
// graph-level search, and log lines.
#pragma once

#include "core/ir/search_events.h"

namespace collage::cli {

class TerminalProgress : public SearchObserver {
 public:
  // Log lines go to stderr, or to stdout where they are the command's report
  // (collage optimize prints its job's).
  explicit TerminalProgress(bool logToStdout = false) : logToStdout_(logToStdout) {}
  void onMeasureProgress(const MeasureProgressEvent& e) override;
  void onLog(const std::string& line) override;
  // The graph-level search: one line per generation on stdout (best, mean,
  // plans run, cache hits, time left); other searches draw nothing.
  void onSearchStep(const SearchStepEvent& e) override;
  void finish();

 private:
  bool logToStdout_ = false;
  bool drawn_ = false;
  double lastDraw_ = -1;
};

}  // namespace collage::cli
