// The decode attention kernel (native_decode_attention.h): the keys split
// into parts across threads, an online softmax per part, the parts merged
// by log-sum-exp.
#include "backends/native/native_decode_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "backends/native/native_math.h"
#include "core/ir/error.h"

namespace collage::native {

namespace {

// Copies `rows` rows of `cols` floats, strided by (`ld`, `colStride`), into
// `packed` as contiguous rows, and points `data`/`ld` at the copy: a cache
// stored with its head dimension strided is read along rows like any other.
void packRows(const float*& data, int64_t& ld, int64_t colStride, int64_t rows, int64_t cols,
              std::vector<float>& packed) {
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t d = 0; d < cols; ++d)
      packed[static_cast<size_t>(j * cols + d)] = data[j * ld + d * colStride];
  data = packed.data();
  ld = cols;
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Keys per block within a part: the block's scores (rows x 64 floats) stay
// in L1 between the products, the softmax update and the V accumulation.
constexpr int64_t kKeyBlock = 64;
// Multiply-adds below which one unsplit head group per task runs on one
// thread: the threads' start and barrier cost more (the fused passes'
// threshold, native_pass.cc). A split cache always runs in parallel.
constexpr int64_t kParallelMinWork = int64_t{1} << 15;
// Key skipping (DecodeAttentionKernel::visibleKeys): raw scores Q.Kᵀ are
// taken to be within +-kRawScoreBound (a softmax over larger scores is
// already meaningless in float32); a key whose score the ops bring to
// kHiddenBelow or lower is hidden (the masks' float minimum, -inf); a row
// with a key whose score stays above kShownAbove has its max there, so a
// hidden key's exp(s - max) is below any float: skipping it changes nothing.
constexpr double kRawScoreBound = 1e20;
constexpr double kHiddenBelow = -1e30;
constexpr double kShownAbove = -1e29;

// The keys in both lists of ranges [first, end) (each sorted, disjoint).
std::vector<std::pair<int64_t, int64_t>> intersectRuns(
    const std::vector<std::pair<int64_t, int64_t>>& a,
    const std::vector<std::pair<int64_t, int64_t>>& b) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& x : a)
    for (const auto& y : b) {
      const int64_t lo = std::max(x.first, y.first), hi = std::min(x.second, y.second);
      if (lo < hi) out.emplace_back(lo, hi);
    }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int64_t decodeMinKeysFromEnvironment() {
  const char* e = std::getenv("COLLAGE_NATIVE_DECODE_MIN_KEYS");
  if (!e) return kDecodeMinKeysPerPart;
  const long long n = std::atoll(e);
  return n >= 1 ? n : kDecodeMinKeysPerPart;
}

void AttentionPartials::resize(int64_t p, int64_t r, int64_t d) {
  parts = p;
  rows = r;
  dv = d;
  max.assign(static_cast<size_t>(p * r), kNegInf);
  sum.assign(static_cast<size_t>(p * r), 0.0f);
  acc.assign(static_cast<size_t>(p * r * d), 0.0f);
}

void mergeAttentionPartials(const AttentionPartials& p, int64_t first, int64_t count, int64_t row,
                            float* out, int64_t colStride) {
  float m = kNegInf;
  for (int64_t q = first; q < first + count; ++q) m = std::max(m, p.maxAt(q, row));
  float l = 0.0f;
  for (int64_t q = first; q < first + count; ++q)
    if (p.maxAt(q, row) != kNegInf) l += p.sumAt(q, row) * std::exp(p.maxAt(q, row) - m);
  // Every score -inf: 0 / 0, as the reference's softmax.
  const float inv = l > 0.0f ? 1.0f / l : std::numeric_limits<float>::quiet_NaN();
  for (int64_t d = 0; d < p.dv; ++d) out[d * colStride] = 0.0f;
  for (int64_t q = first; q < first + count; ++q) {
    if (p.maxAt(q, row) == kNegInf) continue;
    const float w = std::exp(p.maxAt(q, row) - m) * inv;
    const float* a = p.accAt(q, row);
    for (int64_t d = 0; d < p.dv; ++d) out[d * colStride] += a[d] * w;
  }
  if (!(l > 0.0f))
    for (int64_t d = 0; d < p.dv; ++d) out[d * colStride] = inv;
}

void combineAttentionPartials(const AttentionPartials& p, int64_t first, int64_t count, int64_t row,
                              AttentionPartials& to, int64_t toPart, int64_t toRow) {
  float m = kNegInf;
  for (int64_t q = first; q < first + count; ++q) m = std::max(m, p.maxAt(q, row));
  float l = 0.0f;
  float* acc = to.accAt(toPart, toRow);
  for (int64_t d = 0; d < p.dv; ++d) acc[d] = 0.0f;
  for (int64_t q = first; q < first + count; ++q) {
    if (p.maxAt(q, row) == kNegInf) continue;
    const float w = std::exp(p.maxAt(q, row) - m);
    l += p.sumAt(q, row) * w;
    const float* a = p.accAt(q, row);
    for (int64_t d = 0; d < p.dv; ++d) acc[d] += a[d] * w;
  }
  to.maxAt(toPart, toRow) = m;
  to.sumAt(toPart, toRow) = l;
}

int64_t DecodeAttentionKernel::kvHeadsRun() const {
  return shard && shard->kvHeadEnd >= 0 ? shard->kvHeadEnd - shard->kvHeadFirst : Hkv;
}

int64_t DecodeAttentionKernel::parts() const {
  const int64_t groups = B * std::max<int64_t>(1, kvHeadsRun());
  const int64_t nt = std::max(1, threads);
  const int64_t wanted = (nt + groups - 1) / groups;
  const int64_t most = std::max<int64_t>(1, L / std::max<int64_t>(1, minKeysPerPart));
  return std::max<int64_t>(1, std::min(wanted, most));
}

DecodeAttentionKernel::Scratch& DecodeAttentionKernel::scratch(int thread) {
  return scratch_[static_cast<size_t>(thread)];
}

void DecodeAttentionKernel::run(const std::vector<const DLTensor*>& inputs,
                                const std::vector<DLTensor*>& outputs) {
  std::vector<const void*> slots(numInputs + constants.size());
  for (size_t i = 0; i < numInputs; ++i)
    slots[i] = static_cast<const char*>(inputs.at(i)->data) + inputs[i]->byte_offset;
  for (size_t i = 0; i < constants.size(); ++i) slots[numInputs + i] = constants[i].raw();
  float* out =
      reinterpret_cast<float*>(static_cast<char*>(outputs.at(0)->data) + outputs[0]->byte_offset);
  const float* Q = static_cast<const float*>(slots[static_cast<size_t>(qSlot)]);
  const float* K = static_cast<const float*>(slots[static_cast<size_t>(kSlot)]);
  const float* V = static_cast<const float*>(slots[static_cast<size_t>(vSlot)]);

  const int nt = std::max(1, threads);
  const int64_t P = parts();
  const int64_t R = kvGroup * Sq;  // rows of one KV head: its query heads x queries
  // Tensor parallel: only the shard's KV heads [g0, g0 + hn) (and their
  // query heads); group grp is batch grp / hn, KV head g0 + grp % hn.
  const int64_t hn = kvHeadsRun(), g0 = shard ? shard->kvHeadFirst : 0;
  const int64_t groups = B * hn;
  const int64_t tasks = groups * P;
  const bool packK = k.strides[3] != 1, packV = v.strides[3] != 1;
  if (scratch_.size() < static_cast<size_t>(nt)) scratch_.resize(static_cast<size_t>(nt));
  for (Scratch& w : scratch_) {
    w.qr.resize(static_cast<size_t>(R * D));
    w.s.resize(static_cast<size_t>(R * kKeyBlock));
    if (packK) w.kp.resize(static_cast<size_t>(kKeyBlock * D));
    if (packV) w.vp.resize(static_cast<size_t>(kKeyBlock * Dv));
  }
  partials_.resize(tasks, R, Dv);  // indexed [group * P + part][row]
  visible_.resize(static_cast<size_t>(groups));

  const int64_t work = B * H * Sq * L * (D + Dv);
  const bool parallel = nt > 1 && tasks > 1 && (P > 1 || work >= kParallelMinWork);
#pragma omp parallel num_threads(nt) if (parallel)
  {
    Scratch& w = scratch(omp_get_thread_num());
    // Per group, the keys some row can see (the rest are skipped unread).
#pragma omp for schedule(static)
    for (int64_t grp = 0; grp < groups; ++grp) {
      std::vector<std::pair<int64_t, int64_t>>& runs = visible_[static_cast<size_t>(grp)];
      visibleKeys(slots, grp / hn, g0 + grp % hn, runs);
      if (shard) runs = intersectRuns(runs, shard->keys);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t grp = t / P, part = t % P, b = grp / hn, g = g0 + grp % hn;
      // The part's share of the group's visible keys, as key ranges.
      const std::vector<std::pair<int64_t, int64_t>>& runs = visible_[static_cast<size_t>(grp)];
      int64_t n = 0;
      for (const auto& run : runs) n += run.second - run.first;
      const int64_t o0 = part * n / P, o1 = (part + 1) * n / P;
      // The group's query rows, scaled, contiguous: row r is query r % Sq
      // of head g * kvGroup + r / Sq.
      for (int64_t r = 0; r < R; ++r) {
        const int64_t h = g * kvGroup + r / Sq, i = r % Sq;
        const float* qrow = Q + b * q.strides[0] + h * q.strides[1] + i * q.strides[2];
        for (int64_t d = 0; d < D; ++d)
          w.qr[static_cast<size_t>(r * D + d)] = qrow[d * q.strides[3]] * qScale;
      }
      float* rowMax = &partials_.maxAt(t, 0);
      float* rowSum = &partials_.sumAt(t, 0);
      float* acc = partials_.accAt(t, 0);
      const float* kg = K + b * k.strides[0] + g * k.strides[1];
      const float* vg = V + b * v.strides[0] + g * v.strides[1];
      int64_t ordinal = 0;  // visible keys before the current run
      for (const auto& run : runs) {
        const int64_t j0 = run.first + std::max<int64_t>(0, o0 - ordinal);
        const int64_t j1 = run.first + std::min(run.second - run.first, o1 - ordinal);
        ordinal += run.second - run.first;
        for (int64_t jb = j0; jb < j1; jb += kKeyBlock) {
          const int64_t nk = std::min(kKeyBlock, j1 - jb);
          // K rows of the block, contiguous along D.
          const float* kb = kg + jb * k.strides[2];
          int64_t ldk = k.strides[2];
          if (packK) packRows(kb, ldk, k.strides[3], nk, D, w.kp);
          // S [R][nk] = Q rows . K rows: each K row read once for every row of the group.
          float* s = w.s.data();
          for (int64_t j = 0; j < nk; ++j) {
            const float* krow = kb + j * ldk;
            for (int64_t r = 0; r < R; ++r) {
              const float* qr = w.qr.data() + r * D;
              float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
              for (int64_t d = 0; d < D; ++d) dot += qr[d] * krow[d];
              s[r * kKeyBlock + j] = dot;
            }
          }
          applyScoreOps(slots, s, kKeyBlock, b, g, jb, nk);
          // Online softmax: new max, old terms rescaled, exp(s - max) in place.
          for (int64_t r = 0; r < R; ++r) {
            float* sr = s + r * kKeyBlock;
            float m = rowMax[r];
            for (int64_t j = 0; j < nk; ++j) m = sr[j] > m ? sr[j] : m;
            const float alpha = rowMax[r] == kNegInf ? 0.0f : fastExp(rowMax[r] - m);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < nk; ++j) {
              const float e = m == kNegInf ? 0.0f : fastExp(sr[j] - m);
              sr[j] = e;
              sum += e;
            }
            rowSum[r] = rowSum[r] * alpha + sum;
            rowMax[r] = m;
            if (alpha != 1.0f) {
              float* a = acc + r * Dv;
              for (int64_t d = 0; d < Dv; ++d) a[d] *= alpha;
            }
          }
          // acc [R][Dv] += P [R][nk] . V rows: each V row read once for every row.
          const float* vb = vg + jb * v.strides[2];
          int64_t ldv = v.strides[2];
          if (packV) packRows(vb, ldv, v.strides[3], nk, Dv, w.vp);
          for (int64_t j = 0; j < nk; ++j) {
            const float* vrow = vb + j * ldv;
            for (int64_t r = 0; r < R; ++r) {
              const float e = s[r * kKeyBlock + j];
              float* a = acc + r * Dv;
#pragma omp simd
              for (int64_t d = 0; d < Dv; ++d) a[d] += e * vrow[d];
            }
          }
        }
      }
    }
    // The merge: every (group, row) from its P parts, into the output.
    if (!shard || !shard->exchange) {
#pragma omp for schedule(static)
      for (int64_t x = 0; x < groups * R; ++x) {
        const int64_t grp = x / R, r = x % R, b = grp / hn, g = g0 + grp % hn;
        const int64_t h = g * kvGroup + r / Sq, i = r % Sq;
        float* orow = out + b * o.strides[0] + h * o.strides[1] + i * o.strides[2];
        mergeAttentionPartials(partials_, grp * P, P, r, orow, o.strides[3]);
      }
    }
  }
  if (shard && hn < Hkv) {
    // Tensor parallel: the heads another device computes are NaN here, so
    // that a split that let this device read them would show.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        if (h >= g0 * kvGroup && h < (g0 + hn) * kvGroup) continue;
        for (int64_t i = 0; i < Sq; ++i)
          for (int64_t d = 0; d < Dv; ++d)
            out[b * o.strides[0] + h * o.strides[1] + i * o.strides[2] + d * o.strides[3]] = nan;
      }
  }
  if (!shard || !shard->exchange) return;
  // Cache parallel: this device's parts as one per (group, row), every
  // device's from the exchange (on this thread: MPI is funneled), then the
  // same merge, in device order, on every device.
  mine_.resize(1, groups * R, Dv);
  for (int64_t x = 0; x < groups * R; ++x)
    combineAttentionPartials(partials_, (x / R) * P, P, x % R, mine_, 0, x);
  shard->exchange(mine_, all_);
  if (all_.rows != groups * R || all_.dv != Dv || all_.parts < 1)
    throw Error("decode attention: the exchange returned " + std::to_string(all_.rows) +
                " row(s) of " + std::to_string(all_.dv) + " column(s), expected " +
                std::to_string(groups * R) + " of " + std::to_string(Dv));
  for (int64_t x = 0; x < groups * R; ++x) {
    const int64_t grp = x / R, r = x % R, b = grp / hn, g = g0 + grp % hn;
    const int64_t h = g * kvGroup + r / Sq, i = r % Sq;
    float* orow = out + b * o.strides[0] + h * o.strides[1] + i * o.strides[2];
    mergeAttentionPartials(all_, 0, all_.parts, x, orow, o.strides[3]);
  }
}

