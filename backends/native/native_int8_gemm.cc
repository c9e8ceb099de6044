#include "backends/native/native_int8_gemm.h"

#include <algorithm>
#include <cstring>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define COLLAGE_INT8_VNNI 1
// GCC 12 reports '__Y may be used uninitialized' inside the AVX-512
// headers once their intrinsics are inlined into an OpenMP region (GCC bug
// 105593); the pragma covers the headers' lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace collage::native::int8 {

namespace {

// Wrap-around int32 arithmetic (the modular sums the header describes),
// written on uint32 so that the portable path has no signed overflow.
inline int32_t wrap(uint32_t v) { return static_cast<int32_t>(v); }

}  // namespace

bool usesVnni() {
#ifdef COLLAGE_INT8_VNNI
  return true;
#else
  return false;
#endif
}

void packRows(PackedRows& p, const void* r, bool isSigned, int64_t M, int64_t K, int64_t ld,
              const int64_t* zp, int64_t zpCount, int threads) {
  p.M = M;
  p.K = K;
  p.K4 = (K + 3) / 4 * 4;
  p.blocks = (M + kMr - 1) / kMr;
  p.data.assign(static_cast<size_t>(p.blocks * p.K4 * kMr), 0);
  p.zp.assign(static_cast<size_t>(p.blocks * kMr), 0);
  p.sum.assign(static_cast<size_t>(p.blocks * kMr), 0);
  const uint8_t* bytes = static_cast<const uint8_t*>(r);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && M * K >= (1 << 18))
  for (int64_t m = 0; m < M; ++m) {
    const uint8_t* row = bytes + m * ld;
    int8_t* dst = p.data.data() + (m / kMr) * p.K4 * kMr + (m % kMr) * 4;
    uint32_t sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      // R' = R - 128 for uint8 (flipping the top bit), R itself for int8.
      const int8_t v = static_cast<int8_t>(isSigned ? row[k] : row[k] ^ 0x80);
      dst[(k / 4) * kMr * 4 + (k % 4)] = v;
      sum += static_cast<uint32_t>(static_cast<int32_t>(v));
    }
    const int64_t z = zp ? zp[zpCount > 1 ? m : 0] : 0;
    p.zp[static_cast<size_t>(m)] = static_cast<int32_t>(isSigned ? z : z - 128);
    p.sum[static_cast<size_t>(m)] = wrap(sum);
  }
}

void ColumnScratch::reserve(int64_t K) {
  const size_t K4 = static_cast<size_t>((K + 3) / 4 * 4);
  if (plain.size() < K4 * kNr) plain.resize(K4 * kNr);
  if (panel.size() < K4 * kNr) panel.resize(K4 * kNr);
  colTerm.resize(kNr);
  pzp.resize(kNr);
}

void prepareColumns(ColumnScratch& s, int64_t K) {
  const int64_t K4 = (K + 3) / 4 * 4;
  // Rows K..K4 of the plain block are zero: they add nothing to any sum.
  if (K4 > K) std::memset(s.plain.data() + K * kNr, 0, static_cast<size_t>((K4 - K) * kNr));
  const uint8_t* plain = s.plain.data();
  uint8_t* panel = s.panel.data();
  for (int64_t q = 0; q < K4 / 4; ++q) {
    const uint8_t* r0 = plain + (4 * q) * kNr;
    uint8_t* out = panel + q * 4 * kNr;
#if defined(COLLAGE_INT8_VNNI) || defined(__SSE2__)
    // A 4 x 16 byte transpose per 16 columns: column n's four k's become
    // the four bytes of int32 lane n.
    for (int j = 0; j < kNr; j += 16) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + j));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + kNr + j));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + 2 * kNr + j));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + 3 * kNr + j));
      const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
      const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
      __m128i* o = reinterpret_cast<__m128i*>(out + 4 * j);
      _mm_storeu_si128(o + 0, _mm_unpacklo_epi16(ab0, cd0));
      _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(ab0, cd0));
      _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(ab1, cd1));
      _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(ab1, cd1));
    }
#else
    for (int n = 0; n < kNr; ++n)
      for (int t = 0; t < 4; ++t) out[n * 4 + t] = r0[t * kNr + n];
#endif
  }
  // sum_k P'[k][n] - K * pzp'[n], modulo 2^32.
  uint32_t sum[kNr] = {};
  for (int64_t k = 0; k < K; ++k)
    for (int n = 0; n < kNr; ++n) sum[n] += plain[k * kNr + n];
  for (int n = 0; n < kNr; ++n)
    s.colTerm[n] = wrap(sum[n] - static_cast<uint32_t>(K) * static_cast<uint32_t>(s.pzp[n]));
}

