#include "core/ir/device.h"

namespace collage {

std::string Device::toString() const {
  return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
}

}  // namespace collage
