// A SearchObserver for the terminal: a one-line progress bar on stderr while
// measuring (done/total, cached, ETA), and log lines.
#pragma once

#include "core/ir/search_events.h"

namespace collage::cli {

class TerminalProgress : public SearchObserver {
 public:
  void onMeasureProgress(const MeasureProgressEvent& e) override;
  void onLog(const std::string& line) override;
  void finish();

 private:
  bool drawn_ = false;
  double lastDraw_ = -1;
};

}  // namespace collage::cli