// The keys of group (b, KV head g) that some row of it can see, as ranges
// [first, end): a key is skipped, its K and V rows never read, when the
// score ops hide it from every row (bounds through the ops: its score at
// kHiddenBelow or lower whatever Q.Kᵀ is) and every row has a key the ops
// keep above kShownAbove (so its max is there and a hidden key's term
// exp(s - max) is 0). In a decode step on a cache preallocated to capacity,
// the padding mask hides the unfilled rows: the step reads the filled rows
// and the new token's, not the capacity. Without masks, or when some row
// sees nothing, every key.
void DecodeAttentionKernel::visibleKeys(const std::vector<const void*>& slots, int64_t b, int64_t g,
                                        std::vector<std::pair<int64_t, int64_t>>& runs) const {
  runs.assign(1, {0, L});
  const bool masked = std::any_of(ops.begin(), ops.end(),
                                  [](const ScoreOp& op) { return op.kind != ScoreOp::Scale; });
  if (!masked || L == 0) return;
  const int64_t R = kvGroup * Sq;
  std::vector<char> skip(static_cast<size_t>(L), 1);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t h = g * kvGroup + r / Sq, i = r % Sq;
    bool shown = false;
    for (int64_t j = 0; j < L; ++j) {
      double lo = -kRawScoreBound, hi = kRawScoreBound;
      for (const ScoreOp& op : ops) {
        if (op.kind == ScoreOp::Scale) {
          const double a = lo * op.scale, c = hi * op.scale;
          lo = std::min(a, c);
          hi = std::max(a, c);
          continue;
        }
        const StridedView& w = op.view;
        const int64_t at =
            b * w.strides[0] + h * w.strides[1] + i * w.strides[2] + j * w.strides[3];
        if (op.kind == ScoreOp::Add) {
          const double a = static_cast<const float*>(slots[static_cast<size_t>(op.slot)])[at];
          lo += a;
          hi += a;
          continue;
        }
        const bool c = static_cast<const bool*>(slots[static_cast<size_t>(op.slot)])[at];
        if (c != op.scoresWhereTrue) {
          const StridedView& fw = op.fillView;
          lo = hi = static_cast<const float*>(
              slots[static_cast<size_t>(op.fillSlot)])[b * fw.strides[0] + h * fw.strides[1] +
                                                       i * fw.strides[2] + j * fw.strides[3]];
        }
      }
      // NaN bounds (an inf minus an inf) neither hide nor show.
      if (!(hi <= kHiddenBelow)) skip[static_cast<size_t>(j)] = 0;
      if (lo > kShownAbove) shown = true;
    }
    if (!shown) return;  // this row's max may be among the hidden keys
  }
  runs.clear();
  for (int64_t j = 0; j < L;) {
    if (skip[static_cast<size_t>(j)]) {
      ++j;
      continue;
    }
    int64_t e = j;
    while (e < L && !skip[static_cast<size_t>(e)]) ++e;
    runs.emplace_back(j, e);
    j = e;
  }
}

