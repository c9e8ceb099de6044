// The decode attention kernel (native_decode_attention.h): the keys split
// into parts across threads, an online softmax per part, the parts merged
// by log-sum-exp.
#include "backends/native/native_decode_attention.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "backends/native/native_fma_tile.h"
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
// K and V rows are prefetched this many keys ahead of the products that
// read them: the cache streams from memory, and the hardware prefetcher
// alone left the kernel at 15-16 GB/s where a plain read reaches 22 (its
// streams restart at every 4 KiB page, 16 keys of a 64-wide head).
// bench_decode_split --ring-mb 1024, LLaMA-style shape, 32k keys, 2
// threads, interleaved: none 15.6-16.3 GB/s, 4 keys 17.4-18.3, 8 keys
// 17.5-19.1, 12 keys 17.2-18.5, 16 keys 16.2-16.7.
constexpr int64_t kPrefetchKeys = 8;
// Multiply-adds below which one unsplit head group per task runs on one
// thread: the threads' start and barrier cost more (the fused passes'
// threshold, native_pass.cc). A split cache always runs in parallel.
constexpr int64_t kParallelMinWork = int64_t{1} << 15;
// Key skipping (DecodeAttentionKernel::visibleKeys) bounds scores through
// the score ops (kRawScoreBound, kHiddenBelow, kShownAbove: the header).

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

// GCC 12 warns that the shuffles' own _mm512_undefined_ps may be used
// uninitialised where they are inlined (its header's idiom, a false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#if defined(__AVX512F__)
// The lane each of 16 dot products lands in after reduce16 puts slot p's
// sum in lane kReduceLane[p]; the permutation is its own inverse, so key j's
// vector goes to slot kReduceLane[j] and its sum comes out in lane j.
constexpr int kReduceLane[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

// Sixteen vectors to one: lane kReduceLane[p] is the sum of t[p]'s lanes. A
// transposing tree (halves, quarters, pairs, singles), 45 operations for 16
// dot products where one horizontal sum each would take about 8.
__attribute__((always_inline)) inline __m512 reduce16(const __m512 t[16]) {
  __m512 u[8], w[4], x[2];
  // u[i]: t[i]'s 8-float halves summed in the low half, t[i + 8]'s in the high.
  for (int i = 0; i < 8; ++i)
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[i], t[i + 8], 0x44),
                         _mm512_shuffle_f32x4(t[i], t[i + 8], 0xEE));
  // w[i], 128-bit block k: 4 floats summing to t[i], t[i + 8], t[i + 4], t[i + 12].
  for (int i = 0; i < 4; ++i)
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[i], u[i + 4], 0x88),
                         _mm512_shuffle_f32x4(u[i], u[i + 4], 0xDD));
  // x[i], per block: 2 floats for w[i]'s block, 2 for w[i + 2]'s.
  for (int i = 0; i < 2; ++i)
    x[i] = _mm512_add_ps(_mm512_shuffle_ps(w[i], w[i + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(w[i], w[i + 2], _MM_SHUFFLE(3, 2, 3, 2)));
  // Per block k: w[0], w[2], w[1], w[3]'s block k sums.
  return _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// One query row against up to 16 keys: s[j] = q . K row j, j < n; NC
// vectors of 16 along D (NC = 0: nc of them, a run-time count), the last
// masked by `tail`.
template <int NC>
__attribute__((always_inline)) inline void scoreSixteen(const float* q, const float* kb,
                                                        int64_t ldk, int64_t n, int64_t ncRun,
                                                        __mmask16 tail, float* s) {
  const int64_t nc = NC > 0 ? NC : ncRun;
  __m512 t[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    __m512 a = _mm512_setzero_ps();
    if (j < n) {
      const float* k = kb + j * ldk;
#pragma GCC unroll 8
      for (int64_t c = 0; c + 1 < nc; ++c)
        a = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), _mm512_loadu_ps(k + 16 * c), a);
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q + 16 * (nc - 1)),
                          _mm512_maskz_loadu_ps(tail, k + 16 * (nc - 1)), a);
    }
    t[kReduceLane[j]] = a;
  }
  _mm512_mask_storeu_ps(s, static_cast<__mmask16>((1u << n) - 1), reduce16(t));
}

