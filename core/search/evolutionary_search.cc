#include "core/search/evolutionary_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>

#include "core/ir/error.h"

namespace collage {

std::string_view stopReasonName(EvolutionResult::Stop stop) {
  switch (stop) {
    case EvolutionResult::Stop::Saturated: return "saturated";
    case EvolutionResult::Stop::Budget: return "time budget";
    case EvolutionResult::Stop::Generations: return "last generation";
    case EvolutionResult::Stop::Cancelled: return "cancelled";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kTriesPerChild = 4;

struct Individual {
  Genome genome;
  std::string key;
  double cost = kInf;
};

class Evolution {
 public:
  Evolution(size_t length, int alleles, GenomeFitness& fitness, const EvolutionOptions& options,
            const CancellationToken* cancel)
      : length_(length), alleles_(alleles), fitness_(fitness), options_(options), cancel_(cancel),
        rng_(options.seed), start_(Clock::now()) {}

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  bool stopNow(EvolutionResult::Stop& why) const {
    if (cancel_ && cancel_->cancelled()) {
      why = EvolutionResult::Stop::Cancelled;
      return true;
    }
    if (elapsed() >= options_.budgetSeconds) {
      why = EvolutionResult::Stop::Budget;
      return true;
    }
    return false;
  }

  // Canonicalises and evaluates (or finds in the cache) one genome.
  Individual assess(const Genome& raw) { return assessCanonical(canon(raw)); }
  Individual canon(const Genome& raw) {
    auto [genome, key] = fitness_.canonical(raw);
    return Individual{std::move(genome), std::move(key), kInf};
  }
  // Tells the fitness which of `batch` it will be asked for (those without a
  // cost yet, once each), so it can measure them all at once.
  void prepare(const std::vector<Individual>& batch) {
    std::vector<std::pair<Genome, std::string>> unseen;
    for (const Individual& ind : batch)
      if (!costs_.count(ind.key) &&
          std::none_of(unseen.begin(), unseen.end(), [&](const auto& u) { return u.second == ind.key; }))
        unseen.emplace_back(ind.genome, ind.key);
    if (!unseen.empty()) fitness_.prepareGeneration(unseen, result.best, result.bestCost);
  }
  Individual assessCanonical(Individual ind) {
    const Genome genome = ind.genome;
    const std::string key = ind.key;
    if (auto it = costs_.find(key); it != costs_.end()) {
      ++result.cacheHits;
      ind.cost = it->second;
      return ind;
    }
    GenomeEvaluation e = fitness_.evaluate(genome, key, result.best, result.bestCost);
    ++(e.cached ? result.cacheHits : result.evaluations);
    if (!e.provisional) costs_[key] = e.cost;
    ind.cost = e.cost;
    const bool first = result.best.empty();
    if ((first && std::isfinite(e.cost)) || (!first && e.replacesBest)) {
      result.best = genome;
      result.bestCost = e.cost;
      bestKey_ = key;
      result.secondsToBest = elapsed();
      improved_ = true;
    }
    return ind;
  }

  Genome mutate(Genome g) {
    // One to three changes, each setting a window of consecutive genes to
    // one value: regions appear, grow, move and vanish in blocks, which
    // single-gene flips would need many generations to do.
    static constexpr size_t kWindows[] = {1, 1, 2, 3, 4, 6, 8, 12};
    std::uniform_int_distribution<int> changes(1, 3);
    const int n = changes(rng_);
    for (int c = 0; c < n; ++c) {
      const size_t at = std::uniform_int_distribution<size_t>(0, length_ - 1)(rng_);
      const size_t window = kWindows[std::uniform_int_distribution<size_t>(0, std::size(kWindows) - 1)(rng_)];
      const uint8_t value = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, alleles_ - 1)(rng_));
      for (size_t i = at; i < std::min(length_, at + window); ++i) g[i] = value;
    }
    return g;
  }

  Genome crossover(const Genome& a, const Genome& b) {
    size_t i = std::uniform_int_distribution<size_t>(0, length_)(rng_);
    size_t j = std::uniform_int_distribution<size_t>(0, length_)(rng_);
    if (i > j) std::swap(i, j);
    Genome child = a;
    std::copy(b.begin() + static_cast<std::ptrdiff_t>(i), b.begin() + static_cast<std::ptrdiff_t>(j),
              child.begin() + static_cast<std::ptrdiff_t>(i));
    return child;
  }

  const Individual& tournament(const std::vector<Individual>& population) {
    const Individual* winner = nullptr;
    for (int t = 0; t < std::max(1, options_.tournament); ++t) {
      const Individual& c = population[std::uniform_int_distribution<size_t>(0, population.size() - 1)(rng_)];
      if (!winner || c.cost < winner->cost) winner = &c;
    }
    return *winner;
  }

  // The best `size` distinct individuals, the best genome first.
  std::vector<Individual> survivors(std::vector<Individual> all, size_t size) const {
    std::stable_sort(all.begin(), all.end(), [](const Individual& a, const Individual& b) { return a.cost < b.cost; });
    std::vector<Individual> kept;
    for (Individual& ind : all)  // elitism: the best stays, whatever the others' costs
      if (ind.key == bestKey_) {
        kept.push_back(ind);
        break;
      }
    for (Individual& ind : all) {
      if (kept.size() >= size) break;
      if (std::any_of(kept.begin(), kept.end(), [&](const Individual& k) { return k.key == ind.key; })) continue;
      kept.push_back(std::move(ind));
    }
    return kept;
  }

  GenerationReport report(int generation, const std::vector<Individual>& population) {
    GenerationReport r;
    r.generation = generation;
    r.evaluations = result.evaluations;
    r.cacheHits = result.cacheHits;
    r.bestCost = result.bestCost;
    double sum = 0;
    int n = 0;
    for (const Individual& ind : population)
      if (std::isfinite(ind.cost)) sum += ind.cost, ++n;
    r.meanCost = n ? sum / n : kInf;
    r.elapsedSeconds = elapsed();
    r.bestChanged = improved_;
    r.best = result.best;
    improved_ = false;
    return r;
  }

  EvolutionResult result;
  std::string bestKey_;
  bool improved_ = false;

  size_t length_;
  int alleles_;
  GenomeFitness& fitness_;
  const EvolutionOptions& options_;
  const CancellationToken* cancel_;
  std::mt19937_64 rng_;
  Clock::time_point start_;
  std::map<std::string, double> costs_;  // plan key -> cost, this search's cache
};

}  // namespace

