// The evolutionary search on a deterministic test double of the fitness
// (the product always measures): genomes of 20 genes, 3 alleles, read as
// regions (maximal runs of one non-zero allele) with a planted effect
// between kernels. It must find the planted optimum, evaluate each plan
// once (the cache), and stop at saturation, at the budget or on cancel.
#include "core/search/evolutionary_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace collage {
namespace {

// Costs of a plan of 20 groups: 1 per group left alone, 1.05 per group in a
// region (each library is a little slower on a group alone), and library 1
// saves 0.2 per group boundary it removes inside genes 4..11 (a layout kept
// between kernels). The unique optimum: one region of library 1 over
// exactly genes 4..11, cost 20 - 8 * (1 - 1.05) - 7 * 0.2 = 19.0.
class PlantedFitness final : public GenomeFitness {
 public:
  static constexpr size_t kLength = 20;

  std::pair<Genome, std::string> canonical(const Genome& genome) override {
    std::string key;
    for (uint8_t g : genome) key += static_cast<char>('0' + g);
    return {genome, key};
  }
  GenomeEvaluation evaluate(const Genome& genome, const std::string& key, const Genome&,
                            double bestCost) override {
    ++calls;
    keys.insert(key);
    GenomeEvaluation e;
    e.cost = cost(genome);
    e.replacesBest = e.cost < bestCost - 1e-9;
    return e;
  }
  static double cost(const Genome& g) {
    double total = 0;
    for (size_t i = 0; i < g.size();) {
      size_t end = i;
      while (end + 1 < g.size() && g[end + 1] == g[i]) ++end;
      const double len = static_cast<double>(end - i + 1);
      if (g[i] == 0) {
        total += len;
      } else {
        total += 1.05 * len;
        if (g[i] == 1 && i >= 4 && end <= 11) total -= 0.2 * (len - 1);
      }
      i = end + 1;
    }
    return total;
  }
  static Genome optimum() {
    Genome g(kLength, 0);
    for (size_t i = 4; i <= 11; ++i) g[i] = 1;
    return g;
  }

  int calls = 0;
  std::set<std::string> keys;
};

EvolutionOptions testOptions(uint64_t seed) {
  EvolutionOptions o;
  o.population = 12;
  o.offspring = 12;
  o.saturationGenerations = 40;
  o.maxGenerations = 400;
  o.budgetSeconds = 1e9;
  o.seed = seed;
  return o;
}

TEST(EvolutionarySearch, FindsThePlantedOptimumFromTheZeroSeed) {
  for (uint64_t seed : {1, 2, 3}) {
    PlantedFitness fitness;
    const EvolutionResult r =
        evolve(PlantedFitness::kLength, 3, {Genome(PlantedFitness::kLength, 0)}, fitness, testOptions(seed));
    EXPECT_EQ(r.best, PlantedFitness::optimum()) << "seed " << seed;
    EXPECT_NEAR(r.bestCost, 19.0, 1e-9);
    EXPECT_EQ(r.stop, EvolutionResult::Stop::Saturated);
  }
}

// Every fitness call is a plan never evaluated before; the repeats are
// cache hits (a population converging on the optimum repeats itself a lot).
TEST(EvolutionarySearch, EvaluatesEachPlanOnce) {
  PlantedFitness fitness;
  const EvolutionResult r =
      evolve(PlantedFitness::kLength, 3, {Genome(PlantedFitness::kLength, 0)}, fitness, testOptions(7));
  EXPECT_EQ(fitness.calls, r.evaluations);
  EXPECT_EQ(static_cast<size_t>(fitness.calls), fitness.keys.size());
  EXPECT_GT(r.cacheHits, 0);
  // Each generation measures at most `offspring` new plans, and tries at
  // most four children per new plan it wants.
  ASSERT_GE(r.history.size(), 2u);
  const int offspring = testOptions(7).offspring;
  for (size_t i = 1; i < r.history.size(); ++i) {
    const GenerationReport& a = r.history[i - 1];
    const GenerationReport& b = r.history[i];
    EXPECT_LE(b.evaluations - a.evaluations, offspring);
    EXPECT_LE(b.evaluations - a.evaluations + b.cacheHits - a.cacheHits, 4 * offspring);
  }
  // Early on (far from converged), every generation finds its new plans.
  EXPECT_EQ(r.history[1].evaluations - r.history[0].evaluations, offspring);
}

// The best never gets worse from one generation to the next, and each
// report says when it changed.
TEST(EvolutionarySearch, BestIsMonotoneAndReportedPerGeneration) {
  PlantedFitness fitness;
  std::vector<GenerationReport> seen;
  const EvolutionResult r = evolve(PlantedFitness::kLength, 3, {Genome(PlantedFitness::kLength, 0)}, fitness,
                                   testOptions(4), [&](const GenerationReport& g) { seen.push_back(g); });
  ASSERT_EQ(seen.size(), r.history.size());
  EXPECT_EQ(seen.front().generation, 0);
  EXPECT_DOUBLE_EQ(seen.front().bestCost, 20.0);  // the seed
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_LE(seen[i].bestCost, seen[i - 1].bestCost);
    EXPECT_EQ(seen[i].bestChanged, seen[i].bestCost < seen[i - 1].bestCost);
  }
}

