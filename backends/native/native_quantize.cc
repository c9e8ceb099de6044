#include "backends/native/native_quantize.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/ops/op_helpers.h"
#include "core/ops/requantize.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
// GCC 12 reports '__Y may be used uninitialized' inside the AVX-512
// headers once their intrinsics are inlined into an OpenMP region (GCC bug
// 105593); the pragma covers the headers' lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define COLLAGE_QUANT_AVX512 1
#endif

namespace collage::native {

namespace {

// Elements per work item: enough to hide the scheduling, small enough that
// a 1-D tensor spreads over every thread.
constexpr int64_t kChunk = 1 << 14;

bool isQuantized(ElementType t) { return t == ElementType::UInt8 || t == ElementType::Int8; }

std::string stepLabel(const Node& node) { return "'" + node.name + "' (" + node.op + ")"; }

// The clamping bounds of a quantised type, as floats.
struct Range {
  float lo, hi;
};
Range rangeOf(bool isSigned) { return isSigned ? Range{-128.0f, 127.0f} : Range{0.0f, 255.0f}; }

// y[i] = saturate(nearbyint(x[i] / scale) + zp), as the reference writes it:
// where the scale has an exact reciprocal (exactReciprocal,
// core/ops/requantize.h: a power of two), the multiplication by it, which
// gives the same floats for every x; else the multiplication by RN(1/scale)
// where that decides the integer (reciprocalDecides), the division in the
// lanes where it does not (near a tie); the division alone where the scale
// or its reciprocal is not a normal float.
void quantizeRun(const float* x, int64_t n, float scale, float zp, Range r, uint8_t* y) {
  float inv = 0.0f;
  const bool multiply = exactReciprocal(scale, inv);
  int64_t i = 0;
#ifdef COLLAGE_QUANT_AVX512
  float rec = 0.0f;
  const bool bounded = !multiply && boundedReciprocal(scale, rec);
  const __m512 vs = _mm512_set1_ps(scale), vinv = _mm512_set1_ps(inv), vz = _mm512_set1_ps(zp);
  const __m512 vlo = _mm512_set1_ps(r.lo), vhi = _mm512_set1_ps(r.hi);
  auto store = [&](__m512 v, __mmask16 m) {
    v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vz);
    v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi);
    _mm512_mask_cvtepi32_storeu_epi8(y + i, m, _mm512_cvtps_epi32(v));
  };
  if (multiply) {
    for (; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
      store(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vinv), m);
    }
  } else if (bounded) {  // the product, divided where it does not decide (reciprocalDecides)
    const __m512 vrec = _mm512_set1_ps(rec);
    for (; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
      store(divideByReciprocal16(_mm512_maskz_loadu_ps(m, x + i), vrec, vs), m);
    }
  } else {
    for (; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
      store(_mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), vs), m);
    }
  }
#endif
  // The vector loop's max and min, NaN to r.lo included (requantize.h).
  for (; i < n; ++i)
    y[i] = static_cast<uint8_t>(static_cast<int32_t>(
        multiply ? saturateToRange(std::nearbyint(x[i] * inv) + zp, r.lo, r.hi) : quantizeValue(x[i], scale, zp, r.lo, r.hi)));
}

// y[i] = float(x[i] - zp) * scale.
template <class Q>
void dequantizeRun(const Q* x, int64_t n, int32_t zp, float scale, float* y) {
  int64_t i = 0;
#ifdef COLLAGE_QUANT_AVX512
  const __m512i vz = _mm512_set1_epi32(zp);
  const __m512 vs = _mm512_set1_ps(scale);
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m128i bytes = _mm_maskz_loadu_epi8(m, x + i);
    const __m512i w = std::is_signed_v<Q> ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(w, vz)), vs));
  }
#endif
  for (; i < n; ++i) y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zp) * scale;
}

// A tensor as rows of `inner` contiguous elements, row r using parameter
// r % len (per tensor: one row, parameter 0).
struct Layout {
  int64_t rows = 1, len = 1, inner = 0;
};

