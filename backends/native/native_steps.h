// The steps a native kernel runs in order: fused passes (native_pass.h) and
// single nodes the native backend does not fuse (Conv, MatMul, Gemm, pools,
// and the rare ops it leaves to the registry's reference kernel). Nodes
// whose batch, channels or rows are independent are run as several
// reference calls on views of their slices, in parallel.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/native/native_pass.h"
#include "core/ir/graph.h"
#include "core/ir/tensor.h"

namespace collage::native {

class Step {
 public:
  virtual ~Step() = default;
  virtual void run(const BufferTable& buffers) = 0;
  virtual std::string describe() const = 0;
};

class PassStep : public Step {
 public:
  PassStep(PassProgram program, int threads) : pass_(std::move(program), threads) {}
  void run(const BufferTable& buffers) override { pass_.run(buffers); }
  std::string describe() const override { return pass_.describe(); }

 private:
  CompiledPass pass_;
};

// A node run on buffers: inputs/outputs give the buffer of each of the
// node's inputs/outputs (-1 when absent) and their types.
struct NodeBinding {
  Node node;
  std::vector<int32_t> inputs;
  std::vector<TensorType> inputTypes;
  std::vector<int32_t> outputs;
  std::vector<TensorType> outputTypes;
};

// Compiles a node into a step (parallel slices where the op allows it).
// Throws Error for a node whose types the registry rejects.
std::unique_ptr<Step> makeNodeStep(NodeBinding binding, int threads);

// Whether makeNodeStep would run `node` of `graph` on the registry's scalar
// reference loops (not a vectorised step; float Conv, ConvTranspose and
// MatMul's reference calls are excluded: they run on the blocked reference
// GEMM). Decided by makeNodeStep itself, so the answer cannot drift from
// what the kernel does: Backend::referenceNodes, for the estimate that keeps
// a measurement that cannot finish from starting.
bool runsOnReferenceLoops(const Graph& graph, NodeId node);

}  // namespace collage::native
