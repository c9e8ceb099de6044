#include "backends/native/native_steps.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>

#include "backends/native/native_gemv.h"
#include "backends/native/native_int8_products.h"
#include "backends/native/native_pool.h"
#include "backends/native/native_quantize.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_helpers.h"
#include "core/ops/reference_gemm.h"

namespace collage::native {

namespace {

// Runs body(i) for i in [0, count) on up to `threads` threads; an exception
// in any iteration is rethrown after the loop (never across the OpenMP region).
template <class Body>
void parallelFor(int64_t count, int threads, Body body) {
  if (count <= 1 || threads <= 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < count; ++i) {
    try {
      body(i);
    } catch (...) {
#pragma omp critical(collage_native_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// A view of part of a buffer.
struct View {
  int32_t buffer = -1;
  int64_t byteOffset = 0;
  TensorType type;
};

struct Call {
  Node node;
  std::vector<std::optional<View>> ins, outs;
};

// Slices [begin, end) of `count` items into at most `parts` contiguous ranges.
std::vector<std::pair<int64_t, int64_t>> ranges(int64_t count, int64_t parts, int64_t align = 1) {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (count <= 0) return out;
  parts = std::max<int64_t>(1, std::min(parts, count));
  int64_t begin = 0;
  for (int64_t p = 0; p < parts && begin < count; ++p) {
    int64_t end = count * (p + 1) / parts;
    if (align > 1 && p + 1 < parts) end = std::min(count, (end + align - 1) / align * align);
    if (end <= begin) continue;
    out.emplace_back(begin, end);
    begin = end;
  }
  if (begin < count) out.back().second = count;
  return out;
}

std::string stepLabel(const Node& node) { return "'" + node.name + "' (" + node.op + ")"; }

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

// Reference kernel calls, on views of the node's buffers or of their slices.
class ReferenceStep : public Step {
 public:
  ReferenceStep(const OpSchema& schema, std::vector<Call> calls, int threads, std::string label)
      : schema_(schema), calls_(std::move(calls)), threads_(threads), label_(std::move(label)) {}

  void run(const BufferTable& buffers) override {
    parallelFor(static_cast<int64_t>(calls_.size()), threads_,
                [&](int64_t i) { runCall(calls_[static_cast<size_t>(i)], buffers); });
  }

  std::string describe() const override {
    return label_ + " (reference kernel" +
           (calls_.size() > 1 ? ", " + std::to_string(calls_.size()) + " slices in parallel" : "") + ")";
  }

 private:
  void runCall(const Call& call, const BufferTable& buffers) const {
    auto viewOf = [&](const View& v) {
      return Tensor::view(v.type, static_cast<char*>(buffers.ptr[v.buffer]) + v.byteOffset);
    };
    std::vector<Tensor> inT(call.ins.size()), outT(call.outs.size());
    std::vector<const Tensor*> in;
    std::vector<Tensor*> out;
    for (size_t i = 0; i < call.ins.size(); ++i) {
      if (!call.ins[i]) {
        in.push_back(nullptr);
        continue;
      }
      inT[i] = viewOf(*call.ins[i]);
      in.push_back(&inT[i]);
    }
    for (size_t i = 0; i < call.outs.size(); ++i) {
      if (!call.outs[i]) {
        out.push_back(nullptr);
        continue;
      }
      outT[i] = viewOf(*call.outs[i]);
      out.push_back(&outT[i]);
    }
    std::vector<void*> before;
    for (Tensor* t : out) before.push_back(t ? t->raw() : nullptr);
    schema_.reference(call.node, in, out);
    // Kernels whose output shape depends on values (ConstantOfShape, Range)
    // replace the tensor: copy it back into the caller's buffer.
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i] || out[i]->raw() == before[i]) continue;
      const size_t want = call.outs[i]->type.byteSize();
      if (out[i]->byteSize() != want)
        throw Error(nodeLabel(call.node) + "produced " + out[i]->type().toString() + " where " +
                    call.outs[i]->type.toString() + " was planned");
      if (want) std::memcpy(before[i], out[i]->raw(), want);
    }
  }

  const OpSchema& schema_;
  std::vector<Call> calls_;
  int threads_;
  std::string label_;
};

// MatMul on the reference sgemm, split over batches and row blocks, and
// over column blocks where there are too few rows to keep every thread
// busy: a decode step's projections have one row, and split by rows alone
// they ran on one thread, reading their weights at half the machine's
// bandwidth. Each column of the result sums over K in the same order
// however the columns are split, so the values do not change.
class MatMulStep : public Step {
 public:
  struct Item {
    int64_t offA, offB, offY, rows, col0, cols;
  };

