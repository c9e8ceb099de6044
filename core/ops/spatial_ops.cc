// Pad and Resize. (The importer rewrites the deprecated Upsample and
// Resize-10 into Resize with asymmetric coordinates and floor rounding.)
//
// Resize is computed as separable 1-D passes, innermost axis first, which is
// exactly how the ONNX reference defines n-dimensional interpolation (it
// interpolates the inner dimensions, then interpolates those results along
// the outer one), extrapolation of tf_crop_and_resize included. Each pass
// precomputes, for every output position of its axis, the input taps and
// their weights: 1 tap for nearest, 2 for linear, 4 for cubic.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops/op_registry.h"
#include "core/ops/op_helpers.h"

namespace collage {

namespace {

// ================================ Pad ================================

enum class PadMode { Constant, Reflect, Edge, Wrap };

PadMode padModeOf(const Node& node) {
  const std::string m = node.attrs.getString("mode", "constant");
  if (m == "constant") return PadMode::Constant;
  if (m == "reflect") return PadMode::Reflect;
  if (m == "edge") return PadMode::Edge;
  if (m == "wrap") return PadMode::Wrap;
  throw Error(nodeLabel(node) + "unknown Pad mode '" + m +
              "' (expected constant, reflect, edge or wrap)");
}

std::vector<TensorType> inferPad(const Node& node, const std::vector<TensorType>& in) {
  const TensorType& x = in.at(0);
  switch (x.elementType) {
    case ElementType::Float32: case ElementType::Float64: case ElementType::Int32:
    case ElementType::Int64: case ElementType::Int8: case ElementType::UInt8:
      break;
    default: requireFloat32(node, x);
  }
  const PadMode mode = padModeOf(node);
  const PadAmounts p = padAmounts(node, x.rank());
  TensorType y = x;
  for (size_t i = 0; i < y.shape.size(); ++i) {
    const int64_t kept = x.shape[i] + std::min<int64_t>(p.begin[i], 0) + std::min<int64_t>(p.end[i], 0);
    y.shape[i] = x.shape[i] + p.begin[i] + p.end[i];
    if (kept < 0 || y.shape[i] < 0)
      throw Error(nodeLabel(node) + "pads crop more than dimension " + std::to_string(i) +
                  " of " + shapeToString(x.shape) + " holds");
    if (mode != PadMode::Constant && kept == 0 && y.shape[i] > 0)
      throw Error(nodeLabel(node) + "cannot " + node.attrs.getString("mode", "") +
                  "-pad the empty dimension " + std::to_string(i) + " of " +
                  shapeToString(x.shape));
  }
  return {y};
}

// For each output position of one dimension: the input position it copies,
// or -1 for the constant. Negative pads crop first; the positive pads then
// extend the cropped range (as ONNX Runtime does).
std::vector<int64_t> padSourceTable(int64_t in, int64_t begin, int64_t end, PadMode mode) {
  const int64_t cropBegin = std::max<int64_t>(-begin, 0);
  const int64_t kept = in - cropBegin - std::max<int64_t>(-end, 0);
  const int64_t padBegin = std::max<int64_t>(begin, 0);
  const int64_t out = in + begin + end;
  std::vector<int64_t> table(static_cast<size_t>(std::max<int64_t>(out, 0)));
  for (int64_t o = 0; o < out; ++o) {
    int64_t c = o - padBegin;  // position in the cropped range
    if (c < 0 || c >= kept) {
      switch (mode) {
        case PadMode::Constant:
          c = -1;
          break;
        case PadMode::Edge:
          c = std::clamp<int64_t>(c, 0, kept - 1);
          break;
        case PadMode::Reflect:
          if (kept == 1) {
            c = 0;
          } else {
            const int64_t period = 2 * (kept - 1);
            c = ((c % period) + period) % period;
            if (c >= kept) c = period - c;
          }
          break;
        case PadMode::Wrap:
          c = ((c % kept) + kept) % kept;
          break;
      }
    }
    table[static_cast<size_t>(o)] = c < 0 ? -1 : c + cropBegin;
  }
  return table;
}

template <class T>
void padTyped(const Node& node, const Tensor& X, Tensor& Y) {
  const int64_t rank = X.rank();
  const PadMode mode = padModeOf(node);
  const PadAmounts p = padAmounts(node, rank);
  const T value = static_cast<T>(node.attrs.getFloat("constant_value", 0.0f));
  const T* x = X.data<T>();
  T* y = Y.data<T>();
  const int64_t total = Y.numElements();
  if (total == 0) return;
  if (rank == 0) {
    y[0] = x[0];
    return;
  }
  std::vector<std::vector<int64_t>> tables(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d)
    tables[d] = padSourceTable(X.shape()[d], p.begin[d], p.end[d], mode);
  const std::vector<int64_t> xStrides = stridesOf(X.shape());
  const Shape& ys = Y.shape();
  const int64_t rowLen = ys.back();
  const std::vector<int64_t>& last = tables.back();
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);  // over all but the last dim
  for (int64_t row = 0; row < total / rowLen; ++row) {
    int64_t base = 0;
    bool constantRow = false;
    for (int64_t d = 0; d + 1 < rank; ++d) {
      const int64_t s = tables[d][static_cast<size_t>(index[d])];
      if (s < 0) constantRow = true;
      base += s * xStrides[d];
    }
    T* dst = y + row * rowLen;
    if (constantRow) {
      std::fill(dst, dst + rowLen, value);
    } else {
      for (int64_t i = 0; i < rowLen; ++i) {
        const int64_t s = last[static_cast<size_t>(i)];
        dst[i] = s < 0 ? value : x[base + s];
      }
    }
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++index[d] < ys[d]) break;
      index[d] = 0;
    }
  }
}

