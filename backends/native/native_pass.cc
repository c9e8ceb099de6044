// The evaluator's loops compare floats in selects (clamps, ReLU-like ops,
// the range reduction of exp): with the default -ftrapping-math GCC will not
// if-convert them and leaves the loops scalar. Nothing here reads the FP
// exception flags, so this file gives them up (first, so that every function
// in it, headers included, shares the options and still inlines).
#pragma GCC optimize("no-trapping-math")

#include "backends/native/native_pass_impl.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "backends/native/native_math.h"
#include "core/ir/error.h"

namespace collage::native {

using namespace pass;

// ---------------------------------------------------------------------------
// Affine

void Affine::addScaled(const Affine& o, int64_t mul) {
  c += o.c * mul;
  if (o.a.size() > a.size()) a.resize(o.a.size(), 0);
  for (size_t d = 0; d < o.a.size(); ++d) a[d] += o.a[d] * mul;
}

void Affine::addCoef(size_t d, int64_t v) {
  if (d >= a.size()) a.resize(d + 1, 0);
  a[d] += v;
}

bool Affine::isConstant() const {
  for (int64_t v : a)
    if (v != 0) return false;
  return true;
}

void Affine::trim() {
  while (!a.empty() && a.back() == 0) a.pop_back();
}

bool Affine::operator==(const Affine& o) const {
  if (c != o.c) return false;
  const size_t n = std::max(a.size(), o.a.size());
  for (size_t d = 0; d < n; ++d)
    if (coef(d) != o.coef(d)) return false;
  return true;
}

const char* opName(Op op) {
  static const char* const names[] = {
      "Leaf", "Const", "Relu", "Neg", "Abs", "Sign", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt",
      "Reciprocal", "Erf", "Floor", "Ceil", "Sin", "Cos", "Softplus", "Softsign", "HardSwish",
      "Not", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "Gelu", "GeluTanh", "Clip", "ToBool",
      "Square", "Round", "Add", "Sub", "Mul", "Div", "Mod", "FMod", "Pow", "Max", "Min", "Equal",
      "Less", "Greater", "LessEq", "GreaterEq", "And", "Or", "Xor", "PRelu", "Where", "ReduceSum",
      "ReduceMax", "ReduceMin", "ReduceProd"};
  const size_t i = static_cast<size_t>(op);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "?";
}

namespace {


// ---- Elementwise loop helpers (each a plain loop GCC vectorises). ----

// The loops live in small out-of-line functions, one per op and operand
// shape: inside the (huge) evaluator GCC would stop inlining the math and
// leave the loops scalar.
template <class F>
__attribute__((noinline)) void loopV(float* __restrict o, const float* __restrict x, int n, F f) {
  for (int j = 0; j < n; ++j) o[j] = f(x[j]);
}
template <class F>
__attribute__((noinline)) void loopVV(float* __restrict o, const float* __restrict x,
                                      const float* __restrict y, int n, F f) {
  for (int j = 0; j < n; ++j) o[j] = f(x[j], y[j]);
}
template <class F>
__attribute__((noinline)) void loopVS(float* __restrict o, const float* __restrict x, float y, int n, F f) {
  for (int j = 0; j < n; ++j) o[j] = f(x[j], y);
}
template <class F>
__attribute__((noinline)) void loopSV(float* __restrict o, float x, const float* __restrict y, int n, F f) {
  for (int j = 0; j < n; ++j) o[j] = f(x, y[j]);
}

template <class F>
inline bool un(float* o, Operand a, int n, F f) {
  if (a.vec) {
    loopV(o, a.p, n, f);
    return true;
  }
  o[0] = f(a.p[0]);
  return false;
}

template <class F>
inline bool bin(float* o, Operand a, Operand b, int n, F f) {
  if (a.vec && b.vec) {
    loopVV(o, a.p, b.p, n, f);
    return true;
  }
  if (a.vec) {
    loopVS(o, a.p, b.p[0], n, f);
    return true;
  }
  if (b.vec) {
    loopSV(o, a.p[0], b.p, n, f);
    return true;
  }
  o[0] = f(a.p[0], b.p[0]);
  return false;
}

inline float b2f(bool v) { return v ? 1.0f : 0.0f; }

template <class T>
inline float loadAs(const void* base, int64_t i) {
  return static_cast<float>(static_cast<const T*>(base)[i]);
}

// Reads element i of a buffer of `type` as float.
inline float loadAny(const void* base, ElementType type, int64_t i) {
  switch (type) {
    case ElementType::Float32: return loadAs<float>(base, i);
    case ElementType::Float64: return loadAs<double>(base, i);
    case ElementType::Int8: return loadAs<int8_t>(base, i);
    case ElementType::Int16: return loadAs<int16_t>(base, i);
    case ElementType::Int32: return loadAs<int32_t>(base, i);
    case ElementType::Int64: return loadAs<int64_t>(base, i);
    case ElementType::UInt8: return loadAs<uint8_t>(base, i);
    case ElementType::UInt16: return loadAs<uint16_t>(base, i);
    case ElementType::UInt32: return loadAs<uint32_t>(base, i);
    case ElementType::UInt64: return loadAs<uint64_t>(base, i);
    case ElementType::Bool: return static_cast<const uint8_t*>(base)[i] ? 1.0f : 0.0f;
    default: return 0.0f;
  }
}

inline int64_t loadIndex(const void* base, ElementType type, int64_t i, int64_t dim) {
  int64_t v = type == ElementType::Int32 ? static_cast<const int32_t*>(base)[i]
                                         : static_cast<const int64_t*>(base)[i];
  return v < 0 ? v + dim : v;
}

template <class T>
void gatherStrided(float* __restrict o, const void* base, int64_t off, int64_t stride, int n) {
  const T* p = static_cast<const T*>(base) + off;
  if (stride == 1) {
    for (int j = 0; j < n; ++j) o[j] = static_cast<float>(p[j]);
  } else {
    for (int j = 0; j < n; ++j) o[j] = static_cast<float>(p[j * stride]);
  }
}

void loadStrided(float* o, const void* base, ElementType type, int64_t off, int64_t stride, int n) {
  switch (type) {
    case ElementType::Float32: gatherStrided<float>(o, base, off, stride, n); return;
    case ElementType::Float64: gatherStrided<double>(o, base, off, stride, n); return;
    case ElementType::Int8: gatherStrided<int8_t>(o, base, off, stride, n); return;
    case ElementType::Int16: gatherStrided<int16_t>(o, base, off, stride, n); return;
    case ElementType::Int32: gatherStrided<int32_t>(o, base, off, stride, n); return;
    case ElementType::Int64: gatherStrided<int64_t>(o, base, off, stride, n); return;
    case ElementType::UInt8: gatherStrided<uint8_t>(o, base, off, stride, n); return;
    case ElementType::UInt16: gatherStrided<uint16_t>(o, base, off, stride, n); return;
    case ElementType::UInt32: gatherStrided<uint32_t>(o, base, off, stride, n); return;
    case ElementType::UInt64: gatherStrided<uint64_t>(o, base, off, stride, n); return;
    case ElementType::Bool: {
      const uint8_t* p = static_cast<const uint8_t*>(base) + off;
      for (int j = 0; j < n; ++j) o[j] = p[j * stride] ? 1.0f : 0.0f;
      return;
    }
    default:
      for (int j = 0; j < n; ++j) o[j] = 0.0f;
  }
}

template <typename Q>
void storeIntegers(Q* __restrict d, int64_t stride, Operand src, int n) {
  // A NaN passes the lowering's Clip (comparisons with it are false): it is
  // stored as the type's lowest value, as the reference quantises it
  // (core/ops/requantize.h), never converted to an integer (undefined).
  const auto integer = [](float v) {
    return v == v ? static_cast<Q>(static_cast<int32_t>(v)) : std::numeric_limits<Q>::min();
  };
  if (stride == 1 && src.vec) {
    for (int j = 0; j < n; ++j) d[j] = integer(src.p[j]);
  } else {
    for (int j = 0; j < n; ++j) d[j * stride] = integer(src.p[src.vec ? j : 0]);
  }
}

// Writes n values (or one value repeated, when !src.vec) converted to `type`.
// With `stream`, contiguous float runs go out as non-temporal stores: an
// output larger than the caches is then written without first being read
// into them (a third less memory traffic for an elementwise pass).
void storeValues(void* base, ElementType type, int64_t off, int64_t stride, Operand src, int n,
                 bool stream = false) {
  if (type == ElementType::Float32) {
    float* __restrict d = static_cast<float*>(base) + off;
    if (stride == 1 && src.vec) {
#ifdef __AVX__
      if (stream && (reinterpret_cast<uintptr_t>(d) & 31) == 0) {
        int j = 0;
        for (; j + 8 <= n; j += 8) _mm256_stream_ps(d + j, _mm256_loadu_ps(src.p + j));
        for (; j < n; ++j) d[j] = src.p[j];
        return;
      }
#endif
      if (d != src.p) std::memcpy(d, src.p, static_cast<size_t>(n) * sizeof(float));
    } else if (src.vec) {
      for (int j = 0; j < n; ++j) d[j * stride] = src.p[j];
    } else {
      const float v = src.p[0];
      for (int j = 0; j < n; ++j) d[j * stride] = v;
    }
    return;
  }
  if (type == ElementType::Bool) {
    uint8_t* d = static_cast<uint8_t*>(base) + off;
    for (int j = 0; j < n; ++j) d[j * stride] = src.p[src.vec ? j : 0] != 0.0f ? 1 : 0;
    return;
  }
  // A QuantizeLinear's integers: already rounded and clamped to the type's
  // range in float32 (the lowering's Clip), so the conversion is exact.
  if (type == ElementType::UInt8) {
    storeIntegers(static_cast<uint8_t*>(base) + off, stride, src, n);
    return;
  }
  if (type == ElementType::Int8) {
    storeIntegers(static_cast<int8_t*>(base) + off, stride, src, n);
    return;
  }
  // Stores of other types are never planned (the lowering keeps them off).
}

}  // namespace
// A leaf's values over the block: a pointer into its buffer where the
// block can be read in place, or null once they are loaded into `o`.
// (Always inlined: it was a case of evalEntries' switch, and stays as fast.)
__attribute__((always_inline)) inline const float* CompiledPass::Impl::loadLeaf(
    const IrNode& node, bool isVec, int m, float* o, const int64_t* off,
    const BufferTable& buffers) const {
  const Leaf& leaf = prog.leaves[node.leaf];
  const LeafInfo& li = leafInfo[node.leaf];
  const void* base = buffers.ptr[leaf.buffer];
  const int64_t o0 = off[li.form];
  if (li.direct && isVec) return static_cast<const float*>(base) + o0;
  const int64_t vs = formInner[li.form].back();
  bool blockConstantIndex = true;
  for (int32_t f : li.indForms) blockConstantIndex = blockConstantIndex && formInner[f].back() == 0;
  if (blockConstantIndex) {
    // No index varies along the block (an embedding lookup): one
    // offset for the block, then a plain (often direct) read.
    int64_t at = o0;
    for (size_t k = 0; k < leaf.ind.size(); ++k) {
      const Indirect& ind = leaf.ind[k];
      at += ind.mul * loadIndex(buffers.ptr[ind.buffer], ind.type, off[li.indForms[k]], ind.dim);
    }
    if (isVec && vs == 1 && leaf.type == ElementType::Float32)
      return static_cast<const float*>(base) + at;
    loadStrided(o, base, leaf.type, at, isVec ? vs : 0, m);
  } else {
    for (int j = 0; j < m; ++j) {
      int64_t at = o0 + j * vs;
      for (size_t k = 0; k < leaf.ind.size(); ++k) {
        const Indirect& ind = leaf.ind[k];
        const int32_t f = li.indForms[k];
        at += ind.mul * loadIndex(buffers.ptr[ind.buffer], ind.type,
                                  off[f] + j * formInner[f].back(), ind.dim);
      }
      o[j] = loadAny(base, leaf.type, at);
    }
  }
  return nullptr;
}

// Evaluates a list of entries over n elements (n == 1 for uniform lists),
// with offsets `off` for the block's first element. Its length is the
// switch over ops, one case a line or two, each calling a vectorised loop
// helper: a table, kept in one piece so that it reads (and compiles) as one.
void CompiledPass::Impl::evalEntries(const std::vector<Entry>& entries, int n, ThreadState& ts,
                                     const int64_t* off, const BufferTable& buffers,
                                     int64_t pos) const {
  for (const Entry& e : entries) {
    const IrNode& node = prog.nodes[e.node];
    float* o;
    if (e.cache >= 0) {
      float* c = ts.rowCache.data() + static_cast<size_t>(e.cache) * innerTotal + pos;
      if (e.cacheRead) {
        ts.opnd[e.node] = Operand{c, true};
        continue;
      }
      o = c;
    } else if (e.slot == -2)
      o = &ts.uni[e.node];
    else if (e.store >= 0)
      o = static_cast<float*>(buffers.ptr[prog.stores[e.store].buffer]) + off[storeForm[e.store]];
    else if (e.slot >= 0)
      o = ts.slots + static_cast<size_t>(e.slot) * block;
    else
      o = nullptr;
    const bool isVec = e.slot != -2 && vec[e.node];
    const int m = isVec ? n : 1;
    Operand a{nullptr, false}, b{nullptr, false}, c{nullptr, false};
    if (node.in[0] >= 0) a = ts.opnd[node.in[0]];
    if (node.in[1] >= 0) b = ts.opnd[node.in[1]];
    if (node.in[2] >= 0) c = ts.opnd[node.in[2]];
    const float p0 = node.p0, p1 = node.p1;
    bool rv = false;
    switch (node.op) {
      case Op::Leaf: {
        if (const float* in = loadLeaf(node, isVec, m, o, off, buffers)) {
          ts.opnd[e.node] = Operand{in, true};
          continue;
        }
        rv = isVec;
        break;
      }
      case Op::Const: o[0] = p0; rv = false; break;
      case Op::Relu: rv = un(o, a, m, [](float x) { return x > 0.0f ? x : 0.0f; }); break;
      case Op::Neg: rv = un(o, a, m, [](float x) { return -x; }); break;
      case Op::Abs: rv = un(o, a, m, [](float x) { return std::fabs(x); }); break;
      case Op::Sign:
        rv = un(o, a, m, [](float x) { return b2f(0.0f < x) - b2f(x < 0.0f); });
        break;
      case Op::Sigmoid: rv = un(o, a, m, [](float x) { return fastSigmoid(x); }); break;
      case Op::Tanh: rv = un(o, a, m, [](float x) { return fastTanh(x); }); break;
      case Op::Exp: rv = un(o, a, m, [](float x) { return fastExp(x); }); break;
      case Op::Log: rv = un(o, a, m, [](float x) { return fastLog(x); }); break;
      case Op::Sqrt: rv = un(o, a, m, [](float x) { return std::sqrt(x); }); break;
      case Op::Reciprocal: rv = un(o, a, m, [](float x) { return 1.0f / x; }); break;
      case Op::Erf: rv = un(o, a, m, [](float x) { return fastErf(x); }); break;
      case Op::Floor: rv = un(o, a, m, [](float x) { return std::floor(x); }); break;
      case Op::Ceil: rv = un(o, a, m, [](float x) { return std::ceil(x); }); break;
      case Op::Sin: rv = un(o, a, m, [](float x) { return std::sin(x); }); break;
      case Op::Cos: rv = un(o, a, m, [](float x) { return std::cos(x); }); break;
      case Op::Softplus:
        rv = un(o, a, m, [](float x) { return x > 30.0f ? x : fastLog(1.0f + fastExp(x)); });
        break;
      case Op::Softsign: rv = un(o, a, m, [](float x) { return x / (1.0f + std::fabs(x)); }); break;
      case Op::HardSwish:
        rv = un(o, a, m, [](float x) {
          return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f));
        });
        break;
      case Op::Not: rv = un(o, a, m, [](float x) { return b2f(x == 0.0f); }); break;
      case Op::LeakyRelu: rv = un(o, a, m, [p0](float x) { return x < 0.0f ? p0 * x : x; }); break;
      case Op::Elu:
        rv = un(o, a, m, [p0](float x) { return x < 0.0f ? p0 * (fastExp(x) - 1.0f) : x; });
        break;
      case Op::Selu:
        rv = un(o, a, m, [p0, p1](float x) {
          return x > 0.0f ? p1 * x : p1 * (p0 * fastExp(x) - p0);
        });
        break;
      case Op::HardSigmoid:
        rv = un(o, a, m, [p0, p1](float x) {
          return std::max(0.0f, std::min(1.0f, p0 * x + p1));
        });
        break;
      case Op::Gelu:
        rv = un(o, a, m, [](float x) {
          return 0.5f * x * (1.0f + fastErf(x * 0.7071067811865476f));
        });
        break;
      case Op::GeluTanh:
        rv = un(o, a, m, [](float x) {
          return 0.5f * x * (1.0f + fastTanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
        });
        break;
      case Op::Clip:
        rv = un(o, a, m, [p0, p1](float x) {
          x = x < p0 ? p0 : x;
          return x > p1 ? p1 : x;
        });
        break;
      case Op::ToBool: rv = un(o, a, m, [](float x) { return b2f(x != 0.0f); }); break;
      case Op::Square: rv = un(o, a, m, [](float x) { return x * x; }); break;
      // nearbyint in the default rounding mode, as the reference's
      // QuantizeLinear rounds (core/ops/quantize_ops.cc).
      case Op::Round: rv = un(o, a, m, [](float x) { return std::nearbyint(x); }); break;
      case Op::Add: rv = bin(o, a, b, m, [](float x, float y) { return x + y; }); break;
      case Op::Sub: rv = bin(o, a, b, m, [](float x, float y) { return x - y; }); break;
      case Op::Mul: rv = bin(o, a, b, m, [](float x, float y) { return x * y; }); break;
      case Op::Div: rv = bin(o, a, b, m, [](float x, float y) { return x / y; }); break;
      case Op::Mod:
        rv = bin(o, a, b, m, [](float x, float y) {
          float r = std::fmod(x, y);
          if (r != 0.0f && ((r < 0.0f) != (y < 0.0f))) r += y;
          return r;
        });
        break;
      case Op::FMod: rv = bin(o, a, b, m, [](float x, float y) { return std::fmod(x, y); }); break;
      case Op::Pow:
        rv = bin(o, a, b, m, [](float x, float y) { return y == 2.0f ? x * x : std::pow(x, y); });
        break;
      case Op::Max: rv = bin(o, a, b, m, [](float x, float y) { return x < y ? y : x; }); break;
      case Op::Min: rv = bin(o, a, b, m, [](float x, float y) { return y < x ? y : x; }); break;
      case Op::Equal: rv = bin(o, a, b, m, [](float x, float y) { return b2f(x == y); }); break;
      case Op::Less: rv = bin(o, a, b, m, [](float x, float y) { return b2f(x < y); }); break;
      case Op::Greater: rv = bin(o, a, b, m, [](float x, float y) { return b2f(x > y); }); break;
      case Op::LessEq: rv = bin(o, a, b, m, [](float x, float y) { return b2f(x <= y); }); break;
      case Op::GreaterEq: rv = bin(o, a, b, m, [](float x, float y) { return b2f(x >= y); }); break;
      case Op::And:
        rv = bin(o, a, b, m, [](float x, float y) { return b2f(x != 0.0f && y != 0.0f); });
        break;
      case Op::Or:
        rv = bin(o, a, b, m, [](float x, float y) { return b2f(x != 0.0f || y != 0.0f); });
        break;
      case Op::Xor:
        rv = bin(o, a, b, m, [](float x, float y) { return b2f((x != 0.0f) != (y != 0.0f)); });
        break;
      case Op::PRelu:
        rv = bin(o, a, b, m, [](float x, float s) { return x < 0.0f ? s * x : x; });
        break;
      case Op::Where: {
        const int sc = a.vec ? 1 : 0, sx = b.vec ? 1 : 0, sy = c.vec ? 1 : 0;
        rv = a.vec || b.vec || c.vec;
        const int k = rv ? m : 1;
        for (int j = 0; j < k; ++j) o[j] = a.p[j * sc] != 0.0f ? b.p[j * sx] : c.p[j * sy];
        break;
      }
      case Op::ReduceSum:
      case Op::ReduceMax:
      case Op::ReduceMin:
      case Op::ReduceProd:
        COLLAGE_CHECK(false, "a reduction in an evaluation list");
    }
    ts.opnd[e.node] = Operand{o, rv};
  }
}

