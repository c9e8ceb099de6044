// The attention kernel (native_attention.h): the pattern found around a
// Softmax, compiled with every view folded into strides, and run as one
// flash-attention loop. Its strided views are native_strided_view, its
// inner products native_attention_gemm.
#include "backends/native/native_attention.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "backends/native/native_attention_gemm.h"
#include "backends/native/native_decode_attention.h"
#include "backends/native/native_math.h"
#include "backends/native/native_strided_view.h"
#include "core/ir/tensor.h"
#include "core/ops/layout_attrs.h"

namespace collage::native {

namespace {

bool isReshapeLike(const std::string& op) {
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze";
}

std::string label(const Node& node) { return "'" + node.name + "' (" + node.op + ")"; }

struct Refusal {
  std::string reason;
};

bool isScalarConstant(const Value& v) {
  return v.isConstant() && v.type.elementType == ElementType::Float32 && v.type.numElements() == 1;
}

float scalarOf(const Value& v) { return v.constant->data<float>()[0]; }

// The value's only consumer, or kNoNode (several, none, or a graph output).
NodeId soleConsumer(const Graph& g, ValueId v) {
  const Value& value = g.value(v);
  if (value.isGraphOutput || value.consumers.size() != 1) return kNoNode;
  return value.consumers[0];
}

// ---------------------------------------------------------------------------
// Finding the pattern (shared by the rule and compile).

// Score ops between the first MatMul and the Softmax, in graph order.
struct ScoreChain {
  NodeId first = kNoNode;  // the MatMul of Q and Kᵀ
  std::vector<NodeId> ops;
};

bool isScoreOp(const std::string& op) { return op == "Mul" || op == "Div" || op == "Add" || op == "Where"; }

// Walks back from `v` (the Softmax's input) through score ops to a MatMul.
// `member` limits the walk (the rule passes "any node").
template <class Member>
std::optional<ScoreChain> scoreChainTo(const Graph& g, ValueId v, const Member& member, int depth = 0) {
  const NodeId n = g.value(v).producer;
  if (n == kNoNode || !member(n) || depth > 8) return std::nullopt;
  const Node& node = g.node(n);
  if (node.op == "MatMul") return ScoreChain{n, {}};
  if (!isScoreOp(node.op)) return std::nullopt;
  std::vector<size_t> scoreSlots;
  if (node.op == "Mul") scoreSlots = {0, 1};
  else if (node.op == "Div") scoreSlots = {0};
  else if (node.op == "Add") scoreSlots = {0, 1};
  else scoreSlots = {1, 2};
  for (size_t slot : scoreSlots) {
    const ValueId in = node.inputs.at(slot);
    if (soleConsumer(g, in) != n) continue;
    if (auto chain = scoreChainTo(g, in, member, depth + 1)) {
      chain->ops.push_back(n);
      return chain;
    }
  }
  return std::nullopt;
}

// The nodes that make a Q, K or V operand from its source: views, the
// repeat of KV heads for grouped-query attention (Expand, Tile) and (for Q
// and K) a scale, walked back from `v` while each is the sole user.
template <class Member>
std::vector<NodeId> operandChain(const Graph& g, ValueId v, NodeId user, bool allowScale,
                                 const Member& member) {
  std::vector<NodeId> chain;
  for (int depth = 0; depth < 8; ++depth) {
    const NodeId n = g.value(v).producer;
    if (n == kNoNode || !member(n) || soleConsumer(g, v) != user) break;
    const Node& node = g.node(n);
    if (node.op == "Transpose" || isReshapeLike(node.op) || node.op == "Expand" || node.op == "Tile") {
      if (node.op != "Transpose" && node.inputs.size() > 1 && node.inputs[1] != kNoValue &&
          !g.value(node.inputs[1]).isConstant())
        break;
      v = node.inputs.at(0);
    } else if (allowScale && (node.op == "Mul" || node.op == "Div")) {
      const bool c0 = isScalarConstant(g.value(node.inputs.at(0)));
      const bool c1 = isScalarConstant(g.value(node.inputs.at(1)));
      if (c1 && !c0) v = node.inputs[0];
      else if (c0 && !c1 && node.op == "Mul") v = node.inputs[1];
      else break;
    } else {
      break;
    }
    chain.push_back(n);
    user = n;
  }
  std::reverse(chain.begin(), chain.end());  // source first
  return chain;
}

// The output's head merge: views after the second MatMul, each the sole user.
template <class Member>
std::vector<NodeId> outputChain(const Graph& g, NodeId second, const Member& member) {
  std::vector<NodeId> chain;
  ValueId v = g.node(second).outputs.at(0);
  for (int depth = 0; depth < 8; ++depth) {
    const NodeId n = soleConsumer(g, v);
    if (n == kNoNode || !member(n)) break;
    const Node& node = g.node(n);
    if (!(node.op == "Transpose" || isReshapeLike(node.op)) || node.inputs.at(0) != v) break;
    if (node.inputs.size() > 1 && node.inputs[1] != kNoValue && !g.value(node.inputs[1]).isConstant())
      break;
    chain.push_back(n);
    v = node.outputs.at(0);
  }
  return chain;
}

bool softmaxOverLastAxis(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  const int64_t rank = static_cast<int64_t>(g.value(node.inputs.at(0)).type.shape.size());
  int64_t axis = node.attrs.getInt("axis", -1);
  if (axis < 0) axis += rank;
  return axis == rank - 1;
}

// The attention around Softmax `s`, within `member`.
struct Found {
  NodeId softmax = kNoNode, second = kNoNode;
  ScoreChain scores;
};

template <class Member>
std::optional<Found> findAround(const Graph& g, NodeId s, const Member& member) {
  const Node& sm = g.node(s);
  if (sm.op != "Softmax") return std::nullopt;
  Found f;
  f.softmax = s;
  auto chain = scoreChainTo(g, sm.inputs.at(0), member);
  if (!chain) return std::nullopt;
  if (soleConsumer(g, sm.inputs.at(0)) != s) return std::nullopt;
  f.scores = *chain;
  const NodeId second = soleConsumer(g, sm.outputs.at(0));
  if (second == kNoNode || !member(second) || g.node(second).op != "MatMul" ||
      g.node(second).inputs.at(0) != sm.outputs.at(0))
    return std::nullopt;
  f.second = second;
  return f;
}

// ---------------------------------------------------------------------------
// The compiled kernel.

// Query rows per task and keys per block. A task keeps its scores
// transposed (keys × queries, 256 × 64 floats, 64 KiB), its packed Qᵀ and
// its output rows in L2 (2 MiB per core on Zen 4) while it streams K and V
// blocks from where they lie.
constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 256;
// With causal tiles to skip, smaller key blocks skip more.
constexpr int64_t kSkippingKeyBlock = 64;

class AttentionKernel : public Kernel {
 public:
  // Shapes: [B, H] batch, Sq queries, Sk keys, D (Q·K) and Dv (V) widths.
  int64_t B = 1, H = 1, Sq = 0, Sk = 0, D = 0, Dv = 0;
  // Query heads per KV head (grouped-query attention): head h reads K and V
  // of head h / kvGroup, whose views' head dim is H / kvGroup.
  int64_t kvGroup = 1;
  float qScale = 1.0f;
  int qSlot = -1, kSlot = -1, vSlot = -1;
  StridedView q, k, v, o;  // 4-d [b, h, row, col]; k as [b, h, key, d]
  std::vector<ScoreOp> ops;
  std::vector<Tensor> constants;  // slots numInputs.. are these
  size_t numInputs = 0;
  int threads = 1;
  InnerProduct innerProduct = InnerProduct::OpenBlas;
  std::string label;
  int64_t keyBlock = kKeyBlock;
  // A mask varies along the queries (a causal one): tiles the masks hide
  // are looked for at run time (tileHidden) and skipped.
  bool skipHiddenTiles = false;
  // Tiles skipped in the last run (for describe() and the tests).
  std::atomic<int64_t> tilesSkipped{0}, tilesRun{0};

