// The geometry of a sliding-window op: Conv, ConvTranspose, MaxPool,
// AveragePool (and LpPool-like ops). From a node's attributes (kernel_shape,
// strides, dilations, pads, auto_pad, ceil_mode, output_padding,
// output_shape) and the shapes of its input and weight, it resolves every
// parameter to explicit per-dimension numbers, so that a kernel — the
// reference one or a backend's — never re-derives ONNX's padding rules.
//
// Conventions. All per-dimension vectors have one entry per spatial
// dimension (1 to 3 in practice; any count works). Pads are split into
// padsBegin / padsEnd; for ConvTranspose they may be negative (an
// output_shape larger than the natural one grows the output at the end).
//
// Output size of a forward window op (Conv, pools), with
// effK = (kernel - 1) * dilation + 1:
//   NOTSET/VALID: out = floor((in + padB + padE - effK) / stride) + 1
//                 (ceil instead of floor with ceil_mode; a last window that
//                 would start inside the end padding is dropped, as PyTorch
//                 and newer ONNX do); VALID has zero pads.
//   SAME_UPPER/LOWER: out = ceil(in / stride); total = max(0, (out - 1) *
//                 stride + effK - in), split total/2 at the begin for
//                 SAME_UPPER (the odd one at the end), at the end for
//                 SAME_LOWER.
// ConvTranspose (adjoint of Conv):
//   out = stride * (in - 1) + output_padding + effK - padB - padE;
//   with SAME_* or output_shape the pads are derived from the wanted output
//   (in * stride for SAME_*): total = stride * (in - 1) + output_padding +
//   effK - out, split as above (SAME_UPPER: begin = floor(total / 2); else
//   end = floor(total / 2)); floor division so that a negative total grows
//   the end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"

namespace collage {

enum class AutoPad { NotSet, SameUpper, SameLower, Valid };

// Parses the auto_pad attribute ("NOTSET" when absent); throws Error naming the node.
AutoPad autoPadOf(const Node& node);
std::string_view autoPadName(AutoPad pad);

struct ConvGeometry {
  int64_t batch = 0;
  int64_t inChannels = 0;   // channels of X
  int64_t outChannels = 0;  // channels of Y
  int64_t group = 1;        // 1 for pools
  std::vector<int64_t> inputSpatial;
  std::vector<int64_t> outputSpatial;
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> padsBegin;
  std::vector<int64_t> padsEnd;
  std::vector<int64_t> outputPadding;  // ConvTranspose only; zeros otherwise

  // Conv: X [N, C, D1..Dk], W [M, C/group, K1..Kk].
  static ConvGeometry conv(const Node& node, const Shape& x, const Shape& w);
  // ConvTranspose: X [N, C, D1..Dk], W [C, M/group, K1..Kk].
  static ConvGeometry convTranspose(const Node& node, const Shape& x, const Shape& w);
  // MaxPool / AveragePool / LpPool: X [N, C, D1..Dk]; kernel_shape required.
  static ConvGeometry pool(const Node& node, const Shape& x);

  size_t spatialRank() const { return inputSpatial.size(); }
  // (kernel - 1) * dilation + 1: the extent of one window in the input.
  int64_t effectiveKernel(size_t dim) const { return (kernel[dim] - 1) * dilations[dim] + 1; }
  int64_t kernelSize() const;          // product of kernel
  int64_t inputSpatialSize() const;    // product of inputSpatial
  int64_t outputSpatialSize() const;   // product of outputSpatial
  Shape inputShape() const;            // [N, inChannels, inputSpatial...]
  Shape outputShape() const;           // [N, outChannels, outputSpatial...]
  // Pads in ONNX layout: [begin_0, ..., begin_k-1, end_0, ..., end_k-1].
  std::vector<int64_t> onnxPads() const;
  // True when a window never reaches outside the input and each output
  // element reads exactly one input element per channel (1x1, stride 1, no pads):
  // a Conv is then a plain matrix product.
  bool isPointwise() const;
  // The same geometry with leading spatial dimensions of size 1 (kernel 1,
  // stride 1, dilation 1, no pads) added up to `rank` dimensions, so that a
  // kernel written for 3 spatial dimensions also runs 1D and 2D ops.
  ConvGeometry expandedTo(size_t rank) const;
  // "kernel 3x3 stride 2x2 dil 1x1 pads [1,1,1,1] out 112x112" for messages and tooltips.
  std::string toString() const;
};

// The forward output size of one dimension with explicit pads (NOTSET rule,
// ceil_mode as described above). Returns a value <= 0 when the window does
// not fit; callers turn that into an Error naming the node.
int64_t windowOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                         int64_t padBegin, int64_t padEnd, bool ceilMode);

}  // namespace collage
