// Integer products for oneDNN, step two: an Int8Product (onednn_int8.h)
// built into one kernel: the source quantized in the kernel when the group
// holds its DynamicQuantizeLinear (dynamic_quantize.h, exact), then one
// oneDNN u8/s8 x s8 convolution or matmul with the source zero point as a
// run-time attribute, an s32 destination (the exact accumulator) or an f32
// one with the dequantizing scale (a per-channel binary multiply filled at
// run time from the source's scale), bias and activation as post-ops.
#pragma once

#include <memory>

#include "backends/onednn/onednn_int8.h"
#include "backends/onednn/onednn_kernel.h"

namespace collage::onednn {

// Builds the kernel, or refuses with the reason oneDNN gave.
CompileResult lowerInt8(const std::shared_ptr<Context>& context, const KernelRequest& request,
                        const Int8Product& product);

// "DynamicQuantizeLinear + ConvInteger u8s8 -> f32 ...: convolution(brg:avx512_core_vnni) -> ...":
// what the kernel runs, for explain; empty for another kernel.
std::string describeInt8Kernel(const Kernel& kernel);

}  // namespace collage::onednn
