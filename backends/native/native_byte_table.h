// An elementwise pass over 8-bit integers as one table lookup.
//
// A pass whose inputs are one or two u8/s8 tensors and whose output is one
// u8/s8 tensor computes a function of the input bytes alone: a QDQ residual
// join, DequantizeLinear(a) + DequantizeLinear(b) -> [Relu] ->
// QuantizeLinear, or a quantized activation. Such a function has at most
// 256 x 256 values: the table of them is made once, at compile time, by
// running the pass itself over every input pair, and the pass then runs as
// y[i] = table[a[i] << 8 | b[i]]: no float arithmetic per element (the
// float pass divides by the output scale per element), and the bytes are
// the float pass's by construction (bit for bit the reference's,
// NativeInt8.QuantizersFuseIntoOneElementwisePass).
//
// The rule: no reductions; one or two 8-bit leaves with no indirect terms,
// every other operand a scalar constant (a scale or zero point per channel
// is a leaf of its own: refused); one 8-bit store; the leaves and the store
// at the same offsets, a dense layout (same shape, same layout: no
// broadcast; plain or channels last alike); at least 4096 elements. Any
// other pass runs as before.
//
// The candidate generator grows a group along one path, so it never puts
// both DequantizeLinears of a join in one group with their Add: the backend's
// rule in code names those groups (quantizedJoinGroups).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/native/native_pass.h"
#include "core/runtime/backend.h"

namespace collage::native {

class ByteTable {
 public:
  // The table of `program`, or null where the rule above does not hold.
  static std::unique_ptr<ByteTable> of(const PassProgram& program, int threads);

  void run(const BufferTable& buffers) const;
  std::string describe() const;

 private:
  std::vector<uint8_t> table_;
  int32_t in_[2] = {-1, -1};  // buffers of the high and low byte of the index (-1: none)
  int32_t out_ = -1;
  int64_t count_ = 0;
  int threads_ = 1;
  std::string label_;
};

// Every QDQ join the table runs: DequantizeLinear(a) and DequantizeLinear(b)
// (u8/s8 tensors computed at run time, constant scalar scales and zero
// points, each read by the join alone), an Add, Sub, Mul, Max or Min of the
// two of one shape, then unary activations (Relu, Clip, LeakyRelu, ...) each
// read alone, then a QuantizeLinear of constant scalar scale and zero point:
// one group ("quantized_join") per join.
std::vector<std::pair<NodeSet, std::string>> quantizedJoinGroups(const Graph& graph);

}  // namespace collage::native