  void run(const std::vector<const DLTensor*>& inputs, const std::vector<DLTensor*>& outputs) override {
    std::vector<const void*> slots(numInputs + constants.size());
    for (size_t i = 0; i < numInputs; ++i)
      slots[i] = static_cast<const char*>(inputs.at(i)->data) + inputs[i]->byte_offset;
    for (size_t i = 0; i < constants.size(); ++i) slots[numInputs + i] = constants[i].raw();
    float* out = reinterpret_cast<float*>(static_cast<char*>(outputs.at(0)->data) + outputs[0]->byte_offset);
    const float* Q = static_cast<const float*>(slots[static_cast<size_t>(qSlot)]);
    const float* K = static_cast<const float*>(slots[static_cast<size_t>(kSlot)]);
    const float* V = static_cast<const float*>(slots[static_cast<size_t>(vSlot)]);
    const int nt = std::max(1, threads);
    const int64_t BH = B * H;

    // K is read as A, where it lies (broadcasts of one element: any stride
    // does). V is read as B, a row of 16 floats per load: in place, its rows
    // 3 KiB apart (a head of [S, 768]) fall into 4 of the L1's 64 sets and
    // evict each other, so each task copies its V block to contiguous rows
    // first, unless they are so already. Per task, not once per head before
    // the tasks: a barrier between the two costs more under load than the
    // repeated copy (1/64 of the block's multiply-adds).
    const bool packV = !(v.strides[3] == 1 && v.strides[2] == Dv);
    const int64_t qBlocks = (Sq + kQueryBlock - 1) / kQueryBlock;
    const int64_t tasks = BH * qBlocks;
    const int64_t kb = std::min(keyBlock, Sk);
    const int64_t kBlocks = (Sk + kb - 1) / kb;
    constexpr int64_t ld = kQueryBlock;  // of Qᵀ and Sᵀ
    std::atomic<int64_t> skipped{0};
#pragma omp parallel num_threads(nt) if (nt > 1 && tasks > 1)
    {
      Scratch& w = scratch(omp_get_thread_num(), kb);
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t bh = t / qBlocks, b = bh / H, h = bh % H;
        const int64_t i0 = (t % qBlocks) * kQueryBlock, mq = std::min(kQueryBlock, Sq - i0);
        // Qᵀ [D][mq], scaled.
        const float* qb = Q + b * q.strides[0] + h * q.strides[1] + i0 * q.strides[2];
        for (int64_t i = 0; i < mq; ++i)
          for (int64_t d = 0; d < D; ++d) w.qt[d * ld + i] = qb[i * q.strides[2] + d * q.strides[3]] * qScale;
        std::fill(w.rowMax, w.rowMax + ld, -std::numeric_limits<float>::infinity());
        std::fill(w.rowSum, w.rowSum + ld, 0.0f);
        const float* kbh = K + b * k.strides[0] + (h / kvGroup) * k.strides[1];
        const float* vbh = V + b * v.strides[0] + (h / kvGroup) * v.strides[1];
        for (int64_t j0 = 0; j0 < Sk; j0 += kb) {
          const int64_t nk = std::min(kb, Sk - j0);
          // A tile the masks push far below every row's running max: its
          // terms are 0 in float, as the reference's (K and V not read).
          if (skipHiddenTiles && j0 > 0 && tileHidden(slots, b, h, i0, mq, j0, nk, hiddenBelow(w, mq))) {
            skipped.fetch_add(1, std::memory_order_relaxed);
            continue;
          }
          // Sᵀ [nk][mq] = K[j0:j0+nk] · Qᵀ.
          gemm(innerProduct, nk, mq, D, {kbh + j0 * k.strides[2], k.strides[2], k.strides[3]}, w.qt.data(), ld,
               w.st.data(), ld, false);
          applyScoreOps(slots, w.st.data(), b, h, i0, mq, j0, nk);
          onlineSoftmax(w, mq, nk, j0 == 0);
          // O [mq][Dv] += P [mq][nk] · V[j0:j0+nk]  (P read transposed from Sᵀ).
          const float* vblock = vbh + j0 * v.strides[2];
          int64_t ldv = v.strides[2];
          if (packV) {
            for (int64_t j = 0; j < nk; ++j)
              for (int64_t d = 0; d < Dv; ++d) w.vp[j * Dv + d] = vblock[j * v.strides[2] + d * v.strides[3]];
            vblock = w.vp.data();
            ldv = Dv;
          }
          gemm(innerProduct, mq, Dv, nk, {w.st.data(), 1, ld}, vblock, ldv, w.acc.data(), Dv, j0 != 0);
        }
        float* ob = out + b * o.strides[0] + h * o.strides[1];
        for (int64_t i = 0; i < mq; ++i) {
          const float l = w.rowSum[i];
          // A row whose every score is -inf: the reference's softmax is NaN.
          const float inv = l > 0.0f ? 1.0f / l : std::numeric_limits<float>::quiet_NaN();
          const float* a = w.acc.data() + i * Dv;
          float* orow = ob + (i0 + i) * o.strides[2];
          if (o.strides[3] == 1)
            for (int64_t d = 0; d < Dv; ++d) orow[d] = a[d] * inv;
          else
            for (int64_t d = 0; d < Dv; ++d) orow[d * o.strides[3]] = a[d] * inv;
        }
      }
    }
    tilesSkipped = skipped.load();
    tilesRun = tasks * kBlocks;
  }

