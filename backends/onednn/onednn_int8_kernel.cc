#include "backends/onednn/onednn_int8_kernel.h"

#include <dnnl_debug.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__AVX512F__)
// GCC 12 reports '__Y may be used uninitialized' inside the AVX-512 headers
// once their intrinsics are inlined into an OpenMP region (GCC bug 105593);
// the pragma covers the headers' lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "backends/onednn/dynamic_quantize.h"
#include "backends/onednn/onednn_descs.h"
#include "backends/onednn/onednn_post_ops.h"
#include "core/ir/threading.h"
#include "core/ops/conv_geometry.h"
#include "core/ops/op_helpers.h"
#include "core/ops/requantize.h"

namespace collage::onednn {

using dnnl::memory;
using dt = dnnl::memory::data_type;

namespace {

dt dnnlType(ElementType t) {
  switch (t) {
    case ElementType::UInt8: return dt::u8;
    case ElementType::Int8: return dt::s8;
    case ElementType::Int32: return dt::s32;
    default: return dt::f32;
  }
}

memory::desc plainOf(const Shape& s, dt type) {
  const memory::dims d = dimsOf(s);
  return memory::desc(d, type, rowMajorStrides(d));
}

struct RequantizeParams {
  float lo = 0, hi = 0, zp = 0;
  bool dequantize = false;
  float dqScale = 1.0f;
  int32_t dqZero = 0;
};

// One element as requantize.h computes it: the sum in int64 (no wrap), then
// float32 scale, round half to even, zero point, saturation; optionally
// dequantized as the DequantizeLinear after it.
template <class Q>
inline void requantizeOneInto(int64_t a, float scale, const RequantizeParams& rp, Q* y, float* yf, int64_t j) {
  const Q q = static_cast<Q>(requantizeValue(a, scale, rp.zp, rp.lo, rp.hi));
  if (rp.dequantize)
    yf[j] = static_cast<float>(static_cast<int32_t>(q) - rp.dqZero) * rp.dqScale;
  else
    y[j] = q;
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
// 16 lanes: the same operations in the same order as requantizeValue (int32
// to float, times the float scale, round to nearest even, plus the zero
// point, clamp), each exact or rounded as the scalar one, so the result is
// bit-identical. The int32 sum acc + bias is checked for overflow; a vector
// where it wraps goes through the scalar int64 path.
template <class Q>
inline bool requantize16(__m512i a, __m512i vb, __m512 s, const RequantizeParams& rp, Q* y, float* yf) {
  const __m512i sum = _mm512_add_epi32(a, vb);
  // Signed overflow: the operands agree in sign and the sum does not.
  const __m512i ovf = _mm512_and_si512(_mm512_xor_si512(a, sum), _mm512_xor_si512(vb, sum));
  if (_mm512_movepi32_mask(ovf) != 0) return false;
  __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sum), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, _mm512_set1_ps(rp.zp)), _mm512_set1_ps(rp.lo)), _mm512_set1_ps(rp.hi));
  const __m512i qi = _mm512_cvtps_epi32(v);  // integral and in range: exact
  if (rp.dequantize) {
    _mm512_storeu_ps(yf, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(qi, _mm512_set1_epi32(rp.dqZero))),
                                       _mm512_set1_ps(rp.dqScale)));
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y), _mm512_cvtepi32_epi8(qi));
  }
  return true;
}
#endif

// `count` contiguous accumulators from `acc`, with a bias and scale each
// (biases / scales) or one for all (bias / scale), into y (or yf) from the same offset.
template <class Q>
void requantizeRun(const int32_t* acc, int32_t bias, const int32_t* biases, float scale, const float* scales,
                   const RequantizeParams& rp, Q* y, float* yf, int64_t count) {
  int64_t j = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  for (; j + 16 <= count; j += 16) {
    const __m512i vb = biases ? _mm512_loadu_si512(biases + j) : _mm512_set1_epi32(bias);
    const __m512 vs = scales ? _mm512_loadu_ps(scales + j) : _mm512_set1_ps(scale);
    if (requantize16<Q>(_mm512_loadu_si512(acc + j), vb, vs, rp, y + j, yf + j)) continue;
    for (int64_t k = j; k < j + 16; ++k)
      requantizeOneInto<Q>(static_cast<int64_t>(acc[k]) + (biases ? biases[k] : bias), scales ? scales[k] : scale, rp,
                           y, yf, k);
  }
#endif
  for (; j < count; ++j)
    requantizeOneInto<Q>(static_cast<int64_t>(acc[j]) + (biases ? biases[j] : bias), scales ? scales[j] : scale, rp, y,
                         yf, j);
}

// Channels c0..c1 of one image whose accumulator is channels last
// ([inner][channels], the convolution's own layout), into the plain
// [channels][inner] output: 16 pixels of one channel at a time, gathered, so
// that each output run is contiguous; a block of 16 channels reads each
// accumulator cache line once while it is in L1. This replaces a reorder of
// the whole s32 accumulator to plain layout before the epilogue.
template <class Q>
void requantizeChannelsLast(const int32_t* acc, int64_t channels, int64_t inner, int64_t c0, int64_t c1,
                            const std::vector<int32_t>& biases, const std::vector<float>& scales,
                            const RequantizeParams& rp, Q* y, float* yf) {
  auto biasOf = [&](int64_t c) { return biases.empty() ? 0 : biases[static_cast<size_t>(c)]; };
  auto scaleOf = [&](int64_t c) { return scales[scales.size() > 1 ? static_cast<size_t>(c) : 0]; };
  int64_t p = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int32_t>(channels)));
  if (16 * channels < (int64_t{1} << 29)) {  // the gather's int32 byte offsets
    for (; p + 16 <= inner; p += 16)
      for (int64_t c = c0; c < c1; ++c) {
        const int32_t* src = acc + p * channels + c;
        const int64_t at = c * inner + p;
        const __m512i a = _mm512_i32gather_epi32(idx, src, 4);
        if (requantize16<Q>(a, _mm512_set1_epi32(biasOf(c)), _mm512_set1_ps(scaleOf(c)), rp, y + at, yf + at))
          continue;
        for (int64_t k = 0; k < 16; ++k)
          requantizeOneInto<Q>(static_cast<int64_t>(src[k * channels]) + biasOf(c), scaleOf(c), rp, y, yf, at + k);
      }
  }
#endif
  for (; p < inner; ++p)
    for (int64_t c = c0; c < c1; ++c)
      requantizeOneInto<Q>(static_cast<int64_t>(acc[p * channels + c]) + biasOf(c), scaleOf(c), rp, y, yf,
                           c * inner + p);
}

