// The depthwise-pointwise kernel (native_depthwise_pointwise.h): the block
// found from its depthwise Conv, checked node by node, its BatchNormalizations
// folded and its 1x1 weights packed at compile time, run as bands of rows.
#include "backends/native/native_depthwise_pointwise.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>

#include "core/ir/tensor.h"
#include "core/ops/conv_geometry.h"

namespace collage::native {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Output channels by pixels of one pointwise tile: 8 x 32 floats are 16
// zmm accumulators, the 8 weights broadcast from one packed row.
constexpr int64_t kTileChannels = 8;
constexpr int64_t kTilePixels = 32;
// Floats of depthwise output a band keeps (C x its pixels): 64 KiB, so the
// band stays in L2 while its 1x1 product reads it once per 8 output channels.
constexpr int64_t kBandFloats = 16384;
// Nodes between the two Convs isDepthwisePointwiseGroup looks through (the
// pattern has at most 2).
constexpr int kMaxWalk = 4;

struct Refusal {
  std::string reason;
};

std::string label(const Node& node) { return "node '" + node.name + "' (" + node.op + ")"; }

std::string shapeText(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

NodeId soleConsumer(const Graph& g, ValueId v) {
  const Value& value = g.value(v);
  if (value.isGraphOutput || value.consumers.size() != 1) return kNoNode;
  return value.consumers[0];
}

bool isActivation(const std::string& op) {
  return op == "Relu" || op == "Clip" || op == "LeakyRelu" || op == "PRelu" || op == "HardSwish";
}

// ---------------------------------------------------------------------------
// Finding the block (shared by the rule and compile).

struct Block {
  NodeId dw = kNoNode, bn1 = kNoNode, act1 = kNoNode;
  NodeId pw = kNoNode, bn2 = kNoNode, act2 = kNoNode;
  NodeId add = kNoNode, act3 = kNoNode;
  ValueId residual = kNoValue;
  ValueId output = kNoValue;  // the last node's
  std::vector<NodeId> nodes() const {
    std::vector<NodeId> out;
    for (NodeId n : {dw, bn1, act1, pw, bn2, act2, add, act3})
      if (n != kNoNode) out.push_back(n);
    return out;
  }
};

// Walks forward from Conv `dw` through the pattern's nodes, each the sole
// reader of its predecessor's output and within `member`. pw stays kNoNode
// when no Conv is reached; the walk stops before an Add when `withAdd` is
// false.
template <class Member>
Block walk(const Graph& g, NodeId dw, const Member& member, bool withAdd = true) {
  Block b;
  b.dw = dw;
  ValueId v = g.node(dw).outputs.at(0);
  auto next = [&](const char* op) -> NodeId {
    const NodeId n = soleConsumer(g, v);
    if (n == kNoNode || !member(n)) return kNoNode;
    const Node& node = g.node(n);
    const bool matches = op ? node.op == op : isActivation(node.op);
    if (!matches || node.inputs.at(0) != v) return kNoNode;
    v = node.outputs.at(0);
    return n;
  };
  b.bn1 = next("BatchNormalization");
  b.act1 = next(nullptr);
  b.pw = next("Conv");
  if (b.pw == kNoNode) return b;
  b.bn2 = next("BatchNormalization");
  b.act2 = next(nullptr);
  b.output = v;
  const NodeId a = soleConsumer(g, v);
  if (!withAdd || a == kNoNode || !member(a)) return b;
  const Node& add = g.node(a);
  if (add.op != "Add" || add.inputs.size() != 2) return b;
  const ValueId other = add.inputs[0] == v ? add.inputs[1] : add.inputs[0];
  if (other == v || (add.inputs[0] != v && add.inputs[1] != v)) return b;
  b.add = a;
  b.residual = other;
  v = add.outputs.at(0);
  b.act3 = next(nullptr);
  b.output = v;
  return b;
}

// ---------------------------------------------------------------------------
// Checking the nodes and taking their constants.

// y = x < 0 ? x * slope[c] : x, then clamped to [lo, hi]: Relu, Clip,
// LeakyRelu and PRelu in one form; or HardSwish, x * clamp(x / 6 + 0.5, 0, 1).
struct Act {
  std::string name = "none";
  bool hardSwish = false;
  bool sloped = false;
  std::vector<float> slope;  // per channel, when sloped
  float lo = -kInf, hi = kInf;
  bool clamps() const { return lo != -kInf || hi != kInf; }
};

const Tensor& constantOf(const Graph& g, const Node& node, size_t i, const char* what) {
  const ValueId v = i < node.inputs.size() ? node.inputs[i] : kNoValue;
  if (v == kNoValue) throw Refusal{label(node) + ": has no " + what};
  const Value& value = g.value(v);
  if (!value.isConstant())
    throw Refusal{label(node) + ": its " + what + " '" + value.name + "' is a run-time tensor (constants taken)"};
  if (value.type.elementType != ElementType::Float32)
    throw Refusal{label(node) + ": its " + what + " '" + value.name + "' is not float32"};
  return *value.constant;
}

bool hasInput(const Node& node, size_t i) { return i < node.inputs.size() && node.inputs[i] != kNoValue; }

void requireFloat(const Graph& g, const Node& node, ValueId v) {
  const Value& value = g.value(v);
  if (value.type.elementType != ElementType::Float32)
    throw Refusal{label(node) + ": '" + value.name + "' is " + std::string(elementTypeName(value.type.elementType)) +
                  " (float32 taken)"};
}

Act activationOf(const Graph& g, NodeId n, int64_t channels) {
  Act a;
  if (n == kNoNode) return a;
  const Node& node = g.node(n);
  requireFloat(g, node, node.outputs.at(0));
  if (node.op == "Relu") {
    a.name = "relu";
    a.lo = 0.0f;
  } else if (node.op == "Clip") {
    a.name = "clip";
    a.lo = node.attrs.getFloat("min", -kInf);
    a.hi = node.attrs.getFloat("max", kInf);
    for (size_t i = 1; i < 3; ++i)
      if (hasInput(node, i)) {
        const Tensor& t = constantOf(g, node, i, i == 1 ? "min" : "max");
        if (t.numElements() != 1) throw Refusal{label(node) + ": a bound that is not one value"};
        (i == 1 ? a.lo : a.hi) = t.data<float>()[0];
      }
  } else if (node.op == "HardSwish") {
    a.name = "hard_swish";
    a.hardSwish = true;
  } else if (node.op == "LeakyRelu") {
    a.name = "leaky_relu";
    a.sloped = true;
    a.slope.assign(static_cast<size_t>(channels), node.attrs.getFloat("alpha", 0.01f));
  } else {  // PRelu: one slope, or one per channel ([C,1,1], [1,C,1,1], ...)
    a.name = "prelu";
    a.sloped = true;
    const Tensor& s = constantOf(g, node, 1, "slope");
    const Shape& ss = s.shape();
    const int64_t count = s.numElements();
    bool perChannel = count == channels && ss.size() >= 3;
    for (size_t k = 0; perChannel && k < ss.size(); ++k)
      if (k != ss.size() - 3 && ss[k] != 1) perChannel = false;
    if (count != 1 && !perChannel)
      throw Refusal{label(node) + ": its slope of shape " + shapeText(ss) +
                    " is not one per channel (one value or [" + std::to_string(channels) + ", 1, 1] taken)"};
    a.slope.assign(static_cast<size_t>(channels), s.data<float>()[0]);
    if (count != 1) std::copy(s.data<float>(), s.data<float>() + channels, a.slope.begin());
  }
  return a;
}

// Folds an inference BatchNormalization into the weights (rows of `inner`
// floats, one per channel) and bias before it.
void foldBatchNorm(const Graph& g, NodeId n, int64_t channels, int64_t inner, std::vector<float>& w,
                   std::vector<float>& bias) {
  if (n == kNoNode) return;
  const Node& node = g.node(n);
  if (node.attrs.getInt("training_mode", 0) != 0) throw Refusal{label(node) + ": training_mode (inference taken)"};
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (node.outputs[i] != kNoValue) throw Refusal{label(node) + ": computes running statistics"};
  const char* names[] = {"scale", "bias", "mean", "variance"};
  const float* p[4];
  for (size_t i = 0; i < 4; ++i) {
    const Tensor& t = constantOf(g, node, i + 1, names[i]);
    if (t.numElements() != channels)
      throw Refusal{label(node) + ": its " + names[i] + " has " + std::to_string(t.numElements()) + " values for " +
                    std::to_string(channels) + " channels"};
    p[i] = t.data<float>();
  }
  const double eps = node.attrs.getFloat("epsilon", 1e-5f);
  for (int64_t c = 0; c < channels; ++c) {
    const double s = p[0][c] / std::sqrt(static_cast<double>(p[3][c]) + eps);
    for (int64_t k = 0; k < inner; ++k) w[c * inner + k] = static_cast<float>(w[c * inner + k] * s);
    bias[c] = static_cast<float>((bias[c] - p[2][c]) * s + p[1][c]);
  }
}

ConvGeometry geometryOf(const Graph& g, const Node& node) {
  requireFloat(g, node, node.inputs.at(0));
  const Shape& x = g.value(node.inputs.at(0)).type.shape;
  if (x.size() != 4)
    throw Refusal{label(node) + ": input of rank " + std::to_string(x.size()) + " (2 spatial dims taken)"};
  constantOf(g, node, 1, "weights");
  if (hasInput(node, 2)) constantOf(g, node, 2, "bias");
  try {
    return ConvGeometry::conv(node, x, g.value(node.inputs[1]).type.shape);
  } catch (const Error& e) {
    throw Refusal{e.what()};
  }
}

// ---------------------------------------------------------------------------
// The compiled kernel.

class DepthwisePointwiseKernel : public Kernel {
 public:
  // Geometry: X [N, C, H, W] -> depthwise [N, C, OH, OW] -> Y [N, M, OH, OW].
  int64_t N = 0, C = 0, H = 0, W = 0, KH = 0, KW = 0, SH = 1, SW = 1, PT = 0, PL = 0, PB = 0, PR = 0;
  int64_t OH = 0, OW = 0, M = 0;
  std::vector<float> dwWeights, dwBias;  // [C][KH][KW], [C]; BatchNormalization folded
  std::vector<float> pwPacked, pwBias;   // [M / 8][C][8] zero-padded, [M]
  std::vector<int64_t> owLo, owHi;       // per kw: the output columns whose tap is inside the row
  int64_t colLo = 0, colHi = 0;          // the columns whose every tap is inside the row
  Act act1, act2, act3;
  bool residual = false;
  int xSlot = -1, rSlot = -1;  // inputs; rSlot -1 with `residual`: the constant
  Tensor residualConstant;
  int64_t bandRows = 1, bandStride = 0;  // a band's pixels, rounded up to whole tiles
  int threads = 1;
  bool portable = false;
  std::vector<std::vector<float>> scratch;  // per thread, C x bandStride
  std::string names;

  void run(const std::vector<const DLTensor*>& inputs, const std::vector<DLTensor*>& outputs) override {
    auto in = [&](int slot) {
      const DLTensor* t = inputs.at(static_cast<size_t>(slot));
      return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + t->byte_offset);
    };
    const float* x = in(xSlot);
    const float* r = !residual ? nullptr : rSlot >= 0 ? in(rSlot) : residualConstant.data<float>();
    float* y = reinterpret_cast<float*>(static_cast<char*>(outputs.at(0)->data) + outputs[0]->byte_offset);
    const int64_t bands = (OH + bandRows - 1) / bandRows;
    const int64_t tasks = N * bands;
    const int nt = std::max(1, threads);
#pragma omp parallel num_threads(nt) if (nt > 1 && tasks > 1)
    {
      float* buf = scratch[static_cast<size_t>(omp_get_thread_num())].data();
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t n = t / bands, oh0 = (t % bands) * bandRows;
        const int64_t rows = std::min(bandRows, OH - oh0);
        depthwise(x, n, oh0, rows, buf);
        pointwise(buf, rows * OW, n, oh0, r, y);
      }
    }
  }

