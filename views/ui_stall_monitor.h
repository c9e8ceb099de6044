// Measures how long the UI thread stops answering: a QTimer on the thread
// that creates the monitor ticks every `intervalMs`; a tick that comes late
// means the event loop was busy for (gap - interval). The benchmark uses it
// during an optimisation (target: no stall over 100 ms); the window may show
// it in a debug status line.
//
//   UiStallMonitor monitor;  monitor.start();  ...  monitor.maxStallMs();
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QTimer>

namespace collage {

class UiStallMonitor : public QObject {
  Q_OBJECT
 public:
  explicit UiStallMonitor(int intervalMs = 10, QObject* parent = nullptr);

  void start();
  void stop();
  bool isRunning() const { return timer_.isActive(); }
  // Forgets the stalls so far (keeps running if it was).
  void reset();

  // The longest gap between two ticks minus the interval, in ms (0 if none).
  double maxStallMs() const { return maxStallMs_; }
  // Of the longest stall, the CPU time the UI thread itself spent in it: near
  // the stall, the thread was busy (work to move off it); near 0, it was
  // runnable or asleep but not scheduled (a loaded machine), or blocked.
  double maxStallCpuMs() const { return maxStallCpuMs_; }
  // Of the longest stall, what the kernel says about the UI thread in it
  // (getrusage per thread): involuntary context switches (preempted: the
  // machine is loaded) and major page faults (it waited for the disk).
  long maxStallPreemptions() const { return maxStallPreemptions_; }
  long maxStallMajorFaults() const { return maxStallMajorFaults_; }
  // When the longest stall ended, in ms since start()/reset().
  double maxStallAtMs() const { return maxStallAtMs_; }
  // The most CPU time the UI thread spent between two ticks, in ms.
  double maxBusyMs() const { return maxBusyMs_; }
  // Ticks seen since start()/reset(): shows the event loop kept running.
  qint64 ticks() const { return ticks_; }
  // Gaps longer than `thresholdMs` beyond the interval (default 100 ms).
  int stallsOver() const { return stallsOver_; }
  void setThresholdMs(double ms) { thresholdMs_ = ms; }
  int intervalMs() const { return timer_.interval(); }

 signals:
  // Emitted (on the UI thread) after a tick that ended a stall above the threshold.
  void stalled(double ms);

 private:
  void tick();

  QTimer timer_;
  QElapsedTimer clock_;
  qint64 lastNs_ = 0;
  qint64 lastCpuNs_ = 0;
  double maxStallCpuMs_ = 0;
  double maxStallAtMs_ = 0;
  long lastPreemptions_ = 0, lastMajorFaults_ = 0;
  long maxStallPreemptions_ = 0, maxStallMajorFaults_ = 0;
  double maxBusyMs_ = 0;
  qint64 ticks_ = 0;
  double maxStallMs_ = 0;
  double thresholdMs_ = 100;
  int stallsOver_ = 0;
};

}  // namespace collage