  // Items for `rowRanges` of one product, each split into column blocks (of
  // 16, a vector of floats) until there are `parts` items in all.
  void addItems(const std::vector<std::pair<int64_t, int64_t>>& rowRanges, int64_t parts, int64_t offA,
                int64_t offB, int64_t offY) {
    const int64_t colParts = std::max<int64_t>(1, parts / std::max<int64_t>(1, rowRanges.size()));
    for (auto [r0, r1] : rowRanges)
      for (auto [c0, c1] : ranges(N_, colParts, 16))
        items_.push_back({offA + r0 * K_, offB, offY + r0 * N_, r1 - r0, c0, c1 - c0});
  }

  MatMulStep(const NodeBinding& b, int threads) : threads_(threads), label_(stepLabel(b.node)) {
    a_ = b.inputs[0];
    b_ = b.inputs[1];
    y_ = b.outputs[0];
    const Shape& sa = b.inputTypes[0].shape;
    const Shape& sb = b.inputTypes[1].shape;
    M_ = sa.size() >= 2 ? sa[sa.size() - 2] : 1;
    K_ = sa.back();
    N_ = sb.size() >= 2 ? sb.back() : 1;
    Shape batchA(sa.begin(), sa.end() - std::min<size_t>(sa.size(), 2));
    Shape batchB(sb.begin(), sb.end() - std::min<size_t>(sb.size(), 2));
    const size_t rank = std::max(batchA.size(), batchB.size());
    batchA.insert(batchA.begin(), rank - batchA.size(), 1);
    batchB.insert(batchB.begin(), rank - batchB.size(), 1);
    Shape batch(rank);
    for (size_t i = 0; i < rank; ++i) batch[i] = std::max(batchA[i], batchB[i]);
    const int64_t batches = numElements(batch);
    const int64_t batchesB = numElements(batchB);
    const double flops = 2.0 * static_cast<double>(batches) * M_ * N_ * K_;
    const int64_t parts = flops < 2e5 ? 1 : threads * 2;
    if (batchesB == 1) {
      // One weight matrix: every row of every batch of A is independent.
      const int64_t rowsTotal = numElements(batchA) * M_;
      if (rowsTotal <= kGemvMaxRows) {
        // A few rows (a decode step's): the product is reading B, once, in
        // one contiguous column range per thread (native_gemv.h).
        gemv_ = true;
        for (auto [c0, c1] : ranges(N_, flops < 2e5 ? 1 : threads, 16))
          items_.push_back({0, 0, 0, rowsTotal, c0, c1 - c0});
        return;
      }
      addItems(ranges(rowsTotal, parts, 8), parts, 0, 0, 0);
      return;
    }
    const std::vector<int64_t> stA = stridesOf(batchA), stB = stridesOf(batchB);
    std::vector<int64_t> index(rank, 0);
    const int64_t rowParts = std::max<int64_t>(1, parts / std::max<int64_t>(1, batches));
    for (int64_t i = 0; i < batches; ++i) {
      int64_t ia = 0, ib = 0;
      for (size_t k = 0; k < rank; ++k) {
        if (batchA[k] != 1) ia += index[k] * stA[k];
        if (batchB[k] != 1) ib += index[k] * stB[k];
      }
      addItems(ranges(M_, rowParts, 8), rowParts, ia * M_ * K_, ib * K_ * N_, i * M_ * N_);
      for (size_t k = rank; k-- > 0;) {
        if (++index[k] < batch[k]) break;
        index[k] = 0;
      }
    }
  }

