// Direct NCHW MaxPool and AveragePool (float32, 1 or 2 spatial dimensions,
// no Indices output) for the native backend. The registry's reference
// kernel works out a window per output element; here each output row is
// computed by sweeping the window's taps over the whole row (interior
// columns need no bounds checks, so the loop over output columns
// vectorises), planes run in parallel. Taps are visited in the reference's
// order and the average divides by the same count, so results are
// bit-identical to the reference kernel.
#pragma once

#include <memory>

#include "backends/native/native_steps.h"

namespace collage::native {

// The direct step for a pooling node, or nullptr when the node is outside
// what it handles (other ops or types, 3D pools, an Indices output); the
// caller then uses the reference kernel.
std::unique_ptr<Step> makeDirectPoolStep(const NodeBinding& binding, int threads);

}  // namespace collage::native