void runPad(const Node& node, const std::vector<const Tensor*>& in,
            const std::vector<Tensor*>& out) {
  const Tensor& X = *in[0];
  Tensor& Y = *out[0];
  switch (X.elementType()) {
    case ElementType::Float32: padTyped<float>(node, X, Y); break;
    case ElementType::Float64: padTyped<double>(node, X, Y); break;
    case ElementType::Int32: padTyped<int32_t>(node, X, Y); break;
    case ElementType::Int64: padTyped<int64_t>(node, X, Y); break;
    case ElementType::Int8: padTyped<int8_t>(node, X, Y); break;
    case ElementType::UInt8: padTyped<uint8_t>(node, X, Y); break;
    default: requireFloat32(node, X.type());
  }
}

// ================================ Resize ================================

enum class ResizeMode { Nearest, Linear, Cubic };
enum class CoordMode {
  HalfPixel,
  HalfPixelSymmetric,
  PytorchHalfPixel,
  AlignCorners,
  Asymmetric,
  TfHalfPixelForNn,
  TfCropAndResize,
};
enum class NearestMode { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

// Everything a Resize needs, resolved per dimension.
struct ResizeSpec {
  ResizeMode mode = ResizeMode::Nearest;
  CoordMode coord = CoordMode::HalfPixel;
  NearestMode nearest = NearestMode::RoundPreferFloor;
  double cubicA = -0.75;
  bool excludeOutside = false;
  float extrapolation = 0.0f;
  Shape input, output;
  std::vector<double> scales;             // per dimension (1 for untouched ones)
  std::vector<double> roiStart, roiEnd;   // per dimension (tf_crop_and_resize)
};

std::vector<double> toDoubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

ResizeSpec resizeSpec(const Node& node, const TensorType& x) {
  requireFloat32(node, x);
  if (node.attrs.getInt("antialias", 0) != 0)
    throw Unsupported(nodeLabel(node) + "antialias=1 is not supported");
  ResizeSpec s;
  const std::string mode = node.attrs.getString("mode", "nearest");
  if (mode == "nearest") s.mode = ResizeMode::Nearest;
  else if (mode == "linear") s.mode = ResizeMode::Linear;
  else if (mode == "cubic") s.mode = ResizeMode::Cubic;
  else throw Error(nodeLabel(node) + "unknown mode '" + mode + "'");
  const std::string coord = node.attrs.getString("coordinate_transformation_mode", "half_pixel");
  if (coord == "half_pixel") s.coord = CoordMode::HalfPixel;
  else if (coord == "half_pixel_symmetric") s.coord = CoordMode::HalfPixelSymmetric;
  else if (coord == "pytorch_half_pixel") s.coord = CoordMode::PytorchHalfPixel;
  else if (coord == "align_corners") s.coord = CoordMode::AlignCorners;
  else if (coord == "asymmetric") s.coord = CoordMode::Asymmetric;
  else if (coord == "tf_half_pixel_for_nn") s.coord = CoordMode::TfHalfPixelForNn;
  else if (coord == "tf_crop_and_resize") s.coord = CoordMode::TfCropAndResize;
  else throw Error(nodeLabel(node) + "unknown coordinate_transformation_mode '" + coord + "'");
  const std::string nearest = node.attrs.getString("nearest_mode", "round_prefer_floor");
  if (nearest == "round_prefer_floor") s.nearest = NearestMode::RoundPreferFloor;
  else if (nearest == "round_prefer_ceil") s.nearest = NearestMode::RoundPreferCeil;
  else if (nearest == "floor") s.nearest = NearestMode::Floor;
  else if (nearest == "ceil") s.nearest = NearestMode::Ceil;
  else throw Error(nodeLabel(node) + "unknown nearest_mode '" + nearest + "'");
  s.cubicA = node.attrs.getFloat("cubic_coeff_a", -0.75f);
  s.excludeOutside = node.attrs.getInt("exclude_outside", 0) != 0;
  s.extrapolation = node.attrs.getFloat("extrapolation_value", 0.0f);

  const int64_t rank = x.rank();
  std::vector<int64_t> axes = node.attrs.getInts("axes", {});
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  for (int64_t& a : axes) a = normalizeAxis(node, a, rank);
  const size_t n = axes.size();

  s.input = x.shape;
  s.output = x.shape;
  s.scales.assign(static_cast<size_t>(rank), 1.0);
  s.roiStart.assign(static_cast<size_t>(rank), 0.0);
  s.roiEnd.assign(static_cast<size_t>(rank), 1.0);
  if (s.coord == CoordMode::TfCropAndResize) {
    const std::vector<float> roi = node.attrs.getFloats("roi", {});
    if (roi.size() != 2 * n)
      throw Error(nodeLabel(node) + "tf_crop_and_resize needs roi with " +
                  std::to_string(2 * n) + " values, got " + std::to_string(roi.size()));
    for (size_t i = 0; i < n; ++i) {
      s.roiStart[axes[i]] = roi[i];
      s.roiEnd[axes[i]] = roi[i + n];
    }
  }

  const std::vector<double> scales = toDoubles(node.attrs.getFloats("scales", {}));
  const std::vector<int64_t> sizes = node.attrs.getInts("sizes", {});
  if (scales.empty() == sizes.empty())
    throw Error(nodeLabel(node) + "exactly one of scales and sizes must be given");
  if (!scales.empty()) {
    if (scales.size() != n)
      throw Error(nodeLabel(node) + "scales has " + std::to_string(scales.size()) +
                  " values, expected " + std::to_string(n));
    for (size_t i = 0; i < n; ++i) {
      if (!(scales[i] > 0))
        throw Error(nodeLabel(node) + "scales must be positive");
      const int64_t a = axes[i];
      s.scales[a] = scales[i];
      const double extent = s.roiEnd[a] - s.roiStart[a];  // 1 unless tf_crop_and_resize
      s.output[a] = static_cast<int64_t>(
          std::floor(static_cast<double>(x.shape[a]) * extent * scales[i]));
    }
  } else {
    if (sizes.size() != n)
      throw Error(nodeLabel(node) + "sizes has " + std::to_string(sizes.size()) +
                  " values, expected " + std::to_string(n));
    const std::string policy = node.attrs.getString("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch") {
      for (size_t i = 0; i < n; ++i) {
        const int64_t a = axes[i];
        s.output[a] = sizes[i];
        s.scales[a] = x.shape[a] ? static_cast<double>(sizes[i]) / static_cast<double>(x.shape[a])
                                 : 1.0;
      }
    } else if (policy == "not_larger" || policy == "not_smaller") {
      double scale = policy == "not_larger" ? 1e300 : 0.0;
      for (size_t i = 0; i < n; ++i) {
        const double r = static_cast<double>(sizes[i]) / static_cast<double>(x.shape[axes[i]]);
        scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
      }
      for (size_t i = 0; i < n; ++i) {
        const int64_t a = axes[i];
        s.scales[a] = scale;
        s.output[a] = static_cast<int64_t>(std::nearbyint(scale * static_cast<double>(x.shape[a])));
      }
    } else {
      throw Error(nodeLabel(node) + "unknown keep_aspect_ratio_policy '" + policy + "'");
    }
  }
  for (int64_t d : s.output)
    if (d < 0) throw Error(nodeLabel(node) + "negative output size");
  return s;
}

// Taps of one output position along one axis.
struct Taps {
  int64_t index[4];
  float weight[4];
  int count = 0;  // 0: extrapolated (tf_crop_and_resize outside the input)
};

// The input coordinate of output position x along dimension d (ONNX's
// coordinate transformations; `length` is scale * input as a real number,
// which is what align_corners divides by when scales are given).
double sourceCoordinate(const ResizeSpec& s, size_t d, int64_t x) {
  const double scale = s.scales[d];
  const double in = static_cast<double>(s.input[d]);
  const double outInt = static_cast<double>(s.output[d]);
  const double length = scale * in;
  const double xr = static_cast<double>(x);
  switch (s.coord) {
    case CoordMode::HalfPixel:
      return (xr + 0.5) / scale - 0.5;
    case CoordMode::HalfPixelSymmetric: {
      const double adjustment = outInt / length;
      const double center = in / 2;
      return center * (1 - adjustment) + (xr + 0.5) / scale - 0.5;
    }
    case CoordMode::PytorchHalfPixel:
      return length > 1 ? (xr + 0.5) / scale - 0.5 : -0.5;
    case CoordMode::AlignCorners:
      return length == 1 ? 0.0 : xr * (in - 1) / (length - 1);
    case CoordMode::Asymmetric:
      return xr / scale;
    case CoordMode::TfHalfPixelForNn:
      return (xr + 0.5) / scale;
    case CoordMode::TfCropAndResize: {
      const double start = s.roiStart[d], end = s.roiEnd[d];
      const double pos = length == 1 ? (end - start) * (in - 1) / 2
                                     : xr * (end - start) * (in - 1) / (length - 1);
      return pos + start * (in - 1);
    }
  }
  return xr;
}

void cubicCoefficients(double t, double A, double c[4]) {
  // Keys' cubic convolution kernel at distances 1 + t, t, 1 - t, 2 - t.
  const double x0 = 1 + t, x1 = t, x2 = 1 - t, x3 = 2 - t;
  c[0] = ((A * x0 - 5 * A) * x0 + 8 * A) * x0 - 4 * A;
  c[1] = ((A + 2) * x1 - (A + 3)) * x1 * x1 + 1;
  c[2] = ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1;
  c[3] = ((A * x3 - 5 * A) * x3 + 8 * A) * x3 - 4 * A;
}

std::vector<Taps> axisTaps(const ResizeSpec& s, size_t d) {
  const int64_t in = s.input[d];
  std::vector<Taps> taps(static_cast<size_t>(s.output[d]));
  for (int64_t o = 0; o < s.output[d]; ++o) {
    Taps& t = taps[static_cast<size_t>(o)];
    const double x = sourceCoordinate(s, d, o);
    if (s.coord == CoordMode::TfCropAndResize && (x < 0 || x > static_cast<double>(in - 1))) {
      t.count = 0;
      continue;
    }
    const double fl = std::floor(x);
    const double frac = x - fl;
    const int64_t i0 = static_cast<int64_t>(fl);
    auto clampIndex = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    switch (s.mode) {
      case ResizeMode::Nearest: {
        bool up = false;  // take floor + 1 instead of floor
        switch (s.nearest) {
          case NearestMode::RoundPreferFloor: up = frac > 0.5; break;
          case NearestMode::RoundPreferCeil: up = frac >= 0.5; break;
          case NearestMode::Floor: up = false; break;
          case NearestMode::Ceil: up = frac > 0; break;
        }
        t.count = 1;
        t.index[0] = clampIndex(i0 + (up ? 1 : 0));
        t.weight[0] = 1.0f;
        break;
      }
      case ResizeMode::Linear:
        t.count = 2;
        t.index[0] = clampIndex(i0);
        t.index[1] = clampIndex(i0 + 1);
        t.weight[0] = static_cast<float>(1 - frac);
        t.weight[1] = static_cast<float>(frac);
        break;
      case ResizeMode::Cubic: {
        double c[4];
        cubicCoefficients(frac, s.cubicA, c);
        if (s.excludeOutside) {
          double sum = 0;
          for (int k = 0; k < 4; ++k) {
            const int64_t i = i0 - 1 + k;
            if (i < 0 || i >= in) c[k] = 0;
            sum += c[k];
          }
          if (sum != 0)
            for (double& v : c) v /= sum;
        }
        t.count = 4;
        for (int k = 0; k < 4; ++k) {
          t.index[k] = clampIndex(i0 - 1 + k);
          t.weight[k] = static_cast<float>(c[k]);
        }
        break;
      }
    }
  }
  return taps;
}

bool isIdentity(const std::vector<Taps>& taps, int64_t in) {
  if (static_cast<int64_t>(taps.size()) != in) return false;
  for (size_t o = 0; o < taps.size(); ++o) {
    const Taps& t = taps[o];
    double w = 0;
    bool only = true;
    for (int k = 0; k < t.count; ++k) {
      if (t.weight[k] == 0) continue;
      if (t.index[k] != static_cast<int64_t>(o)) only = false;
      w += t.weight[k];
    }
    if (t.count == 0 || !only || w != 1.0) return false;
  }
  return true;
}

// Resizes dimension d of `src` (shape `shape`) into `dst`; updates `shape`.
void resizePass(const ResizeSpec& s, size_t d, const std::vector<Taps>& taps, const float* src,
                Shape& shape, float* dst) {
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < d) outer *= shape[i];
    if (i > d) inner *= shape[i];
  }
  const int64_t in = shape[d], out = s.output[d];
  for (int64_t o = 0; o < outer; ++o) {
    const float* so = src + o * in * inner;
    float* dso = dst + o * out * inner;
    for (int64_t p = 0; p < out; ++p) {
      const Taps& t = taps[static_cast<size_t>(p)];
      float* row = dso + p * inner;
      if (t.count == 0) {
        std::fill(row, row + inner, s.extrapolation);
        continue;
      }
      const float* r0 = so + t.index[0] * inner;
      const float w0 = t.weight[0];
      for (int64_t i = 0; i < inner; ++i) row[i] = w0 * r0[i];
      for (int k = 1; k < t.count; ++k) {
        const float* rk = so + t.index[k] * inner;
        const float wk = t.weight[k];
        for (int64_t i = 0; i < inner; ++i) row[i] += wk * rk[i];
      }
    }
  }
  shape[d] = out;
}

