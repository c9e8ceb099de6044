#include "core/measure/measurement.h"

#include <cstdio>

#include "core/ir/cost.h"

namespace collage {

std::string costToString(Cost c) {
  if (isUnknown(c)) return "unknown";
  if (isInvalid(c)) return "invalid";
  char buf[64];
  if (c >= 1e6) std::snprintf(buf, sizeof buf, "%.3f ms", c / 1e6);
  else if (c >= 1e3) std::snprintf(buf, sizeof buf, "%.1f us", c / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f ns", c);
  return buf;
}

std::string_view measurementStatusName(MeasurementStatus s) {
  switch (s) {
    case MeasurementStatus::Ok: return "ok";
    case MeasurementStatus::Invalid: return "invalid";
    case MeasurementStatus::Failed: return "failed";
    case MeasurementStatus::TimedOut: return "timed_out";
    case MeasurementStatus::Skipped: return "skipped";
  }
  return "failed";
}

MeasurementStatus measurementStatusFromName(std::string_view name) {
  for (auto s : {MeasurementStatus::Ok, MeasurementStatus::Invalid, MeasurementStatus::Failed,
                 MeasurementStatus::TimedOut, MeasurementStatus::Skipped})
    if (measurementStatusName(s) == name) return s;
  return MeasurementStatus::Failed;
}

std::string_view failureCauseName(FailureCause c) {
  switch (c) {
    case FailureCause::None: return "";
    case FailureCause::TimingLock: return "timing_lock";
    case FailureCause::OutOfMemory: return "out_of_memory";
    case FailureCause::Busy: return "busy";
    case FailureCause::Killed: return "killed";
    case FailureCause::Unchecked: return "unchecked";
  }
  return "";
}

FailureCause failureCauseFromName(std::string_view name) {
  for (auto c : {FailureCause::TimingLock, FailureCause::OutOfMemory, FailureCause::Busy,
                 FailureCause::Killed, FailureCause::Unchecked})
    if (failureCauseName(c) == name) return c;
  return FailureCause::None;
}

std::string_view failureCauseDescription(FailureCause c) {
  switch (c) {
    case FailureCause::None: return "the kernel";
    case FailureCause::TimingLock: return "the machine's timing lock";
    case FailureCause::OutOfMemory: return "the machine's memory";
    case FailureCause::Busy: return "a busy machine";
    case FailureCause::Killed: return "a kill from outside";
    case FailureCause::Unchecked: return "a timeout never checked for a busy machine";
  }
  return "the kernel";
}

std::string Measurement::toString() const {
  if (status != MeasurementStatus::Ok)
    return std::string(measurementStatusName(status)) + (message.empty() ? "" : ": " + message);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s ±%.1f%% (%d samples)%s", costToString(medianNs).c_str(),
                spread * 100, samples, fromCache ? " [cached]" : "");
  std::string out = buf;
  // From the shared store: how many machines' medians this is the median of.
  if (machines > 0)
    out += " [shared: " + std::to_string(machines) + (machines == 1 ? " machine]" : " machines]");
  return out;
}

}  // namespace collage
