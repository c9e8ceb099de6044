// One thread-count setting for every backend (default: the number of cores).
// Backends read threadCount() when they compile and run; setThreadCount() is
// called once at start-up, before any kernel runs.
#pragma once

#include <string>

namespace collage {

int threadCount();
void setThreadCount(int threads);  // <= 0 means "number of cores"
int hardwareCores();

// A warning when other work keeps the cores busy (the 1-minute load average
// above the core count), empty otherwise. Kernels measured then can be slow
// by a whole scheduler time slice per parallel region (seen: a 6 us oneDNN
// pooling measured at 8 ms while a build ran), so the optimizer says so.
std::string busyMachineWarning();

}  // namespace collage