namespace {

inline void accumulate(Op op, double& acc, Operand x, int n) {
  switch (op) {
    case Op::ReduceSum: {
      if (!x.vec) {
        acc += static_cast<double>(x.p[0]) * n;
        return;
      }
      float s = 0.0f;
      const float* __restrict p = x.p;
#pragma omp simd reduction(+ : s)
      for (int j = 0; j < n; ++j) s += p[j];
      acc += s;
      return;
    }
    case Op::ReduceMax: {
      float m = -std::numeric_limits<float>::infinity();
      const float* __restrict p = x.p;
      const int k = x.vec ? n : 1;
#pragma omp simd reduction(max : m)
      for (int j = 0; j < k; ++j) m = p[j] > m ? p[j] : m;
      if (m > acc) acc = m;
      return;
    }
    case Op::ReduceMin: {
      float m = std::numeric_limits<float>::infinity();
      const float* __restrict p = x.p;
      const int k = x.vec ? n : 1;
#pragma omp simd reduction(min : m)
      for (int j = 0; j < k; ++j) m = p[j] < m ? p[j] : m;
      if (m < acc) acc = m;
      return;
    }
    case Op::ReduceProd: {
      for (int j = 0; j < n; ++j) acc *= x.p[x.vec ? j : 0];
      return;
    }
    default: return;
  }
}

inline double reduceInit(Op op) {
  switch (op) {
    case Op::ReduceMax: return -std::numeric_limits<double>::infinity();
    case Op::ReduceMin: return std::numeric_limits<double>::infinity();
    case Op::ReduceProd: return 1.0;
    default: return 0.0;
  }
}

}  // namespace

