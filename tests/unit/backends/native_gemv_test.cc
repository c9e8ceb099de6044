// The native few-row product (native_gemv.h) against a double-precision
// sum, at odd sizes: 1 to 6 rows (past kGemvMaxRows: two row blocks), column
// counts that are not multiples of the 64-column tile or of a 16-float
// vector, K not a multiple of the 8-row block, a column range of a wider B
// (ldb > n), and an output that holds NaN before (it must be written, not
// read). The MatMul step's use of it: NativeBackend.AOneRowMatMul... and
// NativeBackend.AFewRowMatMulRunsTheGemvWithTheReferencesValues.
#include "backends/native/native_gemv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace collage::native {
namespace {

TEST(NativeGemv, FewRowsTimesAMatrixAtOddSizesMatchTheSum) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t M : {1, 2, 3, 4, 5, 6})
    for (int64_t n : {1, 15, 16, 17, 64, 70, 333})
      for (int64_t K : {1, 7, 8, 9, 513}) {
        SCOPED_TRACE("M " + std::to_string(M) + " n " + std::to_string(n) + " K " +
                     std::to_string(K));
        // A [M][K + 3] (row stride past K), B a column range [5, 5 + n) of
        // a [K][n + 9] matrix, Y [M][n + 2].
        const int64_t lda = K + 3, ldb = n + 9, col0 = 5, ldy = n + 2;
        std::vector<float> a(static_cast<size_t>(M * lda)), b(static_cast<size_t>(K * ldb));
        for (float& x : a) x = u(rng);
        for (float& x : b) x = u(rng);
        std::vector<float> y(static_cast<size_t>(M * ldy), std::numeric_limits<float>::quiet_NaN());
        gemvRows(M, n, K, a.data(), lda, b.data() + col0, ldb, y.data(), ldy);
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t j = 0; j < n; ++j) {
            double want = 0.0, scale = 0.0;
            for (int64_t k = 0; k < K; ++k) {
              const double t = static_cast<double>(a[static_cast<size_t>(m * lda + k)]) *
                               b[static_cast<size_t>(k * ldb + col0 + j)];
              want += t;
              scale += std::fabs(t);
            }
            const float got = y[static_cast<size_t>(m * ldy + j)];
            // float32 sums of K terms: a few ulps of the terms' magnitude.
            ASSERT_NEAR(got, want, 1e-6 * (scale + 1.0) * (1 + K / 64)) << "row " << m << " col " << j;
          }
          // Past the n columns the output is untouched.
          for (int64_t j = n; j < ldy; ++j)
            ASSERT_TRUE(std::isnan(y[static_cast<size_t>(m * ldy + j)])) << "row " << m << " col " << j;
        }
      }
}

}  // namespace
}  // namespace collage::native