class Int8Kernel final : public Kernel {
 public:
  using Step = OneDnnKernel::Step;
  using Binding = OneDnnKernel::Binding;

  explicit Int8Kernel(std::shared_ptr<Context> context) : context_(std::move(context)) {}

  void run(const std::vector<const DLTensor*>& inputs, const std::vector<DLTensor*>& outputs) override {
    const int threads = threadCount();
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    auto dataOf = [](const DLTensor* t) { return static_cast<char*>(t->data) + t->byte_offset; };
    for (Binding& b : bindings)
      b.memory.set_data_handle(dataOf(b.isOutput ? outputs[b.index] : inputs[b.index]));
    if (dequantize) {  // DequantizeLinear alone: y = float(x - zero point) * scale, as the reference
      const char* x = dataOf(inputs[0]);
      if (!convert.empty()) {  // its source into the output's layout first
        convertFrom.set_data_handle(const_cast<char*>(x));
        executeSteps(convert, context_->stream);
        x = static_cast<const char*>(convertTo.get_data_handle());
      }
      float* y = reinterpret_cast<float*>(dataOf(outputs[0]));
      const float scale = dequantizeScale;
      const int32_t z = zeroPointConstant;
      if (zeroPointSigned) {
        const int8_t* q = reinterpret_cast<const int8_t*>(x);
#pragma omp parallel for schedule(static) if (sourceCount > (1 << 18))
        for (int64_t i = 0; i < sourceCount; ++i) y[i] = static_cast<float>(q[i] - z) * scale;
      } else {
        const uint8_t* q = reinterpret_cast<const uint8_t*>(x);
#pragma omp parallel for schedule(static) if (sourceCount > (1 << 18))
        for (int64_t i = 0; i < sourceCount; ++i) y[i] = static_cast<float>(q[i] - z) * scale;
      }
      return;
    }
    if (staticQuantize) {  // QuantizeLinear, into the product's source or (alone) the output
      const float* x = reinterpret_cast<const float*>(dataOf(inputs[sourceInput]));
      void* y = accumulator || steps.size() ? quantized.get_data_handle()
                : !convert.empty()            ? convertFrom.get_data_handle()
                                              : dataOf(outputs[0]);
      quantizeLinear(x, sourceCount, staticScale, staticZeroPoint, staticSigned, y);
      if (!convert.empty()) {  // the integers into the output's layout
        convertTo.set_data_handle(dataOf(outputs[0]));
        executeSteps(convert, context_->stream);
      }
      if (steps.empty()) return;
    }
    float sourceScale = 1.0f;
    int32_t zeroPoint = zeroPointConstant;
    if (quantize) {
      const float* x = reinterpret_cast<const float*>(dataOf(inputs[sourceInput]));
      const DynamicQuantization q = dynamicQuantizationOf(x, sourceCount);
      if (quantizerOutputs.empty()) {
        quantizeU8(x, sourceCount, q, static_cast<uint8_t*>(quantized.get_data_handle()));
      } else {  // the quantizer alone: its outputs as the group asks for them
        for (size_t o = 0; o < quantizerOutputs.size(); ++o) {
          char* out = dataOf(outputs[o]);
          if (quantizerOutputs[o] == 0) quantizeU8(x, sourceCount, q, reinterpret_cast<uint8_t*>(out));
          if (quantizerOutputs[o] == 1) std::memcpy(out, &q.scale, sizeof(float));
          if (quantizerOutputs[o] == 2) std::memcpy(out, &q.zeroPoint, 1);
        }
        return;
      }
      sourceScale = q.scale;
      zeroPoint = q.zeroPoint;
    } else if (zeroPointInput >= 0) {
      const char* z = dataOf(inputs[zeroPointInput]);
      zeroPoint = zeroPointSigned ? static_cast<int32_t>(*reinterpret_cast<const int8_t*>(z))
                                  : static_cast<int32_t>(*reinterpret_cast<const uint8_t*>(z));
    }
    *static_cast<int32_t*>(zeroPointMemory.get_data_handle()) = zeroPoint;
    if (scaleMemory) {
      float* s = static_cast<float*>(scaleMemory.get_data_handle());
      // The reference's Mul(x_scale, W_scale), then the product times it.
      const float base = scaleFromQuantizer ? sourceScale : 1.0f;
      for (size_t c = 0; c < scaleCount; ++c)
        s[c] = base * weightScale[weightScale.size() > 1 ? c : 0];
    }
    executeSteps(steps, context_->stream);
    if (accumulator) {
      void* y = dataOf(outputs[0]);
      if (!requantizing) {  // the compensated accumulator: int32 out, or float on through `after`
        if (combined) {
          combine<float>(combined.get_data_handle());
          executeSteps(after, context_->stream);
        } else {
          combine<int32_t>(y);
        }
      } else if (outputSigned) {
        requantize<int8_t>(y);
      } else {
        requantize<uint8_t>(y);
      }
    }
  }

  // The accumulator at (o, c, i) of [outer][channels][inner] (or, channelsInner, [outer][channels]).
  int64_t accAt(const int32_t* acc, int64_t o, int64_t c, int64_t i, int64_t& at) const {
    at = channelsInner ? o * channels + c : (o * channels + c) * inner + i;
    int64_t a = acc[at];
    if (compensation) {
      const int32_t* sum = static_cast<const int32_t*>(compensation.get_data_handle());
      a += static_cast<int64_t>(weightOffset[static_cast<size_t>(c)]) * sum[channelsInner ? o : o * inner + i];
    }
    return a;
  }

