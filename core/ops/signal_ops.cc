// Signal-processing ops of opset 17, as audio front ends (torch.stft,
// torchaudio's spectrograms) export them: DFT, STFT, the Hann, Hamming and
// Blackman windows, and MelWeightMatrix.
//
// Complex tensors are real tensors with a trailing dimension of 2 (real,
// imaginary); a trailing 1 is a real signal. Transforms are the direct
// O(n^2) sums in double: a reference, not an FFT.
//
// Static shapes: DFT's dft_length and STFT's frame_step / frame_length /
// window decide output shapes, so they become attributes at import when
// constant. A node that keeps them as run-time inputs gets a placeholder
// shape from infer (as Range does) and the kernel, reading the run-time
// tensors, gives the output its real shape. The window ops and
// MelWeightMatrix depend on their inputs' values only: value-shaped, folded.
#include <cmath>

#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

constexpr double kPi = 3.14159265358979323846;

bool present(const Inputs& in, size_t i) { return i < in.size() && in[i] != nullptr; }

// Whether input i is a run-time tensor (kept by the importer, not an attribute).
bool runtimeInput(const Types& in, size_t i) {
  return i < in.size() && in[i].elementType != ElementType::Undefined;
}

// Gives an output the shape the kernel computed (infer's placeholder for a
// run-time shape input has zero-sized dimensions).
void reshapeOutput(Tensor* out, const Shape& shape) {
  if (out && out->shape() != shape) *out = Tensor(out->elementType(), shape);
}

Shape dftShape(const Node& node, const Shape& x, int64_t axis, int64_t len) {
  Shape out = x;
  out[axis] = node.attrs.getInt("onesided", 0) != 0 ? len / 2 + 1 : len;
  out.back() = 2;
  return out;
}

ElementType outputDatatype(const Node& node) {
  const ElementType t = elementTypeFromOnnx(static_cast<int32_t>(node.attrs.getInt("output_datatype", 1)));
  requireTypeIn(node, kNumeric, t);
  return t;
}

// Writes doubles into a tensor of any numeric type.
void storeDoubles(const Node& node, const std::vector<double>& v, Tensor& out) {
  visitType<kNumeric>(node, out.elementType(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = out.data<T>();
    for (size_t i = 0; i < v.size(); ++i) y[i] = static_cast<T>(v[i]);
  });
}

// ---- Windows ----

