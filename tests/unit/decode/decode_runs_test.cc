// Decode runs measured on N ranks beside their simulation
// (core/decode/decode_runs.h): a stored run is found for its model only,
// by ranks, and simulated as the workload it ran (CP one request on all
// ranks, replicated projections; DP one request per rank), worked by hand on
// the simulator's test costs; the line `decode-parallel` prints.
#include "core/decode/decode_runs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/pipeline/link_measurement.h"

namespace collage {
namespace {

// The simulator test's hand costs: rest 1 s, attention 0.1 s a row; one
// layer of 2 heads of 2 columns (partials 32 B); a link of 0.5 s + 1 s per 16 B.
DecodeStepCosts handCosts() {
  DecodeStepCosts c;
  c.restSeconds = 1;
  c.attentionSecondsPerRow = 0.1;
  c.layers = 1;
  c.queryHeads = 2;
  c.kvHeads = 2;
  c.headDim = 2;
  c.hiddenBytes = 16;
  c.weightBytes = 100;
  c.cacheBytesPerRow = 10;
  return c;
}
const LinkCost kHandLink{16, 0.5};

DecodeRunRecord run(const std::string& strategy, int ranks, int64_t context, double stepMs,
                    double tokensPerSecond) {
  DecodeRunRecord r;
  r.modelKey = "sha256:abc";
  r.strategy = strategy;
  r.ranks = ranks;
  r.threadsPerRank = 1;
  r.context = context;
  r.capacity = context + 2;
  r.steps = 2;
  r.stepMs = stepMs;
  r.attentionMs = stepMs / 4;
  r.exchangeMs = 100;
  r.tokensPerSecond = tokensPerSecond;
  return r;
}

std::string tempDir() {
  auto dir = std::filesystem::temp_directory_path() /
             ("collage_decode_runs_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

// CP: one request of prompt 2 and 2 steps on 2 ranks, the cache of 4 rows
// split [0, 2) and [2, 4). Step 0: rank 0 reads rows 0, 1 (1 + 0.2 s), rank
// 1 the new row 2 (1.1 s); step 1: each 2 rows (1.2 s). Each step then
// sends the partials (32 B) to the peer: 0.5 + 2 = 2.5 s. Steps 3.7 s each,
// 2 tokens in 7.4 s.
TEST(DecodeRuns, ACacheParallelRunIsSimulatedAsOneRequestWithReplicatedProjections) {
  const MeasuredRunComparison c =
      compareMeasuredRun(handCosts(), kHandLink, run("CP", 2, 2, 4070, 1000.0 / 4070));
  ASSERT_TRUE(c.simulated) << c.why;
  EXPECT_EQ(c.simulation.strategy.name, "CP-replicated");
  EXPECT_NEAR(c.simulatedStepMs, 3700, 1e-6);
  EXPECT_NEAR(c.simulatedTokensPerSecond, 2 / 7.4, 1e-9);
  EXPECT_NEAR(c.simulatedTalkMsPerStep, 2500, 1e-6);
  EXPECT_NEAR(c.stepError, 3700.0 / 4070 - 1, 1e-12);
  EXPECT_NEAR(c.tokensPerSecondError, (2 / 7.4) / (1000.0 / 4070) - 1, 1e-9);
  EXPECT_EQ(describeMeasuredRun(c),
            "measured CP, 2 rank(s) x 1 thread(s), 1 request(s) at 2 rows, 2 step(s): step "
            "4070.0000 ms (simulated 3700.0000 ms, -9.1 %), attention 1017.5000 ms, exchange "
            "100.0000 ms (simulated 2500.0000 ms, link), 0.2 tokens/s (simulated 0.3, +10.0 %)");
}

// The simulator prices the exchange from the stored runs' measured one
// where there is one for the strategy and ranks (measuredExchanges), else
// from the link. A CP run on 2 ranks is planted in a database and read back
// as `decode-parallel` reads it: its 100 ms exchange a step (one layer: one
// exchange a step) prices the same run's simulation at 100 ms a step, not
// the link's 2500; its steps are 1.2 + 0.1 s (the compute as above).
TEST(DecodeRuns, AStoredRunsMeasuredExchangePricesTheSimulatedOne) {
  const std::string dir = tempDir();
  const std::string model = dir + "/exchange_model.onnx";
  std::ofstream(model) << "a model whose exchange was measured";
  const std::string db = dir + "/exchange_runs.sqlite";
  std::filesystem::remove(db);
  {
    MeasurementDb store(db);
    DecodeRunRecord r = run("CP", 2, 2, 4070, 1000.0 / 4070);
    r.modelKey = decodeModelKey(model);
    store.storeDecodeRun(linkFingerprint(), r);
    r.ranks = 1;  // one rank exchanges nothing: not a measured exchange
    r.exchangeMs = 0;
    store.storeDecodeRun(linkFingerprint(), r);
  }
  const std::vector<DecodeRunRecord> runs = storedDecodeRuns(db, decodeModelKey(model));
  ASSERT_EQ(runs.size(), 2u);
  const std::vector<MeasuredExchange> exchanges = measuredExchanges(runs, handCosts());
  ASSERT_EQ(exchanges.size(), 1u);
  EXPECT_EQ(exchanges[0].strategy, "CP");
  EXPECT_EQ(exchanges[0].devices, 2);
  EXPECT_EQ(exchanges[0].runs, 1);
  EXPECT_NEAR(exchanges[0].seconds, 0.1, 1e-12);
  EXPECT_EQ(exchanges[0].secondsPerRow, 0);

  const DecodeRunRecord& cp = runs[0].ranks == 2 ? runs[0] : runs[1];
  const MeasuredRunComparison c = compareMeasuredRun(handCosts(), kHandLink, cp, &exchanges);
  ASSERT_TRUE(c.simulated) << c.why;
  EXPECT_EQ(c.simulation.talkPricedBy, "measured");
  EXPECT_NEAR(c.simulatedTalkMsPerStep, 100, 1e-9);
  EXPECT_NEAR(c.simulatedStepMs, 1300, 1e-9);
  EXPECT_NE(describeMeasuredRun(c).find("exchange 100.0000 ms (simulated 100.0000 ms, measured, 1 "
                                        "run(s))"),
            std::string::npos)
      << describeMeasuredRun(c);
  // Without them, or on another device count, or for TP (no TP run): the link.
  EXPECT_EQ(compareMeasuredRun(handCosts(), kHandLink, cp).simulation.talkPricedBy, "link");
  const std::vector<DecodeRequest> one{{2, 2}};
  const DecodeStrategy tp = *simulatedStrategyOf("TP");
  const DecodeStrategy cpr = *simulatedStrategyOf("CP");
  EXPECT_EQ(simulateDecodeParallel(handCosts(), kHandLink, 3, one, cpr, 0, &exchanges).talkPricedBy,
            "link");
  EXPECT_EQ(simulateDecodeParallel(handCosts(), kHandLink, 2, one, tp, 0, &exchanges).talkPricedBy,
            "link");
  EXPECT_EQ(simulateDecodeParallel(handCosts(), kHandLink, 1, one, cpr, 0, &exchanges).talkPricedBy,
            "");
  // The planner's CP options on 2 devices take it too (CP by requests: two
  // exchanges a layer, 0.2 s a step).
  const DecodeParallelPlan plan = planDecodeParallel(handCosts(), kHandLink, 2, one, 0, &exchanges);
  for (const DecodeSimulation& s : plan.options) {
    if (s.strategy.name == "CP") {
      EXPECT_EQ(s.talkPricedBy, "measured");
      EXPECT_NEAR(s.communicationSeconds, 2 * 0.2, 1e-9);
    }
    if (s.strategy.name == "CP-replicated") EXPECT_NEAR(s.communicationSeconds, 2 * 0.1, 1e-9);
  }
}

// The fit: per strategy and ranks, seconds an exchange (a step's exchange
// over its exchanges: CP one a layer, TP two) as a line in the context;
// a batch's extra bytes add the link's bandwidth time.
TEST(DecodeRuns, MeasuredExchangesAreALineInTheContextPerStrategyAndRanks) {
  DecodeStepCosts costs = handCosts();
  costs.layers = 2;
  std::vector<DecodeRunRecord> runs;
  for (auto [context, ms] : {std::pair<int64_t, double>{100, 20}, {300, 60}}) {
    runs.push_back(run("CP", 2, context, 500, 2));
    runs.back().exchangeMs = ms;
  }
  runs.push_back(run("TP", 2, 100, 500, 2));
  runs.back().exchangeMs = 8;  // 4 all-reduces a step: 2 ms each
  runs.push_back(run("DP", 2, 100, 500, 2));
  const std::vector<MeasuredExchange> e = measuredExchanges(runs, costs);
  ASSERT_EQ(e.size(), 2u);
  const MeasuredExchange* cp = findMeasuredExchange(e, *simulatedStrategyOf("CP"), 2);
  const MeasuredExchange* tp = findMeasuredExchange(e, *simulatedStrategyOf("TP"), 2);
  ASSERT_TRUE(cp && tp);
  EXPECT_EQ(cp->runs, 2);
  EXPECT_NEAR(cp->seconds, 0, 1e-12);  // 10 ms at 100 rows, 30 at 300: 0.1 ms a row
  EXPECT_NEAR(cp->secondsPerRow, 1e-4, 1e-12);
  EXPECT_NEAR(tp->seconds, 2e-3, 1e-12);
  EXPECT_EQ(findMeasuredExchange(e, *simulatedStrategyOf("TP"), 4), nullptr);
  EXPECT_EQ(findMeasuredExchange(e, *simulatedStrategyOf("DP"), 2), nullptr);
  // CP-replicated, 2 requests at 100 rows, one step: 2 layers x (0.01 s at
  // 100 rows + the second request's partials, 32 B at 16 B/s: 2 s).
  const std::vector<DecodeRequest> two{{100, 1}, {100, 1}};
  const DecodeSimulation s =
      simulateDecodeParallel(costs, kHandLink, 2, two, *simulatedStrategyOf("CP"), 0, &e);
  EXPECT_NEAR(s.communicationSeconds, 2 * (0.01 + 2), 1e-9);
}

// DP: the request on each rank, on its own: steps of 1 + 0.3 and 1 + 0.4 s,
// 4 tokens in 2.7 s; no messages.
TEST(DecodeRuns, ADataParallelRunIsOneRequestPerRank) {
  const MeasuredRunComparison c =
      compareMeasuredRun(handCosts(), kHandLink, run("DP", 2, 2, 1400, 2 * 1000.0 / 1400));
  ASSERT_TRUE(c.simulated);
  EXPECT_EQ(c.simulation.strategy.name, "DP");
  EXPECT_EQ(requestsOfRun(c.run).size(), 2u);
  EXPECT_EQ(c.simulation.tokens, 4);
  EXPECT_NEAR(c.simulatedTokensPerSecond, 4 / 2.7, 1e-9);
  EXPECT_NEAR(c.simulatedStepMs, 1400, 1e-6);
  EXPECT_NEAR(c.stepError, 0, 1e-12);
  EXPECT_EQ(c.simulatedTalkMsPerStep, 0);
}

TEST(DecodeRuns, AStrategyTheSimulatorLacksIsShownUnsimulated) {
  EXPECT_EQ(simulatedStrategyOf("TP")->name, "TP");
  const MeasuredRunComparison c =
      compareMeasuredRun(handCosts(), kHandLink, run("PP", 2, 2, 10, 100));
  EXPECT_FALSE(c.simulated);
  EXPECT_NE(describeMeasuredRun(c).find("(not simulated: the simulator has no strategy 'PP')"),
            std::string::npos)
      << describeMeasuredRun(c);
}

// Stored as `generate` stores them (this machine's link fingerprint, the
// model file's sha256): found for that model, by ranks; another model, or
// a database that does not exist, finds none.
TEST(DecodeRuns, StoredRunsAreFoundForTheirModelAndRanks) {
  const std::string dir = tempDir();
  const std::string model = dir + "/model.onnx", other = dir + "/other.onnx";
  std::ofstream(model) << "one model";
  std::ofstream(other) << "another model";
  const std::string db = dir + "/runs.sqlite";
  std::filesystem::remove(db);
  EXPECT_TRUE(storedDecodeRuns(db, decodeModelKey(model)).empty());
  EXPECT_FALSE(std::filesystem::exists(db));  // looking creates no file
  {
    MeasurementDb store(db);
    DecodeRunRecord r = run("CP", 2, 64, 0.2, 5000);
    r.modelKey = decodeModelKey(model);
    store.storeDecodeRun(linkFingerprint(), r);
    r.strategy = "DP";
    store.storeDecodeRun(linkFingerprint(), r);
    r.ranks = 3;
    store.storeDecodeRun(linkFingerprint(), r);
  }
  EXPECT_EQ(decodeModelKey(model).rfind("sha256:", 0), 0u);
  EXPECT_EQ(storedDecodeRuns(db, decodeModelKey(model)).size(), 3u);
  const std::vector<DecodeRunRecord> two = storedDecodeRuns(db, decodeModelKey(model), 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].strategy, "CP");
  EXPECT_EQ(two[1].strategy, "DP");
  EXPECT_EQ(two[0].context, 64);
  EXPECT_TRUE(storedDecodeRuns(db, decodeModelKey(other)).empty());
}

}  // namespace
}  // namespace collage
