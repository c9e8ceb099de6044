// A weight MatMul that computes a shard of itself, for tensor parallelism
// across devices (native_tensor_parallel.h): A [..., K] times a constant
// B [K, N] into [..., N], where this device computes only
//  - some of the N columns (column-sharded: it reads only those columns of
//    B, and fills the others with NaN: no one it serves reads them), or
//  - the sum over some of the K rows (row-sharded: it reads only those
//    columns of A and rows of B), then hands its partial [rows, N] output to
//    `allReduce`, which replaces it by the sum over every device.
// Without a shard it computes the whole product. Why a kernel of its own: a
// shard is a range of the weight, which the native backend's MatMul packs
// and tiles whole at compile time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/ir/tensor.h"
#include "core/runtime/backend.h"

namespace collage::native {

struct MatMulShard {
  bool rows = false;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // columns (rows of B when `rows`) owned
  // Rows: the partial output (count floats) in, every device's sum out.
  std::function<void(float* out, int64_t count)> allReduce;
};

class ShardedMatMulKernel : public Kernel {
 public:
  int64_t M = 0, K = 0, N = 0;  // M: the rows of A (every axis but the last)
  Tensor b;                     // [K, N] float
  int threads = 1;
  std::shared_ptr<MatMulShard> shard;

  void run(const std::vector<const DLTensor*>& inputs,
           const std::vector<DLTensor*>& outputs) override;
};

// The backend `tensor_parallel`: compiles a group of one MatMul whose B is a
// constant float matrix into a ShardedMatMulKernel (no shard yet); refuses
// anything else.
std::unique_ptr<Backend> createTensorParallelBackend(int threads);

}  // namespace collage::native
