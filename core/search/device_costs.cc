#include "core/search/device_costs.h"

#include <algorithm>
#include <cstdio>

namespace collage {

void DeviceCosts::applyTo(OpLevelProblem& problem) const {
  if (backendDevices.empty()) return;
  problem.device = [devices = backendDevices](const std::string& backend) {
    auto it = devices.find(backend);
    return it == devices.end() ? Device{} : it->second;
  };
  problem.copyCost = [models = copyModels](const Device& device) {
    for (const auto& [d, model] : models)
      if (d == device) return model;
    return CopyCostModel{};
  };
}

std::string describeCopyModel(const Device& device, const CopyCostModel& model) {
  auto direction = [](double latencyNs, double bytesPerNs) {
    if (!isKnown(latencyNs) || !(bytesPerNs > 0)) return std::string("unmeasured");
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f us + %.1f GB/s", latencyNs / 1e3, bytesPerNs);
    return std::string(buf);
  };
  return "cpu <-> " + device.toString() + ": to the device " +
         direction(model.toDeviceLatencyNs, model.toDeviceBytesPerNs) + ", to the host " +
         direction(model.toHostLatencyNs, model.toHostBytesPerNs);
}

DeviceCosts measureDeviceCosts(const std::vector<std::string>& backendNames,
                               const BackendLookup& backends, MeasurementDb* db,
                               const HardwareFingerprint& fingerprint,
                               const CopyTimingOptions& options) {
  DeviceCosts costs;
  if (!backends) return costs;
  std::vector<std::pair<Device, DeviceRuntime*>> devices;  // in the backends' order
  for (const std::string& name : backendNames) {
    Backend* backend = backends(name);
    if (!backend || backend->device().type == DeviceType::CPU) continue;
    const Device device = backend->device();
    costs.backendDevices[name] = device;
    auto it = std::find_if(devices.begin(), devices.end(),
                           [&](const auto& d) { return d.first == device; });
    if (it == devices.end())
      devices.emplace_back(device, backend->deviceRuntime());
    else if (!it->second)
      it->second = backend->deviceRuntime();
  }
  for (const auto& [device, runtime] : devices) {
    if (!runtime) {
      costs.copyModels.emplace_back(device, CopyCostModel{});
      costs.notes.push_back(
          "cpu <-> " + device.toString() +
          ": unmeasured (no backend there gives a device runtime); nothing is placed there");
      continue;
    }
    CopyCostMeasurement m = measureCopyCost(device, runtime->fingerprint(), db, fingerprint,
                                            runtimeCopyTimer(*runtime, options), options);
    costs.measured += m.measured;
    costs.copyModels.emplace_back(device, m.model);
    costs.notes.push_back(describeCopyModel(device, m.model) +
                          (m.problem.empty() ? "" : " (" + m.problem + ")"));
  }
  return costs;
}

}  // namespace collage
