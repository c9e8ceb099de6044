#include "core/search/graph_level_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>

#include "core/ir/error.h"

namespace collage {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kFailuresLogged = 3;

// The measured fitness: decodes genomes into plans and times each new plan
// against the best so far in the isolated worker.
class MeasuredPlanFitness final : public GenomeFitness {
 public:
  MeasuredPlanFitness(const RegionEncoding& encoding, IsolatedMeasurer& measurer, MeasurementDb* db,
                      const HardwareFingerprint& fingerprint, const GraphLevelOptions& options,
                      const std::string& baseKey)
      : encoding_(encoding), measurer_(measurer), db_(db), fingerprint_(fingerprint), options_(options),
        baseKey_(baseKey) {
    if (db_)
      for (PlanRunRecord& r : db_->findPlanRuns(fingerprint_, options_.modelKey, baseKey_))
        stored_.emplace(r.planKey, std::move(r));
  }

  std::pair<Genome, std::string> canonical(const Genome& genome) override {
    RegionEncoding::Decoded d = encoding_.decode(genome);
    Genome canon = d.canonical;
    std::string key = d.key;
    plans_.emplace(key, std::move(d.plan));
    return {std::move(canon), std::move(key)};
  }

  GenomeEvaluation evaluate(const Genome& genome, const std::string& key, const Genome& best,
                            double bestCost) override {
    GenomeEvaluation e;
    const Plan& plan = plans_.at(key);
    if (best.empty()) {  // the starting plan: cost 1 by definition
      e.cost = 1;
      e.cached = true;
      setBest(key, 1);
      return e;
    }
    if (auto it = stored_.find(key); it != stored_.end()) {
      const PlanRunRecord& r = it->second;
      const bool couldWin = r.status == MeasurementStatus::Ok && r.relativeCost < bestCost * (1 - options_.minGain);
      if (!couldWin) {  // nothing to confirm: reuse
        e.cost = r.status == MeasurementStatus::Ok ? r.relativeCost : kInf;
        e.cached = true;
        return e;
      }
      // It beat the best once: it must do so again, now, to replace it.
    }
    if (options_.evaluator) {
      auto it = batch_.find(key);
      if (it == batch_.end()) {
        // Still out at its generation's deadline: the incumbent's cost as
        // its estimate, not kept, so it is asked for again when bred again.
        e.cost = bestCost;
        e.provisional = true;
        return e;
      }
      const TimedPlan timed = it->second;
      batch_.erase(it);
      return record(genome, key, timed.runs, costOf(timed.incumbentKey), bestCost);
    }
    const Plan& incumbent = plans_.at(bestKey_);
    PairedPlanRuns runs = measurer_.timePlans(plan, incumbent, options_.runs, options_.timeoutSeconds);
    return record(genome, key, runs, bestCost, bestCost);
  }

  // A generation's plans out at once, when an evaluator times them.
  void prepareGeneration(const std::vector<std::pair<Genome, std::string>>& unseen, const Genome& best,
                         double bestCost) override {
    if (!options_.evaluator || best.empty()) return;
    incumbentCost_[bestKey_] = bestCost;
    std::vector<PlanToTime> out;
    for (const auto& [genome, key] : unseen) {
      if (auto it = stored_.find(key); it != stored_.end()) {
        const PlanRunRecord& r = it->second;
        if (!(r.status == MeasurementStatus::Ok && r.relativeCost < bestCost * (1 - options_.minGain))) continue;
      }
      out.push_back(PlanToTime{key, &plans_.at(key), encoding_.toString(genome)});
      sent_[key] = encoding_.toString(genome);
    }
    if (out.empty()) return;
    std::vector<TimedPlan> back = options_.evaluator->timeGeneration(out, bestKey_, plans_.at(bestKey_), cancel);
    std::map<std::string, bool> thisGeneration;
    for (const PlanToTime& p : out) thisGeneration[p.key] = true;
    for (TimedPlan& t : back) {
      if (thisGeneration.count(t.planKey)) {
        batch_[t.planKey] = std::move(t);
        continue;
      }
      // A plan of an earlier generation, back after its deadline: kept as
      // the search's knowledge of it (it is a cache hit when bred again).
      if (!incumbentCost_.count(t.incumbentKey) || !plans_.count(t.planKey)) continue;
      ++plansCollectedLate;
      PlanRunRecord r = recordOf(t.planKey, sent_[t.planKey], t.runs, costOf(t.incumbentKey));
      if (db_ && t.runs.isVerdict()) db_->storePlanRun(fingerprint_, r);
      stored_[t.planKey] = r;
    }
    for (const PlanToTime& p : out)
      if (!batch_.count(p.key)) ++plansStillOut;
  }

