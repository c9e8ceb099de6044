#include "backends/native/native_int8_products.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/native/native_int8_gemm.h"
#include "core/ops/conv_geometry.h"
#include "core/ops/op_helpers.h"
#include "core/ops/requantize.h"

#if defined(__AVX512F__) && defined(__AVX512VL__)
// GCC 12 reports '__Y may be used uninitialized' inside the AVX-512
// headers once their intrinsics are inlined into an OpenMP region (GCC bug
// 105593); the pragma covers the headers' lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define COLLAGE_INT8_REQUANT_AVX512 1
#endif

namespace collage::native {

namespace {

using int8::ColumnScratch;
using int8::kMr;
using int8::kNr;
using int8::PackedRows;

// The largest K for which sum (a - a_zp)(b - b_zp), each factor within
// [-255, 255], stays inside int32.
constexpr int64_t kMaxExactK = std::numeric_limits<int32_t>::max() / (255 * 255);

bool isQuantized(ElementType t) { return t == ElementType::UInt8 || t == ElementType::Int8; }

std::string stepLabel(const Node& node) { return "'" + node.name + "' (" + node.op + ")"; }

// A run-time parameter (zero point, scale, bias) as int64 / float values;
// empty when the input is absent.
std::vector<int64_t> readInts(const BufferTable& buffers, const NodeBinding& b, size_t i) {
  if (i >= b.inputs.size() || b.inputs[i] < 0) return {};
  const TensorType& t = b.inputTypes[i];
  const void* p = buffers.ptr[b.inputs[i]];
  const int64_t n = t.numElements();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    switch (t.elementType) {
      case ElementType::UInt8: out[k] = static_cast<const uint8_t*>(p)[k]; break;
      case ElementType::Int8: out[k] = static_cast<const int8_t*>(p)[k]; break;
      case ElementType::Int32: out[k] = static_cast<const int32_t*>(p)[k]; break;
      default: throw Error(nodeLabel(b.node) + "input " + std::to_string(i) + " is " + t.toString() +
                           ", not an integer tensor");
    }
  }
  return out;
}

std::vector<float> readFloats(const BufferTable& buffers, const NodeBinding& b, size_t i) {
  if (i >= b.inputs.size() || b.inputs[i] < 0) return {};
  const float* p = static_cast<const float*>(buffers.ptr[b.inputs[i]]);
  return std::vector<float>(p, p + b.inputTypes[i].numElements());
}

template <class V>
V at(const std::vector<V>& v, int64_t i, V fallback) {
  return v.empty() ? fallback : v[v.size() > 1 ? static_cast<size_t>(i) : 0];
}

// Runs body(task, scratch) for every task on up to `threads` threads, each
// thread with its own column scratch. A task multiplies `macsPerTask`;
// small ones (a first layer's K of 27) are handed out several at a time so
// that scheduling does not cost more than the work.
template <class Body>
void forTasks(int64_t tasks, int threads, int64_t K, double macsPerTask, Body body) {
  const bool parallel = threads > 1 && tasks > 1;
  const int64_t grain = std::clamp<int64_t>(static_cast<int64_t>((1 << 21) / std::max(1.0, macsPerTask)), 1,
                                            std::max<int64_t>(1, tasks / (4 * static_cast<int64_t>(threads))));
#pragma omp parallel num_threads(threads) if (parallel)
  {
    ColumnScratch s;
    s.reserve(K);
#pragma omp for schedule(dynamic, grain)
    for (int64_t t = 0; t < tasks; ++t) body(t, s);
  }
}

// How many chunks the row blocks are cut into so that there are about two
// tasks per thread.
int64_t rowChunks(int64_t otherTasks, int64_t blocks, int threads) {
  const int64_t want = (2 * static_cast<int64_t>(threads) + otherTasks - 1) / std::max<int64_t>(1, otherTasks);
  return std::clamp<int64_t>(want, 1, std::max<int64_t>(1, blocks));
}

// ---- Requantisation: y = saturate(round_half_even((acc + bias) * scale) + y_zp),
// in float32 as the reference computes it (core/ops/requantize.h), so the same bytes.
struct Requant {
  bool isSigned = false;
  float zp = 0, lo = 0, hi = 255;
};

inline uint8_t requantizeOne(int32_t acc, int32_t bias, float scale, const Requant& q) {
  const float v = requantizeValue(static_cast<int64_t>(acc) + bias, scale, q.zp, q.lo, q.hi);
  return static_cast<uint8_t>(static_cast<int32_t>(v));
}

// cnt values of one row; scales is one per value or (scalarScale) one for all.
void requantizeRow(const int32_t* acc, int32_t bias, const float* scales, float scalarScale,
                   const Requant& q, uint8_t* out, int64_t cnt) {
  int64_t j = 0;
#ifdef COLLAGE_INT8_REQUANT_AVX512
  const __m512i vb = _mm512_set1_epi32(bias);
  const __m512 vz = _mm512_set1_ps(q.zp), vlo = _mm512_set1_ps(q.lo), vhi = _mm512_set1_ps(q.hi);
  for (; j + 16 <= cnt; j += 16) {
    const __m512 s = scales ? _mm512_loadu_ps(scales + j) : _mm512_set1_ps(scalarScale);
    const __m512i a = _mm512_add_epi32(_mm512_loadu_si512(acc + j), vb);
    __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a), s),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, vz), vlo), vhi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
