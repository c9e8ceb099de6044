// The native backend: Collage's own fusion engine for the CPU (OpenMP,
// vectorised loops). It runs every op of the op set and, its real strength,
// fuses any group of elementwise, broadcast, injective and reduction ops
// into one pass over memory (native_lowering.h says how).
#pragma once

#include <memory>
#include <string>

#include "core/runtime/backend.h"

namespace collage {

std::unique_ptr<Backend> createNativeBackend();

// How a kernel of this backend runs ("1 step(s), 0 scratch buffer(s)\n  pass
// ..."); empty for another backend's kernel. For tests and the inspector.
std::string describeNativeKernel(const Kernel& kernel);

}  // namespace collage