  // The product with the compensation added, as int32 (the reference's
  // accumulator) or float (its Cast).
  template <class T>
  void combine(void* out) const {
    T* y = static_cast<T*>(out);
    const int32_t* acc = static_cast<const int32_t*>(accumulator.get_data_handle());
    const int64_t count = channelsInner ? 1 : inner;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t i = 0; i < count; ++i) {
          int64_t at;
          const int64_t a = accAt(acc, o, c, i, at);
          y[at] = static_cast<T>(static_cast<int32_t>(a));
        }
  }

  // The QLinear ops' output from the exact accumulator (plain layout), as
  // the reference: y = saturate(nearbyint(float(acc + bias[c]) * scale[c]) + zero point), in
  // float32 (core/ops/requantize.h).
  // With outputDequantize, then float(q - zero point) * scale, as the DequantizeLinear after it.
  // Without compensation each run of the accumulator is contiguous with one
  // scale and bias (a Conv plane) or a scale and bias per element (a MatMul
  // row), which requantizeRun does 16 lanes at a time; this loop was a
  // scalar pass per element that cost as much as the int8 product itself.
  template <class Q>
  void requantize(void* out) const {
    Q* y = static_cast<Q*>(out);
    float* yf = static_cast<float*>(out);
    const int32_t* acc = static_cast<const int32_t*>(accumulator.get_data_handle());
    RequantizeParams rp;
    rp.lo = std::numeric_limits<Q>::min();
    rp.hi = std::numeric_limits<Q>::max();
    rp.zp = static_cast<float>(outputZeroPoint);
    rp.dequantize = outputDequantize;
    rp.dqScale = outputDequantizeScale;
    rp.dqZero = outputDequantizeZero;
    const bool perChannelScale = requantScale.size() > 1;
    if (!compensation) {
      if (channelsInner) {  // MatMul: a row of `channels` per outer index
        std::vector<float> scales(static_cast<size_t>(channels), requantScale[0]);
        if (perChannelScale) std::copy(requantScale.begin(), requantScale.end(), scales.begin());
        std::vector<int32_t> biases(static_cast<size_t>(channels), 0);
        if (!intBias.empty()) std::copy(intBias.begin(), intBias.end(), biases.begin());
        const int64_t work = outer * channels;
#pragma omp parallel for schedule(static) if (work > (1 << 14))
        for (int64_t o = 0; o < outer; ++o) {
          const int64_t at = o * channels;
          requantizeRun<Q>(acc + at, 0, biases.data(), 0.0f, scales.data(), rp, y + at, yf + at, channels);
        }
      } else if (channelsLast && nativeOutput) {  // Conv, nhwc in and out: a row of channels per pixel
        std::vector<float> scales(static_cast<size_t>(channels), requantScale[0]);
        if (perChannelScale) std::copy(requantScale.begin(), requantScale.end(), scales.begin());
        std::vector<int32_t> biases(static_cast<size_t>(channels), 0);
        if (!intBias.empty()) std::copy(intBias.begin(), intBias.end(), biases.begin());
        const int64_t rows = outer * inner, work = rows * channels;
#pragma omp parallel for schedule(static) if (work > (1 << 14))
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t at = r * channels;
          requantizeRun<Q>(acc + at, 0, biases.data(), 0.0f, scales.data(), rp, y + at, yf + at, channels);
        }
      } else if (channelsLast) {  // Conv, the accumulator in the primitive's nhwc layout
        const int64_t blocks = (channels + 15) / 16;
        const int64_t work = outer * channels * inner;
#pragma omp parallel for collapse(2) schedule(static) if (work > (1 << 14))
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t b = 0; b < blocks; ++b) {
            const int64_t at = o * channels * inner;
            requantizeChannelsLast<Q>(acc + at, channels, inner, b * 16, std::min(channels, b * 16 + 16), intBias,
                                      requantScale, rp, y + at, yf + at);
          }
      } else {  // Conv (NCHW): a plane per channel, one scale and bias
        const int64_t work = outer * channels * inner;
#pragma omp parallel for collapse(2) schedule(static) if (work > (1 << 14))
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t c = 0; c < channels; ++c) {
            const float scale = requantScale[perChannelScale ? static_cast<size_t>(c) : 0];
            const int32_t bias = intBias.empty() ? 0 : intBias[static_cast<size_t>(c)];
            const int64_t at = (o * channels + c) * inner;
            requantizeRun<Q>(acc + at, bias, nullptr, scale, nullptr, rp, y + at, yf + at, inner);
          }
      }
      return;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < channels; ++c) {
        const float scale = requantScale[perChannelScale ? static_cast<size_t>(c) : 0];
        const int64_t bias = intBias.empty() ? 0 : intBias[static_cast<size_t>(c)];
        // Conv (NCHW): a plane per channel; MatMul: one element per column.
        const int64_t count = channelsInner ? 1 : inner;
        for (int64_t i = 0; i < count; ++i) {
          int64_t at;
          const int64_t a = accAt(acc, o, c, i, at);
          const Q q = static_cast<Q>(requantizeValue(a + bias, scale, rp.zp, rp.lo, rp.hi));
          if (outputDequantize)
            yf[at] = static_cast<float>(static_cast<int32_t>(q) - rp.dqZero) * rp.dqScale;
          else
            y[at] = q;
        }
      }
  }

  // Layout hand-over (backend.h): the float result in the convolution's own
  // layout (nhwc with AVX-512) instead of the reorder to NCHW, which costs
  // more than the int8 convolution itself at large sizes; and a quantizer
  // that reads its float source in that layout and writes the u8 tensor the
  // convolution wants directly (quantization is elementwise, and the range
  // is the same whatever the order).
  //
  // Between int8 kernels the integers pass in the convolution's layout too:
  // a requantized result whose accumulator is channels last is written
  // channels last (the epilogue is then elementwise over rows of channels,
  // no gather to NCHW), and a u8/s8 source given as an input is read in the
  // layout the primitive wants, without the reorder into it. The names carry
  // the element type ("onednn u8 1x64x56x56 nhwc"), so an integer tensor is
  // never handed to a kernel that expects floats in the same layout.
  //
  // A QuantizeLinear or DequantizeLinear alone is elementwise: it offers the
  // convolutions' channels-last layout on both sides, so a residual path
  // (DequantizeLinear -> Add -> Relu -> QuantizeLinear) can stay in it too.
  // Where only one side is handed over, the kernel reorders the integer
  // tensor (a quarter of the float one's bytes): the quantizer's result into
  // the output's layout, or the dequantizer's source into it.
  std::optional<NativeLayout> nativeOutputLayout(size_t output) const override {
    if (output != 0) return std::nullopt;
    if (elementwiseRank()) return elementwiseLayout(false);
    if (outputReorder >= 0)
      return handOverLayoutOf(steps[static_cast<size_t>(outputReorder)].args.at(DNNL_ARG_FROM).get_desc());
    if (requantizing && channelsLast && !outputDequantize && !compensation) {
      const memory::desc acc = accumulator.get_desc();
      return handOverLayoutOf(memory::desc(acc.dims(), outputSigned ? dt::s8 : dt::u8, channelsLastTag(acc.dims().size())));
    }
    return std::nullopt;
  }
  std::optional<NativeLayout> nativeInputLayout(size_t input) const override {
    if (elementwiseRank()) return input == 0 ? elementwiseLayout(true) : std::nullopt;
    if (boundSource >= 0 && static_cast<int>(input) == boundSource) {
      const int s = boundSourceStep();
      if (s < 0) return std::nullopt;
      return handOverLayoutOf(steps[static_cast<size_t>(s)].args.at(DNNL_ARG_TO).get_desc());
    }
    if (!(quantize || staticQuantize) || sourceReorder < 0 || static_cast<int>(input) != sourceInput)
      return std::nullopt;
    const memory::desc u8 = steps[static_cast<size_t>(sourceReorder)].args.at(DNNL_ARG_TO).get_desc();
    // (nativeTagOf reads float32 descriptors: ask about the same layout in f32.)
    std::optional<memory::format_tag> tag;
    for (memory::format_tag t : {memory::format_tag::nwc, memory::format_tag::nhwc, memory::format_tag::ndhwc,
                                 memory::format_tag::nChw16c, memory::format_tag::nChw8c})
      if (!tag && memory::desc(u8.dims(), u8.data_type(), t, true) == u8) tag = nativeTagOf(memory::desc(u8.dims(), dt::f32, t, true));
    // Quantization is elementwise only over a layout without padding.
    if (!tag || static_cast<int64_t>(u8.get_size()) != sourceCount) return std::nullopt;
    return handOverLayoutOf(memory::desc(u8.dims(), dt::f32, *tag));
  }
  void useNativeOutputLayout(size_t output) override {
    COLLAGE_CHECK(nativeOutputLayout(output).has_value(), "no native output to hand over");
    if (elementwiseRank()) {
      nativeElementOut = true;
      prepareConversion();
      return;
    }
    if (outputReorder < 0) {  // the requantized integers, written channels last
      nativeOutput = true;
      return;
    }
    // The primitive writes the caller's buffer: its own result buffer (as
    // large as the output) is released, not kept beside it.
    const int s = outputReorder;
    outputReorder = -1;
    takeOverReorder(s, DNNL_ARG_FROM, true, 0);
  }
  void useNativeInputLayout(size_t input) override {
    COLLAGE_CHECK(nativeInputLayout(input).has_value(), "no native input to take over");
    if (elementwiseRank()) {
      nativeElementIn = true;
      prepareConversion();
      return;
    }
    if (boundSource >= 0 && static_cast<int>(input) == boundSource) {
      // The primitive reads the caller's buffer; its own copy is released.
      const int s = boundSourceStep();
      sourceReorder = -1;
      takeOverReorder(s, DNNL_ARG_TO, false, boundSource);
      return;
    }
    const memory plain = quantized;
    quantized = steps[static_cast<size_t>(sourceReorder)].args.at(DNNL_ARG_TO);
    eraseStep(sourceReorder);
    sourceReorder = -1;
    owned.erase(std::remove(owned.begin(), owned.end(), plain), owned.end());
  }

  std::string describe() const {
    std::string s = what;
    for (size_t i = 0; i < steps.size(); ++i) s += (i == 0 ? ": " : " -> ") + steps[i].impl;
    if (accumulator)
      s += requantizing ? (channelsLast ? (nativeOutput ? " -> requantize (channels last, kept)" : " -> requantize (channels last)")
                                        : " -> requantize")
                        : " -> add the compensation";
    for (const Step& step : after) s += " -> " + step.impl;
    return s;
  }

  // The rank of an elementwise kernel's tensor that offers its layout (3 to
  // 5, channels second), or 0.
  size_t elementwiseRank() const {
    const bool alone = dequantize || (staticQuantize && steps.empty() && !accumulator);
    const size_t rank = elementwiseDims.size();
    return alone && rank >= 3 && rank <= 5 ? rank : 0;
  }
  dt elementwiseIntegerType() const {
    return (dequantize ? zeroPointSigned : staticSigned) ? dt::s8 : dt::u8;
  }
  // Input (the float side for a quantizer) or output, channels last.
  std::optional<NativeLayout> elementwiseLayout(bool input) const {
    const bool integer = dequantize == input;
    const memory::desc md(elementwiseDims, integer ? elementwiseIntegerType() : dt::f32,
                          channelsLastTag(elementwiseDims.size()));
    return handOverLayoutOf(md);
  }
  // The reorder of the integer tensor where one side is handed over and the
  // other is not (none where both or neither are).
  void prepareConversion() {
    convert.clear();
    if (nativeElementIn == nativeElementOut) return;
    const dt t = elementwiseIntegerType();
    const memory::desc plain = memory::desc(elementwiseDims, t, rowMajorStrides(elementwiseDims));
    const memory::desc last(elementwiseDims, t, channelsLastTag(elementwiseDims.size()));
    // The dequantizer reorders its source from the input's layout; the
    // quantizer its result into the output's.
    const memory::desc& from = (dequantize ? nativeElementIn : !nativeElementOut) ? last : plain;
    const memory::desc& to = (dequantize ? nativeElementIn : !nativeElementOut) ? plain : last;
    if (dequantize) {
      convertFrom = memory(from, context_->engine, DNNL_MEMORY_NONE);
      convertTo = memory(to, context_->engine);
    } else {
      convertFrom = memory(from, context_->engine);
      convertTo = memory(to, context_->engine, DNNL_MEMORY_NONE);
    }
    convert.push_back({dnnl::reorder(convertFrom, convertTo), {{DNNL_ARG_FROM, convertFrom}, {DNNL_ARG_TO, convertTo}},
                       "reorder"});
  }
  static memory::format_tag channelsLastTag(size_t rank) {
    return rank == 3 ? memory::format_tag::nwc : rank == 4 ? memory::format_tag::nhwc : memory::format_tag::ndhwc;
  }
  // The reorder of a u8/s8 source input into the primitive's layout, if it
  // is the input's only use (so the primitive can read the input there
  // instead); its position in `steps`, or -1.
  int boundSourceStep() const {
    if (boundSource < 0 || sourceReorder < 0) return -1;
    std::vector<memory> mine;
    for (const Binding& b : bindings)
      if (!b.isOutput && b.index == boundSource) mine.push_back(b.memory);
    if (mine.size() != 1) return -1;
    int uses = 0;
    for (const Step& step : steps)
      for (const auto& [arg, m] : step.args)
        if (m == mine[0]) ++uses;
    for (const Step& step : after)
      for (const auto& [arg, m] : step.args)
        if (m == mine[0]) ++uses;
    const Step& reorder = steps[static_cast<size_t>(sourceReorder)];
    if (uses != 1 || reorder.primitive.get_kind() != dnnl::primitive::kind::reorder ||
        !(reorder.args.at(DNNL_ARG_FROM) == mine[0]))
      return -1;
    return sourceReorder;
  }
  // `from` replaced by `to` in every step, and no longer owned.
  void replace(const memory& from, const memory& to) {
    for (Step& step : steps)
      for (auto& [arg, m] : step.args)
        if (m == from) m = to;
    owned.erase(std::remove(owned.begin(), owned.end(), from), owned.end());
  }
  void eraseStep(int at) {
    steps.erase(steps.begin() + at);
    if (outputReorder > at) --outputReorder;
    if (sourceReorder > at) --sourceReorder;
  }
  // The hand-over of the reorder step `at` between the caller's buffer (the
  // kernel's output or input `index`) and the kernel's own memory (its
  // argument `own`): the step goes, and the caller's buffer, bound at run
  // time, takes the own memory's place in every other step.
  void takeOverReorder(int at, int own, bool output, int index) {
    const memory mine = steps[static_cast<size_t>(at)].args.at(own);
    const memory handle(mine.get_desc(), context_->engine, DNNL_MEMORY_NONE);
    eraseStep(at);
    replace(mine, handle);
    for (Binding& b : bindings)
      if (b.isOutput == output && b.index == index) b.memory = handle;
  }

  std::shared_ptr<Context> context_;
  // The reorders the layout hand-over can drop: the quantized source into
  // the primitive's layout, the float result out of it (-1: none).
  int sourceReorder = -1, outputReorder = -1;
  // The u8/s8 source as an input of the kernel (no quantizer in it): its
  // index, or -1.
  int boundSource = -1;
  // The requantized result is written in the accumulator's channels-last
  // layout (handed over), not NCHW.
  bool nativeOutput = false;
  // A QuantizeLinear or DequantizeLinear alone: its tensor's dims, which
  // sides are handed over, and the reorder of the integers between them
  // (empty when both or neither are).
  memory::dims elementwiseDims;
  bool nativeElementIn = false, nativeElementOut = false;
  memory convertFrom, convertTo;
  std::vector<Step> convert;  // that reorder (its memories: convertFrom, convertTo), or none
  std::string what;  // the product as analysed
  std::vector<Step> steps;
  std::vector<Binding> bindings;
  std::vector<memory> owned;
  // The quantizer (when in the group).
  bool quantize = false;
  int sourceInput = -1;
  int64_t sourceCount = 0;
  memory quantized;                   // its u8 result, plain
  std::vector<int> quantizerOutputs;  // the quantizer alone: which output each kernel output is
  // DequantizeLinear alone (its source's type: zeroPointSigned).
  bool dequantize = false;
  float dequantizeScale = 1.0f;
  // The source zero point: a constant, or read from an input at run time.
  int32_t zeroPointConstant = 0;
  int zeroPointInput = -1;
  bool zeroPointSigned = false;
  memory zeroPointMemory;
  // The dequantizing scale per output channel, filled at run time.
  memory scaleMemory;
  size_t scaleCount = 0;
  std::vector<float> weightScale;
  // QuantizeLinear in the kernel (constant scale and zero point).
  bool staticQuantize = false, staticSigned = false;
  float staticScale = 1.0f;
  int32_t staticZeroPoint = 0;
  // Requantization (QLinear ops): the accumulator, plain, and its parameters.
  memory accumulator;
  bool requantizing = false;
  // Weights that did not fit int8 (onednn_int8.h): the window sums of the
  // source, per channel offsets; a float result goes from `combined` through
  // the `after` steps (scale and post-ops) to the output.
  memory compensation, combined;
  std::vector<int32_t> weightOffset;
  std::vector<Step> after;
  bool scaleFromQuantizer = false;
  bool outputDequantize = false;
  float outputDequantizeScale = 1.0f;
  int32_t outputDequantizeZero = 0;
  bool outputSigned = false;
  int32_t outputZeroPoint = 0;
  std::vector<float> requantScale;
  std::vector<int32_t> intBias;
  // The accumulator as [outer][channels][inner] (Conv: N, C, spatial), or
  // for a MatMul [outer rows][channels] (channelsInner: inner is 1).
  int64_t outer = 1, channels = 1, inner = 1;
  bool channelsInner = false;
  // A Conv's accumulator left in the primitive's channels-last layout
  // ([outer][inner][channels]); only without compensation.
  bool channelsLast = false;
};