// Sweeps the inner space of one row between vb and ve along the vector dim.
void CompiledPass::Impl::sweep(const LoopPlan& loop, int64_t vb, int64_t ve, ThreadState& ts,
                               const BufferTable& buffers) const {
  const size_t innerRank = innerSizes.size();
  const size_t forms = formC.size();
  int64_t outerCombos = 1;
  for (size_t i = 0; i + 1 < innerRank; ++i) outerCombos *= innerSizes[i];
  std::fill(ts.innerIdx.begin(), ts.innerIdx.end(), 0);
  for (int64_t combo = 0; combo < outerCombos; ++combo) {
    for (size_t f = 0; f < forms; ++f) {
      int64_t o = ts.rowOff[f];
      for (size_t i = 0; i + 1 < innerRank; ++i) o += ts.innerIdx[i] * formInner[f][i];
      ts.blkBase[f] = o;
    }
    for (int64_t j0 = vb; j0 < ve; j0 += block) {
      const int n = static_cast<int>(std::min<int64_t>(block, ve - j0));
      for (size_t f = 0; f < forms; ++f) ts.off[f] = ts.blkBase[f] + j0 * formInner[f].back();
      evalEntries(loop.entries, n, ts, ts.off.data(), buffers, combo * vecLen + j0);
      for (int32_t r : loop.reductions)
        accumulate(prog.nodes[r].op, ts.acc[r], ts.opnd[prog.nodes[r].in[0]], n);
      storeBlock(loop, n, ts, buffers);
    }
    for (size_t i = innerRank - 1; i-- > 0;) {
      if (++ts.innerIdx[i] < innerSizes[i]) break;
      ts.innerIdx[i] = 0;
    }
  }
}

