// Link measurement: the fit of latency + bytes / bandwidth, the in-process
// ping-pong through the runtime's queue (its shape, never its timing), and
// the measurement database's round trip of a link, with the migration of a
// file from before links were stored.
#include "core/pipeline/link_measurement.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include <unistd.h>

#include "core/ir/error.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::expectError;

std::vector<LinkSample> exact(double latency, double bandwidth) {
  std::vector<LinkSample> s;
  for (size_t b : linkMessageSizes())
    s.push_back({static_cast<double>(b), latency + static_cast<double>(b) / bandwidth});
  return s;
}

TEST(LinkMeasurement, SizesSpanFourKibToSixteenMib) {
  const std::vector<size_t> sizes = linkMessageSizes();
  ASSERT_EQ(sizes.size(), 7u);
  EXPECT_EQ(sizes.front(), size_t{4} << 10);
  EXPECT_EQ(sizes.back(), size_t{16} << 20);
}

TEST(LinkMeasurement, FitRecoversLatencyAndBandwidth) {
  const LinkFit f = fitLink(exact(5e-6, 2e9));
  EXPECT_NEAR(f.cost.latencyS, 5e-6, 1e-12);
  EXPECT_NEAR(f.cost.bandwidthBytesPerS / 2e9, 1, 1e-9);
  EXPECT_LT(f.worstError, 1e-9);
}

// Weighted by relative error: a 10 % slower small message moves the latency,
// where an unweighted fit would let the 16 MiB point decide everything.
TEST(LinkMeasurement, FitWeighsEverySizeAlike) {
  std::vector<LinkSample> s = exact(20e-6, 1e10);
  s.front().seconds *= 1.1;
  const LinkFit f = fitLink(s);
  EXPECT_GT(f.cost.latencyS, 20e-6);
  EXPECT_LT(f.worstError, 0.1);
  EXPECT_NEAR(f.cost.bandwidthBytesPerS / 1e10, 1, 0.05);
}

TEST(LinkMeasurement, FitNeverGoesBelowZeroLatencyOrBandwidth) {
  // Times that fall with size: no bandwidth term, all latency.
  const LinkFit flat = fitLink({{4096, 2e-6}, {1 << 20, 1e-6}});
  EXPECT_TRUE(std::isinf(flat.cost.bandwidthBytesPerS));
  EXPECT_GT(flat.cost.latencyS, 1e-6);
  EXPECT_LT(flat.cost.latencyS, 2e-6);
  // A free fit through negative latency: refitted through the origin.
  const LinkFit origin = fitLink({{1000, 1e-6}, {2000, 3e-6}, {4000, 7e-6}});
  EXPECT_EQ(origin.cost.latencyS, 0);
  EXPECT_GT(origin.cost.bandwidthBytesPerS, 0);
}

TEST(LinkMeasurement, FitRefusesTooFewSizesOrBadTimes) {
  expectError([] { fitLink({{4096, 1e-6}}); }, {"at least two message sizes"});
  expectError([] { fitLink({{4096, 1e-6}, {4096, 2e-6}}); }, {"at least two message sizes"});
  expectError([] { fitLink({{4096, 1e-6}, {8192, 0}}); }, {"every time must be > 0"});
}

// The ping-pong's shape (one sample per size, every time positive) and that
// it fits; its figures depend on the machine's load and are not asserted.
TEST(LinkMeasurement, InProcessPingPongFits) {
  const std::vector<LinkSample> s = pingPongInProcess(-1, -1, 2);
  ASSERT_EQ(s.size(), linkMessageSizes().size());
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].bytes, static_cast<double>(linkMessageSizes()[i]));
    EXPECT_GT(s[i].seconds, 0);
  }
  const LinkFit f = fitLink(s);
  EXPECT_GE(f.cost.latencyS, 0);
  EXPECT_GT(f.cost.bandwidthBytesPerS, 0);
}

// The ping-pong pins threads of its own: the caller's affinity is as it was
// (assignCores reads it next, in collage pipeline --devices cpu:N).
TEST(LinkMeasurement, InProcessPingPongLeavesTheCallersCpus) {
  cpu_set_t before, after;
  CPU_ZERO(&before);
  CPU_ZERO(&after);
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  if (CPU_COUNT(&before) < 2) GTEST_SKIP() << "needs 2 CPUs";
  int a = -1, b = -1;
  for (int c = 0; c < CPU_SETSIZE && b < 0; ++c)
    if (CPU_ISSET(c, &before)) (a < 0 ? a : b) = c;
  pingPongInProcess(a, b, 1);
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

TEST(LinkMeasurement, PinningToAMissingCpuIsAnError) {
  expectError([] { pingPongInProcess(100000, -1, 1); }, {"cannot pin a thread to cpu 100000"});
}

class LinkStore : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("collage_link_store_" + std::to_string(::getpid()) + ".sqlite"))
                .string();
    std::filesystem::remove(path_);
  }
  void TearDown() override {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + suffix);
  }
  std::string path_;
};

