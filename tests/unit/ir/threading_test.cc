// The thread-count setting: the default ("the number of cores") must behave
// exactly as naming that count does (core/ir/threading.h).
#include "core/ir/threading.h"

#include <gtest/gtest.h>

#include "tests/unit/syscall_counter.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

TEST(Threading, TheDefaultIsTheCoreCount) {
  test_support::ThreadCountGuard guard;
  setThreadCount(0);
  EXPECT_EQ(threadCount(), hardwareCores());
  EXPECT_GE(threadCount(), 1);
  setThreadCount(hardwareCores());
  EXPECT_EQ(threadCount(), hardwareCores());
  setThreadCount(-3);  // <= 0: the default again
  EXPECT_EQ(threadCount(), hardwareCores());
}

// Every kernel run asks threadCount(). Answered from sysfs on each call, the
// default cost a file open, read and close per kernel per run, which named
// counts never paid (a plan ran 1.35x slower by default).
TEST(Threading, TheDefaultIsAnsweredWithoutReadingFiles) {
  test_support::ThreadCountGuard guard;
  setThreadCount(0);
  (void)threadCount();
  const ReadSyscalls reads;
  int sum = 0;
  for (int i = 0; i < 1000; ++i) sum += threadCount();
  EXPECT_EQ(sum, 1000 * hardwareCores());
  EXPECT_LT(reads.since(), 10) << "threadCount() reads a file on each call";
}

}  // namespace
}  // namespace collage
