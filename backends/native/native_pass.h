// The native backend's fused loop: one pass over an iteration space that
// evaluates a small expression program per element and writes its results,
// with no intermediate tensors.
//
//   for each row (the outer dims, split across threads):
//     row-uniform values (per-row scalars: a bias over channels, a mean)
//     for each reduction level: sweep the row's inner dims, accumulate
//     sweep the row again: compute the outputs, store them
//
// Elementwise passes have no reductions: their inner space is the innermost
// dim, cut into chunks so that even a flat 1-D tensor spreads over threads.
// Values are computed a block (up to kBlock elements along the innermost
// dim) at a time, each program node writing a small L1-resident slot, so the
// interpretation overhead is per block, not per element, and every node's
// loop is a plain vectorisable loop.
//
// Every read is a Leaf: a buffer read at an affine offset of the iteration
// coordinates (broadcasts, transposes, slices and reshapes are all folded
// into it at compile time), plus optional indirect terms (Gather's indices).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/element_type.h"

namespace collage::native {

enum class Op : uint8_t {
  Leaf,
  Const,
  // Unary.
  Relu, Neg, Abs, Sign, Sigmoid, Tanh, Exp, Log, Sqrt, Reciprocal, Erf, Floor, Ceil, Sin, Cos,
  Softplus, Softsign, HardSwish, Not, LeakyRelu, Elu, Selu, HardSigmoid, Gelu, GeluTanh, Clip,
  ToBool, Square,
  Round,  // half to even (QuantizeLinear's rounding)
  // Binary.
  Add, Sub, Mul, Div, Mod, FMod, Pow, Max, Min, Equal, Less, Greater, LessEq, GreaterEq, And, Or,
  Xor, PRelu,
  // Ternary.
  Where,
  // Reductions over the pass's inner dims (the result is row-uniform).
  ReduceSum, ReduceMax, ReduceMin, ReduceProd,
};

const char* opName(Op op);
inline bool isReduce(Op op) { return op >= Op::ReduceSum; }

// An affine function of the iteration coordinates: c + sum_d a[d] * p[d]
// (a may be shorter than the rank: missing coefficients are 0).
struct Affine {
  int64_t c = 0;
  std::vector<int64_t> a;

  int64_t coef(size_t d) const { return d < a.size() ? a[d] : 0; }
  void addScaled(const Affine& o, int64_t mul);
  void addCoef(size_t d, int64_t v);
  bool dependsOn(size_t d) const { return coef(d) != 0; }
  bool isConstant() const;
  void trim();  // drops trailing zero coefficients (canonical form for hashing)
  bool operator==(const Affine& o) const;
};

// An indirect term of a leaf offset: mul * wrap(index[off(p)]), where wrap
// adds dim to a negative index (Gather's semantics).
struct Indirect {
  int32_t buffer = -1;
  ElementType type = ElementType::Int64;
  Affine off;
  int64_t dim = 0;
  int64_t mul = 1;
  int64_t count = 0;  // elements of the index tensor (checked before each run)
  bool operator==(const Indirect& o) const {
    return buffer == o.buffer && type == o.type && off == o.off && dim == o.dim && mul == o.mul &&
           count == o.count;
  }
};

struct Leaf {
  int32_t buffer = -1;
  ElementType type = ElementType::Float32;
  Affine off;
  std::vector<Indirect> ind;
  bool operator==(const Leaf& o) const {
    return buffer == o.buffer && type == o.type && off == o.off && ind == o.ind;
  }
};

struct IrNode {
  Op op = Op::Const;
  int32_t in[3] = {-1, -1, -1};
  float p0 = 0, p1 = 0;  // constants: value; attributes (alpha, beta, min, max)
  int32_t leaf = -1;
  double divisor = 1;    // reductions: the result is acc / divisor
};

struct Store {
  int32_t node = -1;
  int32_t buffer = -1;
  ElementType type = ElementType::Float32;
  Affine off;
};

// What the lowering produces for one pass: the program over an iteration
// space of `dims`, some of which (`inner`, in order) are the reduction dims.
struct PassProgram {
  std::vector<int64_t> dims;
  std::vector<int> inner;
  std::vector<IrNode> nodes;  // topological: inputs have lower ids
  std::vector<Leaf> leaves;
  std::vector<Store> stores;
  std::string label;  // for messages
  // Whether the pass may run as a table lookup (native_byte_table.h): not
  // the pass that makes the table.
  bool mayUseTable = true;
};

// Everything a pass needs at run time to find its buffers.
struct BufferTable {
  std::vector<void*> ptr;
};

class CompiledPass {
 public:
  // Does all one-time work: orders and merges the loop dims, classifies
  // nodes, allocates per-thread slots. Throws Error on an inconsistent program.
  CompiledPass(PassProgram program, int threads);
  ~CompiledPass();
  CompiledPass(const CompiledPass&) = delete;
  CompiledPass& operator=(const CompiledPass&) = delete;

  // Runs the pass; buffers are indexed by Leaf/Store/Indirect::buffer.
  // Throws Error (before any thread starts) for an out-of-range Gather index.
  void run(const BufferTable& buffers);

  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collage::native
