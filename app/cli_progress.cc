#include "app/cli_progress.h"

#include <unistd.h>

#include <cstdio>

namespace collage::cli {

void TerminalProgress::onMeasureProgress(const MeasureProgressEvent& e) {
  // On a terminal redraw at most 10 times a second; in a log (not a
  // terminal) one line every 10 seconds. Always at the end.
  const double interval = isatty(STDERR_FILENO) ? 0.1 : 10.0;
  if (e.done < e.total && e.elapsedSeconds - lastDraw_ < interval && lastDraw_ >= 0) return;
  lastDraw_ = e.elapsedSeconds;
  const int width = 30;
  int filled = e.total ? width * e.done / e.total : width;
  char bar[width + 1];
  for (int i = 0; i < width; ++i) bar[i] = i < filled ? '#' : '.';
  bar[width] = 0;
  const bool tty = isatty(STDERR_FILENO);
  char eta[32] = "--";
  if (e.etaSeconds >= 0) std::snprintf(eta, sizeof eta, "%.0fs", e.etaSeconds);
  std::fprintf(stderr, "%smeasuring [%s] %d/%d (cached %d, failed %d) %.0fs ETA %s %-40.40s%s",
               tty ? "\r" : "", bar, e.done, e.total, e.cached, e.failed, e.elapsedSeconds, eta,
               e.current.c_str(), tty ? "" : "\n");
  drawn_ = true;
}

void TerminalProgress::onSearchStep(const SearchStepEvent& e) {
  if (e.search != "graph-level") return;
  finish();
  const int left = static_cast<int>(e.timeLeftSeconds + 0.5);
  std::printf("generation %3d: best %8.3f ms (%.3fx the start), mean %8.3f ms, %4d plans run, %4d cache hits, "
              "%d:%02d left%s\n",
              e.step, e.bestCostNs / 1e6, e.bestRelative, e.meanCostNs / 1e6, e.evaluations, e.cacheHits, left / 60,
              left % 60, e.bestChanged ? "  (new best)" : "");
  std::fflush(stdout);
}

void TerminalProgress::onLog(const std::string& line) {
  if (drawn_ && isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
  drawn_ = false;
  std::fprintf(logToStdout_ ? stdout : stderr, "%s\n", line.c_str());
  if (logToStdout_) std::fflush(stdout);
}

void TerminalProgress::finish() {
  if (drawn_ && isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace collage::cli
