// Memory descriptors and the layouts oneDNN computes in, shared by every
// step of the lowering (onednn_builder.h) and by the kernel's layout
// hand-over (onednn_kernel.cc): plain row-major float32 at a kernel's
// boundary, `any` where a primitive may choose, and the one activation
// layout (nhwc or nChw8c/16c) that every oneDNN kernel of a plan offers.
#pragma once

#include <dnnl.hpp>
#include <optional>
#include <string>

#include "core/ir/tensor.h"
#include "core/runtime/backend.h"

namespace collage::onednn {

// A shape as oneDNN dims; oneDNN has no rank-0 tensors, a scalar is [1].
dnnl::memory::dims dimsOf(const Shape& s);
dnnl::memory::dims rowMajorStrides(const dnnl::memory::dims& d);
// Plain row-major float32: the layout of every tensor at a kernel boundary.
// (memory::dims and Shape are the same type; a rank-0 shape becomes [1].)
// Another data type: a bf16 copy a primitive reads (onednn_precision.h).
dnnl::memory::desc plainDesc(const dnnl::memory::dims& d,
                             dnnl::memory::data_type type = dnnl::memory::data_type::f32);
// float32 (or `type`) in whatever layout the primitive prefers.
dnnl::memory::desc anyDesc(const dnnl::memory::dims& d,
                           dnnl::memory::data_type type = dnnl::memory::data_type::f32);
// `s` with leading 1s up to `rank` dimensions (numpy broadcasting alignment).
Shape padTo(const Shape& s, size_t rank);
// Whether `a` and `b` are both plain and of one size: the same bytes seen
// with other dims (a LayerNormalization's [outer, inner] view of a
// [1, S, H] result), readable through either without a copy.
bool samePlainBytes(const dnnl::memory::desc& a, const dnnl::memory::desc& b);

// oneDNN's channel block on this CPU: 16 with AVX-512, 8 with AVX2 (what
// its JIT convolutions choose).
int64_t blockChannels();
// The layout oneDNN chose for `md` instead of plain NCHW, if it is one it
// may hand over: channel-blocked (nChw8c with AVX2's JIT convolutions,
// nChw16c with AVX-512's) or channels-last (nhwc, which AVX-512's brgemm
// convolutions choose), for ranks 3 to 5.
std::optional<dnnl::memory::format_tag> nativeTagOf(const dnnl::memory::desc& md);
// The name a value in `md`'s layout passes between kernels under (the
// layout hand-over, backend.h): channels last under the name every backend
// shares, the blocked layouts as oneDNN's own ("onednn u8 1x64x56x56
// aBcd16b"); float32, u8 and s8. nullopt for a layout the hand-over does not
// describe.
std::optional<NativeLayout> handOverLayoutOf(const dnnl::memory::desc& md);
// A bf16 memory in one of those layouts as the float32 tensor it is
// converted from: what a bf16 kernel offers to take over at its boundary
// (the conversion then reads the native float32 layout); nullopt otherwise.
std::optional<dnnl::memory::desc> float32Twin(const dnnl::memory::desc& md);
// The layout oneDNN's JIT convolutions choose for activations of `rank`
// (4 or 5) on this CPU, asked once of a sample 3x3 convolution created with
// format_tag::any: nhwc with AVX-512's brgemm kernels, nChw8c with AVX2's.
// Pools and other layout-free steps use it too, so that every oneDNN kernel
// of a plan offers the same layout at its boundary and the Session can hand
// the tensors over between them (a pool in nChw16c after a convolution in
// nhwc would need a reorder pair between them).
std::optional<dnnl::memory::format_tag> activationTag(size_t rank);
// Whether `tag` pads the channels to a block (nChw16c) rather than keeping
// them last (nhwc, any channel count).
bool channelBlocked(dnnl::memory::format_tag tag);

// Whether oneDNN chose a reference implementation (correct, but orders of
// magnitude slower than its JIT ones).
bool isRef(const dnnl::primitive_desc_base& pd);
// "convolution", "reorder", ...: a primitive kind for describe().
std::string kindName(dnnl::primitive::kind k);
// Runs, once per process, what oneDNN's GEMM-based implementations (impl
// "gemm:jit") generate on their first execution rather than at primitive
// creation: the JIT GEMM driver builds its kernels lazily, on the first
// sgemm (or int8 gemm) call, and that took 24-27 ms inside the first such
// MatMul of a prefill's one timed pass (128 tokens, 2 threads), 15 % of the
// pass. A kernel built on such a primitive calls this at compile, so that
// cost is the compile's, as the primitives' own JIT code is.
void warmLazyKernels(const dnnl::primitive_desc_base& pd);

// Which layout a convolution computes in (COLLAGE_ONEDNN_CONV_LAYOUT, a
// diagnostic switch). The kernel's boundary is always plain (NCHW);
// `Blocked` lets oneDNN pick its preferred layout for src and dst (nChw8c
// on AVX2) and reorders around the primitive, `Plain` runs the primitive on
// NCHW directly (and keeps elementwise chains plain too).
enum class ConvLayout { Auto, Plain, Blocked };
ConvLayout convLayoutSetting();

}  // namespace collage::onednn