 private:
  struct Scratch {
    std::vector<float> qt, st, acc, vp;
    alignas(64) float rowMax[kQueryBlock], rowSum[kQueryBlock], alpha[kQueryBlock];
  };
  // Per-thread scratch, allocated on the first run (and kept: run only computes).
  Scratch& scratch(int thread, int64_t kb) {
    Scratch* s;
#pragma omp critical(collage_native_attention_scratch)
    {
      if (scratch_.size() <= static_cast<size_t>(thread)) scratch_.resize(static_cast<size_t>(thread) + 1);
      auto& p = scratch_[static_cast<size_t>(thread)];
      if (!p) {
        p = std::make_unique<Scratch>();
        p->qt.resize(static_cast<size_t>(D * kQueryBlock));
        p->st.resize(static_cast<size_t>(kb * kQueryBlock));
        p->acc.resize(static_cast<size_t>(kQueryBlock * Dv));
        p->vp.resize(static_cast<size_t>(kb * Dv));
      }
      s = p.get();
    }
    return *s;
  }

  // The bound below which a score adds exp(s - max) = 0 in float to every
  // row (e^-110 is below the smallest subnormal; fastExp gives 0 from
  // e^-87.4): 110 below the least running max. -inf while a row has no max.
  double hiddenBelow(const Scratch& w, int64_t mq) const {
    double least = std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < mq; ++i) least = std::min(least, static_cast<double>(w.rowMax[i]));
    return least - 110.0;
  }

  // Whether the score ops bring every score of the tile (queries i0.., keys
  // j0..) below `limit` whatever Q.Kᵀ is (raw scores within
  // +-kRawScoreBound), bounding each score through the ops in the graph's
  // order (a select's fill exactly, an addend added). Scanned from the
  // tile's lower-left corner (the query that sees most, the first key),
  // where a causal mask shows a score first, and stops at the first score
  // that may be above: reading the masks costs a few percent of the tile's
  // products, and a hidden tile saves them all.
  bool tileHidden(const std::vector<const void*>& slots, int64_t b, int64_t h, int64_t i0, int64_t mq,
                  int64_t j0, int64_t nk, double limit) const {
    for (int64_t i = i0 + mq - 1; i >= i0; --i)
      for (int64_t j = j0; j < j0 + nk; ++j) {
        double lo = -kRawScoreBound, hi = kRawScoreBound;
        for (const ScoreOp& op : ops) {
          if (op.kind == ScoreOp::Scale) {
            const double a = lo * op.scale, c = hi * op.scale;
            lo = std::min(a, c);
            hi = std::max(a, c);
            continue;
          }
          const StridedView& w = op.view;
          const int64_t at = b * w.strides[0] + h * w.strides[1] + i * w.strides[2] + j * w.strides[3];
          if (op.kind == ScoreOp::Add) {
            const float m = static_cast<const float*>(slots[static_cast<size_t>(op.slot)])[at];
            lo += m;
            hi += m;
            continue;
          }
          if (static_cast<const bool*>(slots[static_cast<size_t>(op.slot)])[at] != op.scoresWhereTrue) {
            const StridedView& fw = op.fillView;
            lo = hi = static_cast<const float*>(slots[static_cast<size_t>(op.fillSlot)])
                [b * fw.strides[0] + h * fw.strides[1] + i * fw.strides[2] + j * fw.strides[3]];
          }
        }
        if (!(hi < limit)) return false;  // a NaN bound never hides
      }
    return true;
  }