void CompiledPass::Impl::storeBlock(const LoopPlan& loop, int n, ThreadState& ts,
                                    const BufferTable& buffers) const {
  for (int32_t s : loop.stores) {
    const Store& st = prog.stores[s];
    const Operand src = ts.opnd[st.node];
    const int32_t f = storeForm[s];
    // Computed in place (an entry that writes its float store directly):
    // nothing to copy. Only a float32 store can be: for an 8-bit store the
    // float pointer arithmetic below names no element of it, and once
    // pointed by chance at the thread's scratch block, so that block's store
    // was skipped (one channels-last position of a u8 output left unwritten,
    // in a few runs out of a hundred, wherever the heap put the scratch).
    if (st.type == ElementType::Float32 && src.vec &&
        src.p == static_cast<float*>(buffers.ptr[st.buffer]) + ts.off[f])
      continue;
    storeValues(buffers.ptr[st.buffer], st.type, ts.off[f], formInner[f].back(), src, n, stream);
  }
}

// Offsets of every form at the start of a row, from its outer coordinates.
void CompiledPass::Impl::rowOffsets(int64_t row, int64_t* out) const {
  const size_t forms = formC.size();
  for (size_t f = 0; f < forms; ++f) out[f] = formC[f];
  int64_t r = row;
  for (size_t d = outerSizes.size(); d-- > 0;) {
    const int64_t coord = r % outerSizes[d];
    r /= outerSizes[d];
    if (coord == 0) continue;
    for (size_t f = 0; f < forms; ++f) out[f] += coord * formOuter[f][d];
  }
}