void runResizeSpec(const ResizeSpec& s, const Tensor& X, Tensor& Y) {
  Shape shape = s.input;
  std::vector<float> a(X.data<float>(), X.data<float>() + X.numElements()), b;
  for (size_t d = shape.size(); d-- > 0;) {
    const std::vector<Taps> taps = axisTaps(s, d);
    if (isIdentity(taps, shape[d])) continue;
    Shape next = shape;
    next[d] = s.output[d];
    b.assign(static_cast<size_t>(numElements(next)), 0.0f);
    resizePass(s, d, taps, a.data(), shape, b.data());
    a.swap(b);
  }
  std::copy(a.begin(), a.end(), Y.data<float>());
}

std::vector<TensorType> inferResize(const Node& node, const std::vector<TensorType>& in) {
  return {TensorType{ElementType::Float32, resizeSpec(node, in.at(0)).output}};
}

void runResize(const Node& node, const std::vector<const Tensor*>& in,
               const std::vector<Tensor*>& out) {
  runResizeSpec(resizeSpec(node, in[0]->type()), *in[0], *out[0]);
}

double resizeFlops(const Node& node, const std::vector<TensorType>&,
                   const std::vector<TensorType>& out) {
  const std::string mode = node.attrs.getString("mode", "nearest");
  const double perElement = mode == "cubic" ? 8 : mode == "nearest" ? 1 : 4;
  return perElement * static_cast<double>(out.at(0).numElements());
}

}  // namespace