  // Flash attention's update over one key block of Sᵀ [nk][mq]: the running
  // max and sum per query, the block's scores turned into exp(s - max), the
  // output rows rescaled by exp(old max - new max).
  void onlineSoftmax(Scratch& w, int64_t mq, int64_t nk, bool firstBlock) const {
    constexpr int64_t ld = kQueryBlock;
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    alignas(64) float m[kQueryBlock], sum[kQueryBlock];
    std::copy(w.rowMax, w.rowMax + mq, m);
    for (int64_t j = 0; j < nk; ++j) {
      const float* s = w.st.data() + j * ld;
#pragma omp simd
      for (int64_t i = 0; i < mq; ++i) m[i] = s[i] > m[i] ? s[i] : m[i];
    }
    // Rows with no finite score yet count nothing (their max stays -inf).
    for (int64_t i = 0; i < mq; ++i) sum[i] = 0.0f;
    for (int64_t j = 0; j < nk; ++j) {
      float* s = w.st.data() + j * ld;
#pragma omp simd
      for (int64_t i = 0; i < mq; ++i) {
        const float e = m[i] == kNegInf ? 0.0f : fastExp(s[i] - m[i]);
        s[i] = e;
        sum[i] += e;
      }
    }
    for (int64_t i = 0; i < mq; ++i) {
      const float alpha = w.rowMax[i] == kNegInf ? 0.0f : fastExp(w.rowMax[i] - m[i]);
      w.rowSum[i] = w.rowSum[i] * alpha + sum[i];
      w.rowMax[i] = m[i];
      if (!firstBlock && alpha != 1.0f) {
        float* a = w.acc.data() + i * Dv;
        for (int64_t d = 0; d < Dv; ++d) a[d] *= alpha;
      }
    }
  }

  // The score ops on Sᵀ [nk][mq] (key j, query i), in the graph's order.
  void applyScoreOps(const std::vector<const void*>& slots, float* st, int64_t b, int64_t h, int64_t i0,
                     int64_t mq, int64_t j0, int64_t nk) const {
    constexpr int64_t ld = kQueryBlock;
    for (const ScoreOp& op : ops) {
      if (op.kind == ScoreOp::Scale) {
        for (int64_t j = 0; j < nk; ++j) {
          float* s = st + j * ld;
#pragma omp simd
          for (int64_t i = 0; i < mq; ++i) s[i] *= op.scale;
        }
        continue;
      }
      const StridedView& w = op.view;
      const int64_t base = b * w.strides[0] + h * w.strides[1] + i0 * w.strides[2] + j0 * w.strides[3];
      const int64_t si = w.strides[2], sj = w.strides[3];
      if (op.kind == ScoreOp::Add) {
        const float* m = static_cast<const float*>(slots[static_cast<size_t>(op.slot)]) + base;
        for (int64_t j = 0; j < nk; ++j) {
          float* s = st + j * ld;
          const float* mj = m + j * sj;
          if (si == 0) {
            const float x = mj[0];
#pragma omp simd
            for (int64_t i = 0; i < mq; ++i) s[i] += x;
          } else if (si == 1) {
#pragma omp simd
            for (int64_t i = 0; i < mq; ++i) s[i] += mj[i];
          } else {
            for (int64_t i = 0; i < mq; ++i) s[i] += mj[i * si];
          }
        }
        continue;
      }
      const bool* c = static_cast<const bool*>(slots[static_cast<size_t>(op.slot)]) + base;
      const StridedView& fw = op.fillView;
      const float* f = static_cast<const float*>(slots[static_cast<size_t>(op.fillSlot)]) + b * fw.strides[0] +
                       h * fw.strides[1] + i0 * fw.strides[2] + j0 * fw.strides[3];
      const bool keepWhen = op.scoresWhereTrue;
      for (int64_t j = 0; j < nk; ++j) {
        float* s = st + j * ld;
        const bool* cj = c + j * sj;
        const float* fj = f + j * fw.strides[3];
        const int64_t fi = fw.strides[2];
        if (si == 1 && fi == 0) {
          const float x = fj[0];
#pragma omp simd
          for (int64_t i = 0; i < mq; ++i) s[i] = cj[i] != keepWhen ? x : s[i];
        } else {
          for (int64_t i = 0; i < mq; ++i)
            if (cj[i * si] != keepWhen) s[i] = fj[i * fi];
        }
      }
    }
  }

  std::vector<std::unique_ptr<Scratch>> scratch_;
};

// ---------------------------------------------------------------------------
// Compiling: the group must be exactly one attention, every view a stride.

class AttentionCompiler {
 public:
  AttentionCompiler(const KernelRequest& req, int threads) : req_(req), g_(*req.graph), threads_(threads) {}

