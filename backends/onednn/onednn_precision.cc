#include "backends/onednn/onednn_precision.h"

namespace collage::onednn {

std::string backendName(Precision p) { return p == Precision::F32 ? "onednn" : "onednn_bf16"; }

std::string precisionName(Precision p) { return p == Precision::F32 ? "f32" : "bf16"; }

dnnl::memory::data_type computeType(Precision p) {
  return p == Precision::F32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
}

// float32: as every CPU backend's kernels are checked (IEEE products, only
// the summation order differs).
//
// bf16 keeps 8 significant bits: each operand is rounded with a relative
// error up to 2^-9 ~ 2e-3 (round to nearest), so a product errs by up to
// ~4e-3, with a sign that varies from term to term. Accumulated in float32
// over k terms the error grows as sqrt(k), and so does a sum of terms of
// varying sign: relative to the scale of the result a kernel's error stays
// ~1e-2 whatever k is, for the accumulation lengths of real models (k = 9 x
// 64 = 576 up to 9 x 512 = 4608 in ResNet-50's 3x3 convs, 768 and 3072 in
// BERT-base). Measured (2026-11-26, AVX-512 BF16, every group that lowers on
// onednn_bf16, random inputs, seeds 0, 1, 13), each kernel alone on the
// reference's inputs: at most 1.1e-2 of its output's largest value
// (ResNet-50-small), 1.3e-2 (MobileNetV2-small), 3.1e-3 (BERT-small,
// ViT-B/16-small): precisionKernelError, 3e-2, bounds it with a margin of
// 2.3x and still fails a wrong kernel (a dropped bias, a transposed
// operand, a lost post-op err by O(1) of the scale).
//
// A whole plan's outputs inherit every layer's rounding: what they need
// depends on depth and on how much the network amplifies a perturbation,
// not on k. Measured as above, the smallest rtol = atol that passes, over
// the three seeds: BERT-small 4.4e-4, ViT-B/16-small 4.3e-3,
// Inception-v3-small 2.9e-2, ResNet-50-small 0.15 (max abs error 0.20 on
// logits up to 3.2), MobileNetV2-small 0.22. These small zoo models have
// random weights, which amplify rounding more than trained ones; the
// declared rtol = atol = 0.25 covers the worst of them (1.1x over
// MobileNetV2's worst seed, 1.7x over ResNet-50's). Loose by design: the
// kernel bound above is what tells a wrong kernel from rounding.
Tolerance precisionTolerance(Precision p) {
  return p == Precision::F32 ? Tolerance{1e-3, 1e-4} : Tolerance{2.5e-1, 2.5e-1};
}

double precisionKernelError(Precision p) { return p == Precision::F32 ? 0.0 : 3e-2; }

std::string precisionUnavailableReason(Precision p) {
  if (p == Precision::F32) return "";
  if (dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_bf16) return "";
  return "this CPU has no AVX-512 BF16 instructions (oneDNN would emulate bf16 or run its "
         "reference kernels)";
}

}  // namespace collage::onednn
