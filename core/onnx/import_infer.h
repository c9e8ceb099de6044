// Infer: the static output types of a canonical node, from the op's shape
// inference, or, where a run-time input decides the shape, from what the
// model declares; then checked against the model's own declarations.
//
// Invariant: every output a node keeps has a static TensorType whose byte
// size fits in 64 bits; in the model's graph it agrees with the declared
// type (inside a body a disagreement is a note, as in ONNX Runtime).
#pragma once

#include "core/ir/error.h"

namespace collage::onnx_import {

// A node whose inferred types do not work at the bound input sizes (shape
// inference refused them), as opposed to a model that is wrong at any size
// (a missing value or attribute): an If's branch failing so may be one that
// is never taken at these sizes.
class ShapesDoNotFit : public Error {
 public:
  using Error::Error;
};

}  // namespace collage::onnx_import
