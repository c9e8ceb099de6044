// A device for tests, so the Session's device logic runs without a GPU.
//
// FakeDeviceRuntime's "device memory" is host memory it allocates and keeps
// track of; its copies are memcpy that check which side of the host/device
// line each pointer is on, and count. FakeDeviceBackend runs the native
// backend's kernels "on the device": before each run it checks that every
// tensor it is given is device memory (so a Session that forgot a copy fails
// loudly instead of computing right by accident, since the memory is the
// same RAM). HostCheckingBackend is native with the opposite check.
// Deterministic, and for tests only.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "core/runtime/backend.h"
#include "core/runtime/device_runtime.h"

namespace collage::test_support {

class FakeDeviceRuntime : public DeviceRuntime {
 public:
  explicit FakeDeviceRuntime(Device device = Device{DeviceType::CUDA, 0}) : device_(device) {}
  ~FakeDeviceRuntime() override;

  Device device() const override { return device_; }
  void* allocate(size_t bytes) override;
  void release(void* deviceMemory) noexcept override;
  // Throw Error when the destination is not device memory with room for
  // `bytes`, or the source is not host memory (and the reverse to the host).
  void copyToDevice(void* deviceDst, const void* hostSrc, size_t bytes) override;
  void copyToHost(void* hostDst, const void* deviceSrc, size_t bytes) override;
  void synchronize() override { ++synchronizations; }
  std::string fingerprint() const override { return "fake " + device_.toString(); }

  // Whether [p, p + bytes) lies inside one live allocation.
  bool holds(const void* p, size_t bytes) const;
  // Whether [p, p + bytes) overlaps any live allocation.
  bool touches(const void* p, size_t bytes) const;

  size_t liveBlocks() const { return blocks_.size(); }
  size_t liveBytes() const;

  int copiesToDevice = 0;
  int copiesToHost = 0;
  size_t bytesToDevice = 0;
  size_t bytesToHost = 0;
  int allocations = 0;
  size_t allocatedBytes = 0;  // over the runtime's life
  int synchronizations = 0;
  void resetCounts() { copiesToDevice = copiesToHost = 0, bytesToDevice = bytesToHost = 0; }

 private:
  Device device_;
  std::map<const std::byte*, std::unique_ptr<std::byte[]>> owned_;
  std::map<const std::byte*, size_t> blocks_;  // start -> size
};

// The native backend's kernels on a fake device: device() and deviceRuntime()
// are the runtime's; a kernel throws Error naming the tensor when it is
// handed anything but that device's memory.
class FakeDeviceBackend : public Backend {
 public:
  explicit FakeDeviceBackend(FakeDeviceRuntime& runtime, std::string name = "fakegpu");
  std::string name() const override { return name_; }
  std::string version() const override { return "1"; }
  Device device() const override { return runtime_.device(); }
  DeviceRuntime* deviceRuntime() override { return &runtime_; }
  CompileResult compile(const KernelRequest& request) override;
  int kernelRuns = 0;

 private:
  FakeDeviceRuntime& runtime_;
  std::string name_;
  std::unique_ptr<Backend> native_;
};

// The native backend, checking that its kernels are never handed memory of
// the fake device.
class HostCheckingBackend : public Backend {
 public:
  explicit HostCheckingBackend(const FakeDeviceRuntime& runtime);
  std::string name() const override { return "hostcheck"; }
  std::string version() const override { return "1"; }
  CompileResult compile(const KernelRequest& request) override;

 private:
  const FakeDeviceRuntime& runtime_;
  std::unique_ptr<Backend> native_;
};

}  // namespace collage::test_support
