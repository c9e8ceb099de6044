// A wait that polls: the one the MPI runtimes use for their requests
// (core/pipeline/mpi_pipeline_runtime.cc, core/decode/mpi_cache_exchange.cc),
// and its model for the simulators (PollingWait::end).
//
// Why it spins first: a sleep costs more than asked for. On Linux a normal
// thread oversleeps by its timer slack (50 us by default) plus the wake-up
// (~17 us on the machines measured, 2026-11-29), so a wait that naps 5 us
// between tests saw a message that came 2 us after the link's latency some
// 60 us late, and cache parallelism was slower than one device. Spinning
// (testing back to back) sees it at once but holds a core; so the wait spins
// for as long as one nap would cost, then naps with growing naps: the
// ski-rental rule, which never spends more than twice what the best choice
// made knowing the arrival would have spent.
#pragma once

#include <chrono>
#include <functional>

namespace collage {

struct PollingWait {
  double spinSeconds = 0;      // tests back to back this long first
  double firstNapSeconds = 0;  // then naps this long, doubling; 0: woken at once
  double maxNapSeconds = 0;    // up to this
  // When a wait of `seconds` ends: at once within the spin, else at the
  // first poll at or after it (naps taken as exact: mpiWaitPolling() sets
  // the timer slack to 1 ns, so a nap oversleeps by the wake-up only).
  double end(double seconds) const;
};

// The naps of the MPI runtimes' waits: 20 us doubling to 1 ms, so a long wait
// costs a core next to nothing and a wait of t past the spin is seen within
// about t later.
constexpr double kMpiFirstNapSeconds = 20e-6;
constexpr double kMpiMaxNapSeconds = 1e-3;

// The MPI runtimes' wait for the calling thread: on its first call on a
// thread, sets the thread's timer slack to 1 ns (so naps are accurate:
// a 20 us nap measured 37 us, not 87 us) and measures what one first nap
// costs there (the median of 5), the spin bound; later calls return the
// same.
PollingWait mpiWaitPolling();

using Nap = std::function<void(std::chrono::duration<double>)>;

// Calls `test` until it returns true (then true) or the deadline passes
// (then false, after one last test): back to back for how.spinSeconds, then
// with naps of how.firstNapSeconds doubling up to how.maxNapSeconds, each
// taken by `nap` (default: std::this_thread::sleep_for). The caller says
// what it waited for in its own error.
bool pollUntil(const std::function<bool()>& test, std::chrono::steady_clock::time_point deadline,
               const PollingWait& how, const Nap& nap = {});

}  // namespace collage
