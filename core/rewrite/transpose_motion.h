// Moving a Transpose across an elementwise op, down (sink-transpose) or up
// (hoist-transpose), a rule and its inverse. Neither is faster alone; each
// lets something else happen: two Transposes meet and collapse
// (collapse-transposes), or the elementwise op comes next to an anchor (or
// away from one) so that a backend fuses it.
//
//        x                               x
//        │                               │
//    Transpose p      sink-transpose     f ─ c permuted by p⁻¹
//        │          ─────────────────▶   │
//        f ─ c      ◀─────────────────  Transpose p
//        │            hoist-transpose    │
//        y                               y    (the same value, the same name)
//
//   f        a one-input elementwise op (OpKind ElemWise in the op registry:
//            Relu, Erf, Sigmoid, Clip, Cast, ...; further inputs, if any,
//            constant scalars; no axis attribute), or a broadcasting binary op
//            (OpKind Broadcast: Add, Mul, Pow, ...) whose other input is a
//            constant c: c, aligned to the rank (leading 1s), is transposed
//            with the layout so that it meets the same elements.
//   condition the value between the two nodes has one reader and is no graph
//            output (it changes meaning: the name stays, the type follows);
//            f never widens its data input by broadcasting (the constant's
//            dims divide the data's); the graph's outputs keep their names.
#pragma once

#include <memory>

#include "core/rewrite/substitution.h"

namespace collage {

std::unique_ptr<Substitution> makeSinkTranspose();
std::unique_ptr<Substitution> makeHoistTranspose();

}  // namespace collage
