// How a group maps onto one cuDNN call: pure logic, no CUDA, so it is
// unit-tested without a GPU and the pattern rule asks it.
//
//   Conv -> [Add(bias per channel)] -> [Add(residual z)] -> [Relu]
//       cudnnConvolutionBiasActivationForward: y = act(conv(x) + z + bias)
//   MaxPool | AveragePool | GlobalAveragePool | GlobalMaxPool    cudnnPoolingForward
//   Softmax | LogSoftmax (any axis, as outer x len x inner)      cudnnSoftmaxForward
//   BatchNormalization (inference) cudnnBatchNormalizationForwardInference
//
// Convolutions and pools of 1, 2 or 3 spatial dimensions, grouped and
// depthwise; cuDNN wants at least 4-D tensors, so a 1-D one is given a
// spatial dimension of 1 in front. cuDNN pads symmetrically: asymmetric
// pads and auto_pad are refused (the importer writes explicit pads).
#pragma once

#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/node_set.h"

namespace collage::cudnn {

enum class CudnnOp { Conv, MaxPool, AveragePool, Softmax, LogSoftmax, BatchNorm };

struct CudnnPlan {
  std::string refusal;  // non-empty: not one cuDNN call, and why
  CudnnOp op = CudnnOp::Conv;

  // Dimensions as cuDNN sees them (NC + spatial, at least 4).
  std::vector<int> xDims, wDims, yDims;
  std::vector<int> pads, strides, dilations, window;  // per spatial dimension
  int groups = 1;
  bool countIncludePad = false;  // AveragePool

  ValueId x = kNoValue, w = kNoValue;
  ValueId bias = kNoValue;  // per output channel (Conv's B, or an Add of a constant)
  ValueId z = kNoValue;     // residual added before the activation
  bool relu = false;
  // BatchNormalization's constants and epsilon.
  ValueId scale = kNoValue, shift = kNoValue, mean = kNoValue, var = kNoValue;
  double epsilon = 1e-5;
  ValueId output = kNoValue;

  // "conv2d 1x64x56x56 k3x3 s1 g1 bias relu"
  std::string toString() const;
};

CudnnPlan planCudnn(const Graph& graph, const NodeSet& nodes);

// Ops that may follow a convolution inside a group.
bool isConvEpilogueOp(const std::string& op);

}  // namespace collage::cudnn
