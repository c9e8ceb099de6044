// One thread-count setting for every backend (default: the number of cores).
// Backends read threadCount() when they compile and run; setThreadCount() is
// called once at start-up, before any kernel runs.
#pragma once

namespace collage {

int threadCount();
void setThreadCount(int threads);  // <= 0 means "number of cores"
int hardwareCores();

}  // namespace collage