EvolutionResult evolve(size_t length, int alleles, const std::vector<Genome>& seeds, GenomeFitness& fitness,
                       const EvolutionOptions& options,
                       const std::function<void(const GenerationReport&)>& onGeneration,
                       const CancellationToken* cancel) {
  COLLAGE_CHECK(!seeds.empty(), "the evolutionary search needs a seed");
  Evolution evo(length, alleles, fitness, options, cancel);
  EvolutionResult& result = evo.result;
  auto emit = [&](const GenerationReport& r) {
    result.history.push_back(r);
    if (onGeneration) onGeneration(r);
  };
  auto finish = [&](EvolutionResult::Stop why) {
    result.stop = why;
    result.seconds = evo.elapsed();
    return std::move(result);
  };

  // Generation 0: the first seed (the initial best), then the other seeds
  // and mutants of them, prepared as one batch.
  std::vector<Individual> population;
  EvolutionResult::Stop why = EvolutionResult::Stop::Generations;
  for (const Genome& s : seeds) COLLAGE_CHECK(s.size() == length, "a seed of the wrong length");
  population.push_back(evo.assess(seeds.front()));
  const size_t size = static_cast<size_t>(std::max(2, options.population));
  std::vector<Individual> batch;
  for (size_t i = 1; i < seeds.size(); ++i) batch.push_back(evo.canon(seeds[i]));
  for (size_t tries = 0; 1 + batch.size() < size && length > 0 && tries < 4 * size; ++tries)
    batch.push_back(evo.canon(evo.mutate(seeds[tries % seeds.size()])));
  if (!evo.stopNow(why)) evo.prepare(batch);
  for (Individual& ind : batch) {
    if (evo.stopNow(why)) break;
    population.push_back(evo.assessCanonical(std::move(ind)));
  }
  population = evo.survivors(std::move(population), size);
  emit(evo.report(0, population));
  if (evo.stopNow(why)) return finish(why);

  int sinceBest = 0;
  for (int generation = 1; generation <= options.maxGenerations; ++generation) {
    std::vector<Individual> next = population;
    bool stopped = false;
    // Children until `offspring` of them are plans this search has not seen
    // (a converging population breeds repeats, which cost nothing but teach
    // nothing), or a few times that many tries; then evaluated as a batch.
    std::vector<Individual> children;
    std::vector<std::string> freshKeys;
    for (int tries = 0;
         static_cast<int>(freshKeys.size()) < options.offspring && tries < kTriesPerChild * options.offspring &&
         length > 0;
         ++tries) {
      const Individual& a = evo.tournament(population);
      Genome child = a.genome;
      if (std::uniform_real_distribution<double>(0, 1)(evo.rng_) < options.crossoverRate)
        child = evo.crossover(a.genome, evo.tournament(population).genome);
      Individual c = evo.canon(evo.mutate(std::move(child)));
      if (!evo.costs_.count(c.key) && std::find(freshKeys.begin(), freshKeys.end(), c.key) == freshKeys.end())
        freshKeys.push_back(c.key);
      children.push_back(std::move(c));
    }
    if (evo.stopNow(why))
      stopped = true;
    else
      evo.prepare(children);
    for (Individual& c : children) {
      if (stopped || evo.stopNow(why)) {
        stopped = true;
        break;
      }
      next.push_back(evo.assessCanonical(std::move(c)));
    }
    const bool improved = evo.improved_;
    population = evo.survivors(std::move(next), size);
    result.generations = generation;
    emit(evo.report(generation, population));
    if (stopped) return finish(why);
    sinceBest = improved ? 0 : sinceBest + 1;
    if (sinceBest >= options.saturationGenerations) return finish(EvolutionResult::Stop::Saturated);
  }
  return finish(EvolutionResult::Stop::Generations);
}

}  // namespace collage
