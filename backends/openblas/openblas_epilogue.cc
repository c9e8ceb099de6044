#include "backends/openblas/openblas_epilogue.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "backends/native/native_math.h"
#include "core/ir/error.h"

namespace collage::openblas {

namespace {

// Elements below which splitting a range over threads costs more than it saves.
constexpr int64_t kParallelThreshold = 32 * 1024;

// The transcendental functions are the native backend's vectorisable ones
// (native_math.h, a few ulps; erf 1.5e-7 absolute): libm's erf/exp/tanh
// keep an epilogue loop scalar, and BERT's erf GELU over a 128x3072 product
// cost more than a millisecond that way.
inline float sigmoidOf(float x) { return native::fastSigmoid(x); }
inline float geluOf(float x) {
  return 0.5f * x * (1.0f + native::fastErf(x * 0.7071067811865476f));
}
inline float geluTanhOf(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + native::fastTanh(c * (x + 0.044715f * x * x * x)));
}

// dst[j] = f(a[j * sa]) with sa 0 or 1. dst may alias a (same index).
template <class F>
inline void mapUnary(const float* a, int64_t sa, float* dst, int64_t n, F f) {
  if (sa == 1) {
    for (int64_t j = 0; j < n; ++j) dst[j] = f(a[j]);
  } else {
    const float v = f(a[0]);
    std::fill(dst, dst + n, v);
  }
}

// dst[j] = f(a[j * sa], b[j * sb]) with strides 0 or 1; a scalar side is
// hoisted so that the loop vectorises.
template <class F>
inline void mapBinary(const float* a, int64_t sa, const float* b, int64_t sb, float* dst, int64_t n,
                      F f) {
  if (sa == 1 && sb == 1) {
    for (int64_t j = 0; j < n; ++j) dst[j] = f(a[j], b[j]);
  } else if (sa == 1) {
    const float bv = b[0];
    for (int64_t j = 0; j < n; ++j) dst[j] = f(a[j], bv);
  } else if (sb == 1) {
    const float av = a[0];
    for (int64_t j = 0; j < n; ++j) dst[j] = f(av, b[j]);
  } else {
    std::fill(dst, dst + n, f(a[0], b[0]));
  }
}

}  // namespace

int epilogueArity(EpilogueOp op) {
  switch (op) {
    case EpilogueOp::Add:
    case EpilogueOp::Sub:
    case EpilogueOp::Mul:
    case EpilogueOp::Div:
    case EpilogueOp::AddScaled:
      return 2;
    default:
      return 1;
  }
}

std::string_view epilogueOpName(EpilogueOp op) {
  switch (op) {
    case EpilogueOp::Add:
      return "Add";
    case EpilogueOp::Sub:
      return "Sub";
    case EpilogueOp::Mul:
      return "Mul";
    case EpilogueOp::Div:
      return "Div";
    case EpilogueOp::AddScaled:
      return "AddScaled";
    case EpilogueOp::Relu:
      return "Relu";
    case EpilogueOp::LeakyRelu:
      return "LeakyRelu";
    case EpilogueOp::Clip:
      return "Clip";
    case EpilogueOp::Sigmoid:
      return "Sigmoid";
    case EpilogueOp::Tanh:
      return "Tanh";
    case EpilogueOp::HardSwish:
      return "HardSwish";
    case EpilogueOp::HardSigmoid:
      return "HardSigmoid";
    case EpilogueOp::Elu:
      return "Elu";
    case EpilogueOp::Erf:
      return "Erf";
    case EpilogueOp::Gelu:
      return "Gelu";
    case EpilogueOp::GeluTanh:
      return "GeluTanh";
    case EpilogueOp::Identity:
      return "Identity";
  }
  return "?";
}

int Epilogue::addOperand(OperandSource source, const Shape& shape) {
  if (shape.size() > shape_.size()) return -1;
  const size_t offset = shape_.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1 && shape[i] != shape_[offset + i]) return -1;
  operands_.push_back({std::move(source), shape});
  return static_cast<int>(operands_.size()) - 1;
}

int Epilogue::addStep(EpilogueOp op, std::vector<Arg> args, float p0, float p1) {
  COLLAGE_CHECK(static_cast<int>(args.size()) == epilogueArity(op), "epilogue step arity");
  Step s;
  s.op = op;
  s.args = std::move(args);
  s.p0 = p0;
  s.p1 = p1;
  s.out = numRegisters();
  for (const Arg& a : s.args)
    COLLAGE_CHECK(a.isRegister ? a.index < s.out : a.index < static_cast<int>(operands_.size()),
                  "epilogue argument out of range");
  steps_.push_back(std::move(s));
  outputOfRegister_.push_back(-1);
  return steps_.back().out;
}