  PlanRunRecord recordOf(const std::string& key, const std::string& genome, const PairedPlanRuns& runs,
                         double incumbentCost) const {
    PlanRunRecord record;
    record.modelKey = options_.modelKey;
    record.baseKey = baseKey_;
    record.planKey = key;
    record.genome = genome;
    record.status = runs.status;
    record.message = runs.message;
    record.rounds = static_cast<int>(runs.aMs.size());
    if (runs.ok()) {
      record.relativeCost = runs.medianRatio() * incumbentCost;
      record.medianMs = runs.aMedianMs();
    }
    return record;
  }

  // What a paired run says about a plan timed against an incumbent of cost
  // `incumbentCost`, while the best so far costs `bestCost`.
  GenomeEvaluation record(const Genome& genome, const std::string& key, const PairedPlanRuns& runs,
                          double incumbentCost, double bestCost) {
    GenomeEvaluation e;
    kernelsCompiled += runs.kernelsCompiled;
    kernelsReused += runs.kernelsReused;
    PlanRunRecord record = recordOf(key, encoding_.toString(genome), runs, incumbentCost);
    if (runs.ok()) {
      e.cost = record.relativeCost;
      // The scale from costs to ms: the median over every paired run of the
      // best's time over its cost, so one run in a loaded minute does not set it.
      if (incumbentCost > 0) {
        msPerCostSamples_.push_back(runs.bMedianMs() / incumbentCost);
        std::vector<double> v = msPerCostSamples_;
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        msPerCost_ = v[v.size() / 2];
      }
      // Against the incumbent it ran with; in a batch another plan may have
      // replaced that one since, and this one must then be cheaper still.
      e.replacesBest = runs.aReplacesB(options_.minGain, options_.minFasterShare) && e.cost < bestCost;
    } else {
      // Each failure costs its plan only; the first few are told, the rest counted.
      if (++failedPlans <= kFailuresLogged && observer)
        observer->onLog("graph-level search: a plan could not run (" + runs.message + ")" +
                        (failedPlans == kFailuresLogged ? "; further failures are only counted" : ""));
    }
    // A crash or a timeout may be one busy minute: only this search takes
    // it as the plan's cost; a later one tries the plan again.
    if (db_ && runs.isVerdict()) db_->storePlanRun(fingerprint_, record);
    stored_[key] = record;
    if (e.replacesBest) setBest(key, e.cost);
    return e;
  }

  // ms of a cost, once the first paired run has told the scale (0 before).
  double msOf(double cost) const { return msPerCost_ > 0 ? cost * msPerCost_ : 0; }
  const Plan& planOf(const std::string& key) const { return plans_.at(key); }
  std::vector<Genome> storedSeeds(size_t count) const {
    std::vector<const PlanRunRecord*> ok;
    for (const auto& [k, r] : stored_)
      if (r.status == MeasurementStatus::Ok && r.relativeCost < 1) ok.push_back(&r);
    std::sort(ok.begin(), ok.end(), [](auto* a, auto* b) { return a->relativeCost < b->relativeCost; });
    std::vector<Genome> seeds;
    for (const PlanRunRecord* r : ok) {
      if (seeds.size() >= count) break;
      if (auto g = encoding_.fromString(r->genome)) seeds.push_back(*g);
    }
    return seeds;
  }
  size_t storedCount() const { return stored_.size(); }

