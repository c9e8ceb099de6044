#include "core/measure/copy_cost_measurement.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/ir/error.h"
#include "core/measure/measurer.h"  // summarizeSamples

namespace collage {

CopyTimer runtimeCopyTimer(DeviceRuntime& runtime, const CopyTimingOptions& options) {
  return [&runtime, options](bool toDevice, size_t bytes) {
    Measurement m;
    const auto start = std::chrono::steady_clock::now();
    void* device = nullptr;
    try {
      std::vector<unsigned char> host(bytes, 1);
      device = runtime.allocate(bytes);
      auto once = [&] {
        if (toDevice)
          runtime.copyToDevice(device, host.data(), bytes);
        else
          runtime.copyToHost(host.data(), device, bytes);
        runtime.synchronize();
      };
      for (int i = 0; i < options.warmups; ++i) once();
      std::vector<double> samples;
      for (int i = 0; i < options.repetitions; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        once();
        samples.push_back(
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      summarizeSamples(samples, m);
      m.status = MeasurementStatus::Ok;
    } catch (const std::exception& e) {
      m.status = MeasurementStatus::Failed;
      m.message = e.what();
    }
    if (device) runtime.release(device);
    m.measureSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return m;
  };
}

CopyCostMeasurement measureCopyCost(const Device& device, const std::string& runtimeFingerprint,
                                    MeasurementDb* db, const HardwareFingerprint& fingerprint,
                                    const CopyTimer& timer, const CopyTimingOptions& options) {
  COLLAGE_CHECK(options.largeBytes > options.smallBytes, "copy timing sizes out of order");
  CopyCostMeasurement result;
  const std::string backend = "copy " + device.toString();
  auto timing = [&](bool toDevice, size_t bytes) -> Measurement {
    const std::string direction = toDevice ? "to-device" : "to-host";
    const MeasurementKey key{backend, runtimeFingerprint, direction + "/" + std::to_string(bytes)};
    if (db)
      if (std::optional<Measurement> cached = db->find(fingerprint, key);
          cached && cached->status == MeasurementStatus::Ok)
        return *cached;
    Measurement m = timer(toDevice, bytes);
    if (m.status != MeasurementStatus::Ok) return m;
    ++result.measured;
    if (db) {
      MeasurementRecord record;
      record.fingerprint = fingerprint;
      record.key = key;
      record.signatureText = (toDevice ? "cpu -> " : device.toString() + " -> ") +
                             (toDevice ? device.toString() : std::string("cpu")) + ", " +
                             std::to_string(bytes) + " bytes";
      record.ops = "Copy";
      record.measurement = m;
      db->store(record);
    }
    return m;
  };
  auto fit = [&](bool toDevice, double& latencyNs, double& bytesPerNs) {
    const Measurement small = timing(toDevice, options.smallBytes);
    const Measurement large = timing(toDevice, options.largeBytes);
    if (small.status != MeasurementStatus::Ok || large.status != MeasurementStatus::Ok) {
      const Measurement& bad = small.status != MeasurementStatus::Ok ? small : large;
      result.problem += std::string(result.problem.empty() ? "" : "; ") + "copies " +
                        (toDevice ? "to " : "from ") + device.toString() + ": " + bad.message;
      return;  // stays NaN: unmeasured
    }
    latencyNs = small.medianNs;
    // Noise can make the large copy look no slower than the small one: then
    // its whole time is taken as the transfer's.
    const double extraNs = large.medianNs - small.medianNs;
    const double bytes = static_cast<double>(options.largeBytes - options.smallBytes);
    bytesPerNs = extraNs > 0
                     ? bytes / extraNs
                     : static_cast<double>(options.largeBytes) / std::max(large.medianNs, 1.0);
  };
  fit(true, result.model.toDeviceLatencyNs, result.model.toDeviceBytesPerNs);
  fit(false, result.model.toHostLatencyNs, result.model.toHostBytesPerNs);
  return result;
}

}  // namespace collage
