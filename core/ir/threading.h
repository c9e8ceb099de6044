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

// How long a thread of the OpenMP pool (libgomp's, which oneDNN, OpenBLAS
// and the native backend all run on: one pool for every backend) spins at a
// barrier or between parallel regions before it sleeps. libgomp's own
// default, 300,000 spins (~9 ms here), holds a core through a scheduler time
// slice: on a shared machine a thread waiting for a preempted teammate
// burns the slice the teammate needs. kOpenMpSpinCount keeps the pool hot
// across the few microseconds between a plan's kernels and lets the core go
// soon after. A user's GOMP_SPINCOUNT or OMP_WAIT_POLICY wins.
inline constexpr const char* kOpenMpSpinCount = "10000";

// libgomp reads its environment once, when it loads, before main. So an
// executable calls this first thing in main: unless the environment already
// says how to wait, it sets kOpenMpSpinCount and starts the program again
// (once; its child processes, the measurement workers, inherit the setting).
// A library cannot do this for its host process.
void restartWithOpenMpWaitDefaults(char** argv);

}  // namespace collage
