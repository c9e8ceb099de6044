#include "core/ops/half_float.h"

#include <bit>
#include <cmath>

#include "core/ir/error.h"

namespace collage {

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

float bfloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t floatToHalf(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000;
  const int32_t exp = static_cast<int32_t>((f >> 23) & 0xff);
  uint32_t mant = f & 0x7fffff;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - e;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into the exponent
  return static_cast<uint16_t>(half);
}

Tensor halfToFloat32(const Tensor& in) {
  COLLAGE_CHECK(isHalfType(in.elementType()), "halfToFloat32 on " + in.type().toString());
  Tensor out(ElementType::Float32, in.shape());
  const uint16_t* x = in.data<uint16_t>();
  float* y = out.data<float>();
  for (int64_t i = 0; i < in.numElements(); ++i) y[i] = halfToFloat(x[i]);
  return out;
}

void float32ToHalf(const Tensor& in, Tensor& out) {
  COLLAGE_CHECK(in.elementType() == ElementType::Float32 && isHalfType(out.elementType()) &&
                    in.numElements() == out.numElements(),
                "float32ToHalf from " + in.type().toString() + " to " + out.type().toString());
  const float* x = in.data<float>();
  uint16_t* y = out.data<uint16_t>();
  for (int64_t i = 0; i < in.numElements(); ++i) y[i] = floatToHalf(x[i]);
}

}  // namespace collage