TEST_F(LinkStore, RoundTripsKeyedByMachineTransportProtocolAndEndpoints) {
  const HardwareFingerprint fp = linkFingerprint();
  const LinkKey key = inProcessLinkKey(0, 1);
  EXPECT_EQ(key.transport, "in-process");
  EXPECT_EQ(key.endpoints, "cpus 0|1");
  LinkFit fit;
  fit.cost = {3e9, 7e-6};
  fit.worstError = 0.04;
  {
    MeasurementDb db(path_);
    EXPECT_EQ(db.schemaVersion(), MeasurementDb::kSchemaVersion);  // links came in 7
    EXPECT_FALSE(db.findLink(fp, key));
    db.storeLink(fp, linkRecordOf(key, fit, 7));
  }
  MeasurementDb db(path_);
  const std::optional<LinkRecord> r = db.findLink(fp, key);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->latencySeconds, 7e-6);
  EXPECT_EQ(r->bandwidthBytesPerSecond, 3e9);
  EXPECT_EQ(r->sizes, 7);
  EXPECT_EQ(r->worstError, 0.04);
  EXPECT_FALSE(r->measuredAt.empty());
  EXPECT_EQ(linkCostOf(*r).latencyS, 7e-6);
  // Another endpoint pair, transport, protocol or machine: not this link.
  EXPECT_FALSE(db.findLink(fp, inProcessLinkKey(1, 0)));
  EXPECT_FALSE(db.findLink(fp, mpiLinkKey("mpi", "cpus 0|1")));
  LinkKey older = key;
  older.protocol = "pingpong-4K-16M-r5";
  EXPECT_FALSE(db.findLink(fp, older));
  HardwareFingerprint other = fp;
  other.cpuModel += " (another)";
  EXPECT_FALSE(db.findLink(other, key));
  // No bandwidth term survives the trip as such.
  LinkFit flat;
  flat.cost = {std::numeric_limits<double>::infinity(), 2e-6};
  db.storeLink(fp, linkRecordOf(older, flat, 2));
  EXPECT_TRUE(std::isinf(linkCostOf(*db.findLink(fp, older)).bandwidthBytesPerS));
}

// A file of schema 6 (no links table) is migrated on open and keeps its rows.
TEST_F(LinkStore, MigratesAFileFromBeforeLinks) {
  { MeasurementDb db(path_); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "DROP TABLE links; PRAGMA user_version = 6;", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  MeasurementDb db(path_);
  EXPECT_EQ(db.schemaVersion(), MeasurementDb::kSchemaVersion);
  db.storeLink(linkFingerprint(), linkRecordOf(inProcessLinkKey(0, 1), fitLink(exact(1e-6, 1e9)), 7));
  EXPECT_TRUE(db.findLink(linkFingerprint(), inProcessLinkKey(0, 1)));
}

// inProcessLink measures once, then answers from the database.
TEST_F(LinkStore, InProcessLinkIsMeasuredOnceThenStored) {
  MeasurementDb db(path_);
  LinkFit fit;
  fit.cost = {1e9, 4e-6};
  db.storeLink(linkFingerprint(), linkRecordOf(inProcessLinkKey(-1, -1), fit, 7));
  bool measured = true;
  const LinkRecord r = inProcessLink(&db, -1, -1, &measured);
  EXPECT_FALSE(measured);
  EXPECT_EQ(r.latencySeconds, 4e-6);
  const LinkRecord fresh = inProcessLink(nullptr, -1, -1, &measured);
  EXPECT_TRUE(measured);
  EXPECT_EQ(fresh.sizes, 7);
}

TEST(LinkMeasurement, WithEveryLinkPricesEveryPair) {
  const LinkCost old{1e9, 1e-3}, measured{5e9, 2e-5};
  const Topology t({{"a", DeviceKind::Cpu, 1}, {"b", DeviceKind::Cpu, 1}, {"c", DeviceKind::Cpu, 1}},
                   {{"a", "b", old}}, &old, "test");
  const Topology m = withEveryLink(t, measured, "measured");
  EXPECT_EQ(m.devices().size(), 3u);
  EXPECT_EQ(m.link("a", "b").latencyS, 2e-5);
  EXPECT_EQ(m.link("b", "c").bandwidthBytesPerS, 5e9);
}

}  // namespace
}  // namespace collage
