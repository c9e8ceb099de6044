// Ops that sample an NCHW image at fractional positions: RoiAlign (the
// pooling of Mask/Faster R-CNN heads) and GridSample (spatial transformers,
// optical-flow warps).
//
// Both follow the ONNX reference implementation's conventions (which are
// ONNX Runtime's): RoiAlign's bilinear weights and its "max" mode, which
// takes the largest weighted corner rather than the largest interpolated
// value; GridSample's un-normalisation, border/reflection handling and cubic
// coefficients (A = -0.75).
#include <algorithm>
#include <cmath>

#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

// ---- RoiAlign ----

void addRoiAlign(OpRegistry& r) {
  OpSchema s;
  s.name = "RoiAlign";
  s.kind = OpKind::Opaque;
  s.minInputs = s.maxInputs = 3;
  // Opset 10 had no coordinate_transformation_mode and behaved as
  // output_half_pixel; the importer sets that explicitly for old models.
  s.attributes = {{"coordinate_transformation_mode", AttributeType::String,
                   Attribute(std::string("half_pixel"))},
                  {"mode", AttributeType::String, Attribute(std::string("avg"))},
                  {"output_height", AttributeType::Int, Attribute(int64_t{1})},
                  {"output_width", AttributeType::Int, Attribute(int64_t{1})},
                  {"sampling_ratio", AttributeType::Int, Attribute(int64_t{0})},
                  {"spatial_scale", AttributeType::Float, Attribute(1.0f)}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kFloatTypes, in[0].elementType);
    requireIndexType(node, in[2], "batch_indices");
    if (in[0].rank() != 4 || in[1].rank() != 2 || in[1].shape[1] != 4 ||
        in[1].elementType != in[0].elementType || in[2].shape != Shape{in[1].shape[0]})
      throw Error(nodeLabel(node) + "X " + in[0].toString() + ", rois " + in[1].toString() +
                  " and batch_indices " + in[2].toString() +
                  " must be [N, C, H, W], [R, 4] and [R]");
    const std::string mode = node.attrs.getString("mode", "avg");
    const std::string ctm = node.attrs.getString("coordinate_transformation_mode", "half_pixel");
    if ((mode != "avg" && mode != "max") || (ctm != "half_pixel" && ctm != "output_half_pixel"))
      throw Error(nodeLabel(node) + "mode '" + mode + "' / coordinate_transformation_mode '" + ctm +
                  "' is not one of avg, max / half_pixel, output_half_pixel");
    const int64_t oh = node.attrs.getInt("output_height", 1), ow = node.attrs.getInt("output_width", 1);
    if (oh < 1 || ow < 1) throw Error(nodeLabel(node) + "output size must be positive");
    return Types{{in[0].elementType, {in[1].shape[0], in[0].shape[1], oh, ow}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& xs = in[0]->shape();
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
    const int64_t R = in[1]->shape()[0];
    const int64_t oh = node.attrs.getInt("output_height", 1), ow = node.attrs.getInt("output_width", 1);
    const int64_t ratio = node.attrs.getInt("sampling_ratio", 0);
    const double scale = node.attrs.getFloat("spatial_scale", 1.0f);
    const bool halfPixel =
        node.attrs.getString("coordinate_transformation_mode", "half_pixel") == "half_pixel";
    const bool avg = node.attrs.getString("mode", "avg") == "avg";
    const std::vector<double> rois = in[1]->toDoubles();
    const std::vector<int64_t> batch = in[2]->toInts();
    visitType<kFloatTypes>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = in[0]->data<T>();
      T* y = out[0]->data<T>();
      for (int64_t n = 0; n < R; ++n) {
        if (batch[n] < 0 || batch[n] >= N)
          throw Error(nodeLabel(node) + "batch_indices[" + std::to_string(n) + "] = " +
                      std::to_string(batch[n]) + " is out of range for " + std::to_string(N) +
                      " images");
        const double offset = halfPixel ? 0.5 : 0.0;
        const double x1 = rois[n * 4] * scale - offset, y1 = rois[n * 4 + 1] * scale - offset;
        const double x2 = rois[n * 4 + 2] * scale - offset, y2 = rois[n * 4 + 3] * scale - offset;
        double rw = x2 - x1, rh = y2 - y1;
        if (!halfPixel) {  // the legacy behaviour forces at least a 1x1 region
          rw = std::max(rw, 1.0);
          rh = std::max(rh, 1.0);
        }
        const double bh = rh / static_cast<double>(oh), bw = rw / static_cast<double>(ow);
        const int64_t gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / static_cast<double>(oh)));
        const int64_t gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / static_cast<double>(ow)));
        const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
        for (int64_t c = 0; c < C; ++c) {
          const T* img = x + (batch[n] * C + c) * H * W;
          for (int64_t ph = 0; ph < oh; ++ph)
            for (int64_t pw = 0; pw < ow; ++pw) {
              double acc = 0;
              for (int64_t iy = 0; iy < gh; ++iy)
                for (int64_t ix = 0; ix < gw; ++ix) {
                  double yy = y1 + ph * bh + (iy + 0.5) * bh / static_cast<double>(gh);
                  double xx = x1 + pw * bw + (ix + 0.5) * bw / static_cast<double>(gw);
                  if (yy < -1.0 || yy > H || xx < -1.0 || xx > W) continue;  // contributes 0
                  yy = std::max(yy, 0.0);
                  xx = std::max(xx, 0.0);
                  int64_t yl = static_cast<int64_t>(yy), xl = static_cast<int64_t>(xx), yh, xh;
                  if (yl >= H - 1) {
                    yh = yl = H - 1;
                    yy = static_cast<double>(yl);
                  } else {
                    yh = yl + 1;
                  }
                  if (xl >= W - 1) {
                    xh = xl = W - 1;
                    xx = static_cast<double>(xl);
                  } else {
                    xh = xl + 1;
                  }
                  const double ly = yy - yl, lx = xx - xl, hy = 1 - ly, hx = 1 - lx;
                  const double v1 = hy * hx * img[yl * W + xl], v2 = hy * lx * img[yl * W + xh];
                  const double v3 = ly * hx * img[yh * W + xl], v4 = ly * lx * img[yh * W + xh];
                  if (avg) {
                    acc += v1 + v2 + v3 + v4;
                  } else {
                    acc = std::max({acc, v1, v2, v3, v4});
                  }
                }
              y[((n * C + c) * oh + ph) * ow + pw] = static_cast<T>(avg ? acc / count : acc);
            }
        }
      }
    });
  };
  r.add(std::move(s));
}

