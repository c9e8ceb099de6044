// The oneDNN backend: CPU convolutions, matrix products, pooling,
// normalisations, softmax and elementwise ops, each fused with a chain of
// post-ops (see onednn_chain.h for what a group may contain).
#pragma once

#include <memory>
#include <string>

#include "core/runtime/backend.h"

namespace collage {

std::unique_ptr<Backend> createOneDnnBackend();
// The same lowering with convolutions and matrix products in bf16 (f32
// accumulation): a reduced-precision backend (backends/onednn/onednn_precision.h).
std::unique_ptr<Backend> createOneDnnBf16Backend();

// What oneDNN chose for a kernel of this backend, e.g.
// "convolution(jit:avx2) -> reorder(jit:uni)"; empty for another backend's kernel.
std::string describeOneDnnKernel(const Kernel& kernel);

}  // namespace collage
