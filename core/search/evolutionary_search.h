// The evolutionary search of Collage's second level, over any genome with a
// fitness that is measured (core/search/graph_level_search.h) or, in tests,
// a deterministic double.
//
// A population of genomes, seeded by the caller; each generation makes
// offspring by tournament selection, two-point crossover and mutation, and
// keeps the best of parents and offspring (elitism: the best never leaves).
// The best is not simply the lowest cost seen: the fitness decides whether a
// genome replaces it (a measured one must win paired rounds against it, so
// noise cannot crown a lucky plan). Genomes are canonicalised first, and a
// genome whose plan was evaluated before is not evaluated again (a cache
// hit). The search stops at saturation (no new best for N generations), at
// the time budget, after the last generation, or on cancel, and always
// returns the best found.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/search_events.h"
#include "core/search/region_genome.h"

namespace collage {

struct EvolutionOptions {
  int population = 10;
  int offspring = 10;  // new plans per generation (repeats are cache hits and are not counted)
  int tournament = 3;
  double crossoverRate = 0.7;
  int saturationGenerations = 6;
  int maxGenerations = 1000;
  double budgetSeconds = 300;
  uint64_t seed = 1;
};

struct GenomeEvaluation {
  double cost = std::numeric_limits<double>::infinity();  // lower is better; +inf: cannot run
  bool replacesBest = false;  // the fitness's verdict: it beats the best so far
  bool cached = false;        // known without measuring (a store, or by definition)
  // An estimate, not a measurement (a plan still out at its generation's
  // deadline): used this generation, but not kept in the search's cache, so
  // the plan is asked for again when it is bred again.
  bool provisional = false;
};

class GenomeFitness {
 public:
  virtual ~GenomeFitness() = default;
  // The canonical genome and the identity of the plan it stands for:
  // genomes with equal keys are one individual.
  virtual std::pair<Genome, std::string> canonical(const Genome& genome) = 0;
  // The cost of a canonical genome. `best` is empty for the first
  // evaluation (which then becomes the best if it can run at all).
  virtual GenomeEvaluation evaluate(const Genome& genome, const std::string& key, const Genome& best,
                                    double bestCost) = 0;
  // Called once per generation, before evaluate() is called for each of its
  // plans, with the canonical genomes and keys this search has no cost for
  // yet (the seeds after the first, then each generation's new children):
  // a fitness that measures elsewhere (a Slurm job array) sends them all
  // out at once here, against `best`. The default does nothing.
  virtual void prepareGeneration(const std::vector<std::pair<Genome, std::string>>& unseen,
                                 const Genome& best, double bestCost) {
    (void)unseen, (void)best, (void)bestCost;
  }
};

struct GenerationReport {
  int generation = 0;   // 0: the seeded population
  int evaluations = 0;  // genomes measured so far
  int cacheHits = 0;    // genomes whose plan had a cost already (this search, a store, the seed)
  double bestCost = 0;
  double meanCost = 0;  // over the population members that can run
  double elapsedSeconds = 0;
  bool bestChanged = false;
  Genome best;
};

struct EvolutionResult {
  Genome best;
  double bestCost = std::numeric_limits<double>::infinity();
  int generations = 0;
  int evaluations = 0;
  int cacheHits = 0;
  double seconds = 0;
  double secondsToBest = 0;  // when the last new best was found
  enum class Stop { Saturated, Budget, Generations, Cancelled } stop = Stop::Generations;
  std::vector<GenerationReport> history;
};
std::string_view stopReasonName(EvolutionResult::Stop stop);  // "saturated", "time budget", ...

// `seeds` (at least one) start the population, the first being the initial
// best; the rest of the population is mutants of the seeds. `alleles` is
// the number of values a gene takes (0..alleles-1). `onGeneration` is called
// after each generation (and for the seeded population) on this thread.
EvolutionResult evolve(size_t length, int alleles, const std::vector<Genome>& seeds, GenomeFitness& fitness,
                       const EvolutionOptions& options,
                       const std::function<void(const GenerationReport&)>& onGeneration = {},
                       const CancellationToken* cancel = nullptr);

}  // namespace collage