#endif
  for (; j < cnt; ++j) out[j] = requantizeOne(acc[j], bias, scales ? scales[j] : scalarScale, q);
}

Requant requantOf(ElementType y, int64_t zp) {
  Requant q;
  q.isSigned = y == ElementType::Int8;
  q.zp = static_cast<float>(zp);
  q.lo = q.isSigned ? -128 : 0;
  q.hi = q.isSigned ? 127 : 255;
  return q;
}

// ---------------------------------------------------------------------------
// ConvInteger / QLinearConv.

class Int8ConvStep : public Step {
 public:
  Int8ConvStep(const NodeBinding& b, int threads, bool qlinear)
      : b_(b), threads_(threads), qlinear_(qlinear) {
    const size_t wi = qlinear ? 3 : 1;
    geo_ = ConvGeometry::conv(b.node, b.inputTypes[0].shape, b.inputTypes[wi].shape).expandedTo(3);
    xSigned_ = b.inputTypes[0].elementType == ElementType::Int8;
    wSigned_ = b.inputTypes[wi].elementType == ElementType::Int8;
    groups_ = geo_.group;
    cg_ = geo_.inChannels / groups_;
    mg_ = geo_.outChannels / groups_;
    K_ = cg_ * geo_.kernelSize();
    pixels_ = geo_.outputSpatialSize();
  }

  int64_t K() const { return K_; }
  // One input channel per output channel: a GEMM of one row per group would
  // waste the micro-tile's other rows, so the window is summed directly.
  bool depthwise() const { return cg_ == 1; }

  std::string describe() const override {
    if (depthwise())
      return stepLabel(b_.node) + " (int8 direct depthwise, " + std::to_string(groups_) + " group(s))";
    return stepLabel(b_.node) + " (int8 im2col GEMM" + (int8::usesVnni() ? ", AVX-512 VNNI" : "") + ", " +
           std::to_string(groups_) + " group(s), K " + std::to_string(K_) + ")";
  }

