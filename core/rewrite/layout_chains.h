// Layout chains: data-movement ops that compose into one, or into nothing.
//
// collapse-transposes
//   source    Transpose(Transpose(x, p), q)        or Transpose(x, identity)
//   target    Transpose(x, p∘q)                    or x itself
//   condition a removed value is no graph output and no subgraph reads it;
//             the first Transpose stays when it has other readers.
//
// collapse-reshapes (Reshape, Flatten, Squeeze, Unsqueeze: "reshape-like")
//   source    R2(R1(x))                            or R(x) with the same shape
//   target    Reshape(x, static shape of R2's output) or x itself
//   condition as above. Shapes are static here, so the target needs no shape
//             computation.
#pragma once

#include <memory>

#include "core/rewrite/substitution.h"

namespace collage {

std::unique_ptr<Substitution> makeCollapseTransposes();
std::unique_ptr<Substitution> makeCollapseReshapes();

}  // namespace collage
