#include "core/op_registry.h"

namespace collage {

void registerNormalizationOps(OpRegistry& r) {}

}  // namespace collage
