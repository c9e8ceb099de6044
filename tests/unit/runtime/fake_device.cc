#include "tests/unit/runtime/fake_device.h"

#include <cstring>
#include <vector>

#include "backends/backend_list.h"
#include "core/ir/error.h"

namespace collage::test_support {

FakeDeviceRuntime::~FakeDeviceRuntime() = default;

void* FakeDeviceRuntime::allocate(size_t bytes) {
  // At least one byte, so every allocation has its own address.
  auto block = std::make_unique<std::byte[]>(bytes == 0 ? 1 : bytes);
  const std::byte* start = block.get();
  blocks_[start] = bytes;
  owned_[start] = std::move(block);
  ++allocations;
  allocatedBytes += bytes;
  return const_cast<std::byte*>(start);
}

void FakeDeviceRuntime::release(void* deviceMemory) noexcept {
  const auto* start = static_cast<const std::byte*>(deviceMemory);
  blocks_.erase(start);
  owned_.erase(start);
}

bool FakeDeviceRuntime::holds(const void* p, size_t bytes) const {
  const auto* q = static_cast<const std::byte*>(p);
  auto it = blocks_.upper_bound(q);
  if (it == blocks_.begin()) return false;
  --it;
  return q >= it->first && q + bytes <= it->first + it->second;
}

bool FakeDeviceRuntime::touches(const void* p, size_t bytes) const {
  const auto* q = static_cast<const std::byte*>(p);
  const size_t span = bytes == 0 ? 1 : bytes;
  for (const auto& [start, size] : blocks_)
    if (q < start + (size == 0 ? 1 : size) && start < q + span) return true;
  return false;
}

size_t FakeDeviceRuntime::liveBytes() const {
  size_t total = 0;
  for (const auto& [start, size] : blocks_) total += size;
  return total;
}

void FakeDeviceRuntime::copyToDevice(void* deviceDst, const void* hostSrc, size_t bytes) {
  if (!holds(deviceDst, bytes))
    throw Error("copy to " + device_.toString() + ": the destination is not device memory");
  if (touches(hostSrc, bytes))
    throw Error("copy to " + device_.toString() + ": the source is device memory");
  std::memcpy(deviceDst, hostSrc, bytes);
  ++copiesToDevice;
  bytesToDevice += bytes;
}

void FakeDeviceRuntime::copyToHost(void* hostDst, const void* deviceSrc, size_t bytes) {
  if (!holds(deviceSrc, bytes))
    throw Error("copy from " + device_.toString() + ": the source is not device memory");
  if (touches(hostDst, bytes))
    throw Error("copy from " + device_.toString() + ": the destination is device memory");
  std::memcpy(hostDst, deviceSrc, bytes);
  ++copiesToHost;
  bytesToHost += bytes;
}

namespace {

size_t bytesOf(const DLTensor& t) {
  size_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<size_t>(t.shape[i]);
  return n * ((t.dtype.bits * t.dtype.lanes + 7) / 8);
}

// Runs a native kernel after checking where each tensor lives. `onDevice`:
// every tensor must be the runtime's memory and say kDLCUDA; otherwise none
// may be, and each must say kDLCPU.
class CheckingKernel : public Kernel {
 public:
  CheckingKernel(std::unique_ptr<Kernel> inner, const FakeDeviceRuntime& runtime, bool onDevice,
                 std::string label, int* runs)
      : inner_(std::move(inner)),
        runtime_(runtime),
        onDevice_(onDevice),
        label_(std::move(label)),
        runs_(runs) {}

  void run(const std::vector<const DLTensor*>& inputs,
           const std::vector<DLTensor*>& outputs) override {
    for (size_t i = 0; i < inputs.size(); ++i) check(*inputs[i], "input " + std::to_string(i));
    for (size_t i = 0; i < outputs.size(); ++i) check(*outputs[i], "output " + std::to_string(i));
    // The native kernel computes on the same RAM, seen as host memory.
    std::vector<DLTensor> in(inputs.size()), out(outputs.size());
    std::vector<const DLTensor*> inPtr;
    std::vector<DLTensor*> outPtr;
    for (size_t i = 0; i < inputs.size(); ++i) {
      in[i] = *inputs[i];
      in[i].device = DLDevice{kDLCPU, 0};
      inPtr.push_back(&in[i]);
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      out[i] = *outputs[i];
      out[i].device = DLDevice{kDLCPU, 0};
      outPtr.push_back(&out[i]);
    }
    inner_->run(inPtr, outPtr);
    if (runs_) ++*runs_;
  }

 private:
  void check(const DLTensor& t, const std::string& what) const {
    const void* data = static_cast<const char*>(t.data) + t.byte_offset;
    if (onDevice_) {
      if (t.device.device_type != kDLCUDA || !runtime_.holds(data, bytesOf(t)))
        throw Error(label_ + ": " + what + " is not in " + runtime_.device().toString() +
                    " memory");
    } else if (t.device.device_type != kDLCPU || runtime_.touches(data, bytesOf(t))) {
      throw Error(label_ + ": " + what + " is in " + runtime_.device().toString() + " memory");
    }
  }

  std::unique_ptr<Kernel> inner_;
  const FakeDeviceRuntime& runtime_;
  bool onDevice_;
  std::string label_;
  int* runs_;
};

CompileResult compileChecked(Backend& native, const KernelRequest& request,
                             const FakeDeviceRuntime& runtime, bool onDevice,
                             const std::string& name, int* runs) {
  CompileResult r = native.compile(request);
  if (!r) return r;
  return CompileResult::ok(std::make_unique<CheckingKernel>(std::move(r.kernel), runtime, onDevice,
                                                            name + " " + request.toString(), runs));
}

}  // namespace

FakeDeviceBackend::FakeDeviceBackend(FakeDeviceRuntime& runtime, std::string name)
    : runtime_(runtime), name_(std::move(name)), native_(createBackend("native")) {}

CompileResult FakeDeviceBackend::compile(const KernelRequest& request) {
  return compileChecked(*native_, request, runtime_, true, name_, &kernelRuns);
}

HostCheckingBackend::HostCheckingBackend(const FakeDeviceRuntime& runtime)
    : runtime_(runtime), native_(createBackend("native")) {}

CompileResult HostCheckingBackend::compile(const KernelRequest& request) {
  return compileChecked(*native_, request, runtime_, false, name(), nullptr);
}

}  // namespace collage::test_support
