// A device's copy model (core/runtime/device_edges.h CopyCostModel), measured
// on this machine and kept in the measurement database, so the op-level DP
// charges what a copy between the host and the device really costs.
//
// Per direction, copies of a small and a large buffer are timed (median of
// repeated copies after warm-up, each ending with the device synchronised):
//
//   latency   = time(small copy)
//   bandwidth = (large - small bytes) / (time(large) - time(small))
//
// Each of the four timings is a Measurement row keyed like a kernel's: the
// hardware fingerprint, "copy" plus the device as the backend, the device
// runtime's fingerprint (GPU, driver, runtime) as its version, and the
// direction and size as the signature. A timing that fails leaves its
// direction NaN (unmeasured: the DP then never copies that way) and is not
// stored, so the next run tries again.
#pragma once

#include <functional>
#include <string>

#include "core/ir/hardware_fingerprint.h"
#include "core/measure/measurement.h"
#include "core/measure/measurement_db.h"
#include "core/runtime/device_edges.h"
#include "core/runtime/device_runtime.h"

namespace collage {

struct CopyTimingOptions {
  size_t smallBytes = 4;
  size_t largeBytes = size_t{16} << 20;  // large enough for the link's bandwidth to dominate
  int warmups = 3;
  int repetitions = 15;
};

// Times one direction and size: Ok with the median, or Failed with why.
using CopyTimer = std::function<Measurement(bool toDevice, size_t bytes)>;

// The product's timer: copies through `runtime` (host and device buffers it
// allocates for the purpose), each followed by synchronize(), timed with the
// steady clock.
CopyTimer runtimeCopyTimer(DeviceRuntime& runtime, const CopyTimingOptions& options = {});

struct CopyCostMeasurement {
  CopyCostModel model;
  int measured = 0;     // timings taken now (the others came from the database)
  std::string problem;  // why a direction is unmeasured, "" when both are
};

// `db` may be null. `device` and `runtimeFingerprint` key the rows.
CopyCostMeasurement measureCopyCost(const Device& device, const std::string& runtimeFingerprint,
                                    MeasurementDb* db, const HardwareFingerprint& fingerprint,
                                    const CopyTimer& timer, const CopyTimingOptions& options = {});

}  // namespace collage
