#include "core/op_registry.h"

namespace collage {

void registerElementwiseOps(OpRegistry& r) {}

}  // namespace collage
