#include "core/op_registry.h"

namespace collage {

void registerConvOps(OpRegistry& r) {}

}  // namespace collage