void CompiledPass::Impl::runItem(int64_t item, ThreadState& ts, const BufferTable& buffers) const {
  const int64_t group = item / chunksPerRow;
  const int64_t chunk = item % chunksPerRow;
  if (tileRows > 1) {
    runTile(group, chunk, ts, buffers);
    return;
  }
  rowOffsets(group, ts.rowOff.data());
  auto evalUniform = [&](int l) { evalEntries(uniformLists[l], 1, ts, ts.rowOff.data(), buffers); };
  evalUniform(0);
  for (int l = 1; l <= levels; ++l) {
    const LoopPlan& loop = loops[l - 1];
    for (int32_t red : loop.reductions) ts.acc[red] = reduceInit(prog.nodes[red].op);
    sweep(loop, 0, vecLen, ts, buffers);
    for (int32_t red : loop.reductions) {
      const IrNode& node = prog.nodes[red];
      ts.uni[red] = static_cast<float>(ts.acc[red] / node.divisor);
    }
    evalUniform(l);
  }
  const int64_t vb = chunk * chunkLen;
  const int64_t ve = std::min(vecLen, vb + chunkLen);
  sweep(finalLoop, vb, ve, ts, buffers);
  if (chunk == 0)
    for (int32_t s : rowStores) {
      const Store& st = prog.stores[s];
      storeValues(buffers.ptr[st.buffer], st.type, ts.rowOff[storeForm[s]], 0, ts.opnd[st.node], 1);
    }
}

