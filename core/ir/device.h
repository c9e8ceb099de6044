// Where tensors live and kernels run: the host CPU or a GPU. Backends declare
// their device (spec files, Backend::device()); the Session will insert copies
// where a plan edge crosses devices.
#pragma once

#include <string>

namespace collage {

enum class DeviceType { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  std::string toString() const;  // "cpu", "cuda:0"
  bool operator==(const Device&) const = default;
};

}  // namespace collage
