// The native backend's vectorisable math (native_math.h).
#include "backends/native/native_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace collage::native {
namespace {

// Below ln(FLT_MIN) exp is a subnormal or 0 in float; fastExp gives 0
// there, never a subnormal: a subnormal probability made each multiply-add
// reading it take a microcode assist (a masked attention ran 18x slower).
TEST(NativeMath, FastExpNeverReturnsASubnormal) {
  const float lowest = std::numeric_limits<float>::lowest();
  for (float x : {lowest, -1e30f, -1000.0f, -104.0f, -100.0f, -90.0f, -87.5f, -87.34f})
    EXPECT_EQ(fastExp(x), 0.0f) << "x = " << x;
  for (float x = -87.3f; x < 88.0f; x += 0.37f) {
    const float y = fastExp(x);
    EXPECT_GE(y, std::numeric_limits<float>::min()) << "x = " << x;
    EXPECT_NEAR(y, std::exp(x), 4e-7f * std::exp(x)) << "x = " << x;
  }
  EXPECT_EQ(fastExp(-std::numeric_limits<float>::infinity()), 0.0f);
}

}  // namespace
}  // namespace collage::native
