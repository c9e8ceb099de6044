// Which device each backend of a job runs on, and each device's measured
// copy model: what the op-level DP needs to charge copies between devices
// (core/search/device_copy_charges.h). The optimize flows (the job, the
// command line, re-planning after an override) build it once and hand it to
// every OpLevelProblem they make.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/device.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/measure/copy_cost_measurement.h"
#include "core/measure/measurement_db.h"
#include "core/runtime/session.h"  // BackendLookup
#include "core/search/op_level_optimizer.h"

namespace collage {

struct DeviceCosts {
  std::map<std::string, Device> backendDevices;  // backends off the host only
  std::vector<std::pair<Device, CopyCostModel>> copyModels;
  int measured = 0;                // copy timings taken now (the rest from the database)
  std::vector<std::string> notes;  // one line per device: its model, or why it is unmeasured

  bool empty() const { return backendDevices.empty(); }
  // Sets problem.device and problem.copyCost (copies of this table, so the
  // problem may outlive it); leaves them null when every backend is on the host.
  void applyTo(OpLevelProblem& problem) const;
};

// Asks each backend where it runs; for every device off the host, its copy
// model from `db` (may be null) or measured through the first of its
// backends' DeviceRuntime. A device whose backends give no runtime stays
// unmeasured (NaN), so the DP does not place on it, and a note says why.
DeviceCosts measureDeviceCosts(const std::vector<std::string>& backendNames,
                               const BackendLookup& backends, MeasurementDb* db,
                               const HardwareFingerprint& fingerprint,
                               const CopyTimingOptions& options = {});

// "cpu <-> cuda:0: to the device 8.1 us + 25.3 GB/s, to the host 7.9 us + 26.0 GB/s".
std::string describeCopyModel(const Device& device, const CopyCostModel& model);

}  // namespace collage