  void run(const BufferTable& buffers) override {
    const NodeBinding& b = b_;
    if (b.outputTypes[0].numElements() == 0) return;
    const size_t wi = qlinear_ ? 3 : 1, xzi = 2, wzi = qlinear_ ? 5 : 3;
    const uint8_t* x = static_cast<const uint8_t*>(buffers.ptr[b.inputs[0]]);
    const uint8_t* w = static_cast<const uint8_t*>(buffers.ptr[b.inputs[wi]]);
    const std::vector<int64_t> xzp = readInts(buffers, b, xzi), wzp = readInts(buffers, b, wzi);
    if (xzp.size() > 1)
      throw Error(nodeLabel(b.node) + "x_zero_point must be a scalar, got " + b.inputTypes[xzi].toString());
    if (wzp.size() > 1 && static_cast<int64_t>(wzp.size()) != geo_.outChannels)
      throw Error(nodeLabel(b.node) + "w_zero_point must be a scalar or hold " +
                  std::to_string(geo_.outChannels) + " values, got " + b.inputTypes[wzi].toString());
    if (depthwise()) return runDepthwise(buffers, x, w, at<int64_t>(xzp, 0, 0), wzp);
    std::vector<PackedRows>& rows = rows_;
    rows.resize(static_cast<size_t>(groups_));
    for (int64_t g = 0; g < groups_; ++g)
      int8::packRows(rows[static_cast<size_t>(g)], w + g * mg_ * K_, wSigned_, mg_, K_, K_,
                     wzp.empty() ? nullptr : wzp.data() + (wzp.size() > 1 ? g * mg_ : 0),
                     static_cast<int64_t>(wzp.size()), threads_);
    const uint8_t flip = xSigned_ ? 0x80 : 0;
    const int32_t xz = int8::shiftColumnZeroPoint(at<int64_t>(xzp, 0, 0), xSigned_);
    const uint8_t pad = static_cast<uint8_t>(xz);

    std::vector<float> scale;
    std::vector<int64_t> bias;
    Requant q;
    if (qlinear_) requantParams(buffers, scale, bias, q);

    const int64_t colBlocks = (pixels_ + kNr - 1) / kNr;
    const int64_t blocks = rows.front().blocks;
    const int64_t outer = geo_.batch * groups_ * colBlocks;
    const int64_t chunks = rowChunks(outer, blocks, threads_);
    const int64_t inPlane = geo_.inputSpatialSize();
    void* y = buffers.ptr[b.outputs[0]];
    const double macs = static_cast<double>(kNr) * K_ * mg_ / static_cast<double>(chunks);
    forTasks(outer * chunks, threads_, K_, macs, [&](int64_t task, ColumnScratch& s) {
      const int64_t chunk = task % chunks, cb = (task / chunks) % colBlocks;
      const int64_t g = (task / chunks / colBlocks) % groups_, img = task / chunks / colBlocks / groups_;
      const int64_t n0 = cb * kNr, cnt = std::min<int64_t>(kNr, pixels_ - n0);
      im2col(x + (img * geo_.inChannels + g * cg_) * inPlane, n0, cnt, flip, pad, s.plain.data());
      std::fill(s.pzp.begin(), s.pzp.end(), xz);
      int8::prepareColumns(s, K_);
      const PackedRows& R = rows[static_cast<size_t>(g)];
      const int64_t b0 = blocks * chunk / chunks, b1 = blocks * (chunk + 1) / chunks;
      for (int64_t blk = b0; blk < b1; ++blk) {
        int8::multiplyBlock(R, blk, s);
        for (int r = 0; r < kMr && blk * kMr + r < mg_; ++r) {
          const int64_t oc = g * mg_ + blk * kMr + r;
          const int64_t at0 = (img * geo_.outChannels + oc) * pixels_ + n0;
          const int32_t* acc = s.tile + r * kNr;
          if (!qlinear_)
            std::memcpy(static_cast<int32_t*>(y) + at0, acc, static_cast<size_t>(cnt) * 4);
          else
            requantizeRow(acc, static_cast<int32_t>(at<int64_t>(bias, oc, 0)), nullptr,
                          scale[static_cast<size_t>(oc)], q, static_cast<uint8_t*>(y) + at0, cnt);
        }
      }
    });
  }

 private:
  // QLinearConv's requantisation: scale per output channel, as the reference computes it.
  void requantParams(const BufferTable& buffers, std::vector<float>& scale, std::vector<int64_t>& bias,
                     Requant& q) const {
    const std::vector<float> xs = readFloats(buffers, b_, 1), ws = readFloats(buffers, b_, 4),
                             ys = readFloats(buffers, b_, 6);
    for (int64_t m = 0; m < geo_.outChannels; ++m)
      scale.push_back(requantizeScale(xs[0], at<float>(ws, m, 1.0f), ys[0]));
    bias = readInts(buffers, b_, 8);
    q = requantOf(b_.outputTypes[0].elementType, at<int64_t>(readInts(buffers, b_, 7), 0, 0));
  }

