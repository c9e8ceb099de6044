// Float16 in the reference kernels: no kernel computes in it; ops that accept
// it convert to float32, compute, and round back (which is also what numpy
// does for float16, so results match ONNX's test data). bfloat16 is not
// covered: ONNX 1.12's test data for it is stored as uint16.
#pragma once

#include <cstdint>

#include "core/ir/tensor.h"

namespace collage {

// IEEE half / bfloat16 bits to float and back (round to nearest even): for
// float16 constants, the kernels below and comparisons.
float halfToFloat(uint16_t bits);
float bfloat16ToFloat(uint16_t bits);
uint16_t floatToHalf(float value);

inline bool isHalfType(ElementType t) { return t == ElementType::Float16; }

// A float32 copy of a float16 tensor.
Tensor halfToFloat32(const Tensor& in);
// Rounds a float32 tensor into `out` (float16, same shape), to nearest even.
void float32ToHalf(const Tensor& in, Tensor& out);

}  // namespace collage