class Int8Builder {
 public:
  Int8Builder(std::shared_ptr<Context> context, const KernelRequest& request, const Int8Product& p)
      : request_(request), g_(*request.graph), p_(p), k_(std::make_unique<Int8Kernel>(std::move(context))) {}

  std::unique_ptr<Kernel> build() {
    k_->what = p_.describe(g_);
    if (p_.anchor == kNoNode && p_.dequantizer != kNoNode) return buildDequantizerAlone();
    if (p_.anchor == kNoNode && p_.staticQuantizer != kNoNode) {  // QuantizeLinear alone
      setUpStaticQuantizer(g_.value(g_.node(p_.staticQuantizer).inputs[0]).type.numElements());
      k_->elementwiseDims = dimsOf(g_.value(g_.node(p_.staticQuantizer).inputs[0]).type.shape);
      return std::move(k_);
    }
    if (p_.anchor == kNoNode) return buildQuantizerAlone();
    const Node& anchor = g_.node(p_.anchor);
    label_ = nodeLabel(anchor);
    setUpSource();
    std::vector<PostOp> ops = simplified(p_.postOps);
    const bool conv = p_.kind == Int8Product::Kind::Conv;
    const size_t rank = p_.shape.size();
    const bool quantizeOutput = p_.outputQuantizer != kNoNode;
    if (quantizeOutput) appendOutputQuantization(ops);
    const bool compensate = !p_.weightOffset.empty();
    k_->scaleFromQuantizer = p_.scaleFromQuantizer;
    if (p_.hasScale || (compensate && p_.floatOutput)) {
      Shape scaleShape(rank, 1);
      scaleShape[conv ? 1 : rank - 1] = p_.outChannels();
      k_->scaleCount = static_cast<size_t>(p_.outChannels());
      k_->weightScale = p_.hasScale ? p_.weightScale : std::vector<float>{1.0f};
      k_->scaleMemory = owned(plainOf(scaleShape, dt::f32));
    }
    // Compensated: the product alone into an s32 accumulator; scale and post-ops come after.
    const std::vector<PostOp> productOps = compensate ? std::vector<PostOp>() : ops;
    const dnnl::primitive_attr attr = attrFor(productOps, !compensate && p_.hasScale);
    const memory::desc dstPlain = plainOf(p_.shape, quantizeOutput                ? dnnlType(p_.outputType)
                                                    : p_.floatOutput && !compensate ? dt::f32
                                                                                    : dt::s32);
    k_->requantizing = p_.requantize;
    k_->weightOffset = p_.weightOffset;
    if (p_.requantize || compensate) {
      k_->outputSigned = p_.outputType == ElementType::Int8;  // (requantizing)
      k_->outputZeroPoint = p_.outputZeroPoint;
      k_->outputDequantize = p_.outputDequantizer != kNoNode;
      k_->outputDequantizeScale = p_.outputDequantizeScale;
      k_->outputDequantizeZero = p_.outputDequantizeZero;
      k_->requantScale = p_.requantScale;
      k_->intBias = p_.intBias;
      k_->channels = p_.outChannels();
      if (conv) {
        k_->outer = p_.shape[0];
        k_->inner = numElements(p_.shape) / (p_.shape[0] * k_->channels);
      } else {
        k_->outer = numElements(p_.shape) / k_->channels;
        k_->channelsInner = true;
      }
    }
    try {
      if (conv)
        buildConv(anchor, attr, productOps, dstPlain);
      else
        buildMatMul(attr, productOps, dstPlain);
      if (compensate) buildCompensation(anchor, ops);
    } catch (const dnnl::error& e) {
      throw Refusal{label_ + "oneDNN has no int8 " + (conv ? "convolution" : "matmul") + " for " +
                    p_.describe(g_) + ": " + e.what()};
    }
    return std::move(k_);
  }

