// How many threads of this process run kernels at this moment, and the most
// that ever did at once (the high-water mark).
//
// A timing is only true when one thread runs kernels at a time: two threads
// running oneDNN kernels share the cores, the caches and the memory
// bandwidth, so each measures both. The app runs its background work one
// piece at a time for that reason (views/background_work.h); this counter is
// how a test checks it. A thread counts while it runs a Session
// (Session::run) and while it waits on a measurement worker process that
// runs kernels for it (IsolatedMeasurer), so a kernel timed in the worker
// beside a plan running here is seen too. A scope nested in another on the
// same thread counts once.
//
//   {
//     KernelActivity::Scope running;  // this thread runs kernels until the scope ends
//     kernel->run(inputs, outputs);
//   }
//   EXPECT_EQ(KernelActivity::highWaterMark(), 1);
#pragma once

namespace collage {

class KernelActivity {
 public:
  class Scope {
   public:
    Scope();
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };

  // Threads running kernels now.
  static int running();
  // The most threads that ran kernels at once since the start (or the last reset).
  static int highWaterMark();
  // Sets the high-water mark to running() (tests, before the part they check).
  static void resetHighWaterMark();
};

}  // namespace collage
