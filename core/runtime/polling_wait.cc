// pollUntil and the MPI runtimes' PollingWait (polling_wait.h).
#include "core/runtime/polling_wait.h"

#include <sys/prctl.h>

#include <algorithm>
#include <array>
#include <thread>

namespace collage {

double PollingWait::end(double seconds) const {
  if (seconds <= spinSeconds || !(firstNapSeconds > 0)) return std::max(0.0, seconds);
  double t = spinSeconds, nap = firstNapSeconds;
  while (t < seconds) {
    t += nap;
    nap = std::min(nap * 2, std::max(maxNapSeconds, firstNapSeconds));
  }
  return t;
}

PollingWait mpiWaitPolling() {
  thread_local const PollingWait polling = [] {
    // Slack 1 ns: a normal thread's naps end within the wake-up, not 50 us
    // later (a real-time thread has none; the call is then harmless).
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    std::array<double, 5> costs{};
    for (double& c : costs) {
      const auto start = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(kMpiFirstNapSeconds));
      c = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    std::nth_element(costs.begin(), costs.begin() + 2, costs.end());
    return PollingWait{costs[2], kMpiFirstNapSeconds, kMpiMaxNapSeconds};
  }();
  return polling;
}

bool pollUntil(const std::function<bool()>& test, std::chrono::steady_clock::time_point deadline,
               const PollingWait& how, const Nap& nap) {
  using Clock = std::chrono::steady_clock;
  const auto spinEnd =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::max(0.0, how.spinSeconds)));
  for (;;) {
    if (test()) return true;
    const auto now = Clock::now();
    if (now > deadline) return false;
    if (now < spinEnd) continue;
    break;
  }
  const auto maxNap =
      std::chrono::duration<double>(std::max(how.maxNapSeconds, how.firstNapSeconds));
  std::chrono::duration<double> next(how.firstNapSeconds);
  for (;;) {
    if (nap)
      nap(next);
    else
      std::this_thread::sleep_for(next);
    next = std::min(next * 2, maxNap);
    if (test()) return true;
    if (Clock::now() > deadline) return false;
  }
}

}  // namespace collage
