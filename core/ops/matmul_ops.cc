// Gemm and MatMul on the reference sgemm, and Det.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops/op_registry.h"
#include "core/ops/op_helpers.h"
#include "core/ops/reference_gemm.h"

namespace collage {

namespace {

// ---- Gemm: Y = alpha * op(A) * op(B) + beta * C ----

struct GemmDims {
  int64_t M, N, K;
};

GemmDims gemmDims(const Node& node, const Shape& a, const Shape& b) {
  if (a.size() != 2 || b.size() != 2)
    throw Error(nodeLabel(node) + "A " + shapeToString(a) + " and B " + shapeToString(b) +
                " must be matrices");
  const bool transA = node.attrs.getInt("transA", 0) != 0;
  const bool transB = node.attrs.getInt("transB", 0) != 0;
  GemmDims d{transA ? a[1] : a[0], transB ? b[0] : b[1], transA ? a[0] : a[1]};
  const int64_t kb = transB ? b[1] : b[0];
  if (kb != d.K)
    throw Error(nodeLabel(node) + "inner dimensions differ: op(A) is " + std::to_string(d.M) +
                "x" + std::to_string(d.K) + ", op(B) is " + std::to_string(kb) + "x" +
                std::to_string(d.N));
  return d;
}

bool hasC(const std::vector<TensorType>& in) {
  return in.size() > 2 && in[2].elementType != ElementType::Undefined;
}

std::vector<TensorType> inferGemm(const Node& node, const std::vector<TensorType>& in) {
  if (in.size() < 2) throw Error(nodeLabel(node) + "needs inputs A and B");
  requireFloat32(node, in[0]);
  requireFloat32(node, in[1]);
  const GemmDims d = gemmDims(node, in[0].shape, in[1].shape);
  if (hasC(in)) {
    requireFloat32(node, in[2]);
    // C broadcasts unidirectionally to [M, N].
    const Shape& c = in[2].shape;
    const Shape y{d.M, d.N};
    bool ok = c.size() <= 2;
    for (size_t i = 0; ok && i < c.size(); ++i) {
      const int64_t want = y[2 - c.size() + i];
      ok = c[i] == want || c[i] == 1;
    }
    if (!ok)
      throw Error(nodeLabel(node) + "C " + shapeToString(c) + " does not broadcast to " +
                  shapeToString(y));
  }
  return {TensorType{ElementType::Float32, {d.M, d.N}}};
}

void runGemm(const Node& node, const std::vector<const Tensor*>& in,
             const std::vector<Tensor*>& out) {
  const Tensor& A = *in[0];
  const Tensor& B = *in[1];
  const Tensor* C = in.size() > 2 ? in[2] : nullptr;
  const bool transA = node.attrs.getInt("transA", 0) != 0;
  const bool transB = node.attrs.getInt("transB", 0) != 0;
  const float alpha = node.attrs.getFloat("alpha", 1.0f);
  float beta = node.attrs.getFloat("beta", 1.0f);
  const GemmDims d = gemmDims(node, A.shape(), B.shape());
  float* y = out[0]->data<float>();
  if (C && beta != 0.0f) {
    // Broadcast C into Y, then let the sgemm scale it by beta.
    const Shape& cs = C->shape();
    const int64_t cRows = cs.size() == 2 ? cs[0] : 1;
    const int64_t cCols = cs.empty() ? 1 : cs.back();
    const float* c = C->data<float>();
    for (int64_t i = 0; i < d.M; ++i)
      for (int64_t j = 0; j < d.N; ++j)
        y[i * d.N + j] = c[(cRows == 1 ? 0 : i) * cCols + (cCols == 1 ? 0 : j)];
  } else {
    beta = 0.0f;
  }
  referenceSgemm(transA, transB, d.M, d.N, d.K, alpha, A.data<float>(), A.shape()[1],
                 B.data<float>(), B.shape()[1], beta, y, d.N);
}

double gemmFlops(const Node& node, const std::vector<TensorType>& in,
                 const std::vector<TensorType>&) {
  const GemmDims d = gemmDims(node, in[0].shape, in[1].shape);
  return 2.0 * static_cast<double>(d.M) * static_cast<double>(d.N) * static_cast<double>(d.K);
}

// ---- MatMul: numpy matmul semantics ----

// The operands as batches of matrices: a 1-D A is a 1xK row (its M is
// dropped from the output), a 1-D B a Kx1 column (its N is dropped); batch
// dimensions broadcast.
struct MatMulDims {
  int64_t M = 1, N = 1, K = 1;
  Shape batchA, batchB, batch;  // batch dims of A, of B (padded to batch's rank), broadcast
  Shape output;
};

MatMulDims matMulDims(const Node& node, const Shape& a, const Shape& b) {
  if (a.empty() || b.empty())
    throw Error(nodeLabel(node) + "MatMul operands must have rank >= 1, got " +
                shapeToString(a) + " and " + shapeToString(b));
  MatMulDims d;
  d.M = a.size() >= 2 ? a[a.size() - 2] : 1;
  d.K = a.back();
  const int64_t kb = b.size() >= 2 ? b[b.size() - 2] : b[0];
  d.N = b.size() >= 2 ? b.back() : 1;
  if (kb != d.K)
    throw Error(nodeLabel(node) + "inner dimensions differ: " + shapeToString(a) + " x " +
                shapeToString(b));
  d.batchA.assign(a.begin(), a.end() - std::min<size_t>(a.size(), 2));
  d.batchB.assign(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  d.batch = broadcastShapes(node, {d.batchA, d.batchB});
  d.batchA.insert(d.batchA.begin(), d.batch.size() - d.batchA.size(), 1);
  d.batchB.insert(d.batchB.begin(), d.batch.size() - d.batchB.size(), 1);
  d.output = d.batch;
  if (a.size() >= 2) d.output.push_back(d.M);
  if (b.size() >= 2) d.output.push_back(d.N);
  return d;
}

std::vector<TensorType> inferMatMul(const Node& node, const std::vector<TensorType>& in) {
  if (in.size() < 2) throw Error(nodeLabel(node) + "needs inputs A and B");
  requireFloat32(node, in[0]);
  requireFloat32(node, in[1]);
  return {TensorType{ElementType::Float32, matMulDims(node, in[0].shape, in[1].shape).output}};
}

void runMatMul(const Node& node, const std::vector<const Tensor*>& in,
               const std::vector<Tensor*>& out) {
  const MatMulDims d = matMulDims(node, in[0]->shape(), in[1]->shape());
  const float* a = in[0]->data<float>();
  const float* b = in[1]->data<float>();
  float* y = out[0]->data<float>();
  const int64_t batches = numElements(d.batch);
  const int64_t batchesA = numElements(d.batchA), batchesB = numElements(d.batchB);
  // Common case (a layer applying one weight matrix to a batch of rows):
  // fold A's batch into M and run one product.
  if (batchesB == 1) {
    referenceSgemm(false, false, batchesA * d.M, d.N, d.K, 1.0f, a, d.K, b, d.N, 0.0f, y, d.N);
    return;
  }
  const std::vector<int64_t> stridesA = stridesOf(d.batchA), stridesB = stridesOf(d.batchB);
  const size_t rank = d.batch.size();
  std::vector<int64_t> index(rank, 0);
  for (int64_t i = 0; i < batches; ++i) {
    int64_t ia = 0, ib = 0;
    for (size_t k = 0; k < rank; ++k) {
      if (d.batchA[k] != 1) ia += index[k] * stridesA[k];
      if (d.batchB[k] != 1) ib += index[k] * stridesB[k];
    }
    referenceSgemm(false, false, d.M, d.N, d.K, 1.0f, a + ia * d.M * d.K, d.K,
                   b + ib * d.K * d.N, d.N, 0.0f, y + i * d.M * d.N, d.N);
    for (size_t k = rank; k-- > 0;) {
      if (++index[k] < d.batch[k]) break;
      index[k] = 0;
    }
  }
}

double matMulFlops(const Node& node, const std::vector<TensorType>& in,
                   const std::vector<TensorType>&) {
  const MatMulDims d = matMulDims(node, in[0].shape, in[1].shape);
  return 2.0 * static_cast<double>(d.M) * static_cast<double>(d.N) * static_cast<double>(d.K) *
         static_cast<double>(numElements(d.batch));
}


// ---- Det: determinants of the trailing M x M matrices, by LU
// decomposition with partial pivoting in double ----

std::vector<TensorType> inferDet(const Node& node, const std::vector<TensorType>& in) {
  requireFloat32(node, in[0]);
  const int64_t rank = in[0].rank();
  if (rank < 2 || in[0].shape[rank - 1] != in[0].shape[rank - 2])
    throw Error(nodeLabel(node) + "the input must be [*, M, M], not " + in[0].toString());
  return {{in[0].elementType, Shape(in[0].shape.begin(), in[0].shape.end() - 2)}};
}

void runDet(const Node&, const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) {
  const int64_t m = in[0]->shape().back();
  const int64_t count = out[0]->numElements();
  const float* x = in[0]->data<float>();
  float* y = out[0]->data<float>();
  std::vector<double> a(static_cast<size_t>(m * m));
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < m * m; ++i) a[i] = x[b * m * m + i];
    double det = 1.0;
    for (int64_t col = 0; col < m && det != 0.0; ++col) {
      int64_t pivot = col;
      for (int64_t r = col + 1; r < m; ++r)
        if (std::fabs(a[r * m + col]) > std::fabs(a[pivot * m + col])) pivot = r;
      if (a[pivot * m + col] == 0.0) {
        det = 0.0;
        break;
      }
      if (pivot != col) {
        for (int64_t k = 0; k < m; ++k) std::swap(a[col * m + k], a[pivot * m + k]);
        det = -det;
      }
      det *= a[col * m + col];
      for (int64_t r = col + 1; r < m; ++r) {
        const double f = a[r * m + col] / a[col * m + col];
        for (int64_t k = col; k < m; ++k) a[r * m + k] -= f * a[col * m + k];
      }
    }
    y[b] = static_cast<float>(det);
  }
}

}  // namespace

void registerMatMulOps(OpRegistry& r) {
  OpSchema det;
  det.name = "Det";
  det.kind = OpKind::Opaque;
  det.infer = inferDet;
  det.reference = runDet;
  r.add(std::move(det));

  OpSchema gemm;
  gemm.name = "Gemm";
  gemm.kind = OpKind::Anchor;
  gemm.minInputs = 2;
  gemm.maxInputs = 3;
  gemm.attributes = {
      {"alpha", AttributeType::Float, Attribute(1.0f)},
      {"beta", AttributeType::Float, Attribute(1.0f)},
      {"transA", AttributeType::Int, Attribute(int64_t{0})},
      {"transB", AttributeType::Int, Attribute(int64_t{0})},
  };
  gemm.infer = inferGemm;
  gemm.reference = runGemm;
  gemm.flops = gemmFlops;
  r.add(std::move(gemm));

  OpSchema matmul;
  matmul.name = "MatMul";
  matmul.kind = OpKind::Anchor;
  matmul.minInputs = 2;
  matmul.maxInputs = 2;
  matmul.infer = inferMatMul;
  matmul.reference = runMatMul;
  matmul.flops = matMulFlops;
  r.add(std::move(matmul));
}

}  // namespace collage