  void run(const BufferTable& buffers) override {
    const float* a = static_cast<const float*>(buffers.ptr[a_]);
    const float* b = static_cast<const float*>(buffers.ptr[b_]);
    float* y = static_cast<float*>(buffers.ptr[y_]);
    parallelFor(static_cast<int64_t>(items_.size()), threads_, [&](int64_t i) {
      const Item& it = items_[static_cast<size_t>(i)];
      if (gemv_) {
        gemvRows(it.rows, it.cols, K_, a + it.offA, K_, b + it.offB + it.col0, N_,
                 y + it.offY + it.col0, N_);
        return;
      }
      referenceSgemm(false, false, it.rows, it.cols, K_, 1.0f, a + it.offA, K_, b + it.offB + it.col0, N_, 0.0f,
                     y + it.offY + it.col0, N_);
    });
  }

  std::string describe() const override {
    if (gemv_) return label_ + " (few-row gemv, " + std::to_string(items_.size()) + " column blocks)";
    return label_ + " (reference sgemm, " + std::to_string(items_.size()) + " blocks)";
  }

 private:
  int threads_;
  std::string label_;
  int32_t a_, b_, y_;
  int64_t M_, N_, K_;
  bool gemv_ = false;  // at most kGemvMaxRows rows, one weight matrix: gemvRows
  std::vector<Item> items_;
};

// Gemm on the reference sgemm, split over row blocks of Y.
class GemmStep : public Step {
 public:
  GemmStep(const NodeBinding& b, int threads) : threads_(threads), label_(stepLabel(b.node)) {
    a_ = b.inputs[0];
    b_ = b.inputs[1];
    c_ = b.inputs.size() > 2 ? b.inputs[2] : -1;
    y_ = b.outputs[0];
    transA_ = b.node.attrs.getInt("transA", 0) != 0;
    transB_ = b.node.attrs.getInt("transB", 0) != 0;
    alpha_ = b.node.attrs.getFloat("alpha", 1.0f);
    beta_ = b.node.attrs.getFloat("beta", 1.0f);
    const Shape& sa = b.inputTypes[0].shape;
    const Shape& sb = b.inputTypes[1].shape;
    M_ = transA_ ? sa[1] : sa[0];
    K_ = transA_ ? sa[0] : sa[1];
    N_ = transB_ ? sb[0] : sb[1];
    lda_ = sa[1];
    ldb_ = sb[1];
    if (c_ >= 0) {
      const Shape& cs = b.inputTypes[2].shape;
      cRows_ = cs.size() == 2 ? cs[0] : 1;
      cCols_ = cs.empty() ? 1 : cs.back();
    }
    if (c_ < 0 || beta_ == 0.0f) c_ = -1;
    const double flops = 2.0 * static_cast<double>(M_) * N_ * K_;
    rows_ = ranges(M_, flops < 2e5 ? 1 : threads * 2, 8);
  }

  void run(const BufferTable& buffers) override {
    const float* a = static_cast<const float*>(buffers.ptr[a_]);
    const float* b = static_cast<const float*>(buffers.ptr[b_]);
    const float* c = c_ >= 0 ? static_cast<const float*>(buffers.ptr[c_]) : nullptr;
    float* y = static_cast<float*>(buffers.ptr[y_]);
    parallelFor(static_cast<int64_t>(rows_.size()), threads_, [&](int64_t i) {
      const auto [m0, m1] = rows_[static_cast<size_t>(i)];
      if (c)
        for (int64_t r = m0; r < m1; ++r)
          for (int64_t j = 0; j < N_; ++j)
            y[r * N_ + j] = c[(cRows_ == 1 ? 0 : r) * cCols_ + (cCols_ == 1 ? 0 : j)];
      referenceSgemm(transA_, transB_, m1 - m0, N_, K_, alpha_, a + (transA_ ? m0 : m0 * lda_),
                     lda_, b, ldb_, c ? beta_ : 0.0f, y + m0 * N_, N_);
    });
  }

