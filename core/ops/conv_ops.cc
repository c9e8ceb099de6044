// Conv and ConvTranspose: reference kernels on the reference sgemm.
//
// Conv lowers each (image, group) to one matrix product:
//   Y_g[Cout/g, P] = W_g[Cout/g, Cin/g * K] * col[Cin/g * K, P]
// where col is the im2col unfolding of X_g (P output positions, K kernel
// taps); a 1x1, stride-1, unpadded Conv reads X_g directly. ConvTranspose is
// the adjoint: col[Cout/g * K, Pin] = W_g^T * X_g, then col2im scatters and
// adds col into Y. Kernels handle 1 to 3 spatial dimensions (1D and 2D are
// run as 3D with leading unit dimensions).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/ops/conv_geometry.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_helpers.h"
#include "core/ops/reference_gemm.h"

namespace collage {

namespace {

constexpr size_t kMaxSpatialRank = 3;

std::vector<AttributeSpec> convAttributes(bool transpose) {
  std::vector<AttributeSpec> a = {
      {"auto_pad", AttributeType::String, Attribute(std::string("NOTSET"))},
      {"dilations", AttributeType::Ints, std::nullopt},     // absent: 1 per dimension
      {"group", AttributeType::Int, Attribute(int64_t{1})},
      {"kernel_shape", AttributeType::Ints, std::nullopt},  // absent: from W
      {"pads", AttributeType::Ints, std::nullopt},          // absent: 0
      {"strides", AttributeType::Ints, std::nullopt},       // absent: 1 per dimension
  };
  if (transpose) {
    a.push_back({"output_padding", AttributeType::Ints, std::nullopt});  // absent: 0
    a.push_back({"output_shape", AttributeType::Ints, std::nullopt});    // absent: computed
  }
  return a;
}

void checkSpatialRank(const Node& node, const ConvGeometry& g) {
  if (g.spatialRank() > kMaxSpatialRank)
    throw Unsupported(nodeLabel(node) + std::to_string(g.spatialRank()) +
                      " spatial dimensions (at most 3 are supported)");
}

void checkBias(const Node& node, const std::vector<TensorType>& in, int64_t channels) {
  if (in.size() < 3 || in[2].elementType == ElementType::Undefined) return;
  requireFloat32(node, in[2]);
  if (in[2].shape != Shape{channels})
    throw Error(nodeLabel(node) + "bias B " + shapeToString(in[2].shape) + " must be [" +
                std::to_string(channels) + "]");
}

void checkInputs(const Node& node, const std::vector<TensorType>& in) {
  if (in.size() < 2) throw Error(nodeLabel(node) + "needs inputs X and W");
  requireFloat32(node, in[0]);
  requireFloat32(node, in[1]);
}

// Unfolds one group of one image: col[(c * K + tap) * P + outPos] =
// x[c, outPos * stride - pad + tap * dilation] (0 outside the input).
void im2col(const float* x, int64_t channels, const ConvGeometry& g, float* col) {
  const int64_t ID = g.inputSpatial[0], IH = g.inputSpatial[1], IW = g.inputSpatial[2];
  const int64_t OD = g.outputSpatial[0], OH = g.outputSpatial[1], OW = g.outputSpatial[2];
  const int64_t KD = g.kernel[0], KH = g.kernel[1], KW = g.kernel[2];
  const int64_t SW = g.strides[2];
  float* dst = col;
  for (int64_t c = 0; c < channels; ++c) {
    const float* xc = x + c * ID * IH * IW;
    for (int64_t kd = 0; kd < KD; ++kd)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t offW = kw * g.dilations[2] - g.padsBegin[2];
          // Output columns whose input column is inside [0, IW).
          int64_t owLo = 0;
          while (owLo < OW && owLo * SW + offW < 0) ++owLo;
          int64_t owHi = OW;
          while (owHi > owLo && (owHi - 1) * SW + offW >= IW) --owHi;
          for (int64_t od = 0; od < OD; ++od) {
            const int64_t id = od * g.strides[0] - g.padsBegin[0] + kd * g.dilations[0];
            for (int64_t oh = 0; oh < OH; ++oh, dst += OW) {
              const int64_t ih = oh * g.strides[1] - g.padsBegin[1] + kh * g.dilations[1];
              if (id < 0 || id >= ID || ih < 0 || ih >= IH) {
                std::fill(dst, dst + OW, 0.0f);
                continue;
              }
              const float* row = xc + (id * IH + ih) * IW;
              std::fill(dst, dst + owLo, 0.0f);
              if (SW == 1 && owHi > owLo) {
                std::memcpy(dst + owLo, row + owLo + offW,
                            static_cast<size_t>(owHi - owLo) * sizeof(float));
              } else {
                for (int64_t ow = owLo; ow < owHi; ++ow) dst[ow] = row[ow * SW + offW];
              }
              std::fill(dst + owHi, dst + OW, 0.0f);
            }
          }
        }
  }
}

// The adjoint of im2col for ConvTranspose: y[c, inPos * stride - pad + tap *
// dilation] += col[(c * K + tap) * Pin + inPos] where that lies inside y.
void col2im(const float* col, int64_t channels, const ConvGeometry& g, float* y) {
  const int64_t ID = g.inputSpatial[0], IH = g.inputSpatial[1], IW = g.inputSpatial[2];
  const int64_t OD = g.outputSpatial[0], OH = g.outputSpatial[1], OW = g.outputSpatial[2];
  const int64_t KD = g.kernel[0], KH = g.kernel[1], KW = g.kernel[2];
  const int64_t SW = g.strides[2];
  const float* src = col;
  for (int64_t c = 0; c < channels; ++c) {
    float* yc = y + c * OD * OH * OW;
    for (int64_t kd = 0; kd < KD; ++kd)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t offW = kw * g.dilations[2] - g.padsBegin[2];
          int64_t iwLo = 0;
          while (iwLo < IW && iwLo * SW + offW < 0) ++iwLo;
          int64_t iwHi = IW;
          while (iwHi > iwLo && (iwHi - 1) * SW + offW >= OW) --iwHi;
          for (int64_t id = 0; id < ID; ++id) {
            const int64_t od = id * g.strides[0] - g.padsBegin[0] + kd * g.dilations[0];
            for (int64_t ih = 0; ih < IH; ++ih, src += IW) {
              const int64_t oh = ih * g.strides[1] - g.padsBegin[1] + kh * g.dilations[1];
              if (od < 0 || od >= OD || oh < 0 || oh >= OH) continue;
              float* row = yc + (od * OH + oh) * OW;
              for (int64_t iw = iwLo; iw < iwHi; ++iw) row[iw * SW + offW] += src[iw];
            }
          }
        }
  }
}