// Where the scale is per index of an axis, the axis (the reference's rule:
// a one-element scale of rank <= 1 is per tensor).
Layout layoutOf(const Node& node, const TensorType& x, const TensorType& scale) {
  Layout l;
  const int64_t n = x.numElements();
  if (scale.numElements() == 1 && scale.rank() <= 1) {
    l.inner = n;
    return l;
  }
  const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 1), x.rank());
  if (scale.rank() != 1 || scale.shape[0] != x.shape[static_cast<size_t>(axis)])
    throw Error(nodeLabel(node) + "scale " + scale.toString() + " must be a scalar or hold one value per index of axis " +
                std::to_string(axis) + " of " + x.toString());
  l.len = x.shape[static_cast<size_t>(axis)];
  l.inner = shapeProduct(x.shape, axis + 1, x.rank());
  l.rows = l.inner == 0 ? 0 : n / l.inner;
  return l;
}

// body(row, begin, end) over every chunk of every row, in parallel.
template <class Body>
void forChunks(const Layout& l, int threads, Body body) {
  const int64_t perRow = std::max<int64_t>(1, (l.inner + kChunk - 1) / kChunk);
  const int64_t items = l.rows * perRow;
  const bool parallel = threads > 1 && items > 1 && l.rows * l.inner >= kChunk;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t row = it / perRow, c = it % perRow;
    const int64_t b = c * kChunk, e = std::min(l.inner, b + kChunk);
    if (b < e) body(row, b, e);
  }
}

std::vector<int64_t> zeroPoints(const BufferTable& buffers, const NodeBinding& b, size_t i) {
  if (i >= b.inputs.size() || b.inputs[i] < 0) return {0};
  const TensorType& t = b.inputTypes[i];
  const void* p = buffers.ptr[b.inputs[i]];
  std::vector<int64_t> out(static_cast<size_t>(t.numElements()));
  for (size_t k = 0; k < out.size(); ++k)
    out[k] = t.elementType == ElementType::Int8 ? static_cast<const int8_t*>(p)[k] : static_cast<const uint8_t*>(p)[k];
  return out;
}

class QuantizeStep : public Step {
 public:
  QuantizeStep(const NodeBinding& b, int threads) : b_(b), threads_(threads) {
    layout_ = layoutOf(b.node, b.inputTypes[0], b.inputTypes[1]);
  }
  std::string describe() const override { return stepLabel(b_.node) + " (vectorised quantise)"; }
  void run(const BufferTable& buffers) override {
    const float* x = static_cast<const float*>(buffers.ptr[b_.inputs[0]]);
    const float* scale = static_cast<const float*>(buffers.ptr[b_.inputs[1]]);
    const std::vector<int64_t> zp = zeroPoints(buffers, b_, 2);
    const Range r = rangeOf(b_.outputTypes[0].elementType == ElementType::Int8);
    uint8_t* y = static_cast<uint8_t*>(buffers.ptr[b_.outputs[0]]);
    forChunks(layout_, threads_, [&](int64_t row, int64_t b, int64_t e) {
      const int64_t p = row % layout_.len, off = row * layout_.inner;
      quantizeRun(x + off + b, e - b, scale[p], static_cast<float>(zp[zp.size() > 1 ? p : 0]), r, y + off + b);
    });
  }

 private:
  NodeBinding b_;
  int threads_;
  Layout layout_;
};

class DequantizeStep : public Step {
 public:
  DequantizeStep(const NodeBinding& b, int threads) : b_(b), threads_(threads) {
    layout_ = layoutOf(b.node, b.inputTypes[0], b.inputTypes[1]);
  }
  std::string describe() const override { return stepLabel(b_.node) + " (vectorised dequantise)"; }
  void run(const BufferTable& buffers) override {
    const void* x = buffers.ptr[b_.inputs[0]];
    const float* scale = static_cast<const float*>(buffers.ptr[b_.inputs[1]]);
    const std::vector<int64_t> zp = zeroPoints(buffers, b_, 2);
    const bool isSigned = b_.inputTypes[0].elementType == ElementType::Int8;
    float* y = static_cast<float*>(buffers.ptr[b_.outputs[0]]);
    forChunks(layout_, threads_, [&](int64_t row, int64_t b, int64_t e) {
      const int64_t p = row % layout_.len, off = row * layout_.inner + b;
      const int32_t z = static_cast<int32_t>(zp[zp.size() > 1 ? p : 0]);
      if (isSigned)
        dequantizeRun(static_cast<const int8_t*>(x) + off, e - b, z, scale[p], y + off);
      else
        dequantizeRun(static_cast<const uint8_t*>(x) + off, e - b, z, scale[p], y + off);
    });
  }