  // Depthwise: each output plane is its input channel's window sums, one
  // output row at a time in an int32 row that every (kd, kh, kw) tap adds
  // to as one contiguous (stride 1) or strided loop over the row.
  void runDepthwise(const BufferTable& buffers, const uint8_t* x, const uint8_t* w, int64_t xzp,
                    const std::vector<int64_t>& wzp) {
    std::vector<float> scale;
    std::vector<int64_t> bias;
    Requant q;
    if (qlinear_) requantParams(buffers, scale, bias, q);
    void* y = buffers.ptr[b_.outputs[0]];
    if (xSigned_)
      depthwise(reinterpret_cast<const int8_t*>(x), w, xzp, wzp, scale, bias, q, y);
    else
      depthwise(x, w, xzp, wzp, scale, bias, q, y);
  }

  template <class X>
  void depthwise(const X* x, const uint8_t* w, int64_t xzp, const std::vector<int64_t>& wzp,
                 const std::vector<float>& scale, const std::vector<int64_t>& bias, const Requant& q,
                 void* y) const {
    const ConvGeometry& g = geo_;
    const int64_t ID = g.inputSpatial[0], IH = g.inputSpatial[1], IW = g.inputSpatial[2];
    const int64_t OD = g.outputSpatial[0], OH = g.outputSpatial[1], OW = g.outputSpatial[2];
    const int64_t taps = g.kernelSize(), planes = g.batch * g.outChannels;
    const int64_t sw = g.strides[2], dw = g.dilations[2], padL = g.padsBegin[2];
    // An input row as (x - zero point) in int32 over the padded width the
    // windows reach, padding 0: every tap is then a loop over the whole
    // output row with no bounds, which vectorises.
    const int64_t span = (OW - 1) * sw + (g.kernel[2] - 1) * dw + 1;
    const int32_t xz = static_cast<int32_t>(xzp);
#pragma omp parallel num_threads(threads_) if (threads_ > 1 && planes > 1)
    {
      std::vector<uint32_t> acc(static_cast<size_t>(OW));
      std::vector<int32_t> row(static_cast<size_t>(OW)), xr(static_cast<size_t>(span));
      std::vector<int32_t> wv(static_cast<size_t>(taps));
#pragma omp for schedule(dynamic)
      for (int64_t plane = 0; plane < planes; ++plane) {
        const int64_t img = plane / g.outChannels, oc = plane % g.outChannels;
        const X* xc = x + (img * g.inChannels + oc / mg_) * ID * IH * IW;
        const int32_t wz = static_cast<int32_t>(at<int64_t>(wzp, oc, 0));
        for (int64_t t = 0; t < taps; ++t) {
          const uint8_t raw = w[oc * taps + t];
          wv[t] = (wSigned_ ? static_cast<int32_t>(static_cast<int8_t>(raw)) : static_cast<int32_t>(raw)) - wz;
        }
        for (int64_t od = 0; od < OD; ++od)
          for (int64_t oh = 0; oh < OH; ++oh) {
            std::fill(acc.begin(), acc.end(), 0u);
            for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
              const int64_t id = od * g.strides[0] - g.padsBegin[0] + kd * g.dilations[0];
              for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
                const int64_t ih = oh * g.strides[1] - g.padsBegin[1] + kh * g.dilations[1];
                // Padding rows: (zero point - zero point) * w adds nothing.
                if (id < 0 || id >= ID || ih < 0 || ih >= IH) continue;
                const X* src = xc + (id * IH + ih) * IW;
                for (int64_t j = 0; j < span; ++j) {
                  const int64_t iw = j - padL;
                  xr[j] = iw >= 0 && iw < IW ? static_cast<int32_t>(src[iw]) - xz : 0;
                }
                const int32_t* wk = wv.data() + (kd * g.kernel[1] + kh) * g.kernel[2];
                uint32_t* a = acc.data();
                for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
                  const int32_t wt = wk[kw];
                  const int32_t* s = xr.data() + kw * dw;
                  // Each product fits int32; the sum wraps modulo 2^32 as the GEMM's does.
                  if (sw == 1)
                    for (int64_t o = 0; o < OW; ++o) a[o] += static_cast<uint32_t>(s[o] * wt);
                  else
                    for (int64_t o = 0; o < OW; ++o) a[o] += static_cast<uint32_t>(s[o * sw] * wt);
                }
              }
            }
            const int64_t at0 = ((plane * OD + od) * OH + oh) * OW;
            for (int64_t o = 0; o < OW; ++o) row[o] = static_cast<int32_t>(acc[o]);
            if (!qlinear_)
              std::memcpy(static_cast<int32_t*>(y) + at0, row.data(), static_cast<size_t>(OW) * 4);
            else
              requantizeRow(row.data(), static_cast<int32_t>(at<int64_t>(bias, oc, 0)), nullptr,
                            scale[static_cast<size_t>(oc)], q, static_cast<uint8_t*>(y) + at0, OW);
          }
      }
    }
  }

  // Rows k = (c, kd, kh, kw) of the patch matrix for output pixels
  // [n0, n0 + cnt) of one image and group, shifted (P'), into plain
  // (kNr bytes a row). Padding reads the zero point.
  void im2col(const uint8_t* x, int64_t n0, int64_t cnt, uint8_t flip, uint8_t pad, uint8_t* plain) const {
    const ConvGeometry& g = geo_;
    const int64_t ID = g.inputSpatial[0], IH = g.inputSpatial[1], IW = g.inputSpatial[2];
    const int64_t OH = g.outputSpatial[1], OW = g.outputSpatial[2];
    // The block's columns as runs along one output row.
    struct Run {
      int64_t j, len, od, oh, ow;
    };
    Run runs[kNr];
    int nruns = 0;
    for (int64_t j = 0, n = n0; j < cnt;) {
      const int64_t ow = n % OW, oh = (n / OW) % OH, od = n / OW / OH;
      const int64_t len = std::min(OW - ow, cnt - j);
      runs[nruns++] = {j, len, od, oh, ow};
      j += len;
      n += len;
    }
    const int64_t sw = g.strides[2];
    int64_t k = 0;
    for (int64_t c = 0; c < cg_; ++c)
      for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
        for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
          for (int64_t kw = 0; kw < g.kernel[2]; ++kw, ++k) {
            uint8_t* dst = plain + k * kNr;
            if (cnt < kNr) std::memset(dst + cnt, pad, static_cast<size_t>(kNr - cnt));
            for (int i = 0; i < nruns; ++i) {
              const Run& r = runs[i];
              uint8_t* d = dst + r.j;
              const int64_t id = r.od * g.strides[0] - g.padsBegin[0] + kd * g.dilations[0];
              const int64_t ih = r.oh * g.strides[1] - g.padsBegin[1] + kh * g.dilations[1];
              if (id < 0 || id >= ID || ih < 0 || ih >= IH) {
                std::memset(d, pad, static_cast<size_t>(r.len));
                continue;
              }
              const uint8_t* src = x + ((c * ID + id) * IH + ih) * IW;
              const int64_t iw0 = r.ow * sw - g.padsBegin[2] + kw * g.dilations[2];
              // Columns t with 0 <= iw0 + t * sw < IW.
              const int64_t t0 = iw0 >= 0 ? 0 : std::min(r.len, (-iw0 + sw - 1) / sw);
              const int64_t t1 = iw0 >= IW ? 0 : std::max(t0, std::min(r.len, (IW - iw0 + sw - 1) / sw));
              if (t0 > 0) std::memset(d, pad, static_cast<size_t>(t0));
              if (sw == 1 && flip == 0) {
                if (t1 > t0) std::memcpy(d + t0, src + iw0 + t0, static_cast<size_t>(t1 - t0));
              } else if (sw == 1) {
                const uint8_t* s = src + iw0;
                for (int64_t t = t0; t < t1; ++t) d[t] = s[t] ^ flip;
              } else {
                for (int64_t t = t0; t < t1; ++t) d[t] = src[iw0 + t * sw] ^ flip;
              }
              if (t1 < r.len) std::memset(d + t1, pad, static_cast<size_t>(r.len - t1));
            }
          }
  }

  NodeBinding b_;
  int threads_;
  bool qlinear_;
  ConvGeometry geo_;
  bool xSigned_ = false, wSigned_ = false;
  int64_t groups_ = 1, cg_ = 0, mg_ = 0, K_ = 0, pixels_ = 0;
  // The packed weights of each group, storage kept between runs (a kernel
  // is not reentrant: core/runtime/backend.h).
  std::vector<PackedRows> rows_;
};