// Elementwise passes only: tileRows consecutive rows block by block.
void CompiledPass::Impl::runTile(int64_t group, int64_t chunk, ThreadState& ts,
                                 const BufferTable& buffers) const {
  const size_t forms = formC.size();
  const int64_t r0 = group * tileRows;
  const int64_t r1 = std::min(rows, r0 + tileRows);
  for (int64_t r = r0; r < r1; ++r) rowOffsets(r, ts.tileOff.data() + (r - r0) * forms);
  const int64_t vb = chunk * chunkLen;
  const int64_t ve = std::min(vecLen, vb + chunkLen);
  for (int64_t j0 = vb; j0 < ve; j0 += block) {
    const int n = static_cast<int>(std::min<int64_t>(block, ve - j0));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t* rowOff = ts.tileOff.data() + (r - r0) * forms;
      evalEntries(uniformLists[0], 1, ts, rowOff, buffers);
      for (size_t f = 0; f < forms; ++f) ts.off[f] = rowOff[f] + j0 * formInner[f].back();
      evalEntries(finalLoop.entries, n, ts, ts.off.data(), buffers);
      storeBlock(finalLoop, n, ts, buffers);
    }
  }
  if (chunk == 0)
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t* rowOff = ts.tileOff.data() + (r - r0) * forms;
      evalEntries(uniformLists[0], 1, ts, rowOff, buffers);
      for (int32_t s : rowStores) {
        const Store& st = prog.stores[s];
        storeValues(buffers.ptr[st.buffer], st.type, rowOff[storeForm[s]], 0, ts.opnd[st.node], 1);
      }
    }
}

