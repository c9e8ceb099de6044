// One thread-count setting for every backend (default: the number of cores).
// Backends read threadCount() when they compile and run; setThreadCount() is
// called once at start-up, before any kernel runs.
#pragma once

#include <string>

namespace collage {

int threadCount();
void setThreadCount(int threads);  // <= 0 means "number of cores"
// The calling thread's own count, which threadCount() answers on this thread
// before the process's (<= 0: none, the process's applies). A pipeline stage
// runs its Session on its own thread pinned to its core group
// (core/pipeline/pipeline_runtime.h): its kernels compile and run with the
// group's cores while another stage's use another count.
void setThisThreadCount(int threads);
int hardwareCores();

// A warning when other work keeps the cores busy (the 1-minute load average
// above the core count), empty otherwise. Kernels measured then can be slow
// by a whole scheduler time slice per parallel region (seen: a 6 us oneDNN
// pooling measured at 8 ms while a build ran), so the optimizer says so.
std::string busyMachineWarning();

}  // namespace collage
