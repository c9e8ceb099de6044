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
//
// sink-split: a Split whose every output is read by one layout op of one
// kind becomes that layout op on the whole tensor, then the Split (so n
// small copies become one larger one):
//   source    Transpose(Split(x)_i, p_i)           for every output i
//   target    Split(Transpose(x, p_0))_i, then Transpose(., q_i) where p_i
//             differs from p_0 (q_i = p_0^-1 ∘ p_i; none where equal)
//   source    R_i(Split(x, axis a)_i), R_i reshape-like
//   target    Split(Reshape(x, S), axis b)_i
//   condition each output's only reader is that op (and no graph output);
//             for reshapes, every R_i keeps the dimensions before a and
//             splits axis a's block alike (equal shapes but at one axis b).
//
// slices-to-split: sibling Slices that tile one axis of the same tensor
// are one Split (its inverse of a merge: what sink-split then works on):
//   source    Slice(x, [s_i, e_i) on axis a), i = 1..n, n >= 2, step 1
//   target    Split(x, axis a, sizes e_i - s_i)_i
//   condition the ranges, sorted, tile [0, dim a) exactly; each Slice cuts
//             that axis only.
#pragma once

#include <memory>

#include "core/rewrite/substitution.h"

namespace collage {

std::unique_ptr<Substitution> makeCollapseTransposes();
std::unique_ptr<Substitution> makeCollapseReshapes();
std::unique_ptr<Substitution> makeSinkSplit();
std::unique_ptr<Substitution> makeSlicesToSplit();

}  // namespace collage