// Fills `rows` rows of `cols` floats with bias[row] (or zeros without bias).
void fillBias(float* y, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    std::fill(y + r * cols, y + (r + 1) * cols, bias ? bias[r] : 0.0f);
}

std::vector<TensorType> inferConv(const Node& node, const std::vector<TensorType>& in) {
  checkInputs(node, in);
  ConvGeometry g = ConvGeometry::conv(node, in[0].shape, in[1].shape);
  checkSpatialRank(node, g);
  checkBias(node, in, g.outChannels);
  return {TensorType{ElementType::Float32, g.outputShape()}};
}

void runConv(const Node& node, const std::vector<const Tensor*>& in,
             const std::vector<Tensor*>& out) {
  const Tensor& X = *in[0];
  const Tensor& W = *in[1];
  const float* bias = in.size() > 2 && in[2] ? in[2]->data<float>() : nullptr;
  const ConvGeometry full = ConvGeometry::conv(node, X.shape(), W.shape());
  const ConvGeometry g = full.expandedTo(kMaxSpatialRank);
  const int64_t cin = g.inChannels / g.group, cout = g.outChannels / g.group;
  const int64_t K = cin * g.kernelSize();
  const int64_t P = g.outputSpatialSize(), inP = g.inputSpatialSize();
  const bool pointwise = g.isPointwise();
  std::vector<float> col(pointwise ? 0 : static_cast<size_t>(K * P));
  const float* x = X.data<float>();
  const float* w = W.data<float>();
  float* y = out[0]->data<float>();
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < g.group; ++grp) {
      const float* xg = x + (n * g.inChannels + grp * cin) * inP;
      float* yg = y + (n * g.outChannels + grp * cout) * P;
      const float* b = xg;
      if (!pointwise) {
        im2col(xg, cin, g, col.data());
        b = col.data();
      }
      if (bias) fillBias(yg, bias + grp * cout, cout, P);
      referenceSgemm(false, false, cout, P, K, 1.0f, w + grp * cout * K, K, b, P,
                     bias ? 1.0f : 0.0f, yg, P);
    }
}

