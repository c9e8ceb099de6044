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
//
// cancel-transposes: a region that an exporter wrote in another layout
// (tf2onnx: NHWC between Transpose(0,3,1,2) into and Transpose(0,2,3,1) out
// of every NCHW block) runs in the layout of its neighbours, and the
// Transposes at its edges vanish, joins included:
//
//     a    x──────────┐                      a    x
//     │    │          │                      │    │
//   T(p)  T(p⁻¹) ──▶ Conv        ──────▶     │   T(p⁻¹) ──▶ Conv
//     └─ Add ─┘   (x's NCHW copy)            └─ Add' ─┘
//         │                                      │
//        Relu ─── T(p⁻¹) ──▶ Conv               Relu' ──────▶ Conv
//
//   region   the ops reached from the outputs of Transposes of one perm p
//            (the "entries") through layout-free ops: elementwise ops
//            (ElemWise and Broadcast kinds, no axis, constants that never
//            widen), Pad (its pads permuted, any mode) and Concat (its axis
//            permuted); every computed input of a region op is an entry, a
//            region op's output, or a value that already has a Transpose by
//            p⁻¹ among its readers (a skip path that also feeds a block);
//            constants are transposed by p⁻¹.
//   target   the region ops on the un-transposed values, under new names
//            ("<value>/unpermuted"); a reader Transpose by p⁻¹ of a region
//            value (an "exit") is dropped, its readers read the
//            un-transposed value; a region value read by anything else (or a
//            graph output, which keeps its name) gets one Transpose by p.
//   condition the graph loses Transposes: the entries that die (no other
//            reader) plus the exits outnumber the Transposes added.
#pragma once

#include <memory>

#include "core/rewrite/substitution.h"

namespace collage {

std::unique_ptr<Substitution> makeSinkTranspose();
std::unique_ptr<Substitution> makeHoistTranspose();
std::unique_ptr<Substitution> makeCancelTransposes();

}  // namespace collage