namespace {
// Below this much work (elements times program nodes) a pass runs on the
// calling thread: waking the others costs more than it saves.
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

// Orders a thread's non-temporal stores before whatever reads the output next.
inline void fence() {
#ifdef __AVX__
  _mm_sfence();
#endif
}
}  // namespace

CompiledPass::CompiledPass(PassProgram program, int threads) : impl_(std::make_unique<Impl>()) {
  impl_->prog = std::move(program);
  impl_->threads = std::max(1, threads);
  impl_->build();
  impl_->plan();
  impl_->table = ByteTable::of(impl_->prog, impl_->threads);
}

CompiledPass::~CompiledPass() = default;

void CompiledPass::run(const BufferTable& buffers) {
  Impl& im = *impl_;
  if (im.items == 0) return;
  if (im.table) {
    im.table->run(buffers);
    return;
  }
  for (const Impl::IndexCheck& c : im.indexChecks) {
    const void* p = buffers.ptr[c.buffer];
    for (int64_t i = 0; i < c.count; ++i) {
      const int64_t v = c.type == ElementType::Int32 ? static_cast<const int32_t*>(p)[i]
                                                     : static_cast<const int64_t*>(p)[i];
      if (v < -c.dim || v >= c.dim)
        throw Error("pass " + im.prog.label + ": index " + std::to_string(v) +
                    " is out of range for dimension " + std::to_string(c.dim));
    }
  }
  const int64_t work = im.total * static_cast<int64_t>(im.prog.nodes.size() + 1);
  const int threads = im.items > 1 && work >= kParallelMinWork ? im.threads : 1;
  if (threads == 1) {
    for (int64_t it = 0; it < im.items; ++it) im.runItem(it, im.states[0], buffers);
    if (im.stream) fence();
    return;
  }
  // Dynamic: on a machine shared with other work a descheduled thread's
  // share is taken over instead of being waited for.
  const int64_t grain = std::max<int64_t>(1, im.items / (kItemsPerThread * threads));
#pragma omp parallel num_threads(threads)
  {
    ThreadState& ts = im.states[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, grain) nowait
    for (int64_t it = 0; it < im.items; ++it) im.runItem(it, ts, buffers);
    if (im.stream) fence();
  }
}

std::string CompiledPass::describe() const {
  const Impl& im = *impl_;
  if (im.table) return im.table->describe();
  std::ostringstream os;
  os << "pass " << im.prog.label << ": outer [";
  for (size_t i = 0; i < im.outerSizes.size(); ++i) os << (i ? "x" : "") << im.outerSizes[i];
  os << "] inner [";
  for (size_t i = 0; i < im.innerSizes.size(); ++i) os << (i ? "x" : "") << im.innerSizes[i];
  os << "] " << im.prog.nodes.size() << " nodes, " << im.levels << " reduction level(s), "
     << im.slotCount << " slots";
  if (im.cacheCount) os << ", " << im.cacheCount << " row-cached value(s)";
  if (im.tileRows > 1) os << ", tiles of " << im.tileRows << " rows";
  if (im.stream) os << ", streaming stores";
  return os.str();
}

}  // namespace collage::native
