#include "core/measure/machine_timing_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/ir/error.h"

namespace collage {

std::string MachineTimingLock::path() {
  const char* configured = std::getenv("COLLAGE_TIMING_LOCK");
  return configured && *configured ? configured : "/tmp/collage-timing.lock";
}

MachineTimingLock::MachineTimingLock(const std::string& what,
                                     const std::function<void(const std::string&)>& waiting,
                                     const std::function<bool()>& stop) {
  const std::string file = path();
  const mode_t previous = umask(0);  // every user's runs share the machine
  fd_ = open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  umask(previous);
  if (fd_ < 0)
    throw Error("cannot open the machine's timing lock " + file + ": " + std::strerror(errno));
  // Non-blocking tries, so that a caller can give up (an app starting over).
  while (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const std::string why = std::strerror(errno);
      close(fd_);
      fd_ = -1;
      throw Error("cannot take the machine's timing lock " + file + ": " + why);
    }
    if (!waited_ && waiting) {
      // The holder writes who it is just after it takes the lock: read again
      // a moment later if it has not yet.
      char holder[512] = {};
      ssize_t got = pread(fd_, holder, sizeof holder - 1, 0);
      if (got <= 0) {
        usleep(5000);
        got = pread(fd_, holder, sizeof holder - 1, 0);
      }
      waiting(got > 0 ? std::string(holder, static_cast<size_t>(got)) : "another process");
    }
    waited_ = true;
    if (stop && stop()) {
      close(fd_);
      fd_ = -1;
      return;
    }
    usleep(20000);
  }
  // Who holds it, for the next one that waits.
  char since[16];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(since, sizeof since, "%H:%M:%S", &local);
  const std::string self = "pid " + std::to_string(getpid()) + ", " + what + ", since " + since;
  if (ftruncate(fd_, 0) == 0 && pwrite(fd_, self.data(), self.size(), 0) < 0) {
    // Only the description is lost: the lock is held all the same.
  }
}

MachineTimingLock::~MachineTimingLock() {
  if (fd_ >= 0) close(fd_);  // closing the only descriptor releases the flock
}

}  // namespace collage
