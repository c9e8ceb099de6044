// Timing is exclusive per machine. A kernel timed while another process (a
// second `collage optimize`, the app, a script on the API) runs kernels
// shares the cores, caches and memory bandwidth with it, and measures both:
// two optimisations started together on one model chose plans of 75 and 83
// groups. So whatever times kernels holds this lock around each timed batch:
// the measurement worker around each request, the in-process end-to-end
// check and plan runs. One lock file (flock(2)): the kernel releases it when
// its holder exits or is killed, so a crashed worker never leaves it taken.
// A process that must wait is told who holds it.
//
// Where the file lives. Not in /tmp itself: a file there that another user
// created cannot be opened with O_CREAT under fs.protected_regular (EACCES,
// Debian's default), and anyone may plant a symlink or a file of their own
// there. So by default it is this user's: in $XDG_RUNTIME_DIR, or in a
// folder of ours, $TMPDIR/collage-<uid>/ (mode 0700). All of one user's runs
// (the CLI, the app, the API) take turns. Users who share a machine and
// want their runs to take turns too point COLLAGE_TIMING_LOCK at one file in
// a folder of their group; it is created group-readable and -writable (0660).
// The file is always opened with O_NOFOLLOW: a symlink there is refused.
//
//   MachineTimingLock turn("measuring resnet50.onnx",
//                          [](const std::string& holder) { report("waiting for " + holder); });
//   ... time kernels ...
//   // released at the end of the scope
#pragma once

#include <functional>
#include <string>

namespace collage {

// How a waiting run says so, followed by the holder: "waiting for the
// machine's timing lock, held by pid 4321, measuring resnet50.onnx, since ...".
inline constexpr const char* kWaitingForTimingLock = "waiting for the machine's timing lock, held by ";

class MachineTimingLock {
 public:
  // The lock file: $COLLAGE_TIMING_LOCK if set (tests, or a file a group
  // shares), else collage-timing.lock in runtimeDirectory(). Error when
  // there is no usable folder (naming it and why).
  static std::string path();
  // This user's folder for the lock: $XDG_RUNTIME_DIR when it is a
  // directory (not a symlink) owned by us and writable, else
  // $TMPDIR/collage-<uid> (TMPDIR default /tmp), created with mode 0700 and
  // checked to be a directory, not a symlink, owned by us and closed to
  // others. Error naming it when it is none of these.
  static std::string runtimeDirectory();

  // Waits until this process holds the lock. When another holds it, calls
  // `waiting` first, once, with what the holder wrote of itself ("pid 4321,
  // measuring resnet50.onnx, since 20:31:05"), then tries again every 20 ms
  // until it has it or `stop` says to give up (then held() is false). `what`
  // is this holder's own description. Error if the lock file cannot be opened
  // (a measurement failing so is the machine's failure, not the kernel's:
  // FailureCause::TimingLock).
  explicit MachineTimingLock(const std::string& what,
                             const std::function<void(const std::string& holder)>& waiting = {},
                             const std::function<bool()>& stop = {});
  ~MachineTimingLock();
  MachineTimingLock(const MachineTimingLock&) = delete;
  MachineTimingLock& operator=(const MachineTimingLock&) = delete;

  // Whether this process had to wait for another holder.
  bool waited() const { return waited_; }
  // Whether it holds the lock (false only when `stop` gave up).
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  bool waited_ = false;
};

}  // namespace collage