 private:
  // QDQ's QuantizeLinear at the end, as post-ops after the float ones:
  // f / scale (a binary division, which oneDNN computes as one: not its
  // eltwise linear, whose alpha would be a rounded reciprocal), or f times
  // the scale's reciprocal where that is exact (core/ops/requantize.h);
  // rounded half to even (eltwise round, the default rounding mode, as
  // nearbyint); plus the zero point, an integer added to an integer. The
  // store into u8/s8 saturates to the type's range, and converts integral
  // floats exactly. Binary ops on scalars, not eltwise ones: oneDNN 2.6 runs
  // a second eltwise op of an algorithm with the first one's parameters
  // (onednn_post_ops.h), and a linear op in the chain before would merge.
  void appendOutputQuantization(std::vector<PostOp>& ops) const {
    const std::string& name = g_.node(p_.outputQuantizer).name;
    auto scalar = [&](float v) {
      Operand o;
      o.isConstant = true;
      o.shape = Shape(p_.shape.size(), 1);
      o.constant = Tensor::fromFloats(o.shape, {v});
      return o;
    };
    float inv = 0.0f;
    if (exactReciprocal(p_.outputQuantizeScale, inv))
      ops.push_back(PostOp::binary(dnnl::algorithm::binary_mul, scalar(inv), name));
    else
      ops.push_back(PostOp::binary(dnnl::algorithm::binary_div, scalar(p_.outputQuantizeScale), name));
    ops.push_back(PostOp::eltwise(dnnl::algorithm::eltwise_round, 0.0f, 0.0f, name));
    if (p_.outputQuantizeZero != 0)
      ops.push_back(PostOp::binary(dnnl::algorithm::binary_add, scalar(static_cast<float>(p_.outputQuantizeZero)), name));
  }

