// What does not fit in this machine's memory is refused by name before it is
// allocated (core/ir/memory_budget.h): the budget itself, its lowering by
// $COLLAGE_MEMORY_LIMIT (how these tests plant a machine too small), and the
// reference executor's check before each node. The measurer's and the
// Session's refusals are tested with them (measurer_test.cc, session_test.cc).
#include "core/ir/memory_budget.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/ops/reference_executor.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

// Sets $COLLAGE_MEMORY_LIMIT while it lives.
struct MemoryLimit {
  explicit MemoryLimit(const char* value) { setenv("COLLAGE_MEMORY_LIMIT", value, 1); }
  ~MemoryLimit() { unsetenv("COLLAGE_MEMORY_LIMIT"); }
};

TEST(MemoryBudget, ParsesByteCounts) {
  EXPECT_EQ(parseByteCount("1048576", "x"), size_t{1} << 20);
  EXPECT_EQ(parseByteCount("64MiB", "x"), size_t{64} << 20);
  EXPECT_EQ(parseByteCount("2 GiB", "x"), size_t{2} << 30);
  EXPECT_EQ(parseByteCount("512KiB", "x"), size_t{512} << 10);
  test_support::expectError([] { parseByteCount("lots", "$X"); }, {"$X", "'lots'", "not a byte count"});
  test_support::expectError([] { parseByteCount("3MB", "$X"); }, {"'3MB'"});
  EXPECT_EQ(describeBytes(512), "512 bytes");
  EXPECT_EQ(describeBytes(size_t{64} << 30), "64.0 GiB");
  EXPECT_EQ(describeBytes(size_t{3} << 19), "1.5 MiB");
}

TEST(MemoryBudget, ARefusalNamesTheLargestTensorAndWhatIsAvailable) {
  const AvailableMemory machine{size_t{24} << 30, "MemAvailable in /proc/meminfo"};
  const TensorBytes scores{"output 'scores' float32[1x16x32768x32768]", size_t{64} << 30};
  const TensorBytes q{"input 'q' float32[1x16x32768x64]", size_t{128} << 20};
  EXPECT_EQ(memoryRefusal({q}, machine), "");
  EXPECT_EQ(memoryRefusal({q, scores}, machine),
            "output 'scores' float32[1x16x32768x32768] is 64.0 GiB, 64.1 GiB in all, and 24.0 GiB is "
            "available (MemAvailable in /proc/meminfo)");
  // What is allocated together counts together.
  EXPECT_NE(memoryRefusal({q, q, q}, AvailableMemory{size_t{300} << 20, "test"}), "");
}

TEST(MemoryBudget, TheEnvironmentLowersTheMachinesBudget) {
  const AvailableMemory machine = availableMemory();
  EXPECT_GT(machine.bytes, size_t{1} << 20) << machine.source;
  {
    MemoryLimit limit("3MiB");
    const AvailableMemory lowered = availableMemory();
    EXPECT_EQ(lowered.bytes, size_t{3} << 20);
    EXPECT_EQ(lowered.source, "$COLLAGE_MEMORY_LIMIT");
    EXPECT_NE(memoryRefusal({{"output 'y' float32[1024x1024]", size_t{4} << 20}}), "");
    EXPECT_EQ(memoryRefusal({{"output 'y' float32[512x1024]", size_t{2} << 20}}), "");
    // Under a mebibyte only the variable is read, and it still counts.
    MemoryLimit tiny("1KiB");
    EXPECT_NE(memoryRefusal({{"output 'z' float32[512]", 2048}}), "");
  }
  MemoryLimit bad("a lot");
  test_support::expectError([] { availableMemory(); }, {"$COLLAGE_MEMORY_LIMIT", "'a lot'"});
}

// The reference executor stops at the node whose outputs cannot fit, naming
// it, before allocating them: not std::bad_alloc, not the out-of-memory killer.
TEST(MemoryBudget, TheReferenceExecutorRefusesANodeThatDoesNotFit) {
  GraphBuilder b;
  const ValueId q = b.input({1024, 64});
  const ValueId k = b.input({64, 1024});
  b.finish(b.op("Relu", {b.op("MatMul", {q, k})}));
  const Graph& g = b.graph();
  const std::vector<Tensor> inputs = randomInputs(g, 1);
  ReferenceExecutor reference(g);
  EXPECT_NO_THROW(reference.run(inputs));
  MemoryLimit limit("3MiB");  // the inputs take 0.5 MiB, the MatMul's output 4 MiB
  test_support::expectError([&] { reference.run(inputs); },
                            {"node 'MatMul", "float32[1024x1024] is 4.0 MiB", "3.0 MiB is available",
                             "$COLLAGE_MEMORY_LIMIT", "the reference executor cannot run it"});
}

}  // namespace
}  // namespace collage