  SearchObserver* observer = nullptr;
  const CancellationToken* cancel = nullptr;
  int plansStillOut = 0;
  int plansCollectedLate = 0;
  int kernelsCompiled = 0;
  int kernelsReused = 0;
  int failedPlans = 0;

 private:
  void setBest(const std::string& key, double cost) {
    bestKey_ = key;
    if (options_.onBestPlan) options_.onBestPlan(plans_.at(key), msOf(cost));
  }

  const RegionEncoding& encoding_;
  IsolatedMeasurer& measurer_;
  MeasurementDb* db_;
  const HardwareFingerprint& fingerprint_;
  const GraphLevelOptions& options_;
  std::string baseKey_;
  std::string bestKey_;
  double msPerCost_ = 0;
  std::vector<double> msPerCostSamples_;
  std::map<std::string, Plan> plans_;             // decoded, by placement key
  std::map<std::string, PlanRunRecord> stored_;   // measured, by placement key
  // With an evaluator: this generation's answers, the cost of each plan that
  // was an incumbent, and the genome of each plan sent.
  std::map<std::string, TimedPlan> batch_;
  std::map<std::string, double> incumbentCost_;
  std::map<std::string, std::string> sent_;
  double costOf(const std::string& incumbentKey) const {
    auto it = incumbentCost_.find(incumbentKey);
    return it == incumbentCost_.end() ? 1 : it->second;
  }
};

}  // namespace

std::vector<GraphLibrary> graphLibrariesOf(const Graph& graph, const std::vector<Backend*>& backends,
                                           const std::vector<std::string>& allowed) {
  std::vector<GraphLibrary> libraries;
  for (Backend* b : backends) {
    if (!b || !b->compilesRegions()) continue;
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), b->name()) == allowed.end()) continue;
    libraries.push_back({b->name(), [b, &graph](const NodeSet& nodes) {
                           return b->regionRefusal(KernelRequest::of(graph, nodes, "region"));
                         }});
  }
  return libraries;
}

std::vector<GraphLibrary> honouringConstraints(const Graph& graph, std::vector<GraphLibrary> libraries,
                                               const PlacementConstraints& constraints) {
  if (constraints.empty()) return libraries;
  // Per node: the backend it is pinned to ("" if none), whether it is in a
  // pinned group, and the backends it must not run on.
  struct NodeRule {
    std::string pinnedTo;
    bool inPinnedGroup = false;
    std::vector<std::string> forbidden;
  };
  auto rules = std::make_shared<std::vector<NodeRule>>(static_cast<size_t>(graph.numNodes()));
  auto select = [&](const NodeSelector& sel) {
    std::vector<NodeId> nodes = sel.select(graph);
    if (nodes.empty()) throw Error("'" + sel.toString() + "' matches no node of the model");
    return nodes;
  };
  for (const Pin& pin : constraints.pins)
    for (const NodeSelector& sel : pin.nodes)
      for (NodeId n : select(sel)) {
        (*rules)[static_cast<size_t>(n)].pinnedTo = pin.backend;
        (*rules)[static_cast<size_t>(n)].inPinnedGroup = pin.group;
      }
  for (const Forbid& f : constraints.forbids)
    for (NodeId n : select(f.nodes)) (*rules)[static_cast<size_t>(n)].forbidden.push_back(f.backend);
  for (GraphLibrary& library : libraries) {
    library.refusal = [&graph, rules, backend = library.backend, inner = library.refusal](const NodeSet& nodes) {
      std::string why;
      nodes.forEach([&](NodeId n) {
        if (!why.empty()) return;
        const NodeRule& r = (*rules)[static_cast<size_t>(n)];
        const std::string name = "node '" + graph.node(n).name + "'";
        if (r.inPinnedGroup)
          why = name + " is in a pinned group";
        else if (!r.pinnedTo.empty() && r.pinnedTo != backend)
          why = name + " is pinned to " + r.pinnedTo;
        else if (std::find(r.forbidden.begin(), r.forbidden.end(), backend) != r.forbidden.end())
          why = name + " must not run on " + backend;
      });
      return why.empty() ? inner(nodes) : why;
    };
  }
  return libraries;
}