  std::string describe() const {
    std::ostringstream s;
    s << "depthwise_pointwise N=" << N << " C=" << C << " " << H << "x" << W << " dw " << KH << "x" << KW
      << " stride " << SH << "x" << SW << " pads [" << PT << "," << PL << "," << PB << "," << PR << "] -> "
      << OH << "x" << OW << ", " << act1.name << ", pw M=" << M << ", " << act2.name
      << (residual ? ", + residual, " + act3.name : std::string()) << ", band " << bandRows << " row(s), "
      << (portable ? "portable" : kAvx512 ? "avx512" : "portable") << " (" << names << ")";
    return s.str();
  }

#if defined(__AVX512F__)
  static constexpr bool kAvx512 = true;
#else
  static constexpr bool kAvx512 = false;
#endif

 private:
  // The band's depthwise output, channel by channel: rows of OW floats, then
  // the first epilogue (the bias folded in first). The columns whose every
  // tap is inside the row (colLo..colHi) run 16 at a time in registers on
  // AVX-512 (strides 1 and 2); the rest, and every column without it, tap
  // by tap over the row.
  void depthwise(const float* x, int64_t n, int64_t oh0, int64_t rows, float* buf) const {
    for (int64_t c = 0; c < C; ++c) {
      const float* xc = x + (n * C + c) * H * W;
      const float* wc = dwWeights.data() + c * KH * KW;
      float* bc = buf + c * bandStride;
      const float b = dwBias[static_cast<size_t>(c)];
      for (int64_t i = 0; i < rows; ++i) {
        float* acc = bc + i * OW;
        const int64_t oh = oh0 + i;
#if defined(__AVX512F__)
        if (!portable && (SW == 1 || SW == 2) && colHi - colLo >= 16) {
          const int64_t vHi = colLo + (colHi - colLo) / 16 * 16;
          rowTaps(xc, wc, oh, b, acc, 0, colLo);
          rowVectors(xc, wc, oh, b, acc, colLo, vHi);
          rowTaps(xc, wc, oh, b, acc, vHi, OW);
          continue;
        }
#endif
        rowTaps(xc, wc, oh, b, acc, 0, OW);
      }
      applyRow(act1, c, bc, rows * OW);
    }
  }

