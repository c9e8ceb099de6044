#include "backends/onednn/channels_transpose.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#ifdef __AVX__
#include <immintrin.h>
#endif

namespace collage::onednn {

namespace {

using tag = dnnl::memory::format_tag;

// The plain and channels-last tags of a rank (3: ncw/nwc, 4: nchw/nhwc,
// 5: ncdhw/ndhwc).
std::optional<std::pair<tag, tag>> tagsOfRank(size_t rank) {
  switch (rank) {
    case 3: return std::make_pair(tag::abc, tag::acb);
    case 4: return std::make_pair(tag::abcd, tag::acdb);
    case 5: return std::make_pair(tag::abcde, tag::acdeb);
    default: return std::nullopt;
  }
}

// b[c][r] = a[r][c] for an 8x8 tile of 4-byte elements (lda, ldb: row strides).
void tile8(const float* a, int64_t lda, float* b, int64_t ldb) {
#ifdef __AVX__
  __m256 r0 = _mm256_loadu_ps(a + 0 * lda), r1 = _mm256_loadu_ps(a + 1 * lda);
  __m256 r2 = _mm256_loadu_ps(a + 2 * lda), r3 = _mm256_loadu_ps(a + 3 * lda);
  __m256 r4 = _mm256_loadu_ps(a + 4 * lda), r5 = _mm256_loadu_ps(a + 5 * lda);
  __m256 r6 = _mm256_loadu_ps(a + 6 * lda), r7 = _mm256_loadu_ps(a + 7 * lda);
  // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves.
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(b + 0 * ldb, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(b + 1 * ldb, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(b + 2 * ldb, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(b + 3 * ldb, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(b + 4 * ldb, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(b + 5 * ldb, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(b + 6 * ldb, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(b + 7 * ldb, _mm256_permute2f128_ps(u3, u7, 0x31));
#else
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c) b[c * ldb + r] = a[r * lda + c];
#endif
}

// b[c][r] = a[r][c] for a 16x16 tile of bytes: four rounds of interleaving
// (bytes, pairs, quads, halves) of pairs of registers.
void tile16(const uint8_t* a, int64_t lda, uint8_t* b, int64_t ldb) {
#ifdef __SSE2__
  __m128i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i * lda));
  // t[i]: rows 2i, 2i+1 interleaved over columns 0-7; t[i + 8]: columns 8-15.
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
    t[i + 8] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
  }
  // r[8h + i]: rows 4i..4i+3 over columns 8h..8h+3; r[8h + i + 4]: 8h+4..8h+7.
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) {
      r[8 * h + i] = _mm_unpacklo_epi16(t[8 * h + 2 * i], t[8 * h + 2 * i + 1]);
      r[8 * h + i + 4] = _mm_unpackhi_epi16(t[8 * h + 2 * i], t[8 * h + 2 * i + 1]);
    }
  // t[4q + i]: rows 8i..8i+7 over columns 4q, 4q+1; t[4q + i + 2]: 4q+2, 4q+3.
  for (int q = 0; q < 4; ++q)
    for (int i = 0; i < 2; ++i) {
      t[4 * q + i] = _mm_unpacklo_epi32(r[4 * q + 2 * i], r[4 * q + 2 * i + 1]);
      t[4 * q + i + 2] = _mm_unpackhi_epi32(r[4 * q + 2 * i], r[4 * q + 2 * i + 1]);
    }
  // Whole columns: 16 rows each.
  for (int o = 0; o < 8; ++o) {
    const int col = (o / 2) * 4 + (o % 2) * 2;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + col * ldb), _mm_unpacklo_epi64(t[2 * o], t[2 * o + 1]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + (col + 1) * ldb), _mm_unpackhi_epi64(t[2 * o], t[2 * o + 1]));
  }
#else
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) b[c * ldb + r] = a[r * lda + c];
#endif
}

// b[c][r] = a[r][c] over rows [r0, r1) and columns [c0, c1) of a rows x
// cols matrix, in whole tiles of T x T where they fit.
template <typename E, int T, void (*Tile)(const E*, int64_t, E*, int64_t)>
void transposeBlock(const E* a, E* b, int64_t rows, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  int64_t r = r0;
  for (; r + T <= r1; r += T) {
    int64_t c = c0;
    for (; c + T <= c1; c += T) Tile(a + r * cols + c, cols, b + c * rows + r, rows);
    for (; c < c1; ++c)
      for (int64_t k = r; k < r + T; ++k) b[c * rows + k] = a[k * cols + c];
  }
  for (; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) b[c * rows + r] = a[r * cols + c];
}

// Per image, a [rows][cols] matrix into [cols][rows], in blocks of 16 rows
// (each destination row gets a whole cache line of floats, or 16 bytes) by
// 256 columns, spread over the threads across every image.
template <typename E, int T, void (*Tile)(const E*, int64_t, E*, int64_t)>
void transposeImages(const E* a, E* b, int64_t batch, int64_t rows, int64_t cols) {
  constexpr int64_t kRows = 16, kCols = 256;
  const int64_t image = rows * cols;
  const int64_t bands = (rows + kRows - 1) / kRows, strips = (cols + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) collapse(3) if (batch * image > 4096)
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t band = 0; band < bands; ++band)
      for (int64_t strip = 0; strip < strips; ++strip)
        transposeBlock<E, T, Tile>(a + n * image, b + n * image, rows, cols, band * kRows,
                                   std::min(rows, (band + 1) * kRows), strip * kCols,
                                   std::min(cols, (strip + 1) * kCols));
}

}  // namespace

std::optional<ChannelsTranspose> channelsTransposeOf(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  using dt = dnnl::memory::data_type;
  const dnnl::memory::dims dims = from.dims();
  if (to.dims() != dims || from.data_type() != to.data_type()) return std::nullopt;
  const dt type = from.data_type();
  const bool bytes = type == dt::u8 || type == dt::s8, words = type == dt::f32 || type == dt::s32;
  const auto tags = tagsOfRank(dims.size());
  if (!(bytes || words) || !tags) return std::nullopt;
  const dnnl::memory::desc plain(dims, type, tags->first), last(dims, type, tags->second);
  ChannelsTranspose t;
  t.elementBytes = bytes ? 1 : 4;
  if (from == plain && to == last && bytes)
    t.toChannelsLast = true;
  else if (!(from == last && to == plain))
    return std::nullopt;
  t.batch = dims[0];
  t.channels = dims[1];
  t.spatial = 1;
  for (size_t d = 2; d < dims.size(); ++d) t.spatial *= dims[d];
  if (t.channels == 1 || t.spatial == 1) return std::nullopt;  // the same bytes: oneDNN copies
  return t;
}

void runChannelsTranspose(const ChannelsTranspose& t, const void* from, void* to) {
  // Channels last is [spatial][channels] per image, plain [channels][spatial].
  const int64_t rows = t.toChannelsLast ? t.channels : t.spatial;
  const int64_t cols = t.toChannelsLast ? t.spatial : t.channels;
  if (t.elementBytes == 1)
    transposeImages<uint8_t, 16, tile16>(static_cast<const uint8_t*>(from), static_cast<uint8_t*>(to), t.batch,
                                         rows, cols);
  else
    transposeImages<float, 8, tile8>(static_cast<const float*>(from), static_cast<float*>(to), t.batch, rows,
                                     cols);
}

}  // namespace collage::onednn
