// merge-siblings: anchors (MatMul, Gemm, Conv) that read the same input and
// have constant weights become one anchor over the concatenated weights and
// a Split that gives back each sibling's output (MetaFlow's merge):
//
//   source   y_i = Op(x, W_i [, B_i])  [ + b_i ]       for i = 1..n, n >= 2
//   target   (y_1, ..., y_n) = Split(Op(x, W_1|...|W_n [, B_1|...|B_n]) [ + b_1|...|b_n ])
//   condition every W_i (and B_i, b_i) is constant; the siblings agree on
//            every attribute and on every weight dimension but the one
//            concatenated (MatMul/Gemm: the output columns; Conv: the output
//            channels, group 1); a bias Add (a constant along the last axis,
//            the anchor's only reader) is merged too when every sibling has one,
//            and so are up to three one-input elementwise ops (Relu, ...) that
//            follow each sibling alike: they run on the merged tensor, before
//            the Split, so a fused Conv+Relu stays fusable.
//
// unmerge-split: the inverse, where a backend fuses each piece with its own
// consumer (or where the model came merged: a packed projection):
//
//   source    (y_1, ..., y_n) = Split(f(Op(x, W [, B]) [+ b]), channel axis)
//   target    y_i = f(Op(x, W_i [, B_i]) [+ b_i])       (W cut by output channel)
//   condition Op is MatMul, Gemm or Conv (group 1) with constant weights; the
//            Split cuts the channel axis (Conv, Gemm: 1; MatMul: the last); f
//            is up to three one-input elementwise ops; every value between the
//            anchor and the Split has one reader and is no graph output; the
//            bias varies along the channels at most (a broadcast one is shared).
//
// enlarge-conv-kernel: MetaFlow's enabling rewrite, worse alone: a Conv gets
// a larger kernel, padded with zeros (and its pads grown to match), so that
// it can merge with a sibling Conv of that kernel size:
//
//   source    y = Conv(x, W) with kernel k, sibling Conv(x, W') with kernel K > k
//   target    y = Conv(x, W zero-padded to K) with pads + (K - k) / 2
//   condition stride, dilation 1 and group 1 equal; K - k even on each axis.
#pragma once

#include <memory>

#include "core/rewrite/substitution.h"

namespace collage {

std::unique_ptr<Substitution> makeMergeSiblings();
std::unique_ptr<Substitution> makeEnlargeConvKernel();
std::unique_ptr<Substitution> makeUnmergeSplit();

}  // namespace collage
