// Helpers several unit-test files share.
#pragma once

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <initializer_list>
#include <string>
#include <thread>

#include "core/ir/error.h"
#include "core/ir/threading.h"
#include "core/measure/measurement.h"

namespace collage::test_support {

// Asserts that f() throws a collage::Error whose message contains every part.
template <class F>
void expectError(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no Error thrown";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
}

// Restores the global thread count when a test ends.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(threadCount()) {}
  ~ThreadCountGuard() { setThreadCount(saved_); }

 private:
  int saved_;
};

// Another process taking this thread's core, for tests of what notices it:
// while it lives, the calling thread runs on one core only (its first
// allowed one) and a busy thread spins there too, so the scheduler switches
// between them; the thread's affinity is restored at the end.
class BusyThreadOnThisCore {
 public:
  BusyThreadOnThisCore() {
    ok_ = sched_getaffinity(0, sizeof all_, &all_) == 0;
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &all_)) {
        CPU_SET(c, &one);
        break;
      }
    ok_ = ok_ && sched_setaffinity(0, sizeof one, &one) == 0;
    busy_ = std::thread([this, one] {
      sched_setaffinity(0, sizeof one, &one);
      while (!stop_.load(std::memory_order_relaxed)) {
      }
    });
  }
  ~BusyThreadOnThisCore() {
    stop_ = true;
    busy_.join();
    sched_setaffinity(0, sizeof all_, &all_);
  }
  // Whether this thread was pinned (else the test cannot rely on switches).
  bool ok() const { return ok_; }

 private:
  cpu_set_t all_{};
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::thread busy_;
};

// A successful measurement of `ns` nanoseconds (median), as the measurer
// reports one, for tests of what consumes measurements.
inline Measurement okMeasurement(double ns) {
  Measurement m;
  m.status = MeasurementStatus::Ok;
  m.medianNs = ns;
  m.samples = 10;
  return m;
}

}  // namespace collage::test_support
