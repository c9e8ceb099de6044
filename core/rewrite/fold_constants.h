// fold-scale-shift: a constant scale or shift next to an anchor becomes
// part of the anchor's weights, so one kernel less runs (and a backend that
// fuses the anchor with what follows sees one op less between them). The
// importer folds no arithmetic into weights, BatchNormalization included
// (it stays an op); this rule folds Mul, Div, Add, Sub and an inference
// BatchNormalization (y * a + b per channel, its four inputs constant):
//
//   after an anchor (its output's only reader), c constant along the
//   anchor's output channels (Conv: axis 1; MatMul, Gemm: the last axis):
//
//     Op(x, W [, B]) [+ b] (*|/) c  ->  Op(x, W (*|/) c [, B (*|/) c]) [+ b (*|/) c]
//     Op(x, W [, B])       (+|-) c  ->  Op(x, W, B (+|-) c)    (Conv, Gemm: B = 0 if absent)
//     Op(x, W) + b         (+|-) c  ->  Op(x, W) + (b (+|-) c) (any anchor with a bias Add)
//     BatchNormalization(Op(x, W [, B]) [+ b])  ->  both at once, where the channels are axis 1
//
//   before an anchor (its data input), s a constant scalar:
//
//     Op(x (*|/) s, W [, B])               ->  Op(x, W (*|/) s [, B])
//
//   across a MatMul of two computed tensors, s a constant scalar, L layout
//   ops (Transpose, Reshape, Flatten, Squeeze, Unsqueeze), on either side:
//
//     MatMul(L(Op(x, W) [+ b]), k) (*|/) s ->  MatMul(L(Op(x, W (*|/) s) [+ b (*|/) s]), k)
//
//   (attention's 1/sqrt(d) goes into Q's projection; the first side that
//   holds is taken), every value on the way read once.
//
//   condition every value that disappears has one reader and is no graph
//            output; the constants broadcast only along the channel axis
//            (never widening the anchor's output); floating-point types;
//            W (and B, b) constant. The constant is on the right of a Sub or
//            Div (y - c, y / c), either side of a Mul or Add. Gemm's alpha
//            and beta are kept (a shift sets beta to 1 with B already scaled).
#pragma once

#include <memory>

#include "core/rewrite/substitution.h"

namespace collage {

std::unique_ptr<Substitution> makeFoldScaleShift();

}  // namespace collage
