// Reorders between channels-last and plain layouts (nhwc <-> nchw, and the
// 1-D and 3-D forms), done by us. oneDNN 2.6 runs them on its generic
// "jit:uni" reorder at 0.1 to 1.8 ns per element; the worst case is the
// common one of many channels over a small image (f32 1x1024x14x14 to
// plain: 360 us, more than the int8 convolution before it). Every int8
// kernel that hands its channels-last result to a kernel reading plain
// memory pays it, and every one that reads u8 from such a kernel pays the
// other way. Blocked in-register transposes (8x8 floats, 16x16 bytes) do
// them at 2-8x the speed, measured side by side with oneDNN's on this
// machine:
//
//   float32 / int32   channels last [N][S][C] -> plain [N][C][S]   (S: spatial dims, flattened)
//   uint8 / int8      both ways
//
// Floats into channels last stay on oneDNN's reorder, as fast as ours.
//
// A kernel's steps run through executeSteps (onednn_kernel.h), which runs
// such a reorder here and every other step on oneDNN.
#pragma once

#include <dnnl.hpp>
#include <cstdint>
#include <optional>

namespace collage::onednn {

struct ChannelsTranspose {
  int64_t batch = 0, channels = 0, spatial = 0;
  int elementBytes = 4;         // 4 (f32, s32) or 1 (u8, s8)
  bool toChannelsLast = false;  // plain -> channels last (bytes only); else the reverse
};

// The transpose a plain reorder from `from` to `to` amounts to (same dims
// and type, one of the pairs above), or nullopt.
std::optional<ChannelsTranspose> channelsTransposeOf(const dnnl::memory::desc& from, const dnnl::memory::desc& to);

// `from` -> `to`, on the current OpenMP thread count.
void runChannelsTranspose(const ChannelsTranspose& t, const void* from, void* to);

}  // namespace collage::onednn
