#include "core/ops/integer_products.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "core/ir/error.h"

namespace collage {

namespace {

// The accumulator tile: kTileRows rows of A against kTileCols columns of B.
// The tile (2 KiB in int32) stays in L1 while B's rows stream past it; the
// inner loop over columns is what the compiler vectorises.
constexpr int64_t kTileRows = 4;
constexpr int64_t kTileCols = 128;
// Elements of an unfolded convolution block (int16): 256 KiB, so the block
// stays in L2 while every tile row of the weights meets it.
constexpr int64_t kColBlockElements = int64_t{1} << 17;

template <class Acc>
void gemm(int64_t M, int64_t N, int64_t K, const int16_t* A, int64_t lda, const int16_t* B, int64_t ldb,
          Acc* C, int64_t ldc) {
  for (int64_t n0 = 0; n0 < N; n0 += kTileCols) {
    const int64_t nb = std::min(kTileCols, N - n0);
    for (int64_t m0 = 0; m0 < M; m0 += kTileRows) {
      const int64_t mr = std::min(kTileRows, M - m0);
      Acc acc[kTileRows][kTileCols] = {};
      for (int64_t k = 0; k < K; ++k) {
        // Rows past mr multiply by 0: one loop shape for every tile.
        Acc a[kTileRows] = {};
        for (int64_t i = 0; i < mr; ++i) a[i] = A[(m0 + i) * lda + k];
        const int16_t* b = B + k * ldb + n0;
        for (int64_t j = 0; j < nb; ++j) {
          const Acc bj = b[j];
          acc[0][j] += a[0] * bj;
          acc[1][j] += a[1] * bj;
          acc[2][j] += a[2] * bj;
          acc[3][j] += a[3] * bj;
        }
      }
      for (int64_t i = 0; i < mr; ++i)
        std::copy(acc[i], acc[i] + nb, C + (m0 + i) * ldc + n0);
    }
  }
}
static_assert(kTileRows == 4, "the inner loop of gemm is written out for 4 rows");

// Calls f with a null pointer of the operand's element type (uint8 or int8).
template <class F>
void visitQuantizedData(const Tensor& t, F f) {
  if (t.elementType() == ElementType::UInt8) return f(t.data<uint8_t>());
  if (t.elementType() == ElementType::Int8) return f(t.data<int8_t>());
  throw Error("integer product of " + t.type().toString() + ": the operands must be uint8 or int8");
}

// q - zeroPoint(i / inner % len) for each element: the zero point a scalar
// (len 1) or one per index of an axis.
std::vector<int16_t> centred(const Tensor& t, const std::vector<int64_t>& zp, int64_t inner, int64_t len) {
  std::vector<int16_t> out(static_cast<size_t>(t.numElements()));
  visitQuantizedData(t, [&](const auto* q) {
    const int64_t n = t.numElements();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t z = zp.empty() ? 0 : zp[zp.size() > 1 ? static_cast<size_t>((i / inner) % len) : 0];
      out[static_cast<size_t>(i)] = static_cast<int16_t>(q[i] - z);
    }
  });
  return out;
}

bool useInt32(IntegerAccumulator accumulator, int64_t K, int64_t aBound, int64_t bBound) {
  return accumulator == IntegerAccumulator::Exact && sumFitsInt32(K, aBound, bBound);
}

// Unfolds columns [p0, p0 + nb) of one image's group (channels c0..c0+cg)
// into col[k][j], k = ((c * KD + kd) * KH + kh) * KW + kw (w's order), with
// x - xzero inside the input and 0 in the padding (which contributes
// nothing, as the loop it replaces skipped it).
template <class Q>
void unfold(const ConvGeometry& g, const Q* x, int64_t xzero, int64_t n, int64_t c0, int64_t cg, int64_t p0,
            int64_t nb, int16_t* col) {
  const int64_t ID = g.inputSpatial[0], IH = g.inputSpatial[1], IW = g.inputSpatial[2];
  const int64_t OH = g.outputSpatial[1], OW = g.outputSpatial[2];
  const int64_t KD = g.kernel[0], KH = g.kernel[1], KW = g.kernel[2];
  // One output row (od, oh) at a time: a run of ow within the block.
  for (int64_t p = p0; p < p0 + nb;) {
    const int64_t od = p / (OH * OW), oh = (p / OW) % OH, ow0 = p % OW;
    const int64_t len = std::min(OW - ow0, p0 + nb - p);
    const int64_t j0 = p - p0;
    int64_t k = 0;
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t kd = 0; kd < KD; ++kd) {
        const int64_t id = od * g.strides[0] - g.padsBegin[0] + kd * g.dilations[0];
        for (int64_t kh = 0; kh < KH; ++kh) {
          const int64_t ih = oh * g.strides[1] - g.padsBegin[1] + kh * g.dilations[1];
          const bool rowInside = id >= 0 && id < ID && ih >= 0 && ih < IH;
          const Q* xrow = rowInside ? x + (((n * g.inChannels + c0 + c) * ID + id) * IH + ih) * IW : nullptr;
          for (int64_t kw = 0; kw < KW; ++kw, ++k) {
            int16_t* dst = col + k * nb + j0;
            if (!rowInside) {
              std::fill(dst, dst + len, int16_t{0});
              continue;
            }
            const int64_t offset = kw * g.dilations[2] - g.padsBegin[2];
            for (int64_t t = 0; t < len; ++t) {
              const int64_t iw = (ow0 + t) * g.strides[2] + offset;
              dst[t] = iw >= 0 && iw < IW ? static_cast<int16_t>(xrow[iw] - xzero) : int16_t{0};
            }
          }
        }
      }
    p += len;
  }
}