  std::unique_ptr<Kernel> compile() {
    std::vector<NodeId> softmaxes, matmuls;
    for (NodeId n : req_.members()) {
      if (g_.node(n).op == "Softmax") softmaxes.push_back(n);
      if (g_.node(n).op == "MatMul") matmuls.push_back(n);
    }
    if (softmaxes.size() != 1 || matmuls.size() != 2)
      throw Refusal{"attention: the group must hold one Softmax between two MatMuls (it holds " +
                    std::to_string(softmaxes.size()) + " Softmax, " + std::to_string(matmuls.size()) +
                    " MatMul)"};
    auto member = [&](NodeId n) { return req_.nodes.contains(n); };
    const NodeId s = softmaxes[0];
    if (!softmaxOverLastAxis(g_, s)) throw Refusal{"attention: " + label(g_.node(s)) + " is not over the last axis"};
    const std::optional<Found> f = findAround(g_, s, member);
    if (!f)
      throw Refusal{"attention: " + label(g_.node(s)) +
                    " is not fed by MatMul -> [scale | additive mask | select] and read by a MatMul alone"};
    const Node& first = g_.node(f->scores.first);
    const Node& second = g_.node(f->second);
    if (req_.outputs.size() != 1) throw Refusal{"attention: the group has " + std::to_string(req_.outputs.size()) + " outputs (it must have one)"};

    k_ = std::make_unique<AttentionKernel>();
    k_->numInputs = req_.inputs.size();
    k_->threads = threads_;
    k_->innerProduct = innerProductFromEnvironment();
    k_->label = req_.toString();
    used_.insert(s);
    used_.insert(f->scores.first);
    used_.insert(f->second);

    // Shapes from the two MatMuls (ranks 2..4; batch dims at most two).
    const Shape& scoresShape = g_.value(first.outputs.at(0)).type.shape;
    const Shape& outShape = g_.value(second.outputs.at(0)).type.shape;
    if (scoresShape.size() < 2 || scoresShape.size() > 4)
      throw Refusal{"attention: scores of rank " + std::to_string(scoresShape.size()) + " (2 to 4 taken)"};
    const size_t r = scoresShape.size();
    int64_t batch[2] = {1, 1};
    if (r >= 3) batch[1] = scoresShape[r - 3];
    if (r == 4) batch[0] = scoresShape[0];
    k_->B = batch[0];
    k_->H = batch[1];
    k_->Sq = scoresShape[r - 2];
    k_->Sk = scoresShape[r - 1];
    k_->Dv = outShape.back();
    if (outShape.size() != r)
      throw Refusal{"attention: the second MatMul's batch differs from the first's"};
    std::vector<int64_t> dims4 = {batch[0], batch[1], k_->Sq, k_->Sk};

    float scale = 1.0f;
    Repeat qr, kr, vr;
    StridedView qv = operand(first.inputs.at(0), f->scores.first, true, scale, k_->qSlot, qr);
    StridedView kv = operand(first.inputs.at(1), f->scores.first, true, scale, k_->kSlot, kr);
    StridedView vv = operand(second.inputs.at(1), f->second, false, scale, k_->vSlot, vr);
    if (qv.dims.size() < 2 || kv.dims.size() < 2 || vv.dims.size() < 2)
      throw Refusal{"attention: a MatMul operand of rank 1"};
    // Grouped-query attention: K and V read KV head h / group for query
    // head h, the group repeated on the head axis by the same factor.
    if (qr.group != 1) throw Refusal{"attention: Q's heads are repeated (only K and V may be)"};
    if (kr.group != vr.group)
      throw Refusal{"attention: K and V repeat their heads differently (K " + std::to_string(kr.group) + "x, V " +
                    std::to_string(vr.group) + "x)"};
    for (const auto& [rep, view, what] : {std::tuple{kr, &kv, "K"}, std::tuple{vr, &vv, "V"}})
      if (rep.group != 1 && (r < 3 || rep.axis != static_cast<int64_t>(view->dims.size()) - 3))
        throw Refusal{std::string("attention: ") + what + "'s heads are repeated on axis " + std::to_string(rep.axis) +
                      ", not on the head axis of the scores"};
    k_->kvGroup = kr.group;
    if (batch[1] % k_->kvGroup != 0) throw Refusal{"attention: the KV heads do not divide the query heads"};
    std::swap(kv.dims[kv.dims.size() - 1], kv.dims[kv.dims.size() - 2]);
    std::swap(kv.strides[kv.strides.size() - 1], kv.strides[kv.strides.size() - 2]);
    k_->qScale = scale;
    auto batched = [&](StridedView v, const char* what) {
      auto b = asBatched4d(std::move(v), batch);
      if (!b) throw Refusal{std::string("attention: ") + what + "'s batch dims do not broadcast to the scores'"};
      return *b;
    };
    k_->q = batched(qv, "Q");
    const int64_t kvBatch[2] = {batch[0], batch[1] / k_->kvGroup};
    auto kvBatched = [&](StridedView v, const char* what) {
      auto b = asBatched4d(std::move(v), kvBatch);
      if (!b) throw Refusal{std::string("attention: ") + what + "'s batch dims do not broadcast to the scores'"};
      return *b;
    };
    k_->k = kvBatched(kv, "K");
    k_->v = kvBatched(vv, "V");
    // One KV head broadcast to every query head (multi-query attention):
    // a group of all heads, so that the decode kernel reads it once.
    if (k_->kvGroup == 1 && k_->H > 1 && k_->k.strides[1] == 0 && k_->v.strides[1] == 0) {
      k_->kvGroup = k_->H;
      k_->k.dims[1] = k_->v.dims[1] = 1;
    }
    k_->D = k_->q.dims[3];
    if (k_->k.dims[3] != k_->D || k_->q.dims[2] != k_->Sq || k_->k.dims[2] != k_->Sk ||
        k_->v.dims[2] != k_->Sk || k_->v.dims[3] != k_->Dv)
      throw Refusal{"attention: Q, K and V shapes do not agree with the scores"};
    if (k_->B * k_->H * k_->Sq * k_->Sk * k_->D * k_->Dv == 0) throw Refusal{"attention: an empty tensor"};

    for (NodeId n : f->scores.ops) scoreOp(n, f->scores, dims4);
    outputView(f->second, member, batch);
    if (k_->Sq <= kDecodeMaxQueries) return decodeKernel();
    chooseTileSkipping();
    return std::move(k_);
  }