  // acc[from..to) of output row oh, tap by tap.
  void rowTaps(const float* xc, const float* wc, int64_t oh, float b, float* acc, int64_t from,
               int64_t to) const {
    if (from >= to) return;
    std::fill(acc + from, acc + to, b);
    for (int64_t kh = 0; kh < KH; ++kh) {
      const int64_t ih = oh * SH - PT + kh;
      if (ih < 0 || ih >= H) continue;
      const float* xr = xc + ih * W;
      for (int64_t kw = 0; kw < KW; ++kw) {
        const float wv = wc[kh * KW + kw];
        const int64_t lo = std::max(from, owLo[static_cast<size_t>(kw)]);
        const int64_t hi = std::min(to, owHi[static_cast<size_t>(kw)]);
        const int64_t shift = kw - PL;
        if (SW == 1) {
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) acc[ow] += wv * xr[ow + shift];
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) acc[ow] += wv * xr[ow * SW + shift];
        }
      }
    }
  }

#if defined(__AVX512F__)
  // acc[from..to) of output row oh, (to - from) a multiple of 16, every tap
  // inside the row: 16 columns in one register over all taps. At stride 2
  // the even floats of 31 (the last one past the 16th output's tap is not
  // read: the row may end there).
  void rowVectors(const float* xc, const float* wc, int64_t oh, float b, float* acc, int64_t from,
                  int64_t to) const {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t o = from; o < to; o += 16) {
      __m512 v = _mm512_set1_ps(b);
      for (int64_t kh = 0; kh < KH; ++kh) {
        const int64_t ih = oh * SH - PT + kh;
        if (ih < 0 || ih >= H) continue;
        const float* xr = xc + ih * W + o * SW - PL;
        const float* w = wc + kh * KW;
        for (int64_t kw = 0; kw < KW; ++kw) {
          __m512 xv;
          if (SW == 1) {
            xv = _mm512_loadu_ps(xr + kw);
          } else {
            const __m512 lo = _mm512_loadu_ps(xr + kw);
            const __m512 hi = _mm512_maskz_loadu_ps(__mmask16(0x7FFF), xr + kw + 16);
            xv = _mm512_permutex2var_ps(lo, even, hi);
          }
          v = _mm512_fmadd_ps(_mm512_set1_ps(w[kw]), xv, v);
        }
      }
      _mm512_storeu_ps(acc + o, v);
    }
  }
