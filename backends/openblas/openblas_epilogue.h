// The elementwise epilogue of an OpenBLAS kernel: every node of the group
// after its anchor (Gemm, MatMul, Conv), applied in one pass over the anchor's
// output after sgemm has written it.
//
// cblas_sgemm cannot call back into our code per register tile, so the best
// an op library can do is to keep the epilogue to a single pass: the output
// is walked in tiles of kTile elements, every epilogue node is evaluated on
// the tile while it is in L1 (intermediate values live in per-thread scratch
// tiles, never in full-size tensors), and the group's outputs are written
// once per tile.
//
// The program is a small DAG over "registers", one per value computed inside
// the group: register 0 is the anchor's result, each step adds one. A step's
// arguments are registers or operands: constants or kernel inputs that
// broadcast (numpy rules, unidirectionally) to the anchor's output shape —
// biases, scales, residual tensors. Every register has the anchor's output
// shape, so a tile is the same index range of every one of them.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/ops/broadcast.h"
#include "core/ir/tensor.h"

namespace collage::openblas {

// Where a kernel reads a tensor at run time: one of Kernel::run's inputs, or
// a constant the kernel owns (copied at compile time, so that the kernel
// does not depend on the Graph staying alive).
struct OperandSource {
  int input = -1;  // index into Kernel::run's inputs, or -1 for a constant
  Tensor constant;

  static OperandSource ofInput(int index) { return OperandSource{index, Tensor()}; }
  static OperandSource ofConstant(Tensor t) { return OperandSource{-1, std::move(t)}; }
  bool isConstant() const { return input < 0; }
  const float* data(const std::vector<const DLTensor*>& inputs) const {
    if (input < 0) return constant.data<float>();
    const DLTensor* t = inputs[static_cast<size_t>(input)];
    return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + t->byte_offset);
  }
};

inline float* outputData(DLTensor* t) {
  return reinterpret_cast<float*>(static_cast<char*>(t->data) + t->byte_offset);
}

enum class EpilogueOp {
  Add,        // a + b
  Sub,        // a - b
  Mul,        // a * b
  Div,        // a / b
  AddScaled,  // a + p0 * b (Gemm's beta * C with a run-time C)
  Relu,
  LeakyRelu,  // p0 = alpha
  Clip,       // p0 = min, p1 = max
  Sigmoid,
  Tanh,
  HardSwish,
  HardSigmoid,  // p0 = alpha, p1 = beta
  Elu,          // p0 = alpha
  Erf,
  Gelu,      // exact (erf) form
  GeluTanh,  // tanh approximation
  Identity,
};

int epilogueArity(EpilogueOp op);
std::string_view epilogueOpName(EpilogueOp op);

class Epilogue {
 public:
  // Elements per tile: 4 KiB per register, so that a few registers stay in L1.
  static constexpr int64_t kTile = 1024;
  static constexpr size_t kMaxRank = 12;
  static constexpr size_t kMaxOperands = 16;

  struct Arg {
    bool isRegister = true;
    int index = 0;  // register or operand index
    static Arg reg(int r) { return {true, r}; }
    static Arg operand(int k) { return {false, k}; }
  };

  Epilogue() = default;
  // `shape`: the anchor's output shape, shared by every register.
  explicit Epilogue(Shape shape) : shape_(std::move(shape)) {}

  const Shape& shape() const { return shape_; }
  int64_t size() const { return numElements(shape_); }
  bool empty() const { return steps_.empty(); }
  int numRegisters() const { return static_cast<int>(steps_.size()) + 1; }
  size_t numOperands() const { return operands_.size(); }

  // Adds an operand read with broadcasting. Returns its index, or -1 when
  // `shape` does not broadcast to the output shape (the caller refuses).
  int addOperand(OperandSource source, const Shape& shape);
  // Appends a step; returns the register holding its result.
  int addStep(EpilogueOp op, std::vector<Arg> args, float p0 = 0.0f, float p1 = 0.0f);
  // Register `reg` is the kernel's output number `output`.
  void markOutput(int reg, int output);
  // The output number holding a register, or -1.
  int outputOf(int reg) const;

  // Builds the iteration plan and per-thread scratch. Returns false (with
  // `why`) when the epilogue exceeds the fixed limits of the tile walker.
  bool finalize(int threads, std::string* why);

  // Per-run pointers: the anchor's result (full output-shaped buffer, which
  // may be one of the outputs), every output, every operand.
  struct Buffers {
    float* anchor = nullptr;
    std::vector<float*> outputs;
    std::vector<const float*> operands;
  };
  // Resolves operand pointers and output pointers; `anchor` is set by the caller.
  void bind(Buffers& b, const std::vector<const DLTensor*>& inputs,
            const std::vector<DLTensor*>& outputs) const;

  // Applies the epilogue to elements [begin, end) of the output, splitting
  // the range over the kernel's threads when it is large.
  void run(const Buffers& b, int64_t begin, int64_t end);
  // The same on the calling thread only, with thread `thread`'s scratch (for
  // callers already inside a parallel region).
  void runOnThread(const Buffers& b, int64_t begin, int64_t end, int thread);

  // "Add(r0, op0) -> r1; Relu(r1) -> r2" for messages and tests.
  std::string toString() const;

 private:
  struct Step {
    EpilogueOp op;
    std::vector<Arg> args;
    float p0 = 0, p1 = 0;
    int out = 0;          // register
    bool direct = false;  // written straight into its output (the last step only)
  };
  struct Operand {
    OperandSource source;
    Shape shape;
  };

  void runTile(const Buffers& b, int64_t pos, int64_t n, const float* const* operandPtrs,
               const int64_t* operandStrides, float* scratch);

  Shape shape_;
  std::vector<Operand> operands_;
  std::vector<Step> steps_;
  std::vector<int> outputOfRegister_{-1};  // per register
  StridedPlan plan_;
  int threads_ = 1;
  std::vector<float> scratch_;  // threads x (registers - 1) x kTile
};

}  // namespace collage::openblas
