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
// ~4e-3, with a random sign from term to term. Accumulated in float32 over
// k terms, the error grows as sqrt(k) while the sum of random-sign terms
// grows as sqrt(k) too: relative to the result's scale the error stays
// ~2e-3 whatever k is, but against an element near zero (a sum that cancels)
// only an absolute floor holds. The accumulation lengths of real models
// (k = 9 x 64 = 576 for a 3x3 64-channel conv up to 4608 for 3x3x512 in
// ResNet-50, 768 and 3072 in BERT-base) do not change that scale argument;
// depth does: each layer's rounding adds to what it inherits, ~sqrt(layers).
// Measured (2026-11-26, AVX-512 BF16, random inputs, every group of the
// plan on onednn_bf16 where it lowers): one conv 64->64 3x3 at 56x56 or a
// 128x768x768 matmul: max abs error ~1e-2 on outputs of order 1 (6e-3 of the
// largest value); ResNet-50-small's logits and BERT-small's outputs: see
// docs/precision.md. rtol 5e-2 with atol 5e-2 covers them with a margin of
// 2x or more, for outputs of order 1, and still catches a wrong kernel (a
// dropped bias, a transposed operand, a missing post-op errs by O(1)).
Tolerance precisionTolerance(Precision p) {
  return p == Precision::F32 ? Tolerance{1e-3, 1e-4} : Tolerance{5e-2, 5e-2};
}

std::string precisionUnavailableReason(Precision p) {
  if (p == Precision::F32) return "";
  if (dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_bf16) return "";
  return "this CPU has no AVX-512 BF16 instructions (oneDNN would emulate bf16 or run its "
         "reference kernels)";
}

}  // namespace collage::onednn
