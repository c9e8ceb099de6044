// The fusion category of an op, as TVM defines it. Pattern rules reason in
// these kinds: "an Anchor followed by ElemWise/Broadcast ops up to an
// Injective sink" is TVM's fusion rule.
#pragma once

#include <optional>
#include <string_view>

namespace collage {

enum class OpKind {
  ElemWise,   // one output element from the same-index input elements (Relu, Add of equal shapes)
  Broadcast,  // elementwise with broadcasting (Add of a bias)
  Injective,  // each output element from one input element, anywhere (Transpose, Reshape, Slice)
  Reduction,  // many input elements into one output element (ReduceMean, Softmax's sums)
  Anchor,     // compute-heavy, output fusable (Conv, MatMul, Gemm, pooling)
  Opaque,     // not fusable
};

std::string_view opKindName(OpKind kind);
std::optional<OpKind> opKindFromName(std::string_view name);

}  // namespace collage