// a0 - a1 cos(2 pi n / N') + a2 cos(4 pi n / N'), N' = size (periodic) or size - 1.
void addWindow(OpRegistry& r, const std::string& name, double a0, double a1, double a2) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Opaque;
  s.valueShapedInputs = {0};
  s.attributes = {{"output_datatype", AttributeType::Int, Attribute(int64_t{1})},
                  {"periodic", AttributeType::Int, Attribute(int64_t{1})}};
  s.infer = [](const Node& node, const Types& in) {
    requireIndexType(node, in[0], "size");
    return Types{{outputDatatype(node), {0}}};
  };
  s.reference = [a0, a1, a2](const Node& node, const Inputs& in, const Outputs& out) {
    const int64_t size = scalarInt(node, *in[0], "size");
    if (size < 0) throw Error(nodeLabel(node) + "size " + std::to_string(size) + " is negative");
    const bool periodic = node.attrs.getInt("periodic", 1) != 0;
    const double denom = static_cast<double>(periodic ? size : size - 1);
    std::vector<double> w(static_cast<size_t>(size));
    for (int64_t n = 0; n < size; ++n) {
      const double t = denom != 0 ? 2 * kPi * static_cast<double>(n) / denom : 0.0;
      w[n] = a0 - a1 * std::cos(t) + a2 * std::cos(2 * t);
    }
    Tensor result(outputDatatype(node), {size});
    storeDoubles(node, w, result);
    *out[0] = std::move(result);
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---- MelWeightMatrix ----

void addMelWeightMatrix(OpRegistry& r) {
  OpSchema s;
  s.name = "MelWeightMatrix";
  s.kind = OpKind::Opaque;
  s.minInputs = s.maxInputs = 5;
  s.valueShapedInputs = {0, 1, 2, 3, 4};
  s.attributes = {{"output_datatype", AttributeType::Int, Attribute(int64_t{1})}};
  s.infer = [](const Node& node, const Types& in) {
    for (int i = 0; i < 3; ++i) requireIndexType(node, in[i], "num_mel_bins, dft_length and sample_rate");
    return Types{{outputDatatype(node), {0, 0}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const int64_t bins = scalarInt(node, *in[0], "num_mel_bins");
    const int64_t dftLength = scalarInt(node, *in[1], "dft_length");
    const int64_t rate = scalarInt(node, *in[2], "sample_rate");
    const double lower = scalarDouble(node, *in[3], "lower_edge_hertz");
    const double upper = scalarDouble(node, *in[4], "upper_edge_hertz");
    if (bins < 1 || dftLength < 1 || rate < 1 || lower < 0 || upper <= lower)
      throw Error(nodeLabel(node) + "needs num_mel_bins, dft_length, sample_rate >= 1 and "
                  "0 <= lower_edge_hertz < upper_edge_hertz");
    const int64_t spectrogramBins = dftLength / 2 + 1;
    // bins + 2 points evenly spaced in mel, mapped back to DFT bin indices.
    auto toMel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
    const double lowMel = toMel(lower), highMel = toMel(upper);
    const double step = (highMel - lowMel) / static_cast<double>(bins + 2);
    std::vector<int64_t> edge(static_cast<size_t>(bins + 2));
    for (int64_t i = 0; i < bins + 2; ++i) {
      const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + lowMel) / 2595.0) - 1.0);
      edge[i] = static_cast<int64_t>(std::floor(static_cast<double>(dftLength + 1) * hz / static_cast<double>(rate)));
    }
    std::vector<double> w(static_cast<size_t>(spectrogramBins * bins), 0.0);
    auto at = [&](int64_t row, int64_t col) -> double& {
      if (row < 0 || row >= spectrogramBins)
        throw Error(nodeLabel(node) + "a mel band edge falls outside the spectrogram's " +
                    std::to_string(spectrogramBins) + " bins");
      return w[row * bins + col];
    };
    for (int64_t i = 0; i < bins; ++i) {
      const int64_t lo = edge[i], center = edge[i + 1], hi = edge[i + 2];
      if (center == lo) {
        at(center, i) = 1.0;
      } else {
        for (int64_t j = lo; j <= center; ++j)
          at(j, i) = static_cast<double>(j - lo) / static_cast<double>(center - lo);
      }
      for (int64_t j = center; j < hi; ++j)
        at(j, i) = static_cast<double>(hi - j) / static_cast<double>(hi - center);
    }
    Tensor result(outputDatatype(node), {spectrogramBins, bins});
    storeDoubles(node, w, result);
    *out[0] = std::move(result);
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---- DFT ----

// out[k] = sum_n in[n] e^(-+2 pi i k n / len) over n < min(n, len) (zero
// padding beyond the signal); strides in complex elements.
void dft1d(const double* re, const double* im, int64_t n, int64_t stride, int64_t len,
           int64_t outBins, bool inverse, double* ore, double* oim, int64_t ostride) {
  const double sign = inverse ? 1.0 : -1.0;
  for (int64_t k = 0; k < outBins; ++k) {
    double sr = 0, si = 0;
    for (int64_t t = 0; t < std::min(n, len); ++t) {
      const double angle = sign * 2 * kPi * static_cast<double>((k * t) % len) / static_cast<double>(len);
      const double c = std::cos(angle), s = std::sin(angle);
      const double xr = re[t * stride], xi = im ? im[t * stride] : 0.0;
      sr += xr * c - xi * s;
      si += xr * s + xi * c;
    }
    if (inverse) {
      sr /= static_cast<double>(len);
      si /= static_cast<double>(len);
    }
    ore[k * ostride] = sr;
    oim[k * ostride] = si;
  }
}

int64_t dftLength(const Node& node, const Inputs* in, int64_t fallback) {
  if (in && present(*in, 1)) return scalarInt(node, *(*in)[1], "dft_length");
  return node.attrs.getInt("dft_length", fallback);
}

void addDft(OpRegistry& r) {
  OpSchema s;
  s.name = "DFT";
  s.kind = OpKind::Opaque;
  s.minInputs = 1;
  s.maxInputs = 2;
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{1})},
                  {"inverse", AttributeType::Int, Attribute(int64_t{0})},
                  {"onesided", AttributeType::Int, Attribute(int64_t{0})},
                  {"dft_length", AttributeType::Int, std::nullopt}};
  s.constInputs = {{1, "dft_length", AttributeType::Int}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kFloatTypes, in[0].elementType);
    const TensorType& x = in[0];
    if (x.rank() < 3 || (x.shape.back() != 1 && x.shape.back() != 2))
      throw Error(nodeLabel(node) + "the input must be [batch, ..., n, 1 or 2], not " + x.toString());
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 1), x.rank() - 1);
    if (axis == 0) throw Error(nodeLabel(node) + "axis 0 is the batch axis");
    if (node.attrs.getInt("onesided", 0) != 0 && node.attrs.getInt("inverse", 0) != 0)
      throw Error(nodeLabel(node) + "onesided and inverse together are not defined");
    if (runtimeInput(in, 1)) {  // a run-time dft_length: placeholder
      Shape placeholder = dftShape(node, x.shape, axis, 0);
      placeholder[axis] = 0;
      return Types{{x.elementType, placeholder}};
    }
    const int64_t len = dftLength(node, nullptr, x.shape[axis]);
    if (len < 1) throw Error(nodeLabel(node) + "dft_length must be positive, not " + std::to_string(len));
    return Types{{x.elementType, dftShape(node, x.shape, axis, len)}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& xs = in[0]->shape();
    const int64_t rank = in[0]->rank();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 1), rank - 1);
    const int64_t len = dftLength(node, &in, xs[axis]);
    const bool inverse = node.attrs.getInt("inverse", 0) != 0;
    if (len < 1) throw Error(nodeLabel(node) + "dft_length must be positive, not " + std::to_string(len));
    reshapeOutput(out[0], dftShape(node, xs, axis, len));
    const Shape& ys = out[0]->shape();
    const bool complexIn = xs.back() == 2;
    const int64_t n = xs[axis], outBins = ys[axis];
    const int64_t outer = shapeProduct(xs, 0, axis), inner = shapeProduct(xs, axis + 1, rank - 1);
    const std::vector<double> x = in[0]->toDoubles();
    std::vector<double> y(static_cast<size_t>(out[0]->numElements()));
    const int64_t c = complexIn ? 2 : 1;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const double* base = x.data() + (o * n * inner + i) * c;
        double* obase = y.data() + (o * outBins * inner + i) * 2;
        dft1d(base, complexIn ? base + 1 : nullptr, n, inner * c, len, outBins, inverse, obase,
              obase + 1, inner * 2);
      }
    storeDoubles(node, y, *out[0]);
  };
  r.add(std::move(s));
}

