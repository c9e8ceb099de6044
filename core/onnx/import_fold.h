// Fold: a node whose inputs are all constant is computed at import by the
// reference kernels and becomes constant values (Shape, Size and a known
// SequenceLength fold from their input's static type alone). This is what
// turns shape subgraphs (Shape -> Gather -> Concat -> Reshape) into the
// static attributes the rest of Collage plans with.
//
// Invariant: with foldConstants, no node in the imported graph has only
// constant inputs, except a random op, one the reference kernel cannot
// compute, or one whose result exceeds kMaxFoldedBytes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace collage::onnx_import {

// The most bytes one tensor may have to be folded into a constant at
// import; a larger result stays a node, so that a model cannot make the
// import allocate without bound. Folding a weight (a transposed or
// dequantized embedding of a large language model is ~500 MiB) still fits.
inline constexpr size_t kMaxFoldedBytes = size_t{1} << 30;

// Ops whose outputs are random: never folded even with constant inputs.
bool isNondeterministic(const std::string& op);

// Data inputs whose VALUES decide the output shape (OpSchema::valueShapedInputs).
// Collage's shapes are static, so these must be constant (the node is then folded away).
std::vector<int> valueShapedInputs(const std::string& op);

}  // namespace collage::onnx_import