#endif

  static void applyRow(const Act& a, int64_t c, float* v, int64_t count) {
    if (a.hardSwish) {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) v[i] = v[i] * std::max(0.0f, std::min(1.0f, v[i] / 6.0f + 0.5f));
    }
    if (a.sloped) {
      const float s = a.slope[static_cast<size_t>(c)];
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) v[i] = v[i] < 0.0f ? v[i] * s : v[i];
    }
    if (a.clamps()) {
      const float lo = a.lo, hi = a.hi;
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) v[i] = std::min(std::max(v[i], lo), hi);
    }
  }

  static float applyOne(const Act& a, int64_t c, float v) {
    if (a.hardSwish) return v * std::max(0.0f, std::min(1.0f, v / 6.0f + 0.5f));
    if (a.sloped && v < 0.0f) v *= a.slope[static_cast<size_t>(c)];
    return std::min(std::max(v, a.lo), a.hi);
  }

  // Y[n, :, band] = W · D (+ bias, act2, + R, act3), tile by tile.
  void pointwise(const float* d, int64_t pixels, int64_t n, int64_t oh0, const float* r, float* y) const {
    const int64_t plane = OH * OW, first = oh0 * OW;
    for (int64_t cb = 0; cb * kTileChannels < M; ++cb) {
      const float* wp = pwPacked.data() + cb * C * kTileChannels;
      const int64_t co0 = cb * kTileChannels, mr = std::min(kTileChannels, M - co0);
      const int64_t at = (n * M + co0) * plane + first;
      for (int64_t p = 0; p < pixels; p += kTilePixels) {
        const int64_t np = std::min(kTilePixels, pixels - p);
#if defined(__AVX512F__)
        if (!portable) {
          tileAvx512(wp, d + p, np, co0, mr, y + at + p, r ? r + at + p : nullptr, plane);
          continue;
        }
#endif
        tilePortable(wp, d + p, np, co0, mr, y + at + p, r ? r + at + p : nullptr, plane);
      }
    }
  }

  // Both tiles read 32 floats of each channel's band (its stride is whole
  // tiles, so the pixels past the band are the buffer's own) and store np.
  void tilePortable(const float* wp, const float* d, int64_t np, int64_t co0, int64_t mr, float* y,
                    const float* r, int64_t ld) const {
    float acc[kTileChannels][kTilePixels] = {};
    for (int64_t k = 0; k < C; ++k) {
      const float* b = d + k * bandStride;
      const float* a = wp + k * kTileChannels;
      for (int64_t i = 0; i < kTileChannels; ++i) {
        const float ai = a[i];
#pragma omp simd
        for (int64_t j = 0; j < kTilePixels; ++j) acc[i][j] += ai * b[j];
      }
    }
    for (int64_t i = 0; i < mr; ++i) {
      const int64_t co = co0 + i;
      for (int64_t j = 0; j < np; ++j) {
        float v = applyOne(act2, co, acc[i][j] + pwBias[static_cast<size_t>(co)]);
        if (r) v = applyOne(act3, co, v + r[i * ld + j]);
        y[i * ld + j] = v;
      }
    }
  }