  std::unique_ptr<Kernel> buildDequantizerAlone() {
    const Node& dq = g_.node(p_.dequantizer);
    k_->dequantize = true;
    k_->dequantizeScale = p_.dequantizeScale;
    k_->sourceCount = g_.value(dq.inputs[0]).type.numElements();
    k_->elementwiseDims = dimsOf(g_.value(dq.inputs[0]).type.shape);
    k_->zeroPointSigned = p_.sourceType == ElementType::Int8;
    if (p_.sourceZeroPoint.isConstant)
      k_->zeroPointConstant = static_cast<int32_t>(p_.sourceZeroPoint.constant.toInts()[0]);
    return std::move(k_);
  }

  std::unique_ptr<Kernel> buildQuantizerAlone() {
    const Node& q = g_.node(p_.quantizer);
    k_->quantize = true;
    k_->sourceInput = p_.source.inputIndex;
    k_->sourceCount = g_.value(q.inputs[0]).type.numElements();
    for (ValueId v : request_.outputs)
      k_->quantizerOutputs.push_back(static_cast<int>(std::find(q.outputs.begin(), q.outputs.end(), v) -
                                                      q.outputs.begin()));
    return std::move(k_);
  }

  memory owned(const memory::desc& md) {
    memory m(md, engine());
    k_->owned.push_back(m);
    return m;
  }
  memory bound(const memory::desc& md, int index, bool output) {
    memory m(md, engine(), DNNL_MEMORY_NONE);
    k_->bindings.push_back({m, output, index, 0});
    return m;
  }
  const dnnl::engine& engine() const { return k_->context_->engine; }

  // Runs a reorder now (compile time) from `from` holding `data` into a new owned memory `to`.
  memory reorderedConstant(const memory::desc& from, const void* data, const memory::desc& to) {
    memory src(from, engine(), const_cast<void*>(data));
    memory dst = owned(to);
    dnnl::stream stream(engine());
    dnnl::reorder(src, dst).execute(stream, src, dst);
    stream.wait();
    return dst;
  }