// ---- STFT ----

struct StftParams {
  int64_t step, frameLength, frames, bins;
  const Tensor* window;
};

StftParams stftParams(const Node& node, const TensorType& signal, const Inputs* in) {
  StftParams p{};
  p.window = in && present(*in, 2) ? (*in)[2] : node.attrs.has("window") ? &node.attrs.getTensor("window") : nullptr;
  p.step = in && present(*in, 1) ? scalarInt(node, *(*in)[1], "frame_step")
                                 : node.attrs.getInt("frame_step", 0);
  if (in && present(*in, 3))
    p.frameLength = scalarInt(node, *(*in)[3], "frame_length");
  else if (node.attrs.has("frame_length"))
    p.frameLength = node.attrs.getInt("frame_length");
  else if (p.window)
    p.frameLength = p.window->numElements();
  else
    throw Error(nodeLabel(node) + "needs a window or a frame_length");
  if (p.window && (p.window->rank() != 1 || p.window->numElements() != p.frameLength))
    throw Error(nodeLabel(node) + "window " + p.window->type().toString() +
                " must be 1-D with frame_length " + std::to_string(p.frameLength) + " values");
  const int64_t length = signal.shape[1];
  if (p.step < 1 || p.frameLength < 1 || p.frameLength > length)
    throw Error(nodeLabel(node) + "frame_step " + std::to_string(p.step) + " and frame_length " +
                std::to_string(p.frameLength) + " do not fit a signal of length " + std::to_string(length));
  p.frames = 1 + (length - p.frameLength) / p.step;
  p.bins = node.attrs.getInt("onesided", 1) != 0 ? p.frameLength / 2 + 1 : p.frameLength;
  return p;
}

