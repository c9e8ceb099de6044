#include "core/op_registry.h"

namespace collage {

void registerMiscOps(OpRegistry& r) {}

}  // namespace collage
