// The arithmetic a oneDNN backend computes its convolutions and matrix
// products in: float32 (`onednn`) or bf16 (`onednn_bf16`), one lowering with
// a precision parameter (Context::precision), two backends so that the
// measurement chooses between them as it chooses between libraries.
//
// bf16: the anchor's weights and activations are rounded to bf16 (8
// significant bits, the float32 exponent) and the products accumulate in
// float32; bias, post-ops and the result stay float32. Pools,
// normalisations, softmax and elementwise chains stay float32: they are
// bound by memory, and each bf16 step there would add a conversion at its
// edge for no arithmetic saved. Conversions (reorders) happen where the
// kernel reads a float32 tensor: at the group's edges.
#pragma once

#include <dnnl.hpp>
#include <string>

#include "core/ir/tensor_compare.h"

namespace collage::onednn {

enum class Precision { F32, Bf16 };

std::string backendName(Precision p);    // "onednn", "onednn_bf16"
std::string precisionName(Precision p);  // "f32", "bf16"
// The data type a convolution's or matrix product's src and weights are read in.
dnnl::memory::data_type computeType(Precision p);

// The tolerance results of `p` are checked with against the float32
// reference (see the comment in onednn_precision.cc for bf16's derivation).
Tolerance precisionTolerance(Precision p);
// How far one kernel alone may err, as a fraction of its output's largest
// |value| (GroupError::scaledError, core/measure/plan_check.h): rounding
// stays within it whatever the depth, a wrong kernel does not. 0 for f32.
double precisionKernelError(Precision p);

// Why `p` cannot run well on this CPU (bf16 without AVX-512 BF16
// instructions is emulated or runs oneDNN's reference code); empty if it can.
std::string precisionUnavailableReason(Precision p);

}  // namespace collage::onednn