// ---------------------------------------------------------------------------
// MatMulInteger / QLinearMatMul.

class Int8MatMulStep : public Step {
 public:
  Int8MatMulStep(const NodeBinding& b, int threads, bool qlinear)
      : b_(b), threads_(threads), qlinear_(qlinear) {
    const Shape& sa = b.inputTypes[0].shape;
    const Shape& sb = b.inputTypes[qlinear ? 3 : 1].shape;
    aSigned_ = b.inputTypes[0].elementType == ElementType::Int8;
    bSigned_ = b.inputTypes[qlinear ? 3 : 1].elementType == ElementType::Int8;
    M_ = sa[sa.size() - 2];
    K_ = sa.back();
    N_ = sb.back();
    const Shape& ys = b.outputTypes[0].shape;
    batch_ = Shape(ys.begin(), ys.end() - 2);
    batchA_ = Shape(sa.begin(), sa.end() - 2);
    batchB_ = Shape(sb.begin(), sb.end() - 2);
  }

  int64_t K() const { return K_; }

  std::string describe() const override {
    return stepLabel(b_.node) + " (int8 GEMM" + (int8::usesVnni() ? ", AVX-512 VNNI" : "") + ", " +
           std::to_string(M_) + "x" + std::to_string(N_) + "x" + std::to_string(K_) + ")";
  }

