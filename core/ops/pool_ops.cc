#include "core/op_registry.h"

namespace collage {

void registerPoolOps(OpRegistry& r) {}

}  // namespace collage