void Epilogue::markOutput(int reg, int output) {
  outputOfRegister_.at(static_cast<size_t>(reg)) = output;
}

int Epilogue::outputOf(int reg) const { return outputOfRegister_.at(static_cast<size_t>(reg)); }

bool Epilogue::finalize(int threads, std::string* why) {
  threads_ = std::max(1, threads);
  if (shape_.size() > kMaxRank || operands_.size() > kMaxOperands) {
    if (why)
      *why = "the epilogue has " + std::to_string(operands_.size()) +
             " broadcast operands on a rank-" + std::to_string(shape_.size()) +
             " output (at most " + std::to_string(kMaxOperands) + " operands, rank " +
             std::to_string(kMaxRank) + ")";
    return false;
  }
  std::vector<Shape> shapes;
  for (const Operand& o : operands_) shapes.push_back(o.shape);
  plan_ = makeBroadcastPlan(shape_, shapes);
  // The last step may write straight into its output: every step reads and
  // writes index j only, so even an output aliasing register 0 is safe, and
  // nothing reads the last register afterwards.
  if (!steps_.empty() && outputOf(steps_.back().out) >= 0) steps_.back().direct = true;
  scratch_.assign(static_cast<size_t>(threads_) * static_cast<size_t>(numRegisters() - 1) *
                      static_cast<size_t>(kTile),
                  0.0f);
  return true;
}

void Epilogue::bind(Buffers& b, const std::vector<const DLTensor*>& inputs,
                    const std::vector<DLTensor*>& outputs) const {
  b.operands.resize(operands_.size());
  for (size_t k = 0; k < operands_.size(); ++k) b.operands[k] = operands_[k].source.data(inputs);
  b.outputs.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) b.outputs[i] = outputData(outputs[i]);
}

void Epilogue::run(const Buffers& b, int64_t begin, int64_t end) {
  if (steps_.empty() || end <= begin) return;
  const int64_t total = end - begin;
  if (threads_ <= 1 || total < kParallelThreshold || omp_in_parallel()) {
    runOnThread(b, begin, end, 0);
    return;
  }
  // Chunks of whole tiles, a few per thread for balance.
  const int64_t chunk =
      std::max<int64_t>(kTile, (total / (threads_ * 4) + kTile - 1) / kTile * kTile);
  const int64_t chunks = (total + chunk - 1) / chunk;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = begin + c * chunk;
    runOnThread(b, lo, std::min(end, lo + chunk), omp_get_thread_num());
  }
}

void Epilogue::runOnThread(const Buffers& b, int64_t begin, int64_t end, int thread) {
  if (steps_.empty() || end <= begin) return;
  float* scratch = scratch_.data() + static_cast<size_t>(thread) *
                                         static_cast<size_t>(numRegisters() - 1) *
                                         static_cast<size_t>(kTile);
  const size_t rank = plan_.dims.size();
  const size_t k = operands_.size();
  const int64_t inner = plan_.dims.back();
  // Multi-index of `begin` over the plan's merged dimensions and each
  // operand's offset there.
  std::array<int64_t, kMaxRank> idx{};
  std::array<int64_t, kMaxOperands> off{}, innerStride{};
  std::array<const float*, kMaxOperands> ptr{};
  int64_t rem = begin;
  for (size_t d = rank; d-- > 0;) {
    idx[d] = rem % plan_.dims[d];
    rem /= plan_.dims[d];
  }
  for (size_t i = 0; i < k; ++i) {
    innerStride[i] = plan_.strides[i].back();
    for (size_t d = 0; d < rank; ++d) off[i] += idx[d] * plan_.strides[i][d];
  }
  int64_t pos = begin;
  while (pos < end) {
    const int64_t n = std::min({inner - idx[rank - 1], end - pos, kTile});
    for (size_t i = 0; i < k; ++i) ptr[i] = b.operands[i] + off[i];
    runTile(b, pos, n, ptr.data(), innerStride.data(), scratch);
    pos += n;
    idx[rank - 1] += n;
    for (size_t i = 0; i < k; ++i) off[i] += n * innerStride[i];
    if (idx[rank - 1] == inner) {
      // Carry into the outer dimensions.
      idx[rank - 1] = 0;
      for (size_t i = 0; i < k; ++i) off[i] -= inner * innerStride[i];
      for (size_t d = rank - 1; d-- > 0;) {
        ++idx[d];
        for (size_t i = 0; i < k; ++i) off[i] += plan_.strides[i][d];
        if (idx[d] < plan_.dims[d]) break;
        idx[d] = 0;
        for (size_t i = 0; i < k; ++i) off[i] -= plan_.strides[i][d] * plan_.dims[d];
      }
    }
  }
}