 private:
  // The output's head merge, read backwards from the group's output: the
  // 4-d view the kernel writes Y through.
  template <class Member>
  void outputView(NodeId secondId, const Member& member, const int64_t batch[2]) {
    std::vector<NodeId> tail = outputChain(g_, secondId, member);
    for (NodeId n : tail) used_.insert(n);
    for (NodeId n : req_.members())
      if (!used_.count(n))
        throw Refusal{"attention: " + label(g_.node(n)) + " is not part of the attention pattern"};
    const ValueId y = tail.empty() ? g_.node(secondId).outputs.at(0) : g_.node(tail.back()).outputs.at(0);
    if (req_.outputs[0] != y)
      throw Refusal{"attention: the group's output must be '" + g_.value(y).name + "', the attention's result"};
    requireFloat(y);
    StridedView ov = contiguous(g_.value(y).type.shape);
    for (auto it = tail.rbegin(); it != tail.rend(); ++it) {
      const Node& node = g_.node(*it);
      const Shape& inShape = g_.value(node.inputs.at(0)).type.shape;
      if (node.op == "Transpose") {
        const std::vector<int64_t> perm = transposePerm(node, static_cast<int64_t>(inShape.size()));
        StridedView in = ov;
        for (size_t i = 0; i < perm.size(); ++i) {
          in.dims[static_cast<size_t>(perm[i])] = ov.dims[i];
          in.strides[static_cast<size_t>(perm[i])] = ov.strides[i];
        }
        ov = in;
      } else {
        auto in = reshapeView(ov, inShape);
        if (!in) throw Refusal{"attention: " + label(node) + " is not a view of the output (it would need a copy)"};
        ov = *in;
      }
    }
    auto o4 = asBatched4d(ov, batch);
    if (!o4) throw Refusal{"attention: the output's batch dims do not match"};
    k_->o = *o4;
    for (int i = 0; i < 2; ++i)
      if (k_->o.strides[i] == 0 && batch[i] > 1) throw Refusal{"attention: the output would be written twice"};
  }

  void requireFloat(ValueId v) {
    if (g_.value(v).type.elementType != ElementType::Float32)
      throw Refusal{"attention: '" + g_.value(v).name + "' is " +
                    std::string(elementTypeName(g_.value(v).type.elementType)) + " (float32 taken)"};
  }

  // The slot of a value read from outside the group (input or constant).
  int slotOf(ValueId v) {
    for (size_t i = 0; i < req_.inputs.size(); ++i)
      if (req_.inputs[i] == v) return static_cast<int>(i);
    const Value& value = g_.value(v);
    if (!value.isConstant())
      throw Refusal{"attention: '" + value.name + "' is neither a kernel input nor a constant"};
    k_->constants.push_back(*value.constant);
    return static_cast<int>(req_.inputs.size() + k_->constants.size() - 1);
  }

  // A few query rows: the same attention on the decode kernel
  // (native_decode_attention.h), the keys split across threads.
  std::unique_ptr<Kernel> decodeKernel() {
    auto d = std::make_unique<DecodeAttentionKernel>();
    d->B = k_->B;
    d->H = k_->H;
    d->kvGroup = k_->kvGroup;
    d->Hkv = k_->H / k_->kvGroup;
    d->Sq = k_->Sq;
    d->L = k_->Sk;
    d->D = k_->D;
    d->Dv = k_->Dv;
    d->qScale = k_->qScale;
    d->qSlot = k_->qSlot;
    d->kSlot = k_->kSlot;
    d->vSlot = k_->vSlot;
    d->q = k_->q;
    d->k = k_->k;
    d->v = k_->v;
    d->o = k_->o;
    d->ops = std::move(k_->ops);
    d->constants = std::move(k_->constants);
    d->numInputs = k_->numInputs;
    d->threads = threads_;
    d->minKeysPerPart = decodeMinKeysFromEnvironment();
    return d;
  }

  // How an operand's heads are repeated: `group` copies of each head
  // (KV head h / group read by query head h), on axis `axis` of its view.
  struct Repeat {
    int64_t group = 1, axis = -1;
  };

  // Q, K or V: the view of its source through the group's views, scales
  // and head repeats. A repeat of the heads (Unsqueeze -> Expand|Tile ->
  // Reshape, as exporters write grouped-query attention) is a broadcast
  // (stride 0) merged into the head axis, which no stride says: `rep`
  // records it and the view keeps the KV heads.
  StridedView operand(ValueId v, NodeId user, bool allowScale, float& scale, int& slot, Repeat& rep) {
    auto member = [&](NodeId n) { return req_.nodes.contains(n); };
    const std::vector<NodeId> chain = operandChain(g_, v, user, allowScale, member);
    const ValueId source = chain.empty() ? v : g_.node(chain.front()).inputs.at(0);
    ValueId src = source;
    if (!chain.empty()) {
      const Node& head = g_.node(chain.front());
      if ((head.op == "Mul") && isScalarConstant(g_.value(head.inputs.at(0)))) src = head.inputs.at(1);
    }
    requireFloat(src);
    slot = slotOf(src);
    StridedView view = contiguous(g_.value(src).type.shape);
    for (NodeId n : chain) {
      const Node& node = g_.node(n);
      used_.insert(n);
      const Shape& outShape = g_.value(node.outputs.at(0)).type.shape;
      if (node.op == "Transpose") {
        const std::vector<int64_t> perm = transposePerm(node, static_cast<int64_t>(view.dims.size()));
        view = transposeView(view, perm);
        if (rep.axis >= 0)
          rep.axis = std::find(perm.begin(), perm.end(), rep.axis) - perm.begin();
      } else if (node.op == "Expand" || node.op == "Tile") {
        view = broadcastView(node, view, outShape);
      } else if (isReshapeLike(node.op)) {
        if (rep.axis >= 0)
          throw Refusal{"attention: " + label(node) + " reshapes the repeated heads (a Transpose may follow, no more)"};
        if (auto out = reshapeView(view, outShape)) {
          view = *out;
        } else if (auto grouped = repeatedHeads(view, outShape, rep)) {
          view = *grouped;
        } else {
          throw Refusal{"attention: " + label(node) + " is not a view of its input (it would need a copy)"};
        }
      } else {
        const bool c1 = isScalarConstant(g_.value(node.inputs.at(1)));
        const float c = scalarOf(g_.value(node.inputs.at(c1 ? 1 : 0)));
        scale = node.op == "Div" ? scale / c : scale * c;
      }
    }
    return view;
  }