std::string graphLevelModelKey(const Plan& plan) {
  std::string key = "sha256:" + plan.modelSha256;
  for (const auto& [name, shape] : plan.inputShapes) {
    key += ";" + name + "=";
    for (size_t i = 0; i < shape.size(); ++i) key += (i ? "x" : "") + std::to_string(shape[i]);
  }
  return key + ";timing=" + kPairedRunMethod;
}

namespace {
GraphLevelResult searchAndCheck(const Graph& graph, const Plan& start, const std::vector<GraphLibrary>& libraries,
                                IsolatedMeasurer& measurer, MeasurementDb* db,
                                const HardwareFingerprint& fingerprint, const GraphLevelOptions& options,
                                SearchObserver* observer, const CancellationToken* cancel) {
  GraphLevelResult result;
  result.plan = start;
  if (libraries.empty()) {
    result.verdict = "no graph library among the backends: nothing to search";
    return result;
  }
  GraphLevelOptions opts = options;
  if (opts.modelKey.empty()) opts.modelKey = graphLevelModelKey(start);
  const RegionEncoding encoding(graph, start, libraries);
  const std::string baseKey = placementKey(start);
  MeasuredPlanFitness fitness(encoding, measurer, db, fingerprint, opts, baseKey);
  fitness.observer = observer;
  fitness.cancel = cancel;
  result.storedRuns = static_cast<int>(fitness.storedCount());

  // Seeds: the starting plan, everything handed to each library in turn
  // (the widest regions each accepts), and the best plans stored earlier.
  std::vector<Genome> seeds{encoding.zeros()};
  for (int a = 1; a < encoding.alleles(); ++a) seeds.push_back(encoding.uniform(static_cast<uint8_t>(a)));
  for (Genome& g : fitness.storedSeeds(3)) seeds.push_back(std::move(g));

  auto onGeneration = [&](const GenerationReport& r) {
    if (!observer) return;
    SearchStepEvent e;
    e.search = "graph-level";
    e.step = r.generation;
    e.evaluations = r.evaluations;
    e.cacheHits = r.cacheHits;
    e.bestCostNs = fitness.msOf(r.bestCost) * 1e6;
    e.meanCostNs = std::isfinite(r.meanCost) ? fitness.msOf(r.meanCost) * 1e6 : 0;
    e.elapsedSeconds = r.elapsedSeconds;
    e.timeLeftSeconds = std::max(0.0, opts.evolution.budgetSeconds - r.elapsedSeconds);
    e.bestChanged = r.bestChanged;
    e.bestRelative = r.bestCost;  // costs are relative to the starting plan
    observer->onSearchStep(e);
  };
  result.evolution = evolve(encoding.length(), encoding.alleles(), seeds, fitness, opts.evolution,
                            onGeneration, cancel);
  result.kernelsCompiled = fitness.kernelsCompiled;
  result.kernelsReused = fitness.kernelsReused;
  result.failedPlans = fitness.failedPlans;
  result.plansStillOut = fitness.plansStillOut;
  result.plansCollectedLate = fitness.plansCollectedLate;

  const Genome& best = result.evolution.best;
  const RegionEncoding::Decoded decoded = encoding.decode(best.empty() ? encoding.zeros() : best);
  if (decoded.key == baseKey) {
    result.verdict = "no plan ran faster than the starting plan";
    result.baseMs = result.bestMs = fitness.msOf(1);  // as the search saw it (0 when nothing ran)
    return result;
  }
  if (result.evolution.stop == EvolutionResult::Stop::Cancelled) {
    // Cancelled: keep the best at once. It has already won paired rounds
    // against every best before it; the final check would keep the user waiting.
    result.plan = decoded.plan;
    result.improved = true;
    result.verdict = "cancelled: keeping the best plan found (not checked again against the starting plan)";
    result.changes = describeRegionChanges(start, result.plan);
    return result;
  }
  // The final check: the best against the starting plan, with more rounds.
  PairedPlanRuns check = opts.evaluator ? opts.evaluator->recheck(decoded.plan, start, opts.finalRuns, cancel)
                                        : measurer.timePlans(decoded.plan, start, opts.finalRuns, opts.timeoutSeconds);
  if (!check.ok()) {
    result.verdict = "the best plan failed its final check (" + check.message + "): keeping the starting plan";
    return result;
  }
  result.baseMs = check.bMedianMs();
  result.bestMs = check.aMedianMs();
  const double ratio = check.medianRatio();
  result.gain = ratio > 0 ? 1 / ratio : 1;
  char buf[256];
  if (ratio >= 1 - opts.minGain || check.aFasterShare() < opts.minFasterShare) {
    std::snprintf(buf, sizeof buf,
                  "the best plan ran %.3fx the starting plan's time in the final check (faster in %.0f%% "
                  "of %zu rounds): keeping the starting plan",
                  ratio, 100 * check.aFasterShare(), check.aMs.size());
    result.verdict = buf;
    result.gain = 1;
    return result;
  }
  std::snprintf(buf, sizeof buf, "%.2fx faster than the starting plan (%.3f -> %.3f ms, paired, faster in %.0f%% of %zu rounds)",
                result.gain, result.baseMs, result.bestMs, 100 * check.aFasterShare(), check.aMs.size());
  result.verdict = buf;
  result.plan = decoded.plan;
  result.improved = true;
  // Each region's own kernel time, so the plan explains itself as any other
  // (on this machine: not when the plans were timed elsewhere).
  const std::vector<NodeSet> sets = resolvePlanGroups(result.plan, graph);
  for (size_t i = 0; i < sets.size(); ++i) {
    PlanGroup& g = result.plan.groups[i];
    if (g.origin != PlanOrigin::GraphLevel || opts.evaluator) continue;
    const Measurement m = measurer.measure(g.backend, sets[i]);
    g.costNs = m.cost();
    g.spread = m.spread;
    g.samples = m.samples;
  }
  // Its prediction is its own measured time: the plan was measured whole,
  // and a region's isolated time (caches flushed before each run) says
  // little about it in sequence.
  result.plan.predictByWholeRun(result.bestMs);
  result.changes = describeRegionChanges(start, result.plan);
  return result;
}
}  // namespace

