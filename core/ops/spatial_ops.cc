#include "core/op_registry.h"

namespace collage {

void registerSpatialOps(OpRegistry& r) {}

}  // namespace collage
