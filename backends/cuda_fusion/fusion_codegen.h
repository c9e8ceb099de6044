// A group of elementwise, broadcast, injective and reduction ops written as
// one CUDA C++ kernel (the role TVM plays in the Collage paper). Pure C++:
// no CUDA header, no device; NVRTC compiles the text (nvrtc_cache.h).
//
// Every value of the group becomes a device function of a flat index in its
// own shape, and a consumer calls its producer with the index remapped:
//
//   out0[i] = x4(i)                       one grid-stride loop per output
//   x4(i)   = expf(x3(i) - max_k x3(..))  Softmax: loops over its axis
//   x3(i)   = x1(i) + x2(bcast(i))        Add: the broadcast operand's index
//   x2(j)   = p[1][j]                     a constant uploaded at compile time
//   x1(i)   = p[0][i]                     a data input
//
// so no intermediate tensor is ever written: the whole group is one pass.
// Reductions recompute their operand for each output element; a group of
// chained reductions (a decomposed LayerNorm) pays that again per level, so
// the fusion rule keeps groups small and the measurement decides.
//
// The text depends only on the group's structure (ops, attributes, shapes,
// scalar constants), never on node or value names, so two groups that are
// the same computation give the same source and share one compiled kernel.
#pragma once

#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/runtime/backend.h"

namespace collage::cuda_fusion {

// The kernel's entry point; it takes one parameter, a struct of pointers:
// the request's inputs, then `constants`, then the request's outputs.
inline constexpr const char* kEntryName = "collage_fused";

struct FusionSource {
  std::string refusal;               // non-empty: not generated, and why
  std::string source;                // CUDA C++ for NVRTC
  std::vector<ValueId> constants;    // constant tensors read as data, in parameter order
  std::vector<int64_t> outputSizes;  // elements of each output, in request order
  int64_t maxOutputSize = 0;         // what the launch grid covers
};

// Why `node` cannot be part of a generated kernel (empty: it can).
std::string nodeRefusal(const Graph& graph, NodeId node);

// Why a group cannot be one generated kernel (empty: it can): a node it
// cannot generate, or reductions nested in the group. Cheap: no text.
std::string groupRefusal(const Graph& graph, const NodeSet& nodes);

// The kernel for a group; a refusal when any node or value is unsupported.
FusionSource generateFusionKernel(const KernelRequest& request);

}  // namespace collage::cuda_fusion
