// One measurement of one kernel: the statistics of its timed runs, or why
// there are none. What the measurer produces and the database keeps.
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/cost.h"

namespace collage {

enum class MeasurementStatus {
  Ok,        // timed: medianNs and friends are set
  Invalid,   // the backend refused to compile it (message: its reason)
  Failed,    // it threw or crashed while compiling or running
  TimedOut,  // it ran past the measurer's time limit
  // Not measured, by decision: a reference-only kernel estimated far slower
  // than a faster candidate for the same nodes (core/measure/reference_skips.h;
  // message: the estimate and the alternative). Never stored: it is a fact
  // about the other candidates, not about the kernel. It cannot be placed
  // (cost +inf), as a kernel that failed: never a zero cost.
  Skipped,
};

std::string_view measurementStatusName(MeasurementStatus s);
MeasurementStatus measurementStatusFromName(std::string_view name);

// Why a measurement failed when the reason lies with the machine rather than
// the kernel. Such a failure says nothing lasting about the kernel: it is not
// kept as the kernel's verdict (the database ignores it on lookup), never
// sent to a team's shared store, and the kernel is measured again on the
// next run. A failure reproduced on a quiet machine has no cause (None) and
// is kept and shared as the kernel's own. A crash of the kernel itself
// (SIGSEGV, SIGABRT, ...) is the kernel's; a kill from outside is not.
enum class FailureCause {
  None,         // timed, or the kernel's own failure
  TimingLock,   // the machine's timing lock could not be opened or taken
  OutOfMemory,  // an allocation failed (std::bad_alloc)
  Busy,         // it ran past the time limit while other processes held the cores
  Killed,       // the worker was killed from outside (SIGKILL: the out-of-memory killer; SIGTERM, ...)
  // A timeout stored before causes were recorded (database schema 5 and
  // older): whether the machine was busy is unknown, so it is measured again once.
  Unchecked,
};

std::string_view failureCauseName(FailureCause c);  // "" for None, else "timing_lock", ...
FailureCause failureCauseFromName(std::string_view name);  // unknown names: None
// "the machine's timing lock", "a busy machine", ...: for notes.
std::string_view failureCauseDescription(FailureCause c);

struct Measurement {
  MeasurementStatus status = MeasurementStatus::Failed;
  double medianNs = 0;
  double spread = 0;  // relative: (p75 - p25) / median
  double minNs = 0;
  int32_t samples = 0;
  // Timed runs left out because another process preempted them (not
  // stored: a fact about the minute it was measured in, not the kernel).
  int32_t preemptedRuns = 0;
  double measureSeconds = 0;  // wall time spent measuring (compile included)
  std::string message;        // refusal or failure reason
  // Set only on failures: the machine's part in it (None: the kernel's own).
  FailureCause cause = FailureCause::None;
  bool fromCache = false;     // filled by the database lookup, not stored
  // How many machines' medians this is the median of: 0 for one measured
  // here, >= 1 for one read from the shared store (core/measure/shared_store.h).
  int32_t machines = 0;
  // Filled by the database lookup, not stored with it: true when the row
  // came from the shared store, now or earlier (the local file's copy of it).
  bool fromShared = false;

  // The cost the optimizers use: the median when Ok, +inf otherwise.
  Cost cost() const { return status == MeasurementStatus::Ok ? medianNs : kInvalidCost; }
  // A failure of the machine, not of the kernel: no verdict to keep or share.
  bool environmental() const { return status != MeasurementStatus::Ok && cause != FailureCause::None; }
  std::string toString() const;
};

}  // namespace collage