#if defined(__AVX512F__)
  // _mm512_max_ps / _mm512_min_ps through their masked forms with every
  // lane set (the same instruction): GCC 12 warns that the unmasked ones'
  // _mm512_undefined_ps() source may be used uninitialised.
  static __m512 vmax(__m512 a, __m512 b) { return _mm512_mask_max_ps(a, __mmask16(0xFFFF), a, b); }
  static __m512 vmin(__m512 a, __m512 b) { return _mm512_mask_min_ps(a, __mmask16(0xFFFF), a, b); }

  static __m512 applyVec(const Act& a, int64_t c, __m512 v) {
    if (a.hardSwish) {
      const __m512 t = _mm512_add_ps(_mm512_div_ps(v, _mm512_set1_ps(6.0f)), _mm512_set1_ps(0.5f));
      return _mm512_mul_ps(v, vmax(_mm512_setzero_ps(), vmin(_mm512_set1_ps(1.0f), t)));
    }
    if (a.sloped) {
      const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
      v = _mm512_mask_mul_ps(v, neg, v, _mm512_set1_ps(a.slope[static_cast<size_t>(c)]));
    }
    if (a.clamps()) v = vmin(vmax(v, _mm512_set1_ps(a.lo)), _mm512_set1_ps(a.hi));
    return v;
  }

  void tileAvx512(const float* wp, const float* d, int64_t np, int64_t co0, int64_t mr, float* y,
                  const float* r, int64_t ld) const {
    __m512 c0[kTileChannels], c1[kTileChannels];
#pragma GCC unroll 8
    for (int i = 0; i < kTileChannels; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < C; ++k) {
      const __m512 b0 = _mm512_loadu_ps(d + k * bandStride);
      const __m512 b1 = _mm512_loadu_ps(d + k * bandStride + 16);
      const float* a = wp + k * kTileChannels;
#pragma GCC unroll 8
      for (int i = 0; i < kTileChannels; ++i) {
        const __m512 ai = _mm512_set1_ps(a[i]);
        c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
        c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
      }
    }
    const __mmask16 m0 = np >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << np) - 1);
    const __mmask16 m1 = np >= 32 ? __mmask16(0xFFFF) : np <= 16 ? __mmask16(0) : __mmask16((1u << (np - 16)) - 1);
    for (int64_t i = 0; i < mr; ++i) {
      const int64_t co = co0 + i;
      const __m512 bias = _mm512_set1_ps(pwBias[static_cast<size_t>(co)]);
      __m512 v0 = applyVec(act2, co, _mm512_add_ps(c0[i], bias));
      __m512 v1 = applyVec(act2, co, _mm512_add_ps(c1[i], bias));
      if (r) {
        v0 = applyVec(act3, co, _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, r + i * ld)));
        v1 = applyVec(act3, co, _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, r + i * ld + 16)));
      }
      _mm512_mask_storeu_ps(y + i * ld, m0, v0);
      _mm512_mask_storeu_ps(y + i * ld + 16, m1, v1);
    }
  }