// A fitness that refuses to crown anyone (measured plans must win paired
// rounds): the seed stays the best, and the search saturates.
class NothingWins final : public GenomeFitness {
 public:
  std::pair<Genome, std::string> canonical(const Genome& g) override {
    return {g, std::string(g.begin(), g.end())};
  }
  GenomeEvaluation evaluate(const Genome& g, const std::string&, const Genome&, double) override {
    ++calls;
    GenomeEvaluation e;
    e.cost = g[0] == 0 ? 10.0 : 9.9;  // lower, but not confirmed
    return e;
  }
  int calls = 0;
};

TEST(EvolutionarySearch, OnlyTheFitnessVerdictReplacesTheBest) {
  NothingWins fitness;
  EvolutionOptions o = testOptions(1);
  o.saturationGenerations = 3;
  const EvolutionResult r = evolve(4, 2, {Genome(4, 0)}, fitness, o);
  EXPECT_EQ(r.best, Genome(4, 0));
  EXPECT_DOUBLE_EQ(r.bestCost, 10.0);
  EXPECT_EQ(r.stop, EvolutionResult::Stop::Saturated);
  EXPECT_EQ(r.generations, 3);
}

TEST(EvolutionarySearch, StopsOnCancelAndAtTheBudgetWithTheBestSoFar) {
  {
    PlantedFitness fitness;
    CancellationToken cancel;
    cancel.cancel();
    const EvolutionResult r = evolve(PlantedFitness::kLength, 3, {Genome(PlantedFitness::kLength, 0)}, fitness,
                                     testOptions(1), {}, &cancel);
    EXPECT_EQ(r.stop, EvolutionResult::Stop::Cancelled);
    EXPECT_EQ(r.best, Genome(PlantedFitness::kLength, 0));  // the seed is always evaluated
    EXPECT_EQ(fitness.calls, 1);
  }
  {
    PlantedFitness fitness;
    EvolutionOptions o = testOptions(1);
    o.budgetSeconds = 0;
    const EvolutionResult r = evolve(PlantedFitness::kLength, 3, {Genome(PlantedFitness::kLength, 0)}, fitness, o);
    EXPECT_EQ(r.stop, EvolutionResult::Stop::Budget);
    EXPECT_EQ(r.best, Genome(PlantedFitness::kLength, 0));
  }
}

// A fitness that measures elsewhere (a Slurm job array): each generation's
// new plans arrive at once in prepareGeneration; those whose answer is not
// back by the deadline (here: every plan with a region of library 2 is "still
// out" the first time) keep an estimate, are not cached, and are asked for
// again when bred again, when their answer is in.
class BatchedFitness final : public GenomeFitness {
 public:
  std::pair<Genome, std::string> canonical(const Genome& genome) override { return inner.canonical(genome); }
  void prepareGeneration(const std::vector<std::pair<Genome, std::string>>& unseen, const Genome& best,
                         double) override {
    ++batches;
    EXPECT_FALSE(best.empty());
    std::set<std::string> once;
    for (const auto& [g, key] : unseen) {
      EXPECT_TRUE(once.insert(key).second) << "a key twice in one batch";
      sent.insert(key);
      const bool slow = std::find(g.begin(), g.end(), uint8_t{2}) != g.end();
      if (slow && !late.count(key))
        late.insert(key);  // out past the deadline: back by the next batch
      else
        answers[key] = PlantedFitness::cost(g);
    }
  }
  GenomeEvaluation evaluate(const Genome& genome, const std::string& key, const Genome& best,
                            double bestCost) override {
    GenomeEvaluation e;
    if (best.empty()) {
      e.cost = PlantedFitness::cost(genome);
      return e;
    }
    EXPECT_TRUE(sent.count(key)) << "evaluated without being sent";
    auto it = answers.find(key);
    if (it == answers.end()) {
      ++estimates;
      e.cost = bestCost;  // the estimate: no better than the best
      e.provisional = true;
      return e;
    }
    answers.erase(it);
    ++measured;
    lateMeasured += late.count(key) > 0;
    e.cost = PlantedFitness::cost(genome);
    e.replacesBest = e.cost < bestCost - 1e-9;
    return e;
  }
  PlantedFitness inner;
  int batches = 0, estimates = 0, measured = 0, lateMeasured = 0;
  std::set<std::string> sent, late;
  std::map<std::string, double> answers;
};

TEST(EvolutionarySearch, AGenerationGoesOutAsOneBatchAndLatePlansKeepTheirEstimate) {
  BatchedFitness fitness;
  EvolutionOptions o = testOptions(3);
  const EvolutionResult r = evolve(PlantedFitness::kLength, 3, {Genome(PlantedFitness::kLength, 0)}, fitness, o);
  // One batch per generation at most (generation 0's seeds and mutants included).
  EXPECT_GE(fitness.batches, 2);
  EXPECT_LE(fitness.batches, r.generations + 1);
  // Some plans were still out and kept their estimate; bred again, they
  // were collected. The best is a measured plan, never an estimate.
  EXPECT_GT(fitness.estimates, 0);
  EXPECT_GT(fitness.lateMeasured, 0);
  EXPECT_LT(r.bestCost, 20.0);
  EXPECT_NEAR(r.bestCost, PlantedFitness::cost(r.best), 1e-9);
}

}  // namespace
}  // namespace collage
