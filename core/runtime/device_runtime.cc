#include "core/runtime/device_runtime.h"

namespace collage {

DLDevice toDLDevice(const Device& device) {
  return device.type == DeviceType::CPU ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, device.index};
}

}  // namespace collage