// The same for 16 keys and D = 16 x NC, the query row's vectors in
// registers: no masks and no per-key branches, so the 16 accumulators, the
// query and the tree stay in registers (the general form spilled: 12 %
// slower on a cache in L2). With pf > 0, each K row pf keys ahead is
// prefetched (kPrefetchKeys).
template <int NC>
__attribute__((always_inline)) inline void scoreSixteenFull(const __m512 (&qv)[NC], const float* kb,
                                                            int64_t ldk, float* s, int64_t pf) {
  __m512 t[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    const float* k = kb + j * ldk;
    if (pf > 0)
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(k + pf * ldk + 16 * c), _MM_HINT_T0);
    __m512 a = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
#pragma GCC unroll 8
    for (int c = 1; c < NC; ++c) a = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(k + 16 * c), a);
    t[kReduceLane[j]] = a;
  }
  _mm512_storeu_ps(s, reduce16(t));
}

// S [R][nk] = the query rows . the block's K rows; the rows of the first
// query row's pass prefetch K pf keys ahead (the others read the block from
// L1). Widths not a multiple of 16 take the masked form, unprefetched.
template <int NC>
void scoreRows(const float* qr, int64_t R, int64_t D, const float* kb, int64_t ldk, int64_t nk,
               float* s, int64_t lds, int64_t pf) {
  const int64_t nc = (D + 15) / 16;
  const __mmask16 tail =
      D % 16 ? static_cast<__mmask16>((1u << (D % 16)) - 1) : static_cast<__mmask16>(0xFFFF);
  constexpr int kFull = NC > 0 ? NC : 1;
  if (NC > 0 && D == 16 * NC) {
    for (int64_t r = 0; r < R; ++r) {
      __m512 qv[kFull];
      for (int c = 0; c < kFull; ++c) qv[c] = _mm512_loadu_ps(qr + r * D + 16 * c);
      int64_t j0 = 0;
      for (; j0 + 16 <= nk; j0 += 16)
        scoreSixteenFull<kFull>(qv, kb + j0 * ldk, ldk, s + r * lds + j0, r == 0 ? pf : 0);
      if (j0 < nk)
        scoreSixteen<NC>(qr + r * D, kb + j0 * ldk, ldk, nk - j0, nc, tail, s + r * lds + j0);
    }
    return;
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j0 = 0; j0 < nk; j0 += 16)
      scoreSixteen<NC>(qr + r * D, kb + j0 * ldk, ldk, std::min<int64_t>(16, nk - j0), nc, tail,
                       s + r * lds + j0);
}

// acc[RT rows][Dv] += P[RT rows][nk] . V[nk][Dv] (native_fma_tile.h): the
// accumulators stay in registers over the block's keys, each V row loaded
// once for the RT rows.
template <int RT>
void accumulateRows(const float* p, int64_t ldp, const float* vb, int64_t ldv, int64_t nk,
                    float* acc, int64_t Dv, int64_t pf) {
  fmaRows<RT>(0, nk, Dv, p, ldp, vb, ldv, acc, Dv, true, pf);
}
#endif

// S [R][nk] (row stride lds) = the R query rows qr [R][D] . the block's K
// rows (kb, row stride ldk, contiguous along D): each K row read once for
// all the rows of the group (from L1 after the first).
void scoreBlock(const float* qr, int64_t R, int64_t D, const float* kb, int64_t ldk, int64_t nk,
                float* s, int64_t lds, int64_t pf) {
#if defined(__AVX512F__)
  if (D == 0) {
    for (int64_t r = 0; r < R; ++r) std::fill(s + r * lds, s + r * lds + nk, 0.0f);
    return;
  }
  switch ((D + 15) / 16) {
    case 1:
      scoreRows<1>(qr, R, D, kb, ldk, nk, s, lds, pf);
      return;
    case 2:
      scoreRows<2>(qr, R, D, kb, ldk, nk, s, lds, pf);
      return;
    case 3:
      scoreRows<3>(qr, R, D, kb, ldk, nk, s, lds, pf);
      return;
    case 4:
      scoreRows<4>(qr, R, D, kb, ldk, nk, s, lds, pf);
      return;
    case 8:
      scoreRows<8>(qr, R, D, kb, ldk, nk, s, lds, pf);
      return;
    default:
      scoreRows<0>(qr, R, D, kb, ldk, nk, s, lds, pf);
      return;
  }
#else
  for (int64_t j = 0; j < nk; ++j) {
    const float* krow = kb + j * ldk;
    for (int64_t r = 0; r < R; ++r) {
      const float* q = qr + r * D;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < D; ++d) dot += q[d] * krow[d];
      s[r * lds + j] = dot;
    }
  }