#endif
};

// ---------------------------------------------------------------------------
// Compiling: the group must be exactly one block.

class Compiler {
 public:
  Compiler(const KernelRequest& req, int threads) : req_(req), g_(*req.graph), threads_(threads) {}

  std::unique_ptr<Kernel> compile() {
    auto member = [&](NodeId n) { return req_.nodes.contains(n); };
    if (req_.outputs.size() != 1) {
      std::string names;
      for (ValueId v : req_.outputs) names += (names.empty() ? "'" : ", '") + g_.value(v).name + "'";
      throw Refusal{"the group has " + std::to_string(req_.outputs.size()) + " outputs (" + names +
                    "); the kernel writes only the block's result"};
    }
    Block b;
    for (NodeId n : req_.members())
      if (g_.node(n).op == "Conv" && b.pw == kNoNode) b = walk(g_, n, member);
    if (b.pw == kNoNode)
      throw Refusal{"no Conv of the group feeds a Conv through BatchNormalization and one activation only"};
    auto k = std::make_unique<DepthwisePointwiseKernel>();
    takeDepthwise(b, *k);
    takePointwise(b, *k);
    takeResidual(b, *k);
    const std::vector<NodeId> used = b.nodes();
    for (NodeId n : req_.members())
      if (std::find(used.begin(), used.end(), n) == used.end())
        throw Refusal{label(g_.node(n)) + " is not part of the block '" + g_.node(b.dw).name + "' -> '" +
                      g_.node(b.pw).name + "' (its epilogue takes one BatchNormalization, one activation, "
                      "one Add and one activation after it)"};
    if (req_.outputs[0] != b.output)
      throw Refusal{"the group's output must be '" + g_.value(b.output).name + "', the block's result, not '" +
                    g_.value(req_.outputs[0]).name + "'"};
    const std::string& xName = g_.value(g_.node(b.dw).inputs[0]).name;
    k->xSlot = slotOf(g_.node(b.dw).inputs[0], "the block's input '" + xName + "'");
    k->threads = std::max(1, threads_);
    const char* env = std::getenv("COLLAGE_NATIVE_DWPW");
    k->portable = env && std::string(env) == "portable";
    plan(*k);
    k->names = g_.node(b.dw).name + " -> " + g_.node(b.pw).name;
    return k;
  }

 private:
  int slotOf(ValueId v, const std::string& what) const {
    for (size_t i = 0; i < req_.inputs.size(); ++i)
      if (req_.inputs[i] == v) return static_cast<int>(i);
    throw Refusal{what + " is not a kernel input"};
  }