GraphLevelResult runGraphLevelSearch(const Graph& graph, const Plan& start,
                                     const std::vector<GraphLibrary>& libraries, IsolatedMeasurer& measurer,
                                     MeasurementDb* db, const HardwareFingerprint& fingerprint,
                                     const GraphLevelOptions& options, SearchObserver* observer,
                                     const CancellationToken* cancel) {
  GraphLevelResult result =
      searchAndCheck(graph, start, libraries, measurer, db, fingerprint, options, observer, cancel);
  // The plan says what the search did, even when it changed nothing; a
  // plan it kept was timed whole too (in the final paired check).
  if (!result.improved) result.plan.predictByWholeRun(result.baseMs);
  GraphLevelSummary& s = result.plan.graphLevel;
  s.ran = true;
  s.startMs = result.baseMs;
  s.ms = result.improved ? result.bestMs : result.baseMs;
  s.gain = result.gain;
  s.generations = result.evolution.generations;
  s.plansRun = result.evolution.evaluations;
  s.changes = result.changes;
  return result;
}

std::string describeGraphLevel(const GraphLevelResult& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "graph-level: %s; %d generations, %d plans run, %d cache hits, %d could not run, stopped: "
                "%s after %.1f s (best found at %.1f s); kernels compiled %d, reused %d",
                r.verdict.c_str(), r.evolution.generations, r.evolution.evaluations, r.evolution.cacheHits,
                r.failedPlans, std::string(stopReasonName(r.evolution.stop)).c_str(), r.evolution.seconds,
                r.evolution.secondsToBest, r.kernelsCompiled, r.kernelsReused);
  std::string line = buf;
  if (r.plansStillOut > 0 || r.plansCollectedLate > 0)
    line += "; " + std::to_string(r.plansStillOut) + " plans still out at their generation's deadline (" +
            std::to_string(r.plansCollectedLate) + " collected later)";
  return line;
}

}  // namespace collage
