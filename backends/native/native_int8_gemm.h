// The native backend's int8 matrix product, exact in int32:
//
//   C[m][n] = sum_k (R[m][k] - rzp[m]) * (P[k][n] - pzp[n])
//
// R ("rows": a conv's weights, a MatMul's A) and P ("columns": a conv's
// im2col patches, a MatMul's B) are each uint8 or int8, with a zero point per
// row of R and per column of P (or one for all). ConvInteger, MatMulInteger,
// QLinearConv and QLinearMatMul all reduce to it (native_int8_products.h).
//
// How. VNNI's vpdpbusd multiplies unsigned bytes by signed bytes, four
// products summed into each int32 lane, with wrap-around (never saturating)
// adds. Both operands are moved to that form by a shift that changes no
// difference: P' = P + 128 when P is int8 (so P' is uint8) and R' = R - 128
// when R is uint8 (so R' is int8), each zero point shifted alike. Then
//
//   C = sum R'P' - rzp' * sum_k P'[k][n] - pzp'[n] * sum_k R'[m][k] + K rzp' pzp'[n]
//
// where sum R'P' is what vpdpbusd accumulates; the other terms are a sum per
// column (taken while packing P) and one per row (taken while packing R).
// All of it is int32 arithmetic modulo 2^32, so C is exact whenever the true
// sum fits int32, and equal to the int64 sum truncated to int32 (what the
// *Integer ops store) in every case.
//
// Blocking: R is packed once per run into blocks of kMr rows ([k/4][kMr][4]
// bytes, each row's four k's one broadcastable int32); P is produced kNr
// columns at a time by the caller as plain rows (K x kNr bytes, already
// shifted) and interleaved here into [k/4][kNr][4], the layout one vpdpbusd
// reads 16 columns of. A kMr x kNr tile of C lives in 24 zmm registers for
// the whole K loop. Without AVX-512 VNNI the same layout runs through a
// portable loop that gives the same integers.
#pragma once

#include <cstdint>
#include <vector>

namespace collage::native::int8 {

constexpr int kMr = 6;   // rows of C per micro-tile
constexpr int kNr = 64;  // columns of C per micro-tile (four zmm registers of int32)

// R' packed in blocks of kMr rows, with what the compensation needs.
struct PackedRows {
  int64_t M = 0, K = 0;
  int64_t K4 = 0;       // K rounded up to a multiple of 4 (the tail is zero)
  int64_t blocks = 0;   // ceil(M / kMr); rows past M are zero
  std::vector<int8_t> data;    // [block][K4/4][kMr][4]
  std::vector<int32_t> zp;     // rzp' per row
  std::vector<int32_t> sum;    // sum_k R'[m][k] per row
  const int8_t* block(int64_t b) const { return data.data() + b * K4 * kMr; }
};

// Packs M rows of K bytes (row r at r * ld), uint8 or int8, with zero
// points `zp` (zpCount 1: one for every row; else one per row; null: 0), on
// up to `threads` threads (a big weight is packed on every run).
// `into` keeps its storage from run to run, so a big weight costs no fresh
// pages each time.
void packRows(PackedRows& into, const void* r, bool isSigned, int64_t M, int64_t K, int64_t ld,
              const int64_t* zp, int64_t zpCount, int threads = 1);

// P' for a byte of P: the shift that makes int8 values uint8.
inline uint8_t shiftColumnValue(uint8_t raw, bool isSigned) {
  return isSigned ? static_cast<uint8_t>(raw ^ 0x80) : raw;
}
inline int32_t shiftColumnZeroPoint(int64_t zp, bool isSigned) {
  return static_cast<int32_t>(isSigned ? zp + 128 : zp);
}

// Per-thread scratch for one column block.
struct ColumnScratch {
  std::vector<uint8_t> plain;    // K x kNr: the caller writes P' here
  std::vector<uint8_t> panel;    // [K4/4][kNr][4]
  std::vector<int32_t> colTerm;  // sum_k P'[k][n] - K * pzp'[n]
  std::vector<int32_t> pzp;      // pzp'[n] of the block
  alignas(64) int32_t tile[kMr * kNr];
  void reserve(int64_t K);
};

// Interleaves scratch.plain (K rows of kNr bytes) into scratch.panel and
// takes the column terms; scratch.pzp must hold the block's kNr shifted
// column zero points (any value past the block's last column).
void prepareColumns(ColumnScratch& s, int64_t K);

// C for rows [kMr * block, kMr * block + kMr) and the kNr columns of the
// prepared block, exact, into s.tile (row-major, kNr int32 per row).
void multiplyBlock(const PackedRows& rows, int64_t block, ColumnScratch& s);

// Whether this build multiplies with AVX-512 VNNI (for describe()).
bool usesVnni();

}  // namespace collage::native::int8
