#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/measure/switch_costs.h"

namespace collage {
namespace {

TEST(SwitchCosts, EveryOrderedPairIsMeasuredOnceThenComesFromTheDatabase) {
  CandidateSet set(3);
  set.add(Candidate{NodeSet::of(3, {0}), "a", "op", {}});
  set.add(Candidate{NodeSet::of(3, {0}), "b", "op", {}});
  set.add(Candidate{NodeSet::of(3, {1}), "b", "op", {}});
  std::vector<Measurement> ms(3);
  for (size_t i = 0; i < ms.size(); ++i) {
    ms[i].status = MeasurementStatus::Ok;
    ms[i].medianNs = 100.0 * static_cast<double>(3 - i);  // b's cheapest is candidate 2
  }
  std::vector<std::pair<std::string, std::string>> asked;
  MeasurePairFn pair = [&](const Candidate& x, const Candidate& y) {
    asked.emplace_back(x.backend, y.backend);
    EXPECT_TRUE(x.backend != "b" || x.nodes.contains(1)) << "representative is the cheapest";
    Measurement m;
    m.status = MeasurementStatus::Ok;
    m.medianNs = x.backend == y.backend ? 10 : 40;
    return m;
  };
  auto path = std::filesystem::temp_directory_path() / ("switch_" + std::to_string(getpid()) + ".sqlite");
  std::filesystem::remove(path);
  MeasurementDb db(path.string());
  HardwareFingerprint fp{"v", "m", "avx2", 2, 2, ""};
  std::map<std::string, std::string> versions = {{"a", "1"}, {"b", "2"}};
  SwitchCostTable t = measureSwitchCosts(set, ms, versions, &db, fp, pair);
  EXPECT_EQ(asked.size(), 4u);
  EXPECT_EQ(t.measured, 4);
  EXPECT_DOUBLE_EQ(t.epsilonInto("b"), (40.0 + 10.0) / 2);
  EXPECT_DOUBLE_EQ(t.epsilonInto("nobody"), 0.0);
  SwitchCostTable again = measureSwitchCosts(set, ms, versions, &db, fp, pair);
  EXPECT_EQ(asked.size(), 4u);  // nothing measured the second time
  EXPECT_EQ(again.measured, 0);
  EXPECT_EQ(again.pairNs, t.pairNs);
}

}  // namespace
}  // namespace collage
