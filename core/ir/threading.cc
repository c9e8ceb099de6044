#include "core/ir/threading.h"

#include <cstdio>

#include <atomic>
#include <thread>

namespace collage {
namespace {
std::atomic<int> gThreads{0};
thread_local int tThreads = 0;
}  // namespace

// Read once: glibc answers hardware_concurrency() by reading sysfs (an open,
// a read and a close), and threadCount() is asked by every kernel run. Asked
// per run, the default ("the number of cores") cost 12 file reads per run of
// a 13-kernel plan, and ran it 1.35x slower than naming the same count.
int hardwareCores() {
  static const int cores = [] {
    unsigned n = std::thread::hardware_concurrency();
    return n ? static_cast<int>(n) : 1;
  }();
  return cores;
}

int threadCount() {
  if (tThreads > 0) return tThreads;
  int t = gThreads.load();
  return t > 0 ? t : hardwareCores();
}

void setThreadCount(int threads) { gThreads.store(threads > 0 ? threads : 0); }
void setThisThreadCount(int threads) { tThreads = threads > 0 ? threads : 0; }

std::string busyMachineWarning() {
  double load = 0;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = 0;
    std::fclose(f);
  }
  const int cores = hardwareCores();
  if (load <= cores) return {};
  char text[256];
  std::snprintf(text, sizeof text,
                "the machine is busy (load average %.1f on %d cores): kernels measured now can be slow "
                "by a scheduler time slice; measure on a quiet machine, or clear these measurements "
                "later (collage db clear)",
                load, cores);
  return text;
}

}  // namespace collage