  std::string describe() const override {
    return label_ + " (reference sgemm, " + std::to_string(rows_.size()) + " row blocks)";
  }

 private:
  int threads_;
  std::string label_;
  int32_t a_, b_, c_, y_;
  bool transA_, transB_;
  float alpha_, beta_;
  int64_t M_, N_, K_, lda_, ldb_, cRows_ = 1, cCols_ = 1;
  std::vector<std::pair<int64_t, int64_t>> rows_;
};

std::optional<View> whole(const NodeBinding& b, bool input, size_t i) {
  const auto& bufs = input ? b.inputs : b.outputs;
  const auto& types = input ? b.inputTypes : b.outputTypes;
  if (i >= bufs.size() || bufs[i] < 0) return std::nullopt;
  return View{bufs[i], 0, types[i]};
}

Call wholeCall(const NodeBinding& b) {
  Call c{b.node, {}, {}};
  for (size_t i = 0; i < b.inputs.size(); ++i) c.ins.push_back(whole(b, true, i));
  for (size_t i = 0; i < b.outputs.size(); ++i) c.outs.push_back(whole(b, false, i));
  return c;
}

// A view of items [i0, i1) along dim `dim` of a contiguous tensor.
View sliceView(const View& v, size_t dim, int64_t i0, int64_t i1) {
  View s = v;
  const int64_t inner = product(v.type.shape, dim + 1, v.type.shape.size());
  s.byteOffset += i0 * inner * static_cast<int64_t>(elementSize(v.type.elementType));
  s.type.shape[dim] = i1 - i0;
  return s;
}

// Conv: slices over the batch, or (one image) over output channels or groups.
std::vector<Call> convCalls(const NodeBinding& b, int threads) {
  const Shape& x = b.inputTypes[0].shape;
  const Shape& w = b.inputTypes[1].shape;
  const Shape& y = b.outputTypes[0].shape;
  const double flops = 2.0 * static_cast<double>(numElements(y)) * product(w, 1, w.size());
  const Call full = wholeCall(b);
  if (threads <= 1 || flops < 1e6 || x.size() < 3) return {full};
  const int64_t N = x[0], group = b.node.attrs.getInt("group", 1);
  std::vector<Call> calls;
  if (N > 1) {
    for (auto [n0, n1] : ranges(N, threads)) {
      Call c = full;
      c.ins[0] = sliceView(*full.ins[0], 0, n0, n1);
      c.outs[0] = sliceView(*full.outs[0], 0, n0, n1);
      calls.push_back(std::move(c));
    }
    return calls;
  }
  if (group == 1) {
    for (auto [o0, o1] : ranges(w[0], threads, 8)) {
      Call c = full;
      c.ins[1] = sliceView(*full.ins[1], 0, o0, o1);
      if (c.ins.size() > 2 && c.ins[2]) c.ins[2] = sliceView(*full.ins[2], 0, o0, o1);
      c.outs[0] = sliceView(*full.outs[0], 1, o0, o1);
      calls.push_back(std::move(c));
    }
    return calls;
  }
  const int64_t cg = w[1], ocg = w[0] / group;
  for (auto [g0, g1] : ranges(group, threads)) {
    Call c = full;
    c.node.attrs.set("group", g1 - g0);
    c.ins[0] = sliceView(*full.ins[0], 1, g0 * cg, g1 * cg);
    c.ins[1] = sliceView(*full.ins[1], 0, g0 * ocg, g1 * ocg);
    if (c.ins.size() > 2 && c.ins[2]) c.ins[2] = sliceView(*full.ins[2], 0, g0 * ocg, g1 * ocg);
    c.outs[0] = sliceView(*full.outs[0], 1, g0 * ocg, g1 * ocg);
    calls.push_back(std::move(c));
  }
  return calls;
}

// Batch slices (ConvTranspose) or (N*C)-plane slices (pools).
std::vector<Call> planeCalls(const NodeBinding& b, int threads, bool planes) {
  const Call full = wholeCall(b);
  const Shape& x = b.inputTypes[0].shape;
  const Shape& y = b.outputTypes[0].shape;
  if (threads <= 1 || x.size() < 3 || numElements(x) + numElements(y) < (1 << 15)) return {full};
  for (size_t i = 1; i < full.outs.size(); ++i)
    if (full.outs[i]) return {full};  // MaxPool's Indices count from the tensor's start
  std::vector<Call> calls;
  if (!planes) {
    for (auto [n0, n1] : ranges(x[0], threads)) {
      Call c = full;
      c.ins[0] = sliceView(*full.ins[0], 0, n0, n1);
      c.outs[0] = sliceView(*full.outs[0], 0, n0, n1);
      calls.push_back(std::move(c));
    }
    return calls;
  }
  // [N, C, ...] viewed as [1, N*C, ...].
  Call flat = full;
  flat.ins[0]->type.shape = x;
  flat.ins[0]->type.shape[0] = 1;
  flat.ins[0]->type.shape[1] = x[0] * x[1];
  flat.outs[0]->type.shape = y;
  flat.outs[0]->type.shape[0] = 1;
  flat.outs[0]->type.shape[1] = y[0] * y[1];
  for (auto [p0, p1] : ranges(x[0] * x[1], threads * 2)) {
    Call c = flat;
    c.ins[0] = sliceView(*flat.ins[0], 1, p0, p1);
    c.outs[0] = sliceView(*flat.outs[0], 1, p0, p1);
    calls.push_back(std::move(c));
  }
  return calls;
}

}  // namespace

std::unique_ptr<Step> makeNodeStep(NodeBinding binding, int threads) {
  const OpSchema& schema = OpRegistry::instance().get(binding.node.op);
  const std::string& op = binding.node.op;
  const bool allFloat = [&] {
    for (size_t i = 0; i < binding.inputs.size(); ++i)
      if (binding.inputs[i] >= 0 && binding.inputTypes[i].elementType != ElementType::Float32) return false;
    return true;
  }();
  if (op == "MatMul" && allFloat) return std::make_unique<MatMulStep>(binding, threads);
  if (op == "Gemm" && allFloat) return std::make_unique<GemmStep>(binding, threads);
  if (auto pool = makeDirectPoolStep(binding, threads)) return pool;
  if (auto product = makeInt8ProductStep(binding, threads)) return product;
  if (auto quantize = makeQuantizeStep(binding, threads)) return quantize;
  std::vector<Call> calls;
  if (op == "Conv" && allFloat)
    calls = convCalls(binding, threads);
  else if (op == "ConvTranspose" && allFloat)
    calls = planeCalls(binding, threads, false);
  else if (op == "MaxPool" || op == "AveragePool")
    calls = planeCalls(binding, threads, true);
  else
    calls.push_back(wholeCall(binding));
  return std::make_unique<ReferenceStep>(schema, std::move(calls), threads, stepLabel(binding.node));
}

bool runsOnReferenceLoops(const Graph& graph, NodeId node) {
  const Node& n = graph.node(node);
  if (n.op == "Conv" || n.op == "ConvTranspose") return false;
  NodeBinding b;
  b.node = n;
  int32_t buffer = 0;  // placeholders: a step is built, never run
  for (ValueId v : n.inputs) {
    b.inputs.push_back(v == kNoValue ? -1 : buffer++);
    b.inputTypes.push_back(v == kNoValue ? TensorType{} : graph.value(v).type);
  }
  for (ValueId v : n.outputs) {
    b.outputs.push_back(v == kNoValue ? -1 : buffer++);
    b.outputTypes.push_back(v == kNoValue ? TensorType{} : graph.value(v).type);
  }
  try {
    const std::unique_ptr<Step> step = makeNodeStep(std::move(b), 1);
    return dynamic_cast<const ReferenceStep*>(step.get()) != nullptr;
  } catch (const Error&) {
    return false;  // compile() refuses it: nothing to measure
  }
}

}  // namespace collage::native
