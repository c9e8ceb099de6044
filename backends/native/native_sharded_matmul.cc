// ShardedMatMulKernel (native_sharded_matmul.h).
#include "backends/native/native_sharded_matmul.h"

#include <omp.h>

#include <algorithm>
#include <limits>
#include <string>

#include "backends/native/native_gemv.h"
#include "core/ir/error.h"

namespace collage::native {

namespace {

// Below this many multiply-adds one thread is faster than a parallel region.
constexpr int64_t kParallelMinWork = int64_t{1} << 15;
// Columns per task: a task reads its columns of every row of B it reads.
constexpr int64_t kColumnBlock = 256;

// out[m, c0..c1) += sum over k in [k0, k1) of a[m, k] b[k, c0..c1), for every m.
void accumulate(const float* a, const float* b, float* out, int64_t M, int64_t K, int64_t N,
                int64_t k0, int64_t k1, int64_t c0, int64_t c1) {
  for (int64_t m = 0; m < M; ++m) {
    const float* am = a + m * K;
    float* om = out + m * N;
    for (int64_t k = k0; k < k1; ++k) {
      const float x = am[k];
      const float* bk = b + k * N;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) om[c] += x * bk[c];
    }
  }
}

class TensorParallelBackend : public Backend {
 public:
  explicit TensorParallelBackend(int threads) : threads_(threads) {}
  std::string name() const override { return "tensor_parallel"; }
  std::string version() const override { return "1"; }
  CompileResult compile(const KernelRequest& request) override {
    const std::vector<NodeId> members = request.members();
    if (members.size() != 1) return CompileResult::refuse("tensor_parallel compiles one MatMul a group");
    const Graph& g = *request.graph;
    const Node& n = g.node(members[0]);
    if (n.op != "MatMul" || n.inputs.size() != 2 || request.inputs.size() != 1)
      return CompileResult::refuse(n.name + " is not a MatMul by a constant");
    const Value& a = g.value(n.inputs[0]);
    const Value& b = g.value(n.inputs[1]);
    if (!b.isConstant() || b.type.rank() != 2 || b.type.elementType != ElementType::Float32 ||
        a.type.elementType != ElementType::Float32 || a.type.rank() < 1 ||
        a.type.shape.back() != b.type.shape[0])
      return CompileResult::refuse(n.name + ": B is not a constant float matrix of A's columns");
    auto k = std::make_unique<ShardedMatMulKernel>();
    k->K = b.type.shape[0];
    k->N = b.type.shape[1];
    k->M = k->K == 0 ? 0 : a.type.numElements() / k->K;
    k->b = *b.constant;
    k->threads = std::max(1, threads_);
    return CompileResult::ok(std::move(k));
  }

 private:
  int threads_ = 1;
};

}  // namespace

void ShardedMatMulKernel::run(const std::vector<const DLTensor*>& inputs,
                              const std::vector<DLTensor*>& outputs) {
  const float* a = reinterpret_cast<const float*>(static_cast<const char*>(inputs.at(0)->data) +
                                                  inputs[0]->byte_offset);
  float* out =
      reinterpret_cast<float*>(static_cast<char*>(outputs.at(0)->data) + outputs[0]->byte_offset);
  const float* bw = b.data<float>();
  const bool rows = shard && shard->rows;
  // The columns computed, and for each the rows summed.
  std::vector<std::pair<int64_t, int64_t>> columns, kRanges;
  if (!shard) {
    columns.assign(1, {0, N});
    kRanges.assign(1, {0, K});
  } else if (rows) {
    columns.assign(1, {0, N});
    kRanges = shard->ranges;
  } else {
    columns = shard->ranges;
    kRanges.assign(1, {0, K});
    // The columns this device does not own: NaN, so that a wrong split shows.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t m = 0; m < M; ++m) {
      int64_t c = 0;
      for (const auto& [c0, c1] : columns) {
        std::fill(out + m * N + c, out + m * N + c0, nan);
        c = c1;
      }
      std::fill(out + m * N + c, out + m * N + N, nan);
    }
  }
  // A few rows over one range of B's rows (the decode step's case): the
  // gemv, which streams B once (native_gemv.h), each thread a contiguous
  // share of the columns. Else tasks of kColumnBlock columns.
  const bool gemv = M <= kGemvMaxRows && kRanges.size() == 1;
  const int64_t block =
      gemv ? std::max<int64_t>(16, (N / std::max(1, threads) + 15) / 16 * 16) : kColumnBlock;
  std::vector<std::pair<int64_t, int64_t>> tasks;
  for (const auto& [c0, c1] : columns)
    for (int64_t c = c0; c < c1; c += block) tasks.emplace_back(c, std::min(c1, c + block));
  int64_t work = 0, kRows = 0;
  for (const auto& [k0, k1] : kRanges) kRows += k1 - k0;
  for (const auto& [c0, c1] : tasks) work += (c1 - c0) * kRows * M;
  const auto count = static_cast<int64_t>(tasks.size());
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && count > 1 && work >= kParallelMinWork)
  for (int64_t t = 0; t < count; ++t) {
    const auto [c0, c1] = tasks[static_cast<size_t>(t)];
    if (gemv) {
      const auto [k0, k1] = kRanges.front();
      gemvRows(M, c1 - c0, k1 - k0, a + k0, K, bw + k0 * N + c0, N, out + c0, N);
      continue;
    }
    for (int64_t m = 0; m < M; ++m) std::fill(out + m * N + c0, out + m * N + c1, 0.0f);
    for (const auto& [k0, k1] : kRanges) accumulate(a, bw, out, M, K, N, k0, k1, c0, c1);
  }
  if (rows) {
    if (!shard->allReduce) throw Error("a row-sharded MatMul has no all-reduce");
    shard->allReduce(out, M * N);
  }
}

std::unique_ptr<Backend> createTensorParallelBackend(int threads) {
  return std::make_unique<TensorParallelBackend>(threads);
}

}  // namespace collage::native