  void addStep(const dnnl::primitive_desc_base& pd, dnnl::primitive p,
               std::unordered_map<int, memory> args, const std::string& kind) {
    const memory::desc scratch = pd.scratchpad_desc();
    if (scratch.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = owned(scratch);
    warmLazyKernels(pd);
    k_->steps.push_back({std::move(p), std::move(args), kind + "(" + pd.impl_info_str() + ")"});
  }
  void addReorder(const memory& from, const memory& to) {
    const dnnl::reorder::primitive_desc pd(from, to);
    addStep(pd, dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, "reorder");
  }

  // The source in plain layout and the zero point memory.
  void setUpSource() {
    const Shape& xs = g_.value(g_.node(p_.anchor).inputs[0]).type.shape;
    sourcePlain_ = plainOf(xs, dnnlType(p_.sourceType));
    if (p_.quantizer != kNoNode) {
      k_->quantize = true;
      k_->sourceInput = p_.source.inputIndex;
      k_->sourceCount = numElements(xs);
      k_->quantized = owned(sourcePlain_);
      source_ = k_->quantized;
    } else {
      if (p_.staticQuantizer != kNoNode || p_.requantizedSource) {
        setUpStaticQuantizer(numElements(xs));
        k_->quantized = owned(sourcePlain_);
        source_ = k_->quantized;
      } else {
        source_ = bound(sourcePlain_, p_.source.inputIndex, false);
        k_->boundSource = p_.source.inputIndex;
      }
      const Operand& z = p_.sourceZeroPoint;
      if (z.isConstant) {
        k_->zeroPointConstant = static_cast<int32_t>(z.constant.toInts()[0]);
      } else if (z.inputIndex >= 0) {
        k_->zeroPointInput = z.inputIndex;
        k_->zeroPointSigned = g_.value(request_.inputs[static_cast<size_t>(z.inputIndex)]).type.elementType ==
                              ElementType::Int8;
      }
    }
    k_->zeroPointMemory = owned(memory::desc({1}, dt::s32, memory::format_tag::x));
  }

  void setUpStaticQuantizer(int64_t count) {
    k_->staticQuantize = true;
    k_->staticSigned = p_.sourceType == ElementType::Int8;
    k_->staticScale = p_.staticScale;
    k_->staticZeroPoint = p_.staticZeroPoint;
    k_->sourceInput = p_.source.inputIndex;
    k_->sourceCount = count;
  }

  // The window sums of the source minus its zero point (a product with
  // weights of ones), and for a float result the steps after the combination:
  // one binary multiply by the scale with the chain's post-ops.
  void buildCompensation(const Node& anchor, const std::vector<PostOp>& ops) {
    const bool conv = p_.kind == Int8Product::Kind::Conv;
    const Shape& xs = g_.value(anchor.inputs[0]).type.shape;
    dnnl::primitive_attr attr = attrFor({}, false);
    Shape sumShape = p_.shape;
    if (conv) {
      const ConvGeometry geo = ConvGeometry::conv(anchor, xs, p_.weightsShape);
      sumShape[1] = 1;
      memory::dims wd = {1, geo.inChannels};
      wd.insert(wd.end(), geo.kernel.begin(), geo.kernel.end());
      const std::vector<int8_t> ones(static_cast<size_t>(numElements(wd)), 1);
      memory::dims strides(geo.strides.begin(), geo.strides.end()), dil, pl, pr;
      for (size_t i = 0; i < geo.spatialRank(); ++i) {
        dil.push_back(geo.dilations[i] - 1);
        pl.push_back(geo.padsBegin[i]);
        pr.push_back(geo.padsEnd[i]);
      }
      const dnnl::convolution_forward::desc desc(
          dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
          memory::desc(dimsOf(xs), dnnlType(p_.sourceType), memory::format_tag::any),
          memory::desc(wd, dt::s8, memory::format_tag::any), memory::desc(dimsOf(sumShape), dt::s32, memory::format_tag::any),
          strides, dil, pl, pr);
      const dnnl::convolution_forward::primitive_desc pd(desc, attr, engine());
      k_->compensation = productInto(pd, dnnl::convolution_forward(pd), plainOf(wd, dt::s8), ones, sumShape, "convolution");
    } else {
      sumShape.back() = 1;
      Shape wShape = padTo(p_.weightsShape, p_.shape.size());
      wShape.back() = 1;
      const std::vector<int8_t> ones(static_cast<size_t>(numElements(wShape)), 1);
      const dnnl::matmul::desc desc(sourcePlain_, memory::desc(dimsOf(wShape), dt::s8, memory::format_tag::any),
                                    plainOf(sumShape, dt::s32));
      const dnnl::matmul::primitive_desc pd(desc, attr, engine());
      k_->compensation = productInto(pd, dnnl::matmul(pd), plainOf(wShape, dt::s8), ones, sumShape, "matmul");
    }
    if (!p_.floatOutput) return;
    const memory::desc plain = plainOf(p_.shape, dt::f32);
    k_->combined = owned(plain);
    dnnl::post_ops po;
    for (const PostOp& op : ops) {
      if (op.kind == PostOp::Kind::Eltwise)
        po.append_eltwise(1.0f, op.alg, op.alpha, op.beta);
      else
        po.append_binary(op.alg, plainOf(padTo(op.operand.shape, p_.shape.size()), dt::f32));
    }
    dnnl::primitive_attr binaryAttr;
    binaryAttr.set_post_ops(po);
    binaryAttr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::binary::primitive_desc pd(
        dnnl::binary::desc(dnnl::algorithm::binary_mul, plain, k_->scaleMemory.get_desc(), plain), binaryAttr, engine());
    std::unordered_map<int, memory> args = postOpArgs(ops, 0);
    args[DNNL_ARG_SRC_0] = k_->combined;
    args[DNNL_ARG_SRC_1] = k_->scaleMemory;
    args[DNNL_ARG_DST] = bound(plain, 0, true);
    const memory::desc scratch = pd.scratchpad_desc();
    if (scratch.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = owned(scratch);
    k_->after.push_back({dnnl::binary(pd), std::move(args), "binary(" + std::string(pd.impl_info_str()) + ")"});
  }

  // A product of the source with constant `weights` (plain `wPlain`) into a plain s32 buffer of `shape`.
  template <class PD>
  memory productInto(const PD& pd, dnnl::primitive p, const memory::desc& wPlain, const std::vector<int8_t>& weights,
                     const Shape& shape, const std::string& kind) {
    std::unordered_map<int, memory> args;
    args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = k_->zeroPointMemory;
    args[DNNL_ARG_SRC] = sourceFor(pd.src_desc());
    args[DNNL_ARG_WEIGHTS] = reorderedConstant(wPlain, weights.data(), pd.weights_desc());
    const memory::desc plain = plainOf(shape, dt::s32);
    const memory out = owned(plain);
    const bool direct = pd.dst_desc() == plain;
    const memory dst = direct ? out : owned(pd.dst_desc());
    args[DNNL_ARG_DST] = dst;
    addStep(pd, std::move(p), std::move(args), kind);
    if (!direct) addReorder(dst, out);
    return out;
  }

  dnnl::primitive_attr attrFor(const std::vector<PostOp>& ops, bool withScale) {
    dnnl::post_ops po;
    const size_t rank = p_.shape.size();
    if (withScale) po.append_binary(dnnl::algorithm::binary_mul, k_->scaleMemory.get_desc());
    for (const PostOp& op : ops) {
      if (op.kind == PostOp::Kind::Eltwise)
        po.append_eltwise(1.0f, op.alg, op.alpha, op.beta);
      else
        po.append_binary(op.alg, plainOf(padTo(op.operand.shape, rank), dt::f32));
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
  }

  // The arguments every product takes: zero point and post-op operands.
  std::unordered_map<int, memory> commonArgs(const std::vector<PostOp>& ops, bool withScale) {
    std::unordered_map<int, memory> args = postOpArgs(ops, withScale ? 1 : 0);
    args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = k_->zeroPointMemory;
    if (withScale) args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = k_->scaleMemory;
    return args;
  }

  // The operands of the binary post-ops among `ops`, the first at post-op position `index`.
  std::unordered_map<int, memory> postOpArgs(const std::vector<PostOp>& ops, int index) {
    std::unordered_map<int, memory> args;
    for (const PostOp& op : ops) {
      const int at = index++;
      if (op.kind != PostOp::Kind::Binary) continue;
      const memory::desc md = plainOf(padTo(op.operand.shape, p_.shape.size()), dt::f32);
      memory m;
      if (op.operand.isConstant) {
        m = owned(md);
        std::memcpy(m.get_data_handle(), op.operand.constant.raw(), md.get_size());
      } else {
        m = bound(md, op.operand.inputIndex, false);
      }
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(at) | DNNL_ARG_SRC_1] = m;
    }
    return args;
  }

  // The primitive's source in the layout it wants (a reorder of the plain one if needed).
  memory sourceFor(const memory::desc& want) {
    if (want == sourcePlain_) return source_;
    for (const memory& copy : sourceCopies_)  // the two products of a compensated kernel share it
      if (copy.get_desc() == want) return copy;
    memory m = owned(want);
    sourceCopies_.push_back(m);
    // A quantizer in the kernel can write this copy directly, or the
    // kernel before can hand the source over in it (the hand-over). A
    // second copy (another layout) rules the hand-over out: the source
    // must then stay where both reorders read it.
    k_->sourceReorder = sourceCopies_.size() == 1 ? static_cast<int>(k_->steps.size()) : -1;
    addReorder(source_, m);
    return m;
  }

  static bool isChannelsLast(const memory::desc& md) {
    const memory::dims d = md.dims();
    if (d.size() < 3 || d.size() > 5) return false;
    const memory::format_tag tag = d.size() == 3 ? memory::format_tag::nwc
                                   : d.size() == 4 ? memory::format_tag::nhwc
                                                   : memory::format_tag::ndhwc;
    return md == memory::desc(d, md.data_type(), tag);
  }

  template <class PD, class P>
  void finish(const PD& pd, std::unordered_map<int, memory> args, const memory::desc& wPlain,
              const memory::desc& dstPlain, const std::string& kind) {
    args[DNNL_ARG_SRC] = sourceFor(pd.src_desc());
    args[DNNL_ARG_WEIGHTS] = reorderedConstant(wPlain, p_.weights.data(), pd.weights_desc());
    const bool plainDst = pd.dst_desc() == dstPlain;
    // Requantized into a channels-last accumulator: the epilogue reads it
    // there (no reorder of the s32 tensor).
    if (p_.requantize && p_.weightOffset.empty() && p_.kind == Int8Product::Kind::Conv && !plainDst &&
        isChannelsLast(pd.dst_desc())) {
      k_->accumulator = owned(pd.dst_desc());
      k_->channelsLast = true;
      args[DNNL_ARG_DST] = k_->accumulator;
      addStep(pd, P(pd), std::move(args), kind);
      return;
    }
    // Requantized: the plain accumulator is the kernel's, the epilogue writes the output.
    const bool ownAccumulator = p_.requantize || !p_.weightOffset.empty();
    auto result = [&] { return ownAccumulator ? (k_->accumulator = owned(dstPlain)) : bound(dstPlain, 0, true); };
    const memory dst = plainDst ? result() : owned(pd.dst_desc());
    args[DNNL_ARG_DST] = dst;
    addStep(pd, P(pd), std::move(args), kind);
    if (!plainDst) {
      // (A quantized output: the integers in the convolution's layout.)
      const bool handOver = p_.outputQuantizer != kNoNode ? handOverLayoutOf(dst.get_desc()).has_value()
                                                          : nativeTagOf(dst.get_desc()).has_value();
      if (p_.floatOutput && handOver) k_->outputReorder = static_cast<int>(k_->steps.size());
      addReorder(dst, result());
    }
  }

  void buildConv(const Node& anchor, const dnnl::primitive_attr& attr, const std::vector<PostOp>& ops,
                 const memory::desc& dstPlain) {
    const Shape& xs = g_.value(anchor.inputs[0]).type.shape;
    const ConvGeometry geo = ConvGeometry::conv(anchor, xs, p_.weightsShape);
    const int64_t G = geo.group;
    memory::dims wd;
    if (G > 1) wd.push_back(G);
    wd.push_back(geo.outChannels / G);
    wd.push_back(geo.inChannels / G);
    wd.insert(wd.end(), geo.kernel.begin(), geo.kernel.end());
    const memory::desc wPlain = plainOf(wd, dt::s8);
    memory::dims strides(geo.strides.begin(), geo.strides.end()), dil, pl, pr;
    for (size_t i = 0; i < geo.spatialRank(); ++i) {
      dil.push_back(geo.dilations[i] - 1);
      pl.push_back(geo.padsBegin[i]);
      pr.push_back(geo.padsEnd[i]);
    }
    const dt srcType = dnnlType(p_.sourceType), dstType = dstPlain.data_type();
    const memory::desc src(dimsOf(xs), srcType, memory::format_tag::any);
    const memory::desc w(wd, dt::s8, memory::format_tag::any);
    const memory::desc dst(dimsOf(p_.shape), dstType, memory::format_tag::any);
    const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::convolution_direct, src, w, dst, strides,
                                               dil, pl, pr);
    const dnnl::convolution_forward::primitive_desc pd(desc, attr, engine());
    finish<dnnl::convolution_forward::primitive_desc, dnnl::convolution_forward>(
        pd, commonArgs(ops, p_.hasScale && p_.weightOffset.empty()), wPlain, dstPlain, "convolution");
  }

  void buildMatMul(const dnnl::primitive_attr& attr, const std::vector<PostOp>& ops,
                   const memory::desc& dstPlain) {
    const size_t rank = p_.shape.size();
    const memory::desc wPlain = plainOf(padTo(p_.weightsShape, rank), dt::s8);
    const memory::desc w(wPlain.dims(), dt::s8, memory::format_tag::any);
    const dnnl::matmul::desc desc(sourcePlain_, w, dstPlain);
    const dnnl::matmul::primitive_desc pd(desc, attr, engine());
    finish<dnnl::matmul::primitive_desc, dnnl::matmul>(pd, commonArgs(ops, p_.hasScale && p_.weightOffset.empty()),
                                                       wPlain, dstPlain, "matmul");
  }

  const KernelRequest& request_;
  const Graph& g_;
  const Int8Product& p_;
  std::unique_ptr<Int8Kernel> k_;
  std::string label_;
  memory::desc sourcePlain_;
  memory source_;
  std::vector<memory> sourceCopies_;
};

}  // namespace

std::string describeInt8Kernel(const Kernel& kernel) {
  const auto* k = dynamic_cast<const Int8Kernel*>(&kernel);
  return k ? k->describe() : std::string();
}

CompileResult lowerInt8(const std::shared_ptr<Context>& context, const KernelRequest& request,
                        const Int8Product& product) {
  return guardedLowering([&] { return CompileResult::ok(Int8Builder(context, request, product).build()); });
}

}  // namespace collage::onednn