template <class Acc>
void convWith(const ConvGeometry& g, const Tensor& xt, const std::vector<int16_t>& w, int64_t xzero,
              std::vector<int64_t>& acc) {
  const int64_t cg = g.inChannels / g.group, mg = g.outChannels / g.group;
  const int64_t K = cg * g.kernel[0] * g.kernel[1] * g.kernel[2];
  const int64_t P = g.outputSpatial[0] * g.outputSpatial[1] * g.outputSpatial[2];
  const int64_t block = std::max(kTileCols, kColBlockElements / std::max<int64_t>(K, 1) / kTileCols * kTileCols);
  std::vector<int16_t> col(static_cast<size_t>(K * std::min(block, P)));
  std::vector<Acc> out(static_cast<size_t>(mg * std::min(block, P)));
  visitQuantizedData(xt, [&](const auto* x) {
    for (int64_t n = 0; n < g.batch; ++n)
      for (int64_t grp = 0; grp < g.group; ++grp)
        for (int64_t p0 = 0; p0 < P; p0 += block) {
          const int64_t nb = std::min(block, P - p0);
          unfold(g, x, xzero, n, grp * cg, cg, p0, nb, col.data());
          gemm<Acc>(mg, nb, K, w.data() + grp * mg * K, K, col.data(), nb, out.data(), nb);
          for (int64_t m = 0; m < mg; ++m)
            std::copy(out.data() + m * nb, out.data() + (m + 1) * nb,
                      acc.data() + (n * g.outChannels + grp * mg + m) * P + p0);
        }
  });
}

}  // namespace

int64_t centredBound(ElementType type, const std::vector<int64_t>& zeroPoints) {
  int64_t lo = 0, hi = 0;
  if (type == ElementType::UInt8) {
    lo = 0;
    hi = 255;
  } else if (type == ElementType::Int8) {
    lo = -128;
    hi = 127;
  } else {
    throw Error(std::string("integer product of ") + std::string(elementTypeName(type)) +
                ": the operands must be uint8 or int8");
  }
  int64_t bound = 0;
  for (int64_t z : zeroPoints.empty() ? std::vector<int64_t>{0} : zeroPoints)
    bound = std::max({bound, std::abs(hi - z), std::abs(lo - z)});
  return bound;
}

