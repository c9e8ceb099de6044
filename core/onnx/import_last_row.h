// An output computed at its last row only (ImportOptions::lastRowOutputs):
// a decoder's prompt pass computes the logits of every prompt position, but
// generating reads the last position's alone, and the vocabulary-wide
// product that makes them (the LM head) is a quarter of a short prompt's
// pass. The import then takes the last row of that product's activation
// (a Gather on its second-to-last axis) before the product, so the output
// has one row there.
#pragma once

#include <string>

#include "core/ir/graph.h"

namespace collage {

// Rewrites `graph` so that output `output` is computed at the last index of
// its second-to-last axis only. It walks back from the output through
// elementwise ops whose other operand is a constant without that axis (a
// bias, a scale, a cap) to a MatMul or Gemm whose second operand is a
// constant, and gathers the last row of its first operand. Returns why it
// left the graph as it was ("" when rewritten): no such output, a node on
// the way it cannot see through, an axis already of one row.
std::string keepLastRow(Graph& graph, const std::string& output);

}  // namespace collage
