// Builder::buildMatMul: MatMul and Gemm as one oneDNN matmul, Gemm's alpha
// and beta * C and leading per-column scales and shifts folded into B and
// the bias; a wide constant B as one matmul per panel of columns.
#include <algorithm>

#include "backends/onednn/onednn_builder.h"

namespace collage::onednn {

using dnnl::algorithm;
using dnnl::memory;

namespace {

// Columns per panel of a wide constant matmul (see buildPanelMatMul).
constexpr int64_t kMatMulPanel = 768;

// Gemm's alpha and beta * C as leading post-ops, so that they fold into B
// and the bias like any other scale or shift.
std::vector<PostOp> gemmLeadingOps(const Node& node, const Operand& c, const std::string& label) {
  std::vector<PostOp> ops;
  const float alpha = node.attrs.getFloat("alpha", 1.0f);
  const float beta = node.attrs.getFloat("beta", 1.0f);
  if (alpha != 1.0f) {
    Operand s;
    s.isConstant = true;
    s.constant = Tensor::scalarFloat(alpha);
    ops.push_back(PostOp::binary(algorithm::binary_mul, s, node.name));
  }
  if (c.present() && beta != 0.0f) {
    Operand cc = c;
    if (c.isConstant) {
      cc.constant = c.constant.clone();
      float* d = cc.constant.data<float>();
      for (int64_t i = 0; i < cc.constant.numElements(); ++i) d[i] *= beta;
    } else if (beta != 1.0f) {
      throw Refusal{label + "a non-constant C with beta != 1"};
    }
    ops.push_back(PostOp::binary(algorithm::binary_add, cc, node.name));
  }
  return ops;
}

// B as the matmul reads it, [..., K, N]: constants are made plain here (so
// scales can be folded into columns), run-time ones transposed by a strided view.
struct MatMulB {
  Shape shape;
  memory::desc md;
  std::vector<float> data;  // a constant's values, [..., K, N] row-major
};

MatMulB matMulB(const Operand& b, bool transB, size_t rank) {
  MatMulB r{padTo(b.shape, rank), memory::desc(), {}};
  r.md = plainDesc(r.shape);
  if (transB) {
    r.shape = {b.shape[1], b.shape[0]};
    r.md = b.isConstant
               ? plainDesc(r.shape)
               : memory::desc({b.shape[1], b.shape[0]}, memory::data_type::f32, {1, b.shape[1]});
  }
  if (!b.isConstant) return r;
  r.data = b.constant.toFloats();
  if (transB) {
    std::vector<float> t(r.data.size());
    const int64_t rows = b.shape[0], cols = b.shape[1];
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = r.data[i * cols + j];
    r.data.swap(t);
  }
  return r;
}

// oneDNN 2.6's gemm-based matmul (the one on AVX2) applies eltwise and
// binary post-ops in a scalar loop after the product: BERT's 128x768x3072
// product with the erf GELU took twice as long as the product alone.
// Its sum post-op is the GEMM's beta, free. So a leading residual becomes
// sum, and trailing eltwise ops run afterwards as JIT eltwise primitives in
// place on the output. Returns the matmul's post-ops and the ones after it.
std::pair<std::vector<PostOp>, std::vector<PostOp>> splitAtProduct(const std::vector<PostOp>& ops,
                                                                   const Shape& y) {
  std::vector<PostOp> mmOps = ops, after;
  if (!mmOps.empty() && isResidualAdd(mmOps[0], y)) mmOps[0].kind = PostOp::Kind::Sum;
  const size_t lead = !mmOps.empty() && mmOps[0].kind == PostOp::Kind::Sum ? 1 : 0;
  if (mmOps.size() > lead &&
      std::all_of(mmOps.begin() + static_cast<std::ptrdiff_t>(lead), mmOps.end(),
                  [](const PostOp& p) { return p.kind == PostOp::Kind::Eltwise; })) {
    after.assign(mmOps.begin() + static_cast<std::ptrdiff_t>(lead), mmOps.end());
    mmOps.resize(lead);
  } else if (lead == 0 || mmOps.size() > lead) {
    mmOps = ops;  // other chains: post-ops as lowered
  }
  return {mmOps, after};
}

}  // namespace

void Builder::buildMatMul(bool gemm) {
  const Node& node = g_.node(chain_.anchor);
  const Operand a = input(0), b = input(1), c = gemm ? input(2) : Operand{};
  const Shape& y = chain_.shape;
  const size_t r = y.size();
  if (a.shape.size() < 2 || b.shape.size() < 2)
    refuse(anchorLabel() + "a 1-D operand (" + shapeToString(a.shape) + " x " +
           shapeToString(b.shape) + ") has no oneDNN matmul");
  const bool transA = gemm && node.attrs.getInt("transA", 0) != 0;
  const bool transB = gemm && node.attrs.getInt("transB", 0) != 0;
  const int64_t N = y[r - 1];

  // A: transposition is a strided view.
  memory::desc aMd = plainDesc(padTo(a.shape, r));
  if (transA)
    aMd = memory::desc({a.shape[1], a.shape[0]}, memory::data_type::f32, {1, a.shape[1]});
  MatMulB bm = matMulB(b, transB, r);

  std::vector<PostOp> all = gemm ? gemmLeadingOps(node, c, anchorLabel()) : std::vector<PostOp>();
  all.insert(all.end(), chain_.postOps.begin(), chain_.postOps.end());
  const Fold fold = foldLeading(all, y, r - 1, b.isConstant, true);
  const std::vector<PostOp> ops = simplified(
      std::vector<PostOp>(all.begin() + static_cast<std::ptrdiff_t>(fold.count), all.end()));
  if (fold.scales)
    for (size_t i = 0; i < bm.data.size(); ++i) bm.data[i] *= fold.scale[i % N];
  std::vector<float> biasData;
  memory::desc biasMd;
  if (fold.shifts) {
    biasData = fold.shift;
    Shape bs(r, 1);
    bs[r - 1] = N;
    biasMd = plainDesc(bs);
  }

  const memory::desc dstMd = plainDesc(y);
  // What the product reads: float32 as given, or (onednn_bf16) bf16 copies
  // of A and of a run-time B converted in the kernel, a constant B converted
  // once here; bias and dst stay float32.
  const memory::data_type compute = computeType(context_->precision);
  const bool reduced = compute != memory::data_type::f32;
  const memory::desc aWant = reduced ? plainDesc(aMd.dims(), compute) : aMd;
  const memory::desc bWant = b.isConstant ? anyDesc(dimsOf(bm.shape), compute)
                             : reduced    ? plainDesc(bm.md.dims(), compute)
                                          : bm.md;
  const auto [mmOps, after] = splitAtProduct(ops, y);
  try {
    const int64_t K = bm.shape[bm.shape.size() - 2];
    memory out;  // the plain output, for the eltwise steps after the product
    if (b.isConstant && b.shape.size() == 2 && mmOps.empty() && !outputInternal() &&
        N >= 2 * kMatMulPanel && static_cast<int64_t>(bm.data.size()) == K * N) {
      out = buildPanelMatMul(a, aMd, aWant, bm.data, K, N, fold.shifts ? biasData.data() : nullptr);
    } else {
      const dnnl::primitive_attr attr = attrFor(mmOps);
      dnnl::matmul::primitive_desc pd =
          fold.shifts
              ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(aWant, bWant, biasMd, dstMd), attr,
                                             engine())
              : dnnl::matmul::primitive_desc(dnnl::matmul::desc(aWant, bWant, dstMd), attr, engine());
      // bf16 is a choice for speed: its reference kernel is never one.
      if (reduced && isRef(pd))
        refuse(anchorLabel() + "oneDNN has no bf16 JIT matmul for " + shapeToString(a.shape) +
               " x " + shapeToString(b.shape));
      Args args;
      args[DNNL_ARG_SRC] = reduced ? source(a, aMd, aWant) : operand(a, aMd);
      args[DNNL_ARG_WEIGHTS] = b.isConstant ? reorderedConstant(bm.md, bm.data.data(), pd.weights_desc())
                               : reduced    ? source(b, bm.md, bWant)
                                            : operand(b, bm.md);
      if (fold.shifts) args[DNNL_ARG_BIAS] = constant(biasMd, biasData.data());
      addMainStep(pd, std::move(args), mmOps);
      // The matmul wrote the plain output directly (its dst is plain).
      out = kernel_->steps.back().args.at(DNNL_ARG_DST);
    }
    if (!after.empty()) addInPlaceEltwise(out, after, " (eltwise after the product)");
  } catch (const dnnl::error& e) {
    refuse(anchorLabel() + "oneDNN cannot run " + opsText(ops) + " for " +
           shapeToString(a.shape) + " x " + shapeToString(b.shape) + ": " + e.what());
  }
}

