#include "core/runtime/kernel_activity.h"

#include <atomic>

namespace collage {
namespace {

std::atomic<int> running_{0};
std::atomic<int> highWater_{0};
// Scopes open on this thread: only the outermost one counts the thread.
thread_local int depth_ = 0;

void raiseHighWater(int now) {
  int seen = highWater_.load();
  while (now > seen && !highWater_.compare_exchange_weak(seen, now)) {
  }
}

}  // namespace

KernelActivity::Scope::Scope() {
  if (depth_++ == 0) raiseHighWater(++running_);
}

KernelActivity::Scope::~Scope() {
  if (--depth_ == 0) --running_;
}

int KernelActivity::running() { return running_.load(); }
int KernelActivity::highWaterMark() { return highWater_.load(); }
void KernelActivity::resetHighWaterMark() { highWater_.store(running_.load()); }

}  // namespace collage
