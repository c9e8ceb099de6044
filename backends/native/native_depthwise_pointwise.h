// A depthwise convolution and the 1x1 convolution it feeds, as one kernel
// (the mobile block's separable convolution), with their epilogues.
//
// The pattern, in the graph's NCHW layout (float32, 2 spatial dims):
//
//   X ─ Conv(depthwise KxK) ─[BatchNormalization]─[act]─ Conv(1x1) ─[BatchNormalization]─[act]─┐
//                                                                          [Add(R) ─[act]] ─ Y
//
// where the depthwise Conv has group == input channels == output channels
// (weights [C, 1, KH, KW]), any strides, any zero pads (symmetric or not,
// auto_pad resolved), no dilation; the 1x1 Conv has group 1, stride 1, no
// pads; an act is Relu, Clip, LeakyRelu, HardSwish or PRelu with one slope
// per channel (or one for all); R is any tensor of Y's shape not computed by the group
// (the block's input, a skip path). Weights, biases, BatchNormalization's
// parameters, slopes and Clip's bounds are constants: each
// BatchNormalization is folded into its Conv's weights and bias at compile
// time.
//
// Invariant: the kernel computes what the group's nodes compute (up to
// float rounding and summation order), or compile refuses, naming the node
// and what it does not take. Every member must be one of the nodes above,
// each intermediate value read by its successor only, and the group's one
// output the last node's.
//
// How it runs: (image × band of output rows) tasks on the backend's threads.
// A task computes the depthwise output of its band for all C channels into
// a buffer of C × (rows · OW) floats sized to stay in L1/L2 (the rows of a
// band are contiguous in NCHW), applies the first epilogue there, then
// multiplies it by the packed 1x1 weights at once (a GEMM of [M × C] by
// [C × band pixels], 8 output channels by 32 pixels a tile on AVX-512) and
// applies the second epilogue and the residual in registers before the one
// store of Y. The depthwise output never reaches memory beyond the cache.
// Without AVX-512 the same loops run in portable C++ that the compiler
// vectorises for the target (COLLAGE_NATIVE_DWPW=portable forces them, for
// tests and re-measuring).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/runtime/backend.h"

namespace collage::native {

// Whether the group holds two Convs, one feeding the other: such a group is
// this kernel's to compile or refuse (the generic lowering would run both
// on the reference's loops).
bool isDepthwisePointwiseGroup(const Graph& graph, const NodeSet& nodes);

// Compiles a depthwise-pointwise group (isDepthwisePointwiseGroup), or says
// why it cannot.
CompileResult compileDepthwisePointwise(const KernelRequest& request, int threads);

// The groups the native rule names for each depthwise Conv whose block this
// kernel takes: the block up to the 1x1 Conv's epilogue
// ("depthwise_pointwise") and, where an Add follows, the block with the
// residual and its activation ("depthwise_pointwise_residual").
std::vector<std::pair<NodeSet, std::string>> depthwisePointwiseGroups(const Graph& graph);

// "depthwise_pointwise N=2 C=17 ..." for this kernel; empty for any other.
std::string describeDepthwisePointwiseKernel(const Kernel& kernel);

}  // namespace collage::native
