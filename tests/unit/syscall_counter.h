// Counts the read system calls this process has made (/proc/self/io's
// syscr): a deterministic way for a test to assert that a hot path does no
// file I/O, where a timing would be noise.
#pragma once

#include <cstdio>
#include <cstring>

namespace collage {

inline long readSyscallsSoFar() {
  long count = -1;
  if (std::FILE* f = std::fopen("/proc/self/io", "r")) {
    char line[128];
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, "syscr:", 6) == 0) count = std::atol(line + 6);
    std::fclose(f);
  }
  return count;
}

// Read calls made since construction, less the ones reading the counter
// itself takes (measured once, on an empty interval).
class ReadSyscalls {
 public:
  ReadSyscalls() {
    const long a = readSyscallsSoFar();
    const long b = readSyscallsSoFar();
    own_ = b - a;
    start_ = readSyscallsSoFar();
  }
  long since() const { return readSyscallsSoFar() - start_ - own_; }

 private:
  long start_ = 0;
  long own_ = 0;
};

}  // namespace collage