// A product with a wide constant B ([K, N], N >= 2 panels) as one matmul
// per panel of kMatMulPanel columns, each writing its columns of the plain
// output in place (a strided view). Measured at 1 thread (AVX2, gemm:jit):
// 128x768 x 768x3072 ran at 26 GFLOP/s as one product against 36 for each
// 768-column panel. The output is this chain's kernel output (the caller's buffer).
memory Builder::buildPanelMatMul(const Operand& a, const memory::desc& aMd,
                                 const memory::desc& aWant, const std::vector<float>& bData,
                                 int64_t K, int64_t N, const float* bias) {
  const Shape& y = chain_.shape;
  const memory::dims yd = dimsOf(y), ys = rowMajorStrides(yd);
  const memory::data_type compute = computeType(context_->precision);
  // A converted once (bf16) and read by every panel.
  const memory src = aWant == aMd ? operand(a, aMd) : source(a, aMd, aWant);
  for (int64_t n0 = 0; n0 < N; n0 += kMatMulPanel) {
    const int64_t nc = std::min(kMatMulPanel, N - n0);
    memory::dims cd = yd;
    cd.back() = nc;
    const memory::desc dstMd(cd, memory::data_type::f32, ys);
    std::vector<float> panel(static_cast<size_t>(K * nc));
    for (int64_t k = 0; k < K; ++k)
      std::copy_n(bData.begin() + k * N + n0, nc, panel.begin() + k * nc);
    const Shape bs = padTo(Shape{K, nc}, y.size());
    Shape biasShape(y.size(), 1);
    biasShape.back() = nc;
    const memory::desc biasMd = bias ? plainDesc(biasShape) : memory::desc();
    dnnl::matmul::primitive_desc pd =
        bias ? dnnl::matmul::primitive_desc(
                   dnnl::matmul::desc(aWant, anyDesc(dimsOf(bs), compute), biasMd, dstMd),
                   attrFor({}), engine())
             : dnnl::matmul::primitive_desc(
                   dnnl::matmul::desc(aWant, anyDesc(dimsOf(bs), compute), dstMd), attrFor({}),
                   engine());
    if (compute != memory::data_type::f32 && isRef(pd))
      refuse(anchorLabel() + "oneDNN has no bf16 JIT matmul for a panel of " +
             shapeToString(Shape{K, nc}));
    Args args;
    args[DNNL_ARG_SRC] = src;
    args[DNNL_ARG_WEIGHTS] = reorderedConstant(plainDesc(bs), panel.data(), pd.weights_desc());
    if (bias) args[DNNL_ARG_BIAS] = constant(biasMd, bias + n0);
    memory dst(dstMd, engine(), DNNL_MEMORY_NONE);
    kernel_->bindings.push_back(
        {dst, true, outputIndex(), static_cast<size_t>(n0) * sizeof(float)});
    args[DNNL_ARG_DST] = dst;
    addStep(pd, std::move(args));
  }
  // The trailing eltwise steps below act on the whole output.
  memory whole(plainDesc(y), engine(), DNNL_MEMORY_NONE);
  kernel_->bindings.push_back({whole, true, outputIndex(), 0});
  kernel_->postOps += (kernel_->postOps.empty() ? "" : "; ") +
                      std::to_string((N + kMatMulPanel - 1) / kMatMulPanel) + " column panels";
  return whole;
}

}  // namespace collage::onednn