  void run(const BufferTable& buffers) override {
    const NodeBinding& b = b_;
    if (b.outputTypes[0].numElements() == 0) return;
    const size_t bi = qlinear_ ? 3 : 1, azi = 2, bzi = qlinear_ ? 5 : 3;
    const uint8_t* a = static_cast<const uint8_t*>(buffers.ptr[b.inputs[0]]);
    const uint8_t* bm = static_cast<const uint8_t*>(buffers.ptr[b.inputs[bi]]);
    const std::vector<int64_t> azp = readInts(buffers, b, azi), bzp = readInts(buffers, b, bzi);
    if (azp.size() > 1 && static_cast<int64_t>(azp.size()) != M_)
      throw Error(nodeLabel(b.node) + "a_zero_point must be a scalar or hold " + std::to_string(M_) + " values");
    if (bzp.size() > 1 && static_cast<int64_t>(bzp.size()) != N_)
      throw Error(nodeLabel(b.node) + "b_zero_point must be a scalar or hold " + std::to_string(N_) + " values");
    const int64_t aBatches = numElements(batchA_);
    std::vector<PackedRows>& rows = rows_;
    rows.resize(static_cast<size_t>(aBatches));
    for (int64_t i = 0; i < aBatches; ++i)
      int8::packRows(rows[static_cast<size_t>(i)], a + i * M_ * K_, aSigned_, M_, K_, K_,
                     azp.empty() ? nullptr : azp.data(), static_cast<int64_t>(azp.size()), threads_);
    std::vector<int32_t> bz(static_cast<size_t>(N_));
    for (int64_t n = 0; n < N_; ++n) bz[n] = int8::shiftColumnZeroPoint(at<int64_t>(bzp, n, 0), bSigned_);
    const uint8_t flip = bSigned_ ? 0x80 : 0;

    std::vector<float> as, bs;
    float ys = 1;
    Requant q;
    if (qlinear_) {
      as = readFloats(buffers, b, 1);
      bs = readFloats(buffers, b, 4);
      ys = readFloats(buffers, b, 6)[0];
      q = requantOf(b.outputTypes[0].elementType, at<int64_t>(readInts(buffers, b, 7), 0, 0));
    }

    const int64_t batches = numElements(batch_);
    const int64_t colBlocks = (N_ + kNr - 1) / kNr;
    const int64_t blocks = rows.front().blocks;
    const int64_t outer = batches * colBlocks;
    const int64_t chunks = rowChunks(outer, blocks, threads_);
    void* y = buffers.ptr[b.outputs[0]];
    const double macs = static_cast<double>(kNr) * K_ * M_ / static_cast<double>(chunks);
    forTasks(outer * chunks, threads_, K_, macs, [&](int64_t task, ColumnScratch& s) {
      const int64_t chunk = task % chunks, cb = (task / chunks) % colBlocks, bt = task / chunks / colBlocks;
      const int64_t n0 = cb * kNr, cnt = std::min<int64_t>(kNr, N_ - n0);
      const uint8_t* src = bm + batchOffset(batchB_, bt) * K_ * N_ + n0;
      for (int64_t k = 0; k < K_; ++k) {
        uint8_t* d = s.plain.data() + k * kNr;
        for (int64_t j = 0; j < cnt; ++j) d[j] = src[k * N_ + j] ^ flip;
        if (cnt < kNr) std::memset(d + cnt, 0, static_cast<size_t>(kNr - cnt));
      }
      for (int64_t j = 0; j < kNr; ++j) s.pzp[j] = j < cnt ? bz[n0 + j] : 0;
      int8::prepareColumns(s, K_);
      const PackedRows& R = rows[static_cast<size_t>(batchOffset(batchA_, bt))];
      const int64_t b0 = blocks * chunk / chunks, b1 = blocks * (chunk + 1) / chunks;
      float scales[kNr];
      for (int64_t blk = b0; blk < b1; ++blk) {
        int8::multiplyBlock(R, blk, s);
        for (int r = 0; r < kMr && blk * kMr + r < M_; ++r) {
          const int64_t m = blk * kMr + r;
          const int64_t at0 = (bt * M_ + m) * N_ + n0;
          const int32_t* acc = s.tile + r * kNr;
          if (!qlinear_) {
            std::memcpy(static_cast<int32_t*>(y) + at0, acc, static_cast<size_t>(cnt) * 4);
            continue;
          }
          const float am = at<float>(as, m, 1.0f);
          for (int64_t j = 0; j < cnt; ++j) scales[j] = requantizeScale(am, at<float>(bs, n0 + j, 1.0f), ys);
          requantizeRow(acc, 0, scales, 0, q, static_cast<uint8_t*>(y) + at0, cnt);
        }
      }
    });
  }