  void takeDepthwise(const Block& b, DepthwisePointwiseKernel& k) {
    const Node& node = g_.node(b.dw);
    const ConvGeometry geo = geometryOf(g_, node);
    if (geo.dilations != std::vector<int64_t>{1, 1})
      throw Refusal{label(node) + ": dilations " + shapeText(geo.dilations) + " (the fused kernel takes 1)"};
    if (geo.group != geo.inChannels || geo.outChannels != geo.inChannels)
      throw Refusal{label(node) + ": group " + std::to_string(geo.group) + " with " +
                    std::to_string(geo.inChannels) + " input and " + std::to_string(geo.outChannels) +
                    " output channels is not depthwise (group == input == output channels taken)"};
    k.N = geo.batch;
    k.C = geo.inChannels;
    k.H = geo.inputSpatial[0];
    k.W = geo.inputSpatial[1];
    k.KH = geo.kernel[0];
    k.KW = geo.kernel[1];
    k.SH = geo.strides[0];
    k.SW = geo.strides[1];
    k.PT = geo.padsBegin[0];
    k.PL = geo.padsBegin[1];
    k.PB = geo.padsEnd[0];
    k.PR = geo.padsEnd[1];
    k.OH = geo.outputSpatial[0];
    k.OW = geo.outputSpatial[1];
    if (k.PT < 0 || k.PL < 0 || k.PB < 0 || k.PR < 0 || k.OH <= 0 || k.OW <= 0 || k.N <= 0)
      throw Refusal{label(node) + ": " + geo.toString() + " (non-negative pads and a non-empty output taken)"};
    const Tensor& w = constantOf(g_, node, 1, "weights");
    k.dwWeights.assign(w.data<float>(), w.data<float>() + w.numElements());
    k.dwBias.assign(static_cast<size_t>(k.C), 0.0f);
    if (hasInput(node, 2)) {
      const Tensor& bias = constantOf(g_, node, 2, "bias");
      std::copy(bias.data<float>(), bias.data<float>() + k.C, k.dwBias.begin());
    }
    foldBatchNorm(g_, b.bn1, k.C, k.KH * k.KW, k.dwWeights, k.dwBias);
    k.act1 = activationOf(g_, b.act1, k.C);
    for (int64_t kw = 0; kw < k.KW; ++kw) {
      int64_t lo = 0, hi = k.OW;
      while (lo < k.OW && lo * k.SW - k.PL + kw < 0) ++lo;
      while (hi > lo && (hi - 1) * k.SW - k.PL + kw >= k.W) --hi;
      k.owLo.push_back(lo);
      k.owHi.push_back(hi);
    }
    k.colLo = *std::max_element(k.owLo.begin(), k.owLo.end());
    k.colHi = std::max(k.colLo, *std::min_element(k.owHi.begin(), k.owHi.end()));
  }

  void takePointwise(const Block& b, DepthwisePointwiseKernel& k) {
    const Node& node = g_.node(b.pw);
    const ConvGeometry geo = geometryOf(g_, node);
    if (geo.kernel != std::vector<int64_t>{1, 1})
      throw Refusal{label(node) + ": kernel " + shapeText(geo.kernel) + " (the fused kernel takes a 1x1 Conv)"};
    if (geo.group != 1) throw Refusal{label(node) + ": group " + std::to_string(geo.group) + " (1 taken)"};
    if (geo.strides != std::vector<int64_t>{1, 1})
      throw Refusal{label(node) + ": strides " + shapeText(geo.strides) + " (1 taken)"};
    for (int64_t p : geo.onnxPads())
      if (p != 0) throw Refusal{label(node) + ": pads " + shapeText(geo.onnxPads()) + " (none taken)"};
    k.M = geo.outChannels;
    const Tensor& w = constantOf(g_, node, 1, "weights");
    std::vector<float> weights(w.data<float>(), w.data<float>() + w.numElements());
    k.pwBias.assign(static_cast<size_t>(k.M), 0.0f);
    if (hasInput(node, 2)) {
      const Tensor& bias = constantOf(g_, node, 2, "bias");
      std::copy(bias.data<float>(), bias.data<float>() + k.M, k.pwBias.begin());
    }
    foldBatchNorm(g_, b.bn2, k.M, k.C, weights, k.pwBias);
    k.act2 = activationOf(g_, b.act2, k.M);
    const int64_t blocks = (k.M + kTileChannels - 1) / kTileChannels;
    k.pwPacked.assign(static_cast<size_t>(blocks * k.C * kTileChannels), 0.0f);
    for (int64_t co = 0; co < k.M; ++co)
      for (int64_t c = 0; c < k.C; ++c)
        k.pwPacked[static_cast<size_t>(((co / kTileChannels) * k.C + c) * kTileChannels + co % kTileChannels)] =
            weights[static_cast<size_t>(co * k.C + c)];
  }

