#include "core/ops/half_float.h"

#include "core/ir/error.h"
#include "core/onnx/tensor_proto.h"

namespace collage {

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
