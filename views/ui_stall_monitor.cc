#include "views/ui_stall_monitor.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <ctime>

#include <sys/resource.h>

namespace collage {
namespace {

// CPU time of the calling thread (the UI thread: the timer ticks there).
qint64 threadCpuNs() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<qint64>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// (involuntary context switches, major page faults) of the calling thread.
std::pair<long, long> threadUsage() {
  rusage u{};
  if (getrusage(RUSAGE_THREAD, &u) != 0) return {0, 0};
  return {u.ru_nivcsw, u.ru_majflt};
}

}  // namespace

UiStallMonitor::UiStallMonitor(int intervalMs, QObject* parent) : QObject(parent) {
  // PreciseTimer: a coarse timer may fire up to 5 % late by design, which
  // would read as a stall.
  timer_.setTimerType(Qt::PreciseTimer);
  timer_.setInterval(std::max(1, intervalMs));
  connect(&timer_, &QTimer::timeout, this, &UiStallMonitor::tick);
}

void UiStallMonitor::start() {
  reset();
  timer_.start();
}

void UiStallMonitor::stop() { timer_.stop(); }

void UiStallMonitor::reset() {
  clock_.start();
  lastNs_ = 0;
  lastCpuNs_ = threadCpuNs();
  maxStallCpuMs_ = 0;
  maxStallAtMs_ = 0;
  maxBusyMs_ = 0;
  std::tie(lastPreemptions_, lastMajorFaults_) = threadUsage();
  maxStallPreemptions_ = maxStallMajorFaults_ = 0;
  ticks_ = 0;
  maxStallMs_ = 0;
  stallsOver_ = 0;
}

void UiStallMonitor::tick() {
  const qint64 now = clock_.nsecsElapsed();
  const double gapMs = (now - lastNs_) / 1e6;
  lastNs_ = now;
  const qint64 cpu = threadCpuNs();
  const double cpuMs = (cpu - lastCpuNs_) / 1e6;
  lastCpuNs_ = cpu;
  const auto [preemptions, majorFaults] = threadUsage();
  const long newPreemptions = preemptions - lastPreemptions_;
  const long newMajorFaults = majorFaults - lastMajorFaults_;
  lastPreemptions_ = preemptions;
  lastMajorFaults_ = majorFaults;
  ++ticks_;
  maxBusyMs_ = std::max(maxBusyMs_, cpuMs);
  const double stall = std::max(0.0, gapMs - timer_.interval());
  if (stall > maxStallMs_) {
    maxStallMs_ = stall;
    maxStallCpuMs_ = cpuMs;
    maxStallAtMs_ = now / 1e6;
    maxStallPreemptions_ = newPreemptions;
    maxStallMajorFaults_ = newMajorFaults;
  }
  if (stall > thresholdMs_) {
    ++stallsOver_;
    emit stalled(stall);
  }
}

}  // namespace collage
