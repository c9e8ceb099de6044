// Helpers several unit-test files share.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

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