bool sumFitsInt32(int64_t K, int64_t aBound, int64_t bBound) {
  // K * aBound * bBound <= INT32_MAX, without overflowing int64 on the way.
  const int64_t limit = std::numeric_limits<int32_t>::max();
  const int64_t product = aBound * bBound;  // <= 255 * 255 (or small test bounds)
  return product == 0 || K <= limit / product;
}

void integerGemm(int64_t M, int64_t N, int64_t K, const int16_t* A, int64_t lda, const int16_t* B,
                 int64_t ldb, int32_t* C, int64_t ldc) {
  gemm<int32_t>(M, N, K, A, lda, B, ldb, C, ldc);
}

void integerGemm(int64_t M, int64_t N, int64_t K, const int16_t* A, int64_t lda, const int16_t* B,
                 int64_t ldb, int64_t* C, int64_t ldc) {
  gemm<int64_t>(M, N, K, A, lda, B, ldb, C, ldc);
}

std::vector<int64_t> matMulIntegerAcc(const Tensor& at, const Tensor& bt, const std::vector<int64_t>& azp,
                                      const std::vector<int64_t>& bzp, const Shape& ys,
                                      IntegerAccumulator accumulator) {
  const Shape& as = at.shape();
  const Shape& bs = bt.shape();
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const Shape batch(ys.begin(), ys.end() - 2);
  // a's zero point runs along rows (index / K % M), b's along columns (index % N).
  const std::vector<int16_t> a = centred(at, azp, K, M), b = centred(bt, bzp, 1, N);
  // An operand's batch offset under numpy broadcasting (1 = repeated).
  auto batchOffset = [&](const Shape& opShape, int64_t index) {
    const int64_t lead = static_cast<int64_t>(batch.size()) - (static_cast<int64_t>(opShape.size()) - 2);
    int64_t offset = 0, stride = 1;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      const int64_t coord = index % batch[d];
      index /= batch[d];
      if (d < lead) continue;
      const int64_t extent = opShape[d - lead];
      offset += (extent == 1 ? 0 : coord) * stride;
      stride *= extent;
    }
    return offset;
  };
  const int64_t batches = numElements(batch);
  std::vector<int64_t> acc(static_cast<size_t>(batches * M * N), 0);
  const bool narrow = useInt32(accumulator, K, centredBound(at.elementType(), azp), centredBound(bt.elementType(), bzp));
  std::vector<int32_t> out(narrow ? static_cast<size_t>(M * N) : 0);
  for (int64_t bi = 0; bi < batches; ++bi) {
    const int16_t* ap = a.data() + batchOffset(as, bi) * M * K;
    const int16_t* bp = b.data() + batchOffset(bs, bi) * K * N;
    int64_t* c = acc.data() + bi * M * N;
    if (narrow) {
      integerGemm(M, N, K, ap, K, bp, N, out.data(), N);
      std::copy(out.begin(), out.end(), c);
    } else {
      integerGemm(M, N, K, ap, K, bp, N, c, N);
    }
  }
  return acc;
}

std::vector<int64_t> convIntegerAcc(const ConvGeometry& geometry, const Tensor& xt, const Tensor& wt,
                                    const std::vector<int64_t>& xzp, const std::vector<int64_t>& wzp,
                                    IntegerAccumulator accumulator) {
  const ConvGeometry g = geometry.expandedTo(3);
  const int64_t cg = g.inChannels / g.group;
  const int64_t K = cg * g.kernel[0] * g.kernel[1] * g.kernel[2];
  const int64_t xzero = xzp.empty() ? 0 : xzp[0];
  // w [M, C/group, k...] is already the weight matrix: row m is output channel m.
  const std::vector<int16_t> w = centred(wt, wzp, K, g.outChannels);
  std::vector<int64_t> acc(static_cast<size_t>(g.batch * g.outChannels * g.outputSpatialSize()), 0);
  if (acc.empty() || K == 0) return acc;
  if (useInt32(accumulator, K, centredBound(xt.elementType(), {xzero}), centredBound(wt.elementType(), wzp)))
    convWith<int32_t>(g, xt, w, xzero, acc);
  else
    convWith<int64_t>(g, xt, w, xzero, acc);
  return acc;
}

}  // namespace collage