  // Expand, or a Tile that repeats only axes of size 1: a broadcast view.
  // A Tile that repeats a longer axis (heads in blocks, KV head h % Hkv) is
  // refused.
  StridedView broadcastView(const Node& node, StridedView view, const Shape& outShape) {
    if (outShape.size() < view.dims.size())
      throw Refusal{"attention: " + label(node) + " lowers the rank"};
    while (view.dims.size() < outShape.size()) {
      view.dims.insert(view.dims.begin(), 1);
      view.strides.insert(view.strides.begin(), 0);
    }
    for (size_t a = 0; a < outShape.size(); ++a) {
      if (view.dims[a] == outShape[a]) continue;
      if (view.dims[a] != 1)
        throw Refusal{"attention: " + label(node) + " repeats axis " + std::to_string(a) + " of size " +
                      std::to_string(view.dims[a]) +
                      " in blocks (only a broadcast of a size-1 axis, as Unsqueeze -> Expand|Tile -> Reshape "
                      "repeats KV heads, is taken)"};
      view.dims[a] = outShape[a];
      view.strides[a] = 0;
    }
    return view;
  }

  // [.., Hkv, r (stride 0), ..] reshaped to [.., Hkv * r, ..]: the heads
  // repeated r times each, query head h reading KV head h / r. The view
  // keeps [.., Hkv, ..]; `rep` says r and the axis.
  static std::optional<StridedView> repeatedHeads(const StridedView& in, const Shape& out, Repeat& rep) {
    if (in.dims.size() != out.size() + 1) return std::nullopt;
    for (size_t a = 0; a + 1 < in.dims.size(); ++a) {
      if (in.strides[a + 1] != 0 || in.dims[a + 1] <= 1 || out[a] != in.dims[a] * in.dims[a + 1]) continue;
      bool same = true;
      for (size_t b = 0; b < out.size(); ++b)
        if (b != a) same = same && out[b] == in.dims[b < a ? b : b + 1];
      if (!same) continue;
      StridedView v = in;
      v.dims.erase(v.dims.begin() + static_cast<int64_t>(a) + 1);
      v.strides.erase(v.strides.begin() + static_cast<int64_t>(a) + 1);
      rep.group = in.dims[a + 1];
      rep.axis = static_cast<int64_t>(a);
      return v;
    }
    return std::nullopt;
  }

  void scoreOp(NodeId n, const ScoreChain& chain, const std::vector<int64_t>& dims4) {
    const Node& node = g_.node(n);
    used_.insert(n);
    // The operand that carries the scores: the previous node's output.
    const size_t idx = static_cast<size_t>(std::find(chain.ops.begin(), chain.ops.end(), n) - chain.ops.begin());
    const NodeId prev = idx == 0 ? chain.first : chain.ops[idx - 1];
    const ValueId scores = g_.node(prev).outputs.at(0);
    if (g_.value(node.outputs.at(0)).type.shape != g_.value(scores).type.shape)
      throw Refusal{"attention: " + label(node) + " broadcasts the scores to another shape"};
    ScoreOp op;
    if (node.op == "Mul" || node.op == "Div") {
      const ValueId other = node.inputs[0] == scores ? node.inputs[1] : node.inputs[0];
      if (!isScalarConstant(g_.value(other)))
        throw Refusal{"attention: " + label(node) + " scales the scores by a tensor (a scalar constant is taken)"};
      op.kind = ScoreOp::Scale;
      op.scale = node.op == "Div" ? 1.0f / scalarOf(g_.value(other)) : scalarOf(g_.value(other));
    } else if (node.op == "Add") {
      const ValueId other = node.inputs[0] == scores ? node.inputs[1] : node.inputs[0];
      requireFloat(other);
      op.kind = ScoreOp::Add;
      maskOperand(other, dims4, op.view, op.slot);
    } else {  // Where
      const ValueId cond = node.inputs.at(0);
      op.scoresWhereTrue = node.inputs.at(1) == scores;
      const ValueId fill = op.scoresWhereTrue ? node.inputs.at(2) : node.inputs.at(1);
      if (g_.value(cond).type.elementType != ElementType::Bool)
        throw Refusal{"attention: the condition of " + label(node) + " is not bool"};
      requireFloat(fill);
      op.kind = ScoreOp::Select;
      maskOperand(cond, dims4, op.view, op.slot);
      maskOperand(fill, dims4, op.fillView, op.fillSlot);
    }
    k_->ops.push_back(std::move(op));
  }

