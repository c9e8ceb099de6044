#include "core/threading.h"

#include <atomic>
#include <thread>

namespace collage {
namespace {
std::atomic<int> gThreads{0};
}

int hardwareCores() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

int threadCount() {
  int t = gThreads.load();
  return t > 0 ? t : hardwareCores();
}

void setThreadCount(int threads) { gThreads.store(threads > 0 ? threads : 0); }

}  // namespace collage