#endif
}

// acc [R][Dv] += P [R][nk] (row stride ldp) . the block's V rows (vb, row
// stride ldv, contiguous along Dv): each V row read once for all the rows;
// the first rows' pass prefetches V pf keys ahead.
void accumulateBlock(const float* p, int64_t ldp, int64_t R, const float* vb, int64_t ldv,
                     int64_t nk, float* acc, int64_t Dv, int64_t pf) {
#if defined(__AVX512F__)
  int64_t r = 0;
  for (; r + 4 <= R; r += 4)
    accumulateRows<4>(p + r * ldp, ldp, vb, ldv, nk, acc + r * Dv, Dv, r == 0 ? pf : 0);
  switch (R - r) {
    case 3:
      accumulateRows<3>(p + r * ldp, ldp, vb, ldv, nk, acc + r * Dv, Dv, r == 0 ? pf : 0);
      break;
    case 2:
      accumulateRows<2>(p + r * ldp, ldp, vb, ldv, nk, acc + r * Dv, Dv, r == 0 ? pf : 0);
      break;
    case 1:
      accumulateRows<1>(p + r * ldp, ldp, vb, ldv, nk, acc + r * Dv, Dv, r == 0 ? pf : 0);
      break;
    default:
      break;
  }
#else
  for (int64_t j = 0; j < nk; ++j) {
    const float* vrow = vb + j * ldv;
    for (int64_t r = 0; r < R; ++r) {
      const float e = p[r * ldp + j];
      float* a = acc + r * Dv;
#pragma omp simd
      for (int64_t d = 0; d < Dv; ++d) a[d] += e * vrow[d];
    }
  }
#endif
}