  // A mask operand's view. A constant read across queries with a stride
  // (a [Sq, Sk] causal buffer, a [1, H, Sq, Sk] bias) is copied once, here,
  // to [b][h][key][query], so that the kernel reads it along queries, as it
  // keeps the scores.
  void maskOperand(ValueId m, const std::vector<int64_t>& dims4, StridedView& view, int& slot) {
    auto v = broadcastTo(contiguous(g_.value(m).type.shape), dims4);
    if (!v) throw Refusal{"attention: '" + g_.value(m).name + "' does not broadcast to the scores"};
    view = *v;
    const Value& value = g_.value(m);
    if (!value.isConstant() || view.strides[2] == 0 || view.strides[2] == 1) {
      slot = slotOf(m);
      return;
    }
    const int64_t nb = view.strides[0] ? view.dims[0] : 1, nh = view.strides[1] ? view.dims[1] : 1;
    const int64_t sq = view.dims[2], sk = view.dims[3];
    Tensor t(value.type.elementType, {nb, nh, sk, sq});
    auto copy = [&](auto tag) {
      using T = decltype(tag);
      const T* src = value.constant->data<T>();
      T* dst = t.data<T>();
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t h = 0; h < nh; ++h)
          for (int64_t j = 0; j < sk; ++j)
            for (int64_t i = 0; i < sq; ++i)
              dst[((b * nh + h) * sk + j) * sq + i] =
                  src[b * view.strides[0] + h * view.strides[1] + i * view.strides[2] + j * view.strides[3]];
    };
    if (value.type.elementType == ElementType::Bool) copy(bool{});
    else copy(float{});
    k_->constants.push_back(std::move(t));
    slot = static_cast<int>(req_.inputs.size() + k_->constants.size() - 1);
    view.strides = {nb > 1 ? nh * sk * sq : 0, nh > 1 ? sk * sq : 0, 1, sq};
  }

  // Causal attention skips key blocks: when a score op's operand varies
  // along the queries (a causal mask, constant or made at run time; a
  // [B,1,1,Sk] padding mask does not), the kernel looks for tiles the masks
  // hide from every row (tileHidden) and skips them, in smaller key blocks,
  // which skip more.
  void chooseTileSkipping() {
    for (const ScoreOp& op : k_->ops)
      if (op.kind != ScoreOp::Scale && (op.view.strides[2] != 0 || (op.kind == ScoreOp::Select && op.fillView.strides[2] != 0)))
        k_->skipHiddenTiles = true;
    if (k_->skipHiddenTiles) k_->keyBlock = kSkippingKeyBlock;
  }

  const KernelRequest& req_;
  const Graph& g_;
  int threads_;
  std::unique_ptr<AttentionKernel> k_;
  std::set<NodeId> used_;
};

}  // namespace

bool isAttentionGroup(const Graph& graph, const NodeSet& nodes) {
  bool found = false;
  nodes.forEach([&](NodeId n) {
    if (found || graph.node(n).op != "Softmax") return;
    const Node& s = graph.node(n);
    const NodeId p = graph.value(s.inputs.at(0)).producer;
    const bool fedByGroup = p != kNoNode && nodes.contains(p);
    bool readByMatMul = false;
    for (NodeId c : graph.value(s.outputs.at(0)).consumers)
      readByMatMul = readByMatMul || (nodes.contains(c) && graph.node(c).op == "MatMul");
    int matmuls = 0;
    nodes.forEach([&](NodeId m) { matmuls += graph.node(m).op == "MatMul"; });
    found = fedByGroup && readByMatMul && matmuls >= 2;
  });
  return found;
}

CompileResult compileAttention(const KernelRequest& request, int threads) {
  try {
    AttentionCompiler compiler(request, threads);
    return CompileResult::ok(compiler.compile());
  } catch (const Refusal& r) {
    return CompileResult::refuse(r.reason);
  } catch (const Error& e) {
    return CompileResult::refuse(std::string("attention: ") + e.what());
  }
}

std::vector<std::pair<NodeSet, std::string>> attentionGroups(const Graph& graph) {
  std::vector<std::pair<NodeSet, std::string>> out;
  auto any = [](NodeId) { return true; };
  for (NodeId s = 0; s < graph.numNodes(); ++s) {
    if (graph.node(s).op != "Softmax" || !softmaxOverLastAxis(graph, s)) continue;
    const std::optional<Found> f = findAround(graph, s, any);
    if (!f) continue;
    NodeSet core(graph.numNodes());
    core.insert(f->scores.first);
    for (NodeId n : f->scores.ops) core.insert(n);
    core.insert(s);
    core.insert(f->second);
    // A few query rows against the keys: the decode kernel's.
    const Shape& scores = graph.value(graph.node(f->scores.first).outputs.at(0)).type.shape;
    const bool decode = scores.size() >= 2 && scores[scores.size() - 2] <= kDecodeMaxQueries;
    const std::string name = decode ? "decode_attention" : "attention";
    out.emplace_back(core, name);
    NodeSet views = core;
    const Node& first = graph.node(f->scores.first);
    for (NodeId n : operandChain(graph, first.inputs.at(0), f->scores.first, true, any)) views.insert(n);
    for (NodeId n : operandChain(graph, first.inputs.at(1), f->scores.first, true, any)) views.insert(n);
    for (NodeId n : operandChain(graph, graph.node(f->second).inputs.at(1), f->second, false, any))
      views.insert(n);
    for (NodeId n : outputChain(graph, f->second, any)) views.insert(n);
    if (!(views == core)) out.emplace_back(views, name + "_views");
  }
  return out;
}

std::string describeAttentionKernel(const Kernel& kernel) {
  if (const auto* d = dynamic_cast<const DecodeAttentionKernel*>(&kernel)) return d->describe();
  const auto* k = dynamic_cast<const AttentionKernel*>(&kernel);
  if (!k) return {};
  std::ostringstream s;
  s << "attention B=" << k->B << " H=" << k->H << " Sq=" << k->Sq << " Sk=" << k->Sk << " D=" << k->D
    << " Dv=" << k->Dv << ", scale on Q " << k->qScale << ", " << k->ops.size() << " score op(s), q "
    << k->q.toString() << " k " << k->k.toString() << " v " << k->v.toString() << " o " << k->o.toString()
    << (k->innerProduct == InnerProduct::OpenBlas ? ", openblas" : ", microkernel") << ", key block "
    << k->keyBlock;
  if (k->skipHiddenTiles)
    s << ", hidden tiles skipped (" << k->tilesSkipped.load() << " of " << k->tilesRun.load() << " in the last run)";
  return s.str();
}

}  // namespace collage::native