// ---- GridSample ----

enum class Padding { Zeros, Border, Reflection };

double denormalize(double n, int64_t len, bool alignCorners) {
  return alignCorners ? (n + 1) / 2.0 * static_cast<double>(len - 1)
                      : ((n + 1) * static_cast<double>(len) - 1) / 2.0;
}

// Reflects x into [lo, hi] as often as needed.
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const int64_t n = static_cast<int64_t>(dx / range);
    const double rest = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? lo + rest : hi - rest;
  }
  if (x > hi) {
    const double dx = x - hi;
    const int64_t n = static_cast<int64_t>(dx / range);
    const double rest = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? hi - rest : lo + rest;
  }
  return x;
}

void cubicCoefficients(double t, double c[4]) {
  constexpr double A = -0.75;
  const double x = std::fabs(t);
  c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
  c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
  c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = ((A * (2 - x) - 5 * A) * (2 - x) + 8 * A) * (2 - x) - 4 * A;
}

void addGridSample(OpRegistry& r) {
  OpSchema s;
  s.name = "GridSample";
  s.kind = OpKind::Opaque;
  s.minInputs = s.maxInputs = 2;
  s.attributes = {{"align_corners", AttributeType::Int, Attribute(int64_t{0})},
                  {"mode", AttributeType::String, Attribute(std::string("bilinear"))},
                  {"padding_mode", AttributeType::String, Attribute(std::string("zeros"))}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kFloatTypes, in[0].elementType);
    if (in[0].rank() != 4 || in[1].rank() != 4 || in[1].shape[3] != 2 ||
        in[1].shape[0] != in[0].shape[0] || in[1].elementType != in[0].elementType)
      throw Error(nodeLabel(node) + "X " + in[0].toString() + " and grid " + in[1].toString() +
                  " must be [N, C, H, W] and [N, H_out, W_out, 2]");
    const std::string mode = node.attrs.getString("mode", "bilinear");
    const std::string pad = node.attrs.getString("padding_mode", "zeros");
    if ((mode != "bilinear" && mode != "nearest" && mode != "bicubic") ||
        (pad != "zeros" && pad != "border" && pad != "reflection"))
      throw Error(nodeLabel(node) + "mode '" + mode + "' / padding_mode '" + pad +
                  "' is not one of bilinear, nearest, bicubic / zeros, border, reflection");
    return Types{{in[0].elementType, {in[0].shape[0], in[0].shape[1], in[1].shape[1], in[1].shape[2]}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& xs = in[0]->shape();
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
    const int64_t OH = in[1]->shape()[1], OW = in[1]->shape()[2];
    const bool align = node.attrs.getInt("align_corners", 0) != 0;
    const std::string mode = node.attrs.getString("mode", "bilinear");
    const std::string padName = node.attrs.getString("padding_mode", "zeros");
    const Padding pad = padName == "zeros" ? Padding::Zeros
                        : padName == "border" ? Padding::Border
                                              : Padding::Reflection;
    // The region a sample may come from before padding applies.
    const double xMin = align ? 0.0 : -0.5, yMin = xMin;
    const double xMax = align ? W - 1.0 : W - 0.5, yMax = align ? H - 1.0 : H - 0.5;
    const std::vector<double> grid = in[1]->toDoubles();
    visitType<kFloatTypes>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = in[0]->data<T>();
      T* y = out[0]->data<T>();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) {
          const T* img = x + (n * C + c) * H * W;
          auto pixel = [&](int64_t row, int64_t col) -> double {
            if (pad == Padding::Zeros) {
              if (row < 0 || row >= H || col < 0 || col >= W) return 0.0;
            } else if (pad == Padding::Border) {
              row = std::clamp<int64_t>(row, 0, H - 1);
              col = std::clamp<int64_t>(col, 0, W - 1);
            } else {
              col = static_cast<int64_t>(reflect(static_cast<double>(col), xMin, xMax));
              row = static_cast<int64_t>(reflect(static_cast<double>(row), yMin, yMax));
              row = std::clamp<int64_t>(row, 0, H - 1);  // guards the -0.5 edge
              col = std::clamp<int64_t>(col, 0, W - 1);
            }
            return static_cast<double>(img[row * W + col]);
          };
          for (int64_t oy = 0; oy < OH; ++oy)
            for (int64_t ox = 0; ox < OW; ++ox) {
              const double* g = grid.data() + ((n * OH + oy) * OW + ox) * 2;
              double sx = denormalize(g[0], W, align), sy = denormalize(g[1], H, align);
              if (mode == "nearest") {
                sx = std::nearbyint(sx);  // round half to even
                sy = std::nearbyint(sy);
              }
              if (sx < xMin || sx > xMax || sy < yMin || sy > yMax) {
                if (pad == Padding::Border) {
                  sx = std::clamp(sx, 0.0, W - 1.0);
                  sy = std::clamp(sy, 0.0, H - 1.0);
                } else if (pad == Padding::Reflection) {
                  sx = reflect(sx, xMin, xMax);
                  sy = reflect(sy, yMin, yMax);
                }
              }
              double v;
              if (mode == "nearest") {
                v = pixel(static_cast<int64_t>(std::nearbyint(sy)), static_cast<int64_t>(std::nearbyint(sx)));
              } else if (mode == "bilinear") {
                const double fx = std::floor(sx), fy = std::floor(sy);
                const int64_t x1 = static_cast<int64_t>(fx), y1 = static_cast<int64_t>(fy);
                const double dx1 = sx - fx, dx2 = 1 - dx1, dy1 = sy - fy, dy2 = 1 - dy1;
                v = dy2 * (dx2 * pixel(y1, x1) + dx1 * pixel(y1, x1 + 1)) +
                    dy1 * (dx2 * pixel(y1 + 1, x1) + dx1 * pixel(y1 + 1, x1 + 1));
              } else {
                const int64_t x0 = static_cast<int64_t>(std::floor(sx)) - 1;
                const int64_t y0 = static_cast<int64_t>(std::floor(sy)) - 1;
                double cx[4], cy[4];
                cubicCoefficients(sx - static_cast<double>(x0) - 1, cx);
                cubicCoefficients(sy - static_cast<double>(y0) - 1, cy);
                v = 0;
                for (int i = 0; i < 4; ++i) {
                  double rowSum = 0;
                  for (int j = 0; j < 4; ++j) rowSum += cx[j] * pixel(y0 + i, x0 + j);
                  v += cy[i] * rowSum;
                }
              }
              y[((n * C + c) * OH + oy) * OW + ox] = static_cast<T>(v);
            }
        }
    });
  };
  r.add(std::move(s));
}

}  // namespace

void registerSamplingOps(OpRegistry& r) {
  addRoiAlign(r);
  addGridSample(r);
}

}  // namespace collage
