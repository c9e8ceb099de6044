// Node costs through the measurement database: measured once, then read
// back; a node that cannot be measured is an error naming it. The measure
// function here is a test double (the product's is the isolated worker).
#include "core/pipeline/measured_stage_cost.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/ir/error.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::expectError;
using test_support::okMeasurement;

TEST(MeasuredStageCost, NodesAreMeasuredOnceThenReadFromTheDatabase) {
  // in -> Relu -> {Sigmoid, Tanh} -> Add
  GraphBuilder b;
  const ValueId r = b.op("Relu", {b.input({2, 8})});
  b.finish(b.op("Add", {b.op("Sigmoid", {r}), b.op("Tanh", {r})}));
  const Graph& g = b.graph();
  MeasurementDb db(":memory:");
  HardwareFingerprint fp;
  fp.cpuModel = "test cpu";
  fp.threads = 1;
  int calls = 0;
  const MeasureFn measure = [&](const Candidate& c) {
    ++calls;
    return okMeasurement(1000.0 * (c.nodes.first() + 1));
  };
  CostingReport report;
  const NodeProfile p = measureNodes(g, "native", "1", &db, fp, measure, &report);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(report.measured, 4);
  ASSERT_EQ(p.seconds.size(), 4u);
  for (NodeId n = 0; n < 4; ++n)
    EXPECT_DOUBLE_EQ(p.seconds[static_cast<size_t>(n)], 1e-6 * (n + 1));
  EXPECT_EQ(p.activationBytes[3], 2 * 8 * 4);

  const NodeProfile again = measureNodes(g, "native", "1", &db, fp, measure, &report);
  EXPECT_EQ(calls, 4);  // nothing measured again
  EXPECT_EQ(report.cached, 4);
  EXPECT_EQ(again.seconds, p.seconds);
  // Another thread count is another key: measured anew.
  fp.threads = 2;
  measureNodes(g, "native", "1", &db, fp, measure);
  EXPECT_EQ(calls, 8);

  const MeasureFn failing = [&](const Candidate& c) {
    if (c.nodes.first() != 2) return okMeasurement(1000);
    Measurement m;
    m.status = MeasurementStatus::Failed;
    m.message = "the kernel crashed";
    return m;
  };
  expectError([&] { measureNodes(g, "native", "1", nullptr, fp, failing); },
              {"node " + g.node(2).name, "(Tanh)", "native", "the kernel crashed"});
}

}  // namespace
}  // namespace collage