void registerSpatialOps(OpRegistry& r) {
  OpSchema pad;
  pad.name = "Pad";
  pad.kind = OpKind::Injective;
  pad.attributes = {
      {"mode", AttributeType::String, Attribute(std::string("constant"))},
      {"pads", AttributeType::Ints, std::nullopt, true},
      {"constant_value", AttributeType::Float, Attribute(0.0f)},
      {"axes", AttributeType::Ints, std::nullopt},  // absent: every axis
  };
  pad.constInputs = {
      {1, "pads", AttributeType::Ints},
      {2, "constant_value", AttributeType::Float, false},
      {3, "axes", AttributeType::Ints},
  };
  pad.infer = inferPad;
  pad.reference = runPad;
  r.add(std::move(pad));

  OpSchema resize;
  resize.name = "Resize";
  resize.kind = OpKind::Injective;
  resize.attributes = {
      {"antialias", AttributeType::Int, Attribute(int64_t{0})},
      {"axes", AttributeType::Ints, std::nullopt},  // absent: every axis
      {"coordinate_transformation_mode", AttributeType::String,
       Attribute(std::string("half_pixel"))},
      {"cubic_coeff_a", AttributeType::Float, Attribute(-0.75f)},
      {"exclude_outside", AttributeType::Int, Attribute(int64_t{0})},
      {"extrapolation_value", AttributeType::Float, Attribute(0.0f)},
      {"keep_aspect_ratio_policy", AttributeType::String, Attribute(std::string("stretch"))},
      {"mode", AttributeType::String, Attribute(std::string("nearest"))},
      {"nearest_mode", AttributeType::String, Attribute(std::string("round_prefer_floor"))},
      {"roi", AttributeType::Floats, std::nullopt},
      {"scales", AttributeType::Floats, std::nullopt},
      {"sizes", AttributeType::Ints, std::nullopt},
  };
  resize.constInputs = {
      // roi never changes the output shape, but inference checks its length
      // (tf_crop_and_resize), so it needs the value like the shape-deciding ones.
      {1, "roi", AttributeType::Floats},
      {2, "scales", AttributeType::Floats},
      {3, "sizes", AttributeType::Ints},
  };
  resize.infer = inferResize;
  resize.reference = runResize;
  resize.flops = resizeFlops;
  r.add(std::move(resize));
}

}  // namespace collage