double convFlops(const Node& node, const std::vector<TensorType>& in,
                 const std::vector<TensorType>&) {
  const ConvGeometry g = ConvGeometry::conv(node, in[0].shape, in[1].shape);
  return 2.0 * static_cast<double>(g.batch) * static_cast<double>(g.outChannels) *
         static_cast<double>(g.outputSpatialSize()) *
         static_cast<double>(g.inChannels / g.group) * static_cast<double>(g.kernelSize());
}

std::vector<TensorType> inferConvTranspose(const Node& node, const std::vector<TensorType>& in) {
  checkInputs(node, in);
  ConvGeometry g = ConvGeometry::convTranspose(node, in[0].shape, in[1].shape);
  checkSpatialRank(node, g);
  checkBias(node, in, g.outChannels);
  return {TensorType{ElementType::Float32, g.outputShape()}};
}

void runConvTranspose(const Node& node, const std::vector<const Tensor*>& in,
                      const std::vector<Tensor*>& out) {
  const Tensor& X = *in[0];
  const Tensor& W = *in[1];
  const float* bias = in.size() > 2 && in[2] ? in[2]->data<float>() : nullptr;
  const ConvGeometry g =
      ConvGeometry::convTranspose(node, X.shape(), W.shape()).expandedTo(kMaxSpatialRank);
  const int64_t cin = g.inChannels / g.group, cout = g.outChannels / g.group;
  const int64_t rows = cout * g.kernelSize();  // rows of col
  const int64_t inP = g.inputSpatialSize(), outP = g.outputSpatialSize();
  std::vector<float> col(static_cast<size_t>(rows * inP));
  const float* x = X.data<float>();
  const float* w = W.data<float>();
  float* y = out[0]->data<float>();
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < g.group; ++grp) {
      const float* xg = x + (n * g.inChannels + grp * cin) * inP;
      const float* wg = w + grp * cin * rows;  // [cin, cout * K] row-major
      float* yg = y + (n * g.outChannels + grp * cout) * outP;
      referenceSgemm(true, false, rows, inP, cin, 1.0f, wg, rows, xg, inP, 0.0f, col.data(), inP);
      fillBias(yg, bias ? bias + grp * cout : nullptr, cout, outP);
      col2im(col.data(), cout, g, yg);
    }
}

double convTransposeFlops(const Node& node, const std::vector<TensorType>& in,
                          const std::vector<TensorType>&) {
  const ConvGeometry g = ConvGeometry::convTranspose(node, in[0].shape, in[1].shape);
  return 2.0 * static_cast<double>(g.batch) * static_cast<double>(g.inChannels) *
         static_cast<double>(g.inputSpatialSize()) *
         static_cast<double>(g.outChannels / g.group) * static_cast<double>(g.kernelSize());
}

}  // namespace

void registerConvOps(OpRegistry& r) {
  OpSchema conv;
  conv.name = "Conv";
  conv.kind = OpKind::Anchor;
  conv.minInputs = 2;
  conv.maxInputs = 3;
  conv.attributes = convAttributes(false);
  conv.infer = inferConv;
  conv.reference = runConv;
  conv.flops = convFlops;
  r.add(std::move(conv));

  OpSchema convT;
  convT.name = "ConvTranspose";
  convT.kind = OpKind::Anchor;
  convT.minInputs = 2;
  convT.maxInputs = 3;
  convT.attributes = convAttributes(true);
  convT.infer = inferConvTranspose;
  convT.reference = runConvTranspose;
  convT.flops = convTransposeFlops;
  r.add(std::move(convT));
}

}  // namespace collage
