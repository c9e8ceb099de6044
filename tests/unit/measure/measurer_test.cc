// Measurement isolation: a worker that crashes, hangs or talks nonsense is a
// failed measurement, never a crash or hang of the tool. Real workers are
// stood in for by small shell commands with exactly those behaviours.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "core/measure/measurer.h"

#include "backends/backend_list.h"
#include "core/ir/threading.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

NodeSet oneNode() { return NodeSet::of(1, {0}); }

TEST(IsolatedMeasurer, AWorkerCrashIsAFailedMeasurementNamingTheSignal) {
  IsolatedMeasurer m({"/bin/sh", "-c", "read line; kill -SEGV $$"}, MeasurerOptions{});
  Measurement r = m.measure("any", oneNode());
  EXPECT_EQ(r.status, MeasurementStatus::Failed);
  EXPECT_NE(r.message.find("crashed"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("Segmentation"), std::string::npos) << r.message;
  // The next measurement starts a fresh worker.
  Measurement again = m.measure("any", oneNode());
  EXPECT_EQ(again.status, MeasurementStatus::Failed);
  EXPECT_EQ(m.workersStarted(), 2);
}

TEST(IsolatedMeasurer, AHangingWorkerIsKilledAtTheDeadline) {
  MeasurerOptions options;
  options.timeoutSeconds = 0.5;
  IsolatedMeasurer m({"/bin/sh", "-c", "read line; exec sleep 60"}, options);
  Measurement r = m.measure("any", oneNode());
  EXPECT_EQ(r.status, MeasurementStatus::TimedOut);
  EXPECT_LT(r.measureSeconds, 10.0);
}

// The deadline is for silence: a worker that says each slow run is done
// (a 32k-token prompt's attention, 15 s a run) is not killed while it
// makes progress; one that stops talking still is.
TEST(IsolatedMeasurer, AWorkerThatReportsItsRunsIsNotKilledWhileItProgresses) {
  MeasurerOptions options;
  options.timeoutSeconds = 1.5;
  IsolatedMeasurer talking({"/bin/sh", "-c",
                            "read line; for i in 1 2 3 4 5 6; do sleep 0.4; echo '{\"ran\":true}'; done; "
                            "echo '{\"status\":\"ok\",\"median_ns\":3e8,\"samples\":3}'; read line"},
                           options);
  const Measurement r = talking.measure("any", oneNode());
  EXPECT_EQ(r.status, MeasurementStatus::Ok) << r.message;
  EXPECT_EQ(r.samples, 3);
  IsolatedMeasurer silent({"/bin/sh", "-c", "read line; echo '{\"ran\":true}'; exec sleep 60"}, options);
  EXPECT_EQ(silent.measure("any", oneNode()).status, MeasurementStatus::TimedOut);
}

TEST(IsolatedMeasurer, RepliesAreParsedAndGarbageIsAFailure) {
  IsolatedMeasurer ok({"/bin/sh", "-c",
                       "while read line; do echo '{\"status\":\"ok\",\"median_ns\":1500,"
                       "\"spread\":0.01,\"samples\":11}'; done"},
                      MeasurerOptions{});
  Measurement r = ok.measure("any", oneNode());
  EXPECT_EQ(r.status, MeasurementStatus::Ok);
  EXPECT_DOUBLE_EQ(r.medianNs, 1500);
  EXPECT_EQ(r.samples, 11);
  EXPECT_EQ(ok.measure("any", oneNode()).samples, 11);
  EXPECT_EQ(ok.workersStarted(), 1);  // one worker serves many requests

  IsolatedMeasurer garbage({"/bin/sh", "-c", "read line; echo not-json; sleep 5"}, MeasurerOptions{});
  Measurement g = garbage.measure("any", oneNode());
  EXPECT_EQ(g.status, MeasurementStatus::Failed);
  EXPECT_NE(g.message.find("garbled"), std::string::npos) << g.message;
}

TEST(IsolatedMeasurer, AMissingWorkerProgramIsAFailure) {
  IsolatedMeasurer m({"/nonexistent/collage-worker"}, MeasurerOptions{});
  Measurement r = m.measure("any", oneNode());
  EXPECT_EQ(r.status, MeasurementStatus::Failed);
}

TEST(Measurer, SummaryIsMedianAndRelativeInterQuartileSpread) {
  std::vector<double> samples = {10, 12, 11, 13, 100, 9, 11};
  Measurement m;
  summarizeSamples(samples, m);
  EXPECT_DOUBLE_EQ(m.medianNs, 11);
  EXPECT_DOUBLE_EQ(m.minNs, 9);
  EXPECT_EQ(m.samples, 7);
  // Sorted 9 10 11 11 12 13 100: quartiles at positions 1.5 and 4.5.
  EXPECT_NEAR(m.spread, (12.5 - 10.5) / 11.0, 1e-12);
}

// Cold measurement (what the worker does for a model larger than the
// last-level cache): each timed run starts after the caches were
// overwritten, so fewer runs are taken; the result is a normal measurement
// of the same kernel.
TEST(Measurer, ColdMeasurementEvictsBeforeEachRunAndTakesFewerSamples) {
  GraphBuilder b;
  const NodeSet nodes = b.finish(b.op("Relu", {b.input({64, 1024})}));
  std::unique_ptr<Backend> native = createBackend("native");
  MeasurerOptions hot;
  MeasurerOptions cold;
  cold.evictBytes = cacheEvictionBytes(size_t{64} << 20);
  EXPECT_EQ(hot.evictBytes, 0u);
  EXPECT_GE(cold.evictBytes, 2 * privateCacheBytes());
  EXPECT_LE(cold.evictBytes, size_t{256} << 20);
  const Measurement h = measureKernel(*native, KernelRequest::of(b.graph(), nodes), hot);
  const Measurement c = measureKernel(*native, KernelRequest::of(b.graph(), nodes), cold);
  ASSERT_EQ(h.status, MeasurementStatus::Ok) << h.message;
  ASSERT_EQ(c.status, MeasurementStatus::Ok) << c.message;
  EXPECT_GE(c.samples, cold.minSamples);
  EXPECT_LE(c.samples, cold.coldMaxSamples);
  EXPECT_GT(c.medianNs, 0);
}

// A kernel whose timed runs pass maxSeconds before minSamples (a long
// prompt's score tensors: seconds a run) stops at three timed runs instead
// of seven: here every run passes a maxSeconds of a nanosecond.
TEST(Measurer, AKernelSlowerThanTheTimeLimitStopsAtThreeRuns) {
  GraphBuilder b;
  const NodeSet nodes = b.finish(b.op("Relu", {b.input({64, 1024})}));
  std::unique_ptr<Backend> native = createBackend("native");
  MeasurerOptions options;
  options.maxSeconds = 1e-9;
  options.minTotalSeconds = 0;  // as any kernel of seconds a run has passed it
  const Measurement m = measureKernel(*native, KernelRequest::of(b.graph(), nodes), options);
  ASSERT_EQ(m.status, MeasurementStatus::Ok) << m.message;
  EXPECT_GE(m.samples, 1);
  EXPECT_LE(m.samples, 3);
  EXPECT_GT(options.minSamples, 3);
}

// A kernel whose tensors cannot fit in this machine's memory is refused by
// name before anything is compiled or allocated (core/ir/memory_budget.h;
// $COLLAGE_MEMORY_LIMIT plants a machine of 3 MiB): Failed, the machine's
// memory its cause (never stored as the kernel's verdict), naming the
// tensor. Before, it was measured (or, at a long prompt's 64 GiB scores,
// thrown std::bad_alloc or the worker killed by the out-of-memory killer).
TEST(Measurer, AKernelWhoseTensorsDoNotFitIsRefusedByNameBeforeItAllocates) {
  GraphBuilder b;
  const NodeSet nodes = b.finish(b.op("MatMul", {b.input({1024, 64}), b.input({64, 1024})}));
  std::unique_ptr<Backend> native = createBackend("native");
  const KernelRequest request = KernelRequest::of(b.graph(), nodes);
  ASSERT_EQ(measureKernel(*native, request, MeasurerOptions{}).status, MeasurementStatus::Ok);
  setenv("COLLAGE_MEMORY_LIMIT", "3MiB", 1);
  const Measurement m = measureKernel(*native, request, MeasurerOptions{});
  const Measurement pair = measureSwitch(*native, request, *native, request, MeasurerOptions{});
  unsetenv("COLLAGE_MEMORY_LIMIT");
  EXPECT_EQ(m.status, MeasurementStatus::Failed);
  EXPECT_EQ(m.cause, FailureCause::OutOfMemory);
  EXPECT_TRUE(m.environmental());
  const std::string output = b.graph().value(request.outputs[0]).name;
  for (const std::string& part : {std::string("not measured: its tensors do not fit in memory"), "output '" + output + "'",
                                  std::string("float32[1024x1024] is 4.0 MiB"), std::string("3.0 MiB is available")})
    EXPECT_NE(m.message.find(part), std::string::npos) << part << " not in: " << m.message;
  EXPECT_EQ(pair.status, MeasurementStatus::Failed);
  EXPECT_EQ(pair.cause, FailureCause::OutOfMemory);
}

// A kernel that would allocate intermediates of its own (oneDNN running
// MatMul -> Softmax -> MatMul as a sequence keeps the scores between them)
// refuses them the same way, though its inputs and outputs fit.
TEST(Measurer, AKernelWhoseOwnIntermediatesDoNotFitIsRefusedByName) {
  GraphBuilder b;
  b.beginGroup();
  const ValueId scores = b.op("MatMul", {b.input({1024, 64}), b.input({64, 1024})});
  const NodeSet nodes = b.finish(b.op("MatMul", {b.op("Softmax", {scores}), b.input({1024, 16})}));
  std::unique_ptr<Backend> onednn = createBackend("onednn");
  if (!onednn) GTEST_SKIP() << "no oneDNN";
  const KernelRequest request = KernelRequest::of(b.graph(), nodes);
  const Measurement fits = measureKernel(*onednn, request, MeasurerOptions{});
  if (fits.status == MeasurementStatus::Invalid) GTEST_SKIP() << "oneDNN does not run it: " << fits.message;
  ASSERT_EQ(fits.status, MeasurementStatus::Ok) << fits.message;
  setenv("COLLAGE_MEMORY_LIMIT", "3MiB", 1);
  const Measurement m = measureKernel(*onednn, request, MeasurerOptions{});
  unsetenv("COLLAGE_MEMORY_LIMIT");
  EXPECT_EQ(m.status, MeasurementStatus::Failed) << m.message;
  EXPECT_EQ(m.cause, FailureCause::OutOfMemory);
  EXPECT_NE(m.message.find("oneDNN's own tensors"), std::string::npos) << m.message;
  EXPECT_NE(m.message.find("3.0 MiB is available"), std::string::npos) << m.message;
}

// On a shared machine: runs during which another process took the core are
// left out, so the cost is the kernel's and not the scheduler's. A busy
// thread pinned to the measuring thread's core stands in for the other
// process (the measurement runs on one thread, pinned there too).
TEST(Measurer, RunsAnotherProcessPreemptedAreLeftOut) {
  GraphBuilder b;
  // Long enough (8 MiB in and out, about a millisecond) that the runs are
  // most of the measuring thread's time, so the scheduler's switches to the
  // busy thread fall inside them.
  const NodeSet nodes = b.finish(b.op("Relu", {b.input({2048, 1024})}));
  std::unique_ptr<Backend> native = createBackend("native");
  test_support::ThreadCountGuard restore;
  setThreadCount(1);
  auto busy = std::make_unique<test_support::BusyThreadOnThisCore>();
  ASSERT_TRUE(busy->ok());
  MeasurerOptions options;
  options.maxSeconds = 1.0;
  options.targetSpread = 0;  // sample for the whole second
  // When to switch is the scheduler's choice: another measurement if one
  // saw no switch inside a timed run (seen once in 60, then twice in a row
  // on a loaded machine).
  Measurement m;
  for (int attempt = 0; attempt < 5 && m.preemptedRuns == 0; ++attempt)
    m = measureKernel(*native, KernelRequest::of(b.graph(), nodes), options);
  busy.reset();
  ASSERT_EQ(m.status, MeasurementStatus::Ok) << m.message;
  EXPECT_GT(m.preemptedRuns, 0) << m.samples << " samples, median " << m.medianNs << " ns, min " << m.minNs;
  EXPECT_GE(m.samples, options.minSamples);
}

// The cache state a kernel is measured in is the one it meets in a run of
// its model: a model whose working set fits the private caches of the cores
// that run it is measured hot; a larger one after writes of its own working
// set (to the next power of two), with its inputs read again, whatever the
// size of the last-level cache sysfs reports.
TEST(Measurer, AModelThatFitsThePrivateCachesIsMeasuredHotALargerOneAfterItsOwnSize) {
  GraphBuilder small;
  const int64_t smallRows = static_cast<int64_t>(privateCacheBytes() / 4096 / 4);
  small.finish(small.op("Relu", {small.input({smallRows, 1024})}));  // 2 x 1/4 of the private caches
  EXPECT_EQ(modelWorkingSetBytes(small.graph()), size_t{2} * smallRows * 1024 * 4);
  EXPECT_EQ(measurementProtocol(small.graph()), "hot");
  EXPECT_EQ(MeasurerOptions::forModel(small.graph()).evictBytes, 0u);

  // 2 x 3/2 of the private caches: three times them in all, which any
  // last-level cache larger than that held whole before, so it was "hot".
  GraphBuilder mid;
  const int64_t midRows = static_cast<int64_t>(privateCacheBytes() / 4096 * 3 / 2);
  mid.finish(mid.op("Relu", {mid.input({midRows, 1024})}));
  const size_t midBytes = modelWorkingSetBytes(mid.graph());
  EXPECT_GT(midBytes, privateCacheBytes());
  const size_t evict = MeasurerOptions::forModel(mid.graph()).evictBytes;
  EXPECT_GE(evict, std::min(midBytes, size_t{256} << 20));  // the rest of a run displaces as much
  EXPECT_EQ(evict & (evict - 1), 0u);                        // a power of two, shared by similar models
  EXPECT_EQ(evict, cacheEvictionBytes(midBytes));
  EXPECT_EQ(measurementProtocol(mid.graph()), "cold-" + std::to_string(evict >> 20) + "MiB-inputs-hot");

  // Larger models are displaced by more, up to twice the last-level cache.
  EXPECT_LE(cacheEvictionBytes(midBytes), cacheEvictionBytes(8 * midBytes));
  EXPECT_LE(cacheEvictionBytes(size_t{1} << 40), size_t{256} << 20);
}

// Measurements taken cold and hot are different quantities: the protocol is
// part of the fingerprint, so a database never mixes them.
TEST(Measurer, TheProtocolIsPartOfTheFingerprint) {
  GraphBuilder b;
  b.finish(b.op("Relu", {b.input({8, 8})}));
  BackendSet set = loadBackendSet({"native"});
  EXPECT_NE(set.fingerprint(b.graph()).libraryVersions.find(";measure=hot"), std::string::npos)
      << set.fingerprint(b.graph()).libraryVersions;
}

}  // namespace
}  // namespace collage