void multiplyBlock(const PackedRows& rows, int64_t block, ColumnScratch& s) {
  const int64_t steps = rows.K4 / 4;
  const int8_t* a = rows.block(block);
  const uint8_t* b = s.panel.data();
  int32_t* tile = s.tile;
#ifdef COLLAGE_INT8_VNNI
  __m512i c[kMr][4];
  for (int r = 0; r < kMr; ++r)
    for (int j = 0; j < 4; ++j) c[r][j] = _mm512_setzero_si512();
  for (int64_t q = 0; q < steps; ++q) {
    const __m512i b0 = _mm512_loadu_si512(b + q * 4 * kNr);
    const __m512i b1 = _mm512_loadu_si512(b + q * 4 * kNr + 64);
    const __m512i b2 = _mm512_loadu_si512(b + q * 4 * kNr + 128);
    const __m512i b3 = _mm512_loadu_si512(b + q * 4 * kNr + 192);
    const int8_t* aq = a + q * kMr * 4;
    for (int r = 0; r < kMr; ++r) {
      int32_t four;
      std::memcpy(&four, aq + r * 4, 4);
      const __m512i av = _mm512_set1_epi32(four);
      // P' (uint8) times R' (int8): the unsigned operand comes first.
      c[r][0] = _mm512_dpbusd_epi32(c[r][0], b0, av);
      c[r][1] = _mm512_dpbusd_epi32(c[r][1], b1, av);
      c[r][2] = _mm512_dpbusd_epi32(c[r][2], b2, av);
      c[r][3] = _mm512_dpbusd_epi32(c[r][3], b3, av);
    }
  }
  const __m512i t0 = _mm512_loadu_si512(s.colTerm.data());
  const __m512i t1 = _mm512_loadu_si512(s.colTerm.data() + 16);
  const __m512i t2 = _mm512_loadu_si512(s.colTerm.data() + 32);
  const __m512i t3 = _mm512_loadu_si512(s.colTerm.data() + 48);
  const __m512i z0 = _mm512_loadu_si512(s.pzp.data());
  const __m512i z1 = _mm512_loadu_si512(s.pzp.data() + 16);
  const __m512i z2 = _mm512_loadu_si512(s.pzp.data() + 32);
  const __m512i z3 = _mm512_loadu_si512(s.pzp.data() + 48);
  const __m512i terms[4] = {t0, t1, t2, t3}, zps[4] = {z0, z1, z2, z3};
  for (int r = 0; r < kMr; ++r) {
    const __m512i rz = _mm512_set1_epi32(rows.zp[static_cast<size_t>(block * kMr + r)]);
    const __m512i rs = _mm512_set1_epi32(rows.sum[static_cast<size_t>(block * kMr + r)]);
    for (int j = 0; j < 4; ++j) {
      __m512i v = _mm512_sub_epi32(c[r][j], _mm512_mullo_epi32(rz, terms[j]));
      v = _mm512_sub_epi32(v, _mm512_mullo_epi32(rs, zps[j]));
      _mm512_storeu_si512(tile + r * kNr + 16 * j, v);
    }
  }
#else
  uint32_t acc[kMr][kNr] = {};
  for (int64_t q = 0; q < steps; ++q) {
    const uint8_t* bq = b + q * 4 * kNr;
    const int8_t* aq = a + q * kMr * 4;
    for (int r = 0; r < kMr; ++r)
      for (int n = 0; n < kNr; ++n) {
        int32_t d = 0;
        for (int t = 0; t < 4; ++t) d += static_cast<int32_t>(bq[n * 4 + t]) * aq[r * 4 + t];
        acc[r][n] += static_cast<uint32_t>(d);
      }
  }
  for (int r = 0; r < kMr; ++r) {
    const uint32_t rz = static_cast<uint32_t>(rows.zp[static_cast<size_t>(block * kMr + r)]);
    const uint32_t rs = static_cast<uint32_t>(rows.sum[static_cast<size_t>(block * kMr + r)]);
    for (int n = 0; n < kNr; ++n)
      tile[r * kNr + n] = wrap(acc[r][n] - rz * static_cast<uint32_t>(s.colTerm[n]) -
                               rs * static_cast<uint32_t>(s.pzp[n]));
  }
#endif
}

}  // namespace collage::native::int8