 private:
  // The batch index (in units of one matrix) of an operand with batch dims
  // `op` for output batch `index`, numpy broadcasting.
  int64_t batchOffset(const Shape& op, int64_t index) const {
    const int64_t lead = static_cast<int64_t>(batch_.size()) - static_cast<int64_t>(op.size());
    int64_t offset = 0, stride = 1;
    for (int64_t d = static_cast<int64_t>(batch_.size()) - 1; d >= 0; --d) {
      const int64_t coord = index % batch_[d];
      index /= batch_[d];
      if (d < lead) continue;
      const int64_t extent = op[d - lead];
      offset += (extent == 1 ? 0 : coord) * stride;
      stride *= extent;
    }
    return offset;
  }

  NodeBinding b_;
  int threads_;
  bool qlinear_;
  bool aSigned_ = false, bSigned_ = false;
  int64_t M_ = 0, K_ = 0, N_ = 0;
  Shape batch_, batchA_, batchB_;
  std::vector<PackedRows> rows_;  // A's packed batches, storage kept between runs
};

}  // namespace

std::unique_ptr<Step> makeInt8ProductStep(const NodeBinding& b, int threads) {
  const std::string& op = b.node.op;
  const bool conv = op == "ConvInteger" || op == "QLinearConv";
  const bool matmul = op == "MatMulInteger" || op == "QLinearMatMul";
  if (!conv && !matmul) return nullptr;
  const bool qlinear = op[0] == 'Q';
  // Required operands present and quantised; the registry's type inference
  // has checked the rest (shapes, zero point types).
  const size_t wi = qlinear ? 3 : 1;
  if (b.inputs.size() <= wi || b.inputs[0] < 0 || b.inputs[wi] < 0 || b.outputs.empty() || b.outputs[0] < 0)
    return nullptr;
  if (!isQuantized(b.inputTypes[0].elementType) || !isQuantized(b.inputTypes[wi].elementType)) return nullptr;
  if (qlinear) {
    for (size_t i : {size_t{1}, size_t{4}, size_t{6}})
      if (b.inputs.size() <= i || b.inputs[i] < 0) return nullptr;
    if (!isQuantized(b.outputTypes[0].elementType)) return nullptr;
  }
  if (conv) {
    auto step = std::make_unique<Int8ConvStep>(b, threads, qlinear);
    if (qlinear && step->K() > kMaxExactK) return nullptr;
    return step;
  }
  auto step = std::make_unique<Int8MatMulStep>(b, threads, qlinear);
  if (qlinear && step->K() > kMaxExactK) return nullptr;
  return step;
}

}  // namespace collage::native
