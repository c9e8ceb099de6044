// pollUntil: spins before it naps, naps growing, gives up at the deadline;
// PollingWait::end, the simulators' model of it. Sleeps are counted through
// an injected nap; no pass condition is a time.
#include "core/runtime/polling_wait.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

// A message that comes within the spin is seen without a single nap (the
// wait used to nap after every failed test: 5 us asked, ~60 us slept).
TEST(PollingWait, SeesWhatComesWithinTheSpinWithoutNapping) {
  int tests = 0, naps = 0;
  const bool done = pollUntil([&] { return ++tests == 50; }, Clock::now() + std::chrono::hours(1),
                              PollingWait{3600, 20e-6, 1e-3},
                              [&](std::chrono::duration<double>) { ++naps; });
  EXPECT_TRUE(done);
  EXPECT_EQ(tests, 50);
  EXPECT_EQ(naps, 0);
}

// Past the spin: naps of the first length, doubling, capped; at the deadline
// it returns false after one last test (the caller names the peer).
TEST(PollingWait, NapsGrowingAfterTheSpinAndGivesUpAtTheDeadline) {
  std::vector<double> naps;
  int tests = 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(20);
  const bool done = pollUntil([&] { ++tests; return false; }, deadline, PollingWait{0, 1e-3, 4e-3},
                              [&](std::chrono::duration<double> d) {
                                naps.push_back(d.count());
                                if (Clock::now() <= deadline)
                                  std::this_thread::sleep_until(deadline);
                              });
  EXPECT_FALSE(done);
  EXPECT_GE(Clock::now(), deadline);
  ASSERT_EQ(naps.size(), 1u);  // one nap reached the deadline, then the last test
  EXPECT_DOUBLE_EQ(naps[0], 1e-3);
  EXPECT_EQ(tests, 2);
  // Without a deadline in reach, the naps double to the cap.
  naps.clear();
  tests = 0;
  EXPECT_TRUE(pollUntil([&] { return ++tests == 6; }, Clock::now() + std::chrono::hours(1),
                        PollingWait{0, 1e-3, 4e-3},
                        [&](std::chrono::duration<double> d) { naps.push_back(d.count()); }));
  EXPECT_EQ(naps, (std::vector<double>{1e-3, 2e-3, 4e-3, 4e-3, 4e-3}));
}

TEST(PollingWait, GivesUpAtADeadlineAlreadyPassedAfterOneTest) {
  int tests = 0, naps = 0;
  EXPECT_FALSE(pollUntil([&] { ++tests; return false; }, Clock::now() - std::chrono::seconds(1),
                         PollingWait{3600, 20e-6, 1e-3},
                         [&](std::chrono::duration<double>) { ++naps; }));
  EXPECT_EQ(tests, 1);
  EXPECT_EQ(naps, 0);
}

// The model: a wait within the spin ends when its message comes; past it,
// at the first poll after (spin 50 us, naps 20, 40, 80 ... 1000 us: polls
// at 50, 70, 110, 190, 350, 670, 1310, 2310 us ...).
TEST(PollingWait, EndsWithinTheSpinAtOnceAndLaterAtTheNextPoll) {
  const PollingWait w{50e-6, 20e-6, 1e-3};
  EXPECT_EQ(w.end(0), 0);
  EXPECT_EQ(w.end(30e-6), 30e-6);
  EXPECT_EQ(w.end(50e-6), 50e-6);
  EXPECT_NEAR(w.end(51e-6), 70e-6, 1e-12);
  EXPECT_NEAR(w.end(111e-6), 190e-6, 1e-12);
  EXPECT_NEAR(w.end(700e-6), 1310e-6, 1e-12);
  EXPECT_NEAR(w.end(2e-3), 2310e-6, 1e-12);
  EXPECT_EQ(PollingWait{}.end(61e-6), 61e-6);
}

// The MPI runtimes' wait spins for what a first nap costs on this thread:
// at least the nap asked for.
TEST(PollingWait, MpiSpinsForWhatANapCosts) {
  const PollingWait w = mpiWaitPolling();
  EXPECT_EQ(w.firstNapSeconds, kMpiFirstNapSeconds);
  EXPECT_EQ(w.maxNapSeconds, kMpiMaxNapSeconds);
  EXPECT_GE(w.spinSeconds, kMpiFirstNapSeconds);
}

}  // namespace
}  // namespace collage