// The score ops on S [R][nk] (row r: head g * kvGroup + r / Sq, query r % Sq;
// keys jb..jb+nk), in the graph's order, through each operand's view
// broadcast to the scores [b, h, query, key].
void DecodeAttentionKernel::applyScoreOps(const std::vector<const void*>& slots, float* s,
                                          int64_t ld, int64_t b, int64_t g, int64_t jb,
                                          int64_t nk) const {
  const int64_t R = kvGroup * Sq;
  for (const ScoreOp& op : ops) {
    for (int64_t r = 0; r < R; ++r) {
      float* sr = s + r * ld;
      const int64_t h = g * kvGroup + r / Sq, i = r % Sq;
      if (op.kind == ScoreOp::Scale) {
#pragma omp simd
        for (int64_t j = 0; j < nk; ++j) sr[j] *= op.scale;
        continue;
      }
      const StridedView& w = op.view;
      const int64_t base =
          b * w.strides[0] + h * w.strides[1] + i * w.strides[2] + jb * w.strides[3];
      const int64_t sj = w.strides[3];
      if (op.kind == ScoreOp::Add) {
        const float* m = static_cast<const float*>(slots[static_cast<size_t>(op.slot)]) + base;
        if (sj == 1) {
#pragma omp simd
          for (int64_t j = 0; j < nk; ++j) sr[j] += m[j];
        } else {
          for (int64_t j = 0; j < nk; ++j) sr[j] += m[j * sj];
        }
        continue;
      }
      const bool* c = static_cast<const bool*>(slots[static_cast<size_t>(op.slot)]) + base;
      const StridedView& fw = op.fillView;
      const float* f = static_cast<const float*>(slots[static_cast<size_t>(op.fillSlot)]) +
                       b * fw.strides[0] + h * fw.strides[1] + i * fw.strides[2] +
                       jb * fw.strides[3];
      for (int64_t j = 0; j < nk; ++j)
        if (c[j * sj] != op.scoresWhereTrue) sr[j] = f[j * fw.strides[3]];
    }
  }
}

std::string DecodeAttentionKernel::describe() const {
  std::ostringstream s;
  s << "decode attention B=" << B << " H=" << H << " Hkv=" << Hkv << " Sq=" << Sq << " L=" << L
    << " D=" << D << " Dv=" << Dv << ", " << parts() << " part(s) of >= " << minKeysPerPart
    << " keys on " << threads << " thread(s), scale on Q " << qScale << ", " << ops.size()
    << " score op(s), q " << q.toString() << " k " << k.toString() << " v " << v.toString() << " o "
    << o.toString();
  return s.str();
}

}  // namespace collage::native