  void takeResidual(const Block& b, DepthwisePointwiseKernel& k) {
    if (b.add == kNoNode) return;
    const Node& add = g_.node(b.add);
    const Value& r = g_.value(b.residual);
    requireFloat(g_, add, b.residual);
    const Shape out{k.N, k.M, k.OH, k.OW};
    if (r.type.shape != out)
      throw Refusal{label(add) + ": adds '" + r.name + "' of shape " + shapeText(r.type.shape) +
                    " (the block's output shape " + shapeText(out) + " taken, no broadcast)"};
    k.residual = true;
    if (r.isConstant()) k.residualConstant = *r.constant;
    else k.rSlot = slotOf(b.residual, "the residual '" + r.name + "'");
    k.act3 = activationOf(g_, b.act3, k.M);
  }

  // Rows per band: the band's depthwise output within kBandFloats, and at
  // least two tasks per thread where the image allows.
  void plan(DepthwisePointwiseKernel& k) const {
    int64_t rows = std::clamp<int64_t>(kBandFloats / std::max<int64_t>(1, k.C * k.OW), 1, k.OH);
    while (rows > 1 && k.N * ((k.OH + rows - 1) / rows) < 2 * k.threads) rows = (rows + 1) / 2;
    k.bandRows = rows;
    k.bandStride = (rows * k.OW + kTilePixels - 1) / kTilePixels * kTilePixels;
    k.scratch.assign(static_cast<size_t>(k.threads),
                     std::vector<float>(static_cast<size_t>(k.C * k.bandStride), 0.0f));
  }

  const KernelRequest& req_;
  const Graph& g_;
  int threads_;
};

}  // namespace

bool isDepthwisePointwiseGroup(const Graph& graph, const NodeSet& nodes) {
  // A member Conv whose output reaches another member Conv through members.
  std::function<bool(NodeId, int)> reachesConv = [&](NodeId n, int depth) {
    if (depth > kMaxWalk) return false;
    for (ValueId v : graph.node(n).outputs) {
      if (v == kNoValue) continue;
      for (NodeId c : graph.value(v).consumers)
        if (nodes.contains(c) && (graph.node(c).op == "Conv" || reachesConv(c, depth + 1))) return true;
    }
    return false;
  };
  bool found = false;
  nodes.forEach([&](NodeId n) { found = found || (graph.node(n).op == "Conv" && reachesConv(n, 0)); });
  return found;
}

CompileResult compileDepthwisePointwise(const KernelRequest& request, int threads) {
  try {
    Compiler compiler(request, threads);
    return CompileResult::ok(compiler.compile());
  } catch (const Refusal& r) {
    return CompileResult::refuse("depthwise_pointwise: " + r.reason);
  } catch (const Error& e) {
    return CompileResult::refuse(std::string("depthwise_pointwise: ") + e.what());
  }
}

std::vector<std::pair<NodeSet, std::string>> depthwisePointwiseGroups(const Graph& graph) {
  std::vector<std::pair<NodeSet, std::string>> out;
  auto any = [](NodeId) { return true; };
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    if (graph.node(n).op != "Conv") continue;
    const Block full = walk(graph, n, any);
    if (full.pw == kNoNode) continue;
    // Named only where it compiles: the kernel's checks on a request of
    // the block alone.
    auto compiles = [&](const Block& b) {
      NodeSet set(graph.numNodes());
      for (NodeId m : b.nodes()) set.insert(m);
      return std::pair{set, static_cast<bool>(compileDepthwisePointwise(KernelRequest::of(graph, set), 1))};
    };
    Block core = full;
    core.add = core.act3 = kNoNode;
    core.residual = kNoValue;
    core.output = graph.node(core.act2 != kNoNode ? core.act2 : core.bn2 != kNoNode ? core.bn2 : core.pw).outputs[0];
    if (auto [set, ok] = compiles(core); ok) out.emplace_back(set, "depthwise_pointwise");
    if (full.add != kNoNode)
      if (auto [set, ok] = compiles(full); ok) out.emplace_back(set, "depthwise_pointwise_residual");
  }
  return out;
}

std::string describeDepthwisePointwiseKernel(const Kernel& kernel) {
  const auto* k = dynamic_cast<const DepthwisePointwiseKernel*>(&kernel);
  return k ? k->describe() : std::string();
}

}  // namespace collage::native