void Epilogue::runTile(const Buffers& b, int64_t pos, int64_t n, const float* const* operandPtrs,
                       const int64_t* operandStrides, float* scratch) {
  auto regPtr = [&](int r) -> float* {
    return r == 0 ? b.anchor + pos : scratch + static_cast<size_t>(r - 1) * kTile;
  };
  for (const Step& s : steps_) {
    float* dst = s.direct ? b.outputs[static_cast<size_t>(outputOf(s.out))] + pos : regPtr(s.out);
    const float* a[2] = {nullptr, nullptr};
    int64_t sa[2] = {1, 1};
    for (size_t i = 0; i < s.args.size(); ++i) {
      if (s.args[i].isRegister) {
        a[i] = regPtr(s.args[i].index);
      } else {
        a[i] = operandPtrs[s.args[i].index];
        sa[i] = operandStrides[s.args[i].index];
      }
    }
    const float p0 = s.p0, p1 = s.p1;
    switch (s.op) {
      case EpilogueOp::Add:
        mapBinary(a[0], sa[0], a[1], sa[1], dst, n, [](float x, float y) { return x + y; });
        break;
      case EpilogueOp::Sub:
        mapBinary(a[0], sa[0], a[1], sa[1], dst, n, [](float x, float y) { return x - y; });
        break;
      case EpilogueOp::Mul:
        mapBinary(a[0], sa[0], a[1], sa[1], dst, n, [](float x, float y) { return x * y; });
        break;
      case EpilogueOp::Div:
        mapBinary(a[0], sa[0], a[1], sa[1], dst, n, [](float x, float y) { return x / y; });
        break;
      case EpilogueOp::AddScaled:
        mapBinary(a[0], sa[0], a[1], sa[1], dst, n, [p0](float x, float y) { return x + p0 * y; });
        break;
      case EpilogueOp::Relu:
        mapUnary(a[0], sa[0], dst, n, [](float x) { return x > 0.0f ? x : 0.0f; });
        break;
      case EpilogueOp::LeakyRelu:
        mapUnary(a[0], sa[0], dst, n, [p0](float x) { return x < 0.0f ? p0 * x : x; });
        break;
      case EpilogueOp::Clip:
        mapUnary(a[0], sa[0], dst, n, [p0, p1](float x) { return std::min(std::max(x, p0), p1); });
        break;
      case EpilogueOp::Sigmoid:
        mapUnary(a[0], sa[0], dst, n, sigmoidOf);
        break;
      case EpilogueOp::Tanh:
        mapUnary(a[0], sa[0], dst, n, [](float x) { return native::fastTanh(x); });
        break;
      case EpilogueOp::HardSwish:
        mapUnary(a[0], sa[0], dst, n,
                 [](float x) { return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f)); });
        break;
      case EpilogueOp::HardSigmoid:
        mapUnary(a[0], sa[0], dst, n,
                 [p0, p1](float x) { return std::max(0.0f, std::min(1.0f, p0 * x + p1)); });
        break;
      case EpilogueOp::Elu:
        mapUnary(a[0], sa[0], dst, n,
                 [p0](float x) { return x < 0.0f ? p0 * (std::exp(x) - 1.0f) : x; });
        break;
      case EpilogueOp::Erf:
        mapUnary(a[0], sa[0], dst, n, [](float x) { return native::fastErf(x); });
        break;
      case EpilogueOp::Gelu:
        mapUnary(a[0], sa[0], dst, n, geluOf);
        break;
      case EpilogueOp::GeluTanh:
        mapUnary(a[0], sa[0], dst, n, geluTanhOf);
        break;
      case EpilogueOp::Identity:
        mapUnary(a[0], sa[0], dst, n, [](float x) { return x; });
        break;
    }
  }
  // Registers that are outputs (other than the anchor's own buffer and the
  // directly written last step) leave the tile now.
  for (const Step& s : steps_) {
    const int o = outputOf(s.out);
    if (o < 0 || s.direct) continue;
    std::memcpy(b.outputs[static_cast<size_t>(o)] + pos, regPtr(s.out),
                static_cast<size_t>(n) * sizeof(float));
  }
}

std::string Epilogue::toString() const {
  std::string s;
  for (const Step& st : steps_) {
    if (!s.empty()) s += "; ";
    s += std::string(epilogueOpName(st.op)) + "(";
    for (size_t i = 0; i < st.args.size(); ++i) {
      if (i) s += ", ";
      s += (st.args[i].isRegister ? "r" : "op") + std::to_string(st.args[i].index);
    }
    s += ") -> r" + std::to_string(st.out);
  }
  return s;
}

}  // namespace collage::openblas