void addStft(OpRegistry& r) {
  OpSchema s;
  s.name = "STFT";
  s.kind = OpKind::Opaque;
  s.minInputs = 1;
  s.maxInputs = 4;
  s.attributes = {{"onesided", AttributeType::Int, Attribute(int64_t{1})},
                  {"frame_step", AttributeType::Int, std::nullopt},
                  {"window", AttributeType::Tensor, std::nullopt},
                  {"frame_length", AttributeType::Int, std::nullopt}};
  s.constInputs = {{1, "frame_step", AttributeType::Int},
                   {2, "window", AttributeType::Tensor},
                   {3, "frame_length", AttributeType::Int}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kFloatTypes, in[0].elementType);
    if (in[0].rank() != 3 || (in[0].shape[2] != 1 && in[0].shape[2] != 2))
      throw Error(nodeLabel(node) + "the signal must be [batch, length, 1 or 2], not " + in[0].toString());
    if (runtimeInput(in, 1) || runtimeInput(in, 2) || runtimeInput(in, 3))  // placeholder
      return Types{{in[0].elementType, {in[0].shape[0], 0, 0, 2}}};
    const StftParams p = stftParams(node, in[0], nullptr);
    return Types{{in[0].elementType, {in[0].shape[0], p.frames, p.bins, 2}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const StftParams p = stftParams(node, in[0]->type(), &in);
    const Shape& xs = in[0]->shape();
    reshapeOutput(out[0], {xs[0], p.frames, p.bins, 2});
    const int64_t length = xs[1], c = xs[2];
    const std::vector<double> x = in[0]->toDoubles();
    const std::vector<double> window = p.window ? p.window->toDoubles() : std::vector<double>();
    std::vector<double> y(static_cast<size_t>(out[0]->numElements()));
    std::vector<double> re(static_cast<size_t>(p.frameLength)), im(static_cast<size_t>(p.frameLength));
    for (int64_t b = 0; b < xs[0]; ++b)
      for (int64_t f = 0; f < p.frames; ++f) {
        for (int64_t t = 0; t < p.frameLength; ++t) {
          const double w = p.window ? window[t] : 1.0;
          const double* v = x.data() + (b * length + f * p.step + t) * c;
          re[t] = v[0] * w;
          im[t] = c == 2 ? v[1] * w : 0.0;
        }
        double* o = y.data() + (b * p.frames + f) * p.bins * 2;
        dft1d(re.data(), im.data(), p.frameLength, 1, p.frameLength, p.bins, false, o, o + 1, 2);
      }
    storeDoubles(node, y, *out[0]);
  };
  r.add(std::move(s));
}

}  // namespace

void registerSignalOps(OpRegistry& r) {
  addWindow(r, "HannWindow", 0.5, 0.5, 0.0);
  addWindow(r, "HammingWindow", 25.0 / 46.0, 21.0 / 46.0, 0.0);
  addWindow(r, "BlackmanWindow", 0.42, 0.5, 0.08);
  addMelWeightMatrix(r);
  addDft(r);
  addStft(r);
}

}  // namespace collage
