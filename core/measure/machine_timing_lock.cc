#include "core/measure/machine_timing_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/ir/error.h"

namespace collage {

namespace {

std::string uidText() { return std::to_string(static_cast<unsigned long>(geteuid())); }

// Why `dir` is not a folder only this user may write in, or "".
std::string unusableDirectory(const std::string& dir, bool requirePrivate) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return std::strerror(errno);
  if (S_ISLNK(st.st_mode)) return "it is a symbolic link";
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != geteuid())
    return "it belongs to uid " + std::to_string(static_cast<unsigned long>(st.st_uid)) +
           ", not to this user (uid " + uidText() + ")";
  if (requirePrivate && (st.st_mode & (S_IWGRP | S_IWOTH)))
    return "others may write in it (mode " + [&] {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return std::string(mode);
    }() + ")";
  if (access(dir.c_str(), W_OK | X_OK) != 0) return std::strerror(errno);
  return "";
}

}  // namespace

std::string MachineTimingLock::runtimeDirectory() {
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg && *xdg == '/')
    if (unusableDirectory(xdg, /*requirePrivate=*/true).empty()) return xdg;
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp == '/' ? tmp : "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  const std::string dir = base + "/collage-" + uidText();
  // mkdir takes no part of a path that exists already (nor follows a link
  // there); whatever is there is checked below.
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error("cannot create the folder for the machine's timing lock " + dir + ": " +
                std::strerror(errno));
  if (const std::string why = unusableDirectory(dir, /*requirePrivate=*/true); !why.empty())
    throw Error("cannot use " + dir + " for the machine's timing lock: " + why +
                " (remove it, or set COLLAGE_TIMING_LOCK to a file of your own)");
  return dir;
}

std::string MachineTimingLock::path() {
  const char* configured = std::getenv("COLLAGE_TIMING_LOCK");
  if (configured && *configured) return configured;
  return runtimeDirectory() + "/collage-timing.lock";
}

MachineTimingLock::MachineTimingLock(const std::string& what,
                                     const std::function<void(const std::string&)>& waiting,
                                     const std::function<bool()>& stop) {
  const bool configured = std::getenv("COLLAGE_TIMING_LOCK") && *std::getenv("COLLAGE_TIMING_LOCK");
  const std::string file = path();
  // A file named by COLLAGE_TIMING_LOCK is one a group shares: readable and
  // writable by the group. The mode is set explicitly (fchmod) on the file
  // this process creates, not left to the umask; an existing file is opened
  // as it is, without O_CREAT (which fs.protected_regular refuses for another
  // user's file in a sticky folder).
  const mode_t mode = configured ? 0660 : 0600;
  // O_NONBLOCK: a FIFO planted at the path must not block the open (it is
  // refused below as not a regular file); a regular file ignores it.
  const int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  fd_ = open(file.c_str(), flags);
  if (fd_ < 0 && errno == ENOENT) {
    fd_ = open(file.c_str(), flags | O_CREAT | O_EXCL, mode);
    if (fd_ >= 0) {
      if (fchmod(fd_, mode) != 0) {
        // Only sharing with the group is lost: the lock works all the same.
      }
    } else if (errno == EEXIST) {
      fd_ = open(file.c_str(), flags);  // another process created it meanwhile
    }
  }
  if (fd_ < 0) {
    const int err = errno;
    throw Error("cannot open the machine's timing lock " + file + ": " +
                (err == ELOOP ? std::string("it is a symbolic link, which is not followed")
                              : std::string(std::strerror(err))));
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd_);
    fd_ = -1;
    throw Error("cannot use the machine's timing lock " + file + ": it is not a regular file");
  }
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