// The largest of m and s[0..n), ignoring NaN scores as `s > m ? s : m`
// does (their exp is NaN, which reaches the sum anyway). A scalar max is a
// chain of dependent compares: 4 cycles a key, a quarter of the block's
// time at R = 4 rows.
float rowMaxFrom(const float* s, int64_t n, float m) {
#if defined(__AVX512F__)
  __m512 a = _mm512_set1_ps(m);
  int64_t j = 0;
  // max_ps(x, a) returns a where x is NaN.
  for (; j + 16 <= n; j += 16) a = _mm512_max_ps(_mm512_loadu_ps(s + j), a);
  if (j < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
    a = _mm512_max_ps(_mm512_mask_loadu_ps(a, tail, s + j), a);
  }
  return _mm512_reduce_max_ps(a);
#else
  for (int64_t j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
#endif
}

#pragma GCC diagnostic pop

// s[j] = exp(s[j] - m) in place, returning their sum (zeros when m is -inf:
// every score of the row so far hidden). In 512-bit vectors: GCC's default
// for this target is 256, and the block's exps were a sixth of the
// kernel's time.
__attribute__((target("prefer-vector-width=512"))) float exponentiateRow(float* s, int64_t n,
                                                                         float m) {
  if (m == kNegInf) {
    std::fill(s, s + n, 0.0f);
    return 0.0f;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float e = fastExp(s[j] - m);
    s[j] = e;
    sum += e;
  }
  return sum;
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
  // Where K and V are read: the presents' views, or the share a device holds.
  const StoredCache* stored = shard ? shard->stored.get() : nullptr;
  const StridedView& kv = stored ? stored->k : k;
  const StridedView& vv = stored ? stored->v : v;
  const int64_t storedHead = stored ? stored->kvHeadFirst : 0;
  if (stored && (stored->keyRows.size() != shard->keys.size() || g0 < storedHead))
    throw Error("decode attention: the stored cache gives " +
                std::to_string(stored->keyRows.size()) + " key row(s) for " +
                std::to_string(shard->keys.size()) + " key range(s), from KV head " +
                std::to_string(storedHead) + " (the shard's first is " + std::to_string(g0) + ")");
  // The buffer row of key j, which lies in run [j0, j1) of the keys read.
  auto storedRow = [&](int64_t j) {
    if (!stored) return j;
    for (size_t i = 0; i < shard->keys.size(); ++i)
      if (j >= shard->keys[i].first && j < shard->keys[i].second)
        return stored->keyRows[i] + (j - shard->keys[i].first);
    return j;  // not reached: the runs read lie within the shard's keys
  };
  const bool packK = kv.strides[3] != 1, packV = vv.strides[3] != 1;
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
  // Groups whose rows read the same mask entries see the same keys: the
  // mask is scanned once for them (the tasks read the first such group's).
  visibleSource_.resize(static_cast<size_t>(groups));
  {
    std::vector<std::vector<std::vector<int64_t>>> operands;
    for (int64_t grp = 0; grp < groups; ++grp) {
      operands.push_back(groupOperands(grp / hn, g0 + grp % hn));
      visibleSource_[static_cast<size_t>(grp)] =
          std::find(operands.begin(), operands.end(), operands.back()) - operands.begin();
    }
  }
#pragma omp parallel num_threads(nt) if (parallel)
  {
    Scratch& w = scratch(omp_get_thread_num());
    // Per group, the keys some row can see (the rest are skipped unread).
#pragma omp for schedule(static)
    for (int64_t grp = 0; grp < groups; ++grp) {
      if (visibleSource_[static_cast<size_t>(grp)] != grp) continue;
      std::vector<std::pair<int64_t, int64_t>>& runs = visible_[static_cast<size_t>(grp)];
      visibleKeys(slots, grp / hn, g0 + grp % hn, runs);
      if (shard) runs = intersectRuns(runs, shard->keys);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t grp = t / P, part = t % P, b = grp / hn, g = g0 + grp % hn;
      // The part's share of the group's visible keys, as key ranges.
      const std::vector<std::pair<int64_t, int64_t>>& runs =
          visible_[static_cast<size_t>(visibleSource_[static_cast<size_t>(grp)])];
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
      const float* kg = K + b * kv.strides[0] + (g - storedHead) * kv.strides[1];
      const float* vg = V + b * vv.strides[0] + (g - storedHead) * vv.strides[1];
      int64_t ordinal = 0;  // visible keys before the current run
      for (const auto& run : runs) {
        const int64_t j0 = run.first + std::max<int64_t>(0, o0 - ordinal);
        const int64_t j1 = run.first + std::min(run.second - run.first, o1 - ordinal);
        ordinal += run.second - run.first;
        // The run's first key in the buffer (a run lies within one of the
        // shard's ranges, so its rows are consecutive there too).
        const int64_t rowShift = j0 < j1 ? storedRow(j0) - j0 : 0;
        for (int64_t jb = j0; jb < j1; jb += kKeyBlock) {
          const int64_t nk = std::min(kKeyBlock, j1 - jb);
          // K rows of the block, contiguous along D.
          const float* kb = kg + (jb + rowShift) * kv.strides[2];
          int64_t ldk = kv.strides[2];
          if (packK) packRows(kb, ldk, kv.strides[3], nk, D, w.kp);
          // S [R][nk] = Q rows . K rows: each K row read once for every row of the group.
          float* s = w.s.data();
          scoreBlock(w.qr.data(), R, D, kb, ldk, nk, s, kKeyBlock, packK ? 0 : kPrefetchKeys);
          applyScoreOps(slots, s, kKeyBlock, b, g, jb, nk);
          // Online softmax: new max, old terms rescaled, exp(s - max) in place.
          for (int64_t r = 0; r < R; ++r) {
            float* sr = s + r * kKeyBlock;
            const float m = rowMaxFrom(sr, nk, rowMax[r]);
            const float alpha = rowMax[r] == kNegInf ? 0.0f : fastExp(rowMax[r] - m);
            rowSum[r] = rowSum[r] * alpha + exponentiateRow(sr, nk, m);
            rowMax[r] = m;
            if (alpha != 1.0f) {
              float* a = acc + r * Dv;
              for (int64_t d = 0; d < Dv; ++d) a[d] *= alpha;
            }
          }
          // acc [R][Dv] += P [R][nk] . V rows: each V row read once for every row.
          const float* vb = vg + (jb + rowShift) * vv.strides[2];
          int64_t ldv = vv.strides[2];
          if (packV) packRows(vb, ldv, vv.strides[3], nk, Dv, w.vp);
          accumulateBlock(s, kKeyBlock, R, vb, ldv, nk, acc, Dv, packV ? 0 : kPrefetchKeys);
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

// Where row (b, h, i) reads each op's operands, key 0: two rows with the
// same offsets see the same bounds for every key (a mask broadcast over the
// heads and queries, as exporters write it, gives every row of every group
// the same offsets).
std::vector<int64_t> DecodeAttentionKernel::rowOperands(int64_t b, int64_t h, int64_t i) const {
  std::vector<int64_t> at;
  for (const ScoreOp& op : ops) {
    if (op.kind == ScoreOp::Scale) continue;
    const StridedView& w = op.view;
    at.push_back(b * w.strides[0] + h * w.strides[1] + i * w.strides[2]);
    if (op.kind != ScoreOp::Select) continue;
    const StridedView& fw = op.fillView;
    at.push_back(b * fw.strides[0] + h * fw.strides[1] + i * fw.strides[2]);
  }
  return at;
}

// The distinct rows' operand offsets of group (b, KV head g), sorted: two
// groups with the same see the same keys.
std::vector<std::vector<int64_t>> DecodeAttentionKernel::groupOperands(int64_t b, int64_t g) const {
  std::vector<std::vector<int64_t>> rows;
  for (int64_t r = 0; r < kvGroup * Sq; ++r)
    rows.push_back(rowOperands(b, g * kvGroup + r / Sq, r % Sq));
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

// The keys of group (b, KV head g) that some row of it can see, as ranges
// [first, end): a key is skipped, its K and V rows never read, when the
// score ops hide it from every row (bounds through the ops: its score at
// kHiddenBelow or lower whatever Q.Kᵀ is) and every row has a key the ops
// keep above kShownAbove (so its max is there and a hidden key's term
// exp(s - max) is 0). In a decode step on a cache preallocated to capacity,
// the padding mask hides the unfilled rows: the step reads the filled rows
// and the new token's, not the capacity. Without masks, or when some row
// sees nothing, every key. Rows reading the same operands are scanned once
// (groupOperands), in blocks of keys, one op at a time over the block.
void DecodeAttentionKernel::visibleKeys(const std::vector<const void*>& slots, int64_t b, int64_t g,
                                        std::vector<std::pair<int64_t, int64_t>>& runs) const {
  runs.assign(1, {0, L});
  const bool masked = std::any_of(ops.begin(), ops.end(),
                                  [](const ScoreOp& op) { return op.kind != ScoreOp::Scale; });
  if (!masked || L == 0) return;
  std::vector<char> skip(static_cast<size_t>(L), 1);
  constexpr int64_t kScanBlock = 512;
  double lo[kScanBlock], hi[kScanBlock];
  for (const std::vector<int64_t>& at : groupOperands(b, g)) {
    bool shown = false;
    for (int64_t j0 = 0; j0 < L; j0 += kScanBlock) {
      const int64_t n = std::min(kScanBlock, L - j0);
      for (int64_t x = 0; x < n; ++x) {
        lo[x] = -kRawScoreBound;
        hi[x] = kRawScoreBound;
      }
      size_t operand = 0;
      for (const ScoreOp& op : ops) {
        if (op.kind == ScoreOp::Scale) {
          const double f = op.scale;
          for (int64_t x = 0; x < n; ++x) {
            const double a = lo[x] * f, c = hi[x] * f;
            lo[x] = std::min(a, c);
            hi[x] = std::max(a, c);
          }
          continue;
        }
        const int64_t sj = op.view.strides[3];
        const int64_t base = at[operand++] + j0 * sj;
        if (op.kind == ScoreOp::Add) {
          const float* m = static_cast<const float*>(slots[static_cast<size_t>(op.slot)]) + base;
          if (sj == 1) {
            for (int64_t x = 0; x < n; ++x) {
              lo[x] += m[x];
              hi[x] += m[x];
            }
          } else {
            for (int64_t x = 0; x < n; ++x) {
              lo[x] += m[x * sj];
              hi[x] += m[x * sj];
            }
          }
          continue;
        }
        const bool* c = static_cast<const bool*>(slots[static_cast<size_t>(op.slot)]) + base;
        const int64_t fj = op.fillView.strides[3];
        const float* f = static_cast<const float*>(slots[static_cast<size_t>(op.fillSlot)]) +
                         at[operand++] + j0 * fj;
        for (int64_t x = 0; x < n; ++x)
          if (c[x * sj] != op.scoresWhereTrue) lo[x] = hi[x] = f[x * fj];
      }
      // NaN bounds (an inf minus an inf) neither hide nor show.
      char* sk = skip.data() + j0;
      for (int64_t x = 0; x < n; ++x) {
        if (!(hi[x] <= kHiddenBelow)) sk[x] = 0;
        shown = shown || lo[x] > kShownAbove;
      }
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
