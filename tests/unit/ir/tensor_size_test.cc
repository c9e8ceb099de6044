// Sizes a model decides: checked before anything is allocated, and capped
// where the importer folds constants (core/ir/tensor_size.h).
#include "core/ir/tensor_size.h"

#include <gtest/gtest.h>

namespace collage {
namespace {

TEST(TensorSize, CheckedByteSizeRefusesNegativeDimsAndOverflow) {
  EXPECT_EQ(checkedByteSize({2, 3}, ElementType::Float32), 24);
  EXPECT_EQ(checkedByteSize({}, ElementType::Int64), 8);
  EXPECT_EQ(checkedByteSize({4, 0, 7}, ElementType::Float32), 0);
  EXPECT_EQ(checkedByteSize({2, -1}, ElementType::Float32), std::nullopt);
  // The fuzzer's shape: 8358680916989575167 elements of 64 floats.
  EXPECT_EQ(checkedByteSize({1, 8358680916989575167, 64}, ElementType::Float32), std::nullopt);
  EXPECT_EQ(checkedByteSize({int64_t{1} << 31, int64_t{1} << 31}, ElementType::Float32),
            std::nullopt);
}

TEST(TensorSize, TensorOfAnImpossibleShapeIsAnError) {
  try {
    Tensor t(ElementType::Float32, {1, 8358680916989575167, 64});
    FAIL() << "allocated " << t.type().toString();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float32[1x8358680916989575167x64]"), std::string::npos)
        << e.what();
  }
}

TEST(TensorSize, ScopedLimitCapsAllocationsAndNests) {
  EXPECT_EQ(allocationLimit(), SIZE_MAX);
  {
    ScopedAllocationLimit outer(1 << 20);
    Tensor fits(ElementType::Float32, {256, 1024});  // exactly 1 MiB
    EXPECT_THROW(Tensor(ElementType::Float32, {257, 1024}), AllocationLimitExceeded);
    {
      ScopedAllocationLimit inner(4 << 20);  // never raises the outer cap
      EXPECT_EQ(allocationLimit(), size_t{1} << 20);
    }
    EXPECT_EQ(allocationLimit(), size_t{1} << 20);
  }
  EXPECT_EQ(allocationLimit(), SIZE_MAX);
  Tensor big(ElementType::Float32, {257, 1024});
  EXPECT_EQ(big.numElements(), 257 * 1024);
}

}  // namespace
}  // namespace collage