 private:
  NodeBinding b_;
  int threads_;
  Layout layout_;
};

class DynamicQuantizeStep : public Step {
 public:
  DynamicQuantizeStep(const NodeBinding& b, int threads) : b_(b), threads_(threads) {}
  std::string describe() const override {
    return stepLabel(b_.node) + " (parallel min/max, vectorised quantise)";
  }
  void run(const BufferTable& buffers) override {
    const float* x = static_cast<const float*>(buffers.ptr[b_.inputs[0]]);
    const int64_t n = b_.inputTypes[0].numElements();
    // The range, each chunk's from 0 as the reference's is: min and max do
    // not depend on the order, so the chunks combine to the same floats.
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    float lo = 0, hi = 0;
#pragma omp parallel for schedule(static) num_threads(threads_) if (threads_ > 1 && chunks > 1) \
    reduction(min : lo) reduction(max : hi)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t b = c * kChunk, e = std::min(n, b + kChunk);
      float l = 0, h = 0;
      int64_t i = b;
#ifdef COLLAGE_QUANT_AVX512
      __m512 vl = _mm512_setzero_ps(), vh = _mm512_setzero_ps();
      for (; i + 16 <= e; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        // (v < lo) ? v : lo and (v > hi) ? v : hi, as std::min(lo, v) and
        // std::max(hi, v): a NaN is never taken.
        vl = _mm512_min_ps(v, vl);
        vh = _mm512_max_ps(v, vh);
      }
      alignas(64) float ls[16], hs[16];
      _mm512_store_ps(ls, vl);
      _mm512_store_ps(hs, vh);
      for (int k = 0; k < 16; ++k) {
        l = std::min(l, ls[k]);
        h = std::max(h, hs[k]);
      }
#endif
      for (; i < e; ++i) {
        l = std::min(l, x[i]);
        h = std::max(h, x[i]);
      }
      lo = std::min(lo, l);
      hi = std::max(hi, h);
    }
    const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;  // the reference's: 1 for all zeros
    const float zeroPoint =
        scale != 0 ? std::nearbyint(std::min(std::max(0.0f - lo / scale, 0.0f), 255.0f)) : 0.0f;
    if (b_.outputs[0] >= 0) {
      uint8_t* y = static_cast<uint8_t*>(buffers.ptr[b_.outputs[0]]);
      Layout l;
      l.inner = n;
      forChunks(l, threads_, [&](int64_t, int64_t b, int64_t e) {
        if (scale != 0)
          quantizeRun(x + b, e - b, scale, zeroPoint, rangeOf(false), y + b);
        else
          std::fill(y + b, y + e, uint8_t{0});
      });
    }
    if (b_.outputs.size() > 1 && b_.outputs[1] >= 0) *static_cast<float*>(buffers.ptr[b_.outputs[1]]) = scale;
    if (b_.outputs.size() > 2 && b_.outputs[2] >= 0)
      *static_cast<uint8_t*>(buffers.ptr[b_.outputs[2]]) = static_cast<uint8_t>(zeroPoint);
  }

 private:
  NodeBinding b_;
  int threads_;
};

bool has(const NodeBinding& b, size_t i) { return i < b.inputs.size() && b.inputs[i] >= 0; }

}  // namespace

std::unique_ptr<Step> makeQuantizeStep(const NodeBinding& b, int threads) {
  const std::string& op = b.node.op;
  if (b.outputs.empty()) return nullptr;
  if (op == "QuantizeLinear" && has(b, 0) && has(b, 1) && b.outputs[0] >= 0 &&
      b.inputTypes[0].elementType == ElementType::Float32 && b.inputTypes[1].elementType == ElementType::Float32 &&
      isQuantized(b.outputTypes[0].elementType))
    return std::make_unique<QuantizeStep>(b, threads);
  if (op == "DequantizeLinear" && has(b, 0) && has(b, 1) && b.outputs[0] >= 0 &&
      isQuantized(b.inputTypes[0].elementType) && b.inputTypes[1].elementType == ElementType::Float32)
    return std::make_unique<DequantizeStep>(b, threads);
  if (op == "DynamicQuantizeLinear" && has(b, 0) && b.inputTypes[0].elementType == ElementType::Float32)
    return std::make_unique<DynamicQuantizeStep>(b, threads);
  return nullptr;
}

}  // namespace collage::native
