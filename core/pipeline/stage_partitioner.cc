#include "core/pipeline/stage_partitioner.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "core/ir/error.h"

namespace collage {

namespace {

// Stage counts are bits of a 64-bit mask, one past the largest pin.
constexpr int kMaxPinnedStage = 62;

// The search of stage_partitioner.h on one series-parallel tree.
class Partitioner {
 public:
  Partitioner(const PipeGraph& graph, const Topology& topology, const StageCostModel& cost,
              const PartitionOptions& options, SeriesParallelTree tree, bool relay)
      : g_(graph),
        topo_(topology),
        cost_(cost),
        opt_(options),
        tree_(std::move(tree)),
        relay_(relay) {
    if (opt_.batch < 1) throw Error("pipeline: the batch must be at least 1 sample");
    if (opt_.inFlight < 1) throw Error("pipeline: a stage holds at least 1 micro-batch in flight");
    micro_ = opt_.microBatches;
    if (micro_.empty())
      for (int b = 1; b <= opt_.batch; ++b)
        if (opt_.batch % b == 0) micro_.push_back(b);
    std::sort(micro_.begin(), micro_.end());
    micro_.erase(std::unique(micro_.begin(), micro_.end()), micro_.end());
    for (int b : micro_)
      if (b < 1 || opt_.batch % b != 0)
        throw Error("pipeline: micro-batch " + std::to_string(b) +
                    " does not divide the batch of " + std::to_string(opt_.batch));
    kinds_ = topo_.kinds();
    for (DeviceKind k : kinds_) caps_.push_back(topo_.count(k));
    budgets_ = 1;
    for (int c : caps_) budgets_ *= c + 1;
    checkPins();
    if (relay_) {
      position_.assign(g_.size(), 0);
      const auto order = g_.topologicalOrder();
      for (int i = 0; i < g_.size(); ++i) position_[order[i]] = i;
    }
    collectIntervals();
    priceIntervals();
    pinOfInterval_.clear();
    for (const Interval& in : intervals_) pinOfInterval_.push_back(pinOf(in.nodes));
  }

  StageGraph run() {
    if (g_.size() == 0) throw Error("pipeline: the graph has no nodes");
    std::vector<double> targets;
    for (const auto& options : priced_)
      for (const auto& o : options)
        if (o.fits) targets.push_back(o.estimate.timePerSample());
    std::sort(targets.begin(), targets.end());
    targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
    if (targets.empty() || !feasible(targets.back())) explainInfeasible();
    // The least feasible target: feasibility is monotone in the target.
    size_t lo = 0, hi = targets.size() - 1;
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (feasible(targets[mid]))
        hi = mid;
      else
        lo = mid + 1;
    }
    return reconstruct(targets[lo]);
  }

 private:
  // A candidate stage: the nodes of one tree node, or of a run of two or
  // more consecutive children of a Series or of a Parallel.
  struct Interval {
    std::vector<int> nodes;
  };
  struct Option {                          // an interval on d devices of a kind at a micro-batch
    int kind = 0, devices = 0, micro = 0;  // kind index, count, index into micro_
    StageEstimate estimate;
    bool fits = false;  // finite time and within the kind's memory limit
  };

  // ---- pins ---------------------------------------------------------------
  // Stage indices the DP tells apart: 0..cap_-1 exactly, cap_ for "cap_ or
  // later" (no pin names one). Without pins cap_ is 0: one state, the plain
  // DP.
  void checkPins() {
    const int devices = static_cast<int>(topo_.devices().size());
    int largest = -1;
    for (const auto& [node, stage] : opt_.pins) {
      if (node < 0 || node >= g_.size())
        throw Error("pipeline: a pin names node id " + std::to_string(node) + ", the graph has " +
                    std::to_string(g_.size()) + " node(s)");
      if (stage < 0 || stage >= devices)
        throw Error("pipeline: node " + g_.name(node) + " is pinned to stage " +
                    std::to_string(stage) + ", but " + std::to_string(devices) +
                    " device(s) give at most " + std::to_string(devices) +
                    " stage(s) (0.." + std::to_string(devices - 1) + ")");
      if (stage >= kMaxPinnedStage)
        throw Error("pipeline: node " + g_.name(node) + " is pinned to stage " +
                    std::to_string(stage) + "; pins name stages below " +
                    std::to_string(kMaxPinnedStage));
      largest = std::max(largest, stage);
    }
    cap_ = largest + 1;
  }

  // The stage index every pinned node of `nodes` asks for: -1 none pinned,
  // -2 two different ones (never one stage).
  int pinOf(const std::vector<int>& nodes) const {
    int pin = -1;
    for (int v : nodes) {
      auto it = opt_.pins.find(v);
      if (it == opt_.pins.end()) continue;
      if (pin >= 0 && pin != it->second) return -2;
      pin = it->second;
    }
    return pin;
  }
  // Whether interval i may be the stage numbered `index` (capped).
  bool pinAllows(int interval, int index) const {
    const int pin = pinOfInterval_[interval];
    return pin == -1 || pin == index;
  }
  int after(int index) const { return std::min(index + 1, cap_); }
  static uint64_t bit(int index) { return uint64_t{1} << index; }
  // Without pins any way through is as good as another: stop at the first.
  bool settled(uint64_t mask) const { return cap_ == 0 && mask != 0; }

  // ---- candidates -------------------------------------------------------
  void collectIntervals() {
    whole_.assign(tree_.nodes.size(), -1);
    for (size_t t = 0; t < tree_.nodes.size(); ++t) whole_[t] = addInterval(tree_.nodes[t].nodes);
    for (size_t t = 0; t < tree_.nodes.size(); ++t) {
      const SpNode& s = tree_.nodes[t];
      if (s.kind == SpNode::Kind::Leaf) continue;  // runs of a Series' or a Parallel's children
      const int m = static_cast<int>(s.children.size());
      for (int i = 0; i < m; ++i) {
        std::vector<int> nodes;
        for (int j = i; j < m; ++j) {
          const auto& c = tree_.nodes[s.children[j]].nodes;
          nodes.insert(nodes.end(), c.begin(), c.end());
          if (j == i) {
            run_[{static_cast<int>(t), i, j}] = whole_[s.children[j]];
          } else if (i == 0 && j == m - 1) {
            run_[{static_cast<int>(t), i, j}] = whole_[t];
          } else {
            std::vector<int> sorted = nodes;
            std::sort(sorted.begin(), sorted.end());
            run_[{static_cast<int>(t), i, j}] = addInterval(sorted);
          }
        }
      }
    }
  }

  int addInterval(std::vector<int> nodes) {
    intervals_.push_back({std::move(nodes)});
    return static_cast<int>(intervals_.size()) - 1;
  }

  void priceIntervals() {
    priced_.resize(intervals_.size());
    for (size_t i = 0; i < intervals_.size(); ++i) {
      const auto& nodes = intervals_[i].nodes;
      const double received = relay_
                                  ? chainReceivedBytesPerSample(g_, position_, firstPosition(nodes))
                                  : receivedBytesPerSample(g_, nodes);
      const int queues = queuesAtMost(g_, nodes);
      for (int k = 0; k < static_cast<int>(kinds_.size()); ++k)
        for (int d = 1; d <= caps_[k]; ++d)
          for (int b = 0; b < static_cast<int>(micro_.size()); ++b) {
            if (micro_[b] % d != 0) continue;  // the micro-batch splits evenly over the devices
            Option o;
            o.kind = k;
            o.devices = d;
            o.micro = b;
            o.estimate =
                estimateStage(cost_, topo_, nodes, kinds_[k], d, micro_[b], received, queues);
            o.fits = std::isfinite(o.estimate.timePerSample()) &&
                     o.estimate.memoryBytes(opt_.inFlight) <= topo_.memoryLimit(kinds_[k]);
            priced_[i].push_back(o);
          }
    }
  }

  int firstPosition(const std::vector<int>& nodes) const {
    int first = g_.size();
    for (int v : nodes) first = std::min(first, position_[v]);
    return first;
  }

  // ---- budgets: devices still free per kind, as one mixed-radix index ----
  int devicesOf(int budget, int kind) const {
    for (int k = 0; k < kind; ++k) budget /= caps_[k] + 1;
    return budget % (caps_[kind] + 1);
  }
  int stride(int kind) const {
    int s = 1;
    for (int k = 0; k < kind; ++k) s *= caps_[k] + 1;
    return s;
  }
  bool within(int part, int budget) const {
    for (int k = 0; k < static_cast<int>(caps_.size()); ++k)
      if (devicesOf(part, k) > devicesOf(budget, k)) return false;
    return true;
  }
  // `budget` less `part` (part within budget): the digits never borrow.
  static int minus(int budget, int part) { return budget - part; }

  // ---- the DP for one (target, micro-batch) ------------------------------
  // Each answer is memoised per (tree node, child index or -1, budget) for
  // the current (target, micro-batch); the memo is cleared between them.
  bool stageFits(const Option& o) const {
    return o.fits && o.micro == micro_index_ && o.estimate.timePerSample() <= target_;
  }

  // The stage counts (as bits, capped) that planning tree node t on
  // `budget` can end at, its first stage numbered `before`: a whole stage,
  // or its children's runs.
  uint64_t whole(int t, int budget, int before) {
    const auto key = std::make_tuple(t, -1, budget, before);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    uint64_t ends = 0;
    if (pinAllows(whole_[t], before))
      for (const Option& o : priced_[whole_[t]])
        if (stageFits(o) && o.devices <= devicesOf(budget, o.kind)) {
          ends |= bit(after(before));
          break;
        }
    const SpNode& s = tree_.nodes[t];
    if (!settled(ends) && s.kind != SpNode::Kind::Leaf) ends |= runsFrom(t, 0, budget, before);
    memo_[key] = ends;
    return ends;
  }

  // The stage counts children i.. of Series or Parallel node t can end at
  // on `budget`, the first numbered `before`: a run of children i..j as one
  // stage (in a Parallel node two or more side by side: fewer devices than
  // branches can still split the block), or child i planned on its own on
  // part of the budget (in a Series node, only a child that is not a leaf: a
  // leaf alone is the run i..i).
  uint64_t runsFrom(int t, int i, int budget, int before) {
    const SpNode& s = tree_.nodes[t];
    const bool parallel = s.kind == SpNode::Kind::Parallel;
    const int m = static_cast<int>(s.children.size());
    if (i == m) return bit(before);
    auto key = std::make_tuple(t, i, budget, before);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    uint64_t ends = 0;
    for (int j = i + (parallel ? 1 : 0); j < m && !settled(ends); ++j) {
      const int interval = run_.at({t, i, j});
      if (!pinAllows(interval, before)) continue;
      for (const Option& o : priced_[interval])
        if (stageFits(o) && o.devices <= devicesOf(budget, o.kind)) {
          ends |= runsFrom(t, j + 1, minus(budget, o.devices * stride(o.kind)), after(before));
          if (settled(ends)) break;
        }
    }
    if (!settled(ends) && (parallel || tree_.nodes[s.children[i]].kind != SpNode::Kind::Leaf))
      for (int part = 1; part <= budget && !settled(ends); ++part) {
        if (!within(part, budget)) continue;
        const uint64_t mid = whole(s.children[i], part, before);
        for (int a = 0; a <= cap_ && !settled(ends); ++a)
          if (mid & bit(a)) ends |= runsFrom(t, i + 1, minus(budget, part), a);
      }
    memo_[key] = ends;
    return ends;
  }

  int fullBudget() const { return budgets_ - 1; }

  bool feasibleAt(double target, int micro) {
    target_ = target;
    micro_index_ = micro;
    memo_.clear();
    return whole(tree_.root, fullBudget(), 0) != 0;
  }
  bool feasible(double target) {
    for (int b = 0; b < static_cast<int>(micro_.size()); ++b)
      if (feasibleAt(target, b)) return true;
    return false;
  }

  // ---- rebuilding the plan from the memo ---------------------------------
  struct Chosen {
    int interval;
    Option option;
  };

  // Rebuilds a choice whole() found, one that ends at a stage count in
  // `want`, in the same order.
  void emitWhole(int t, int budget, int before, uint64_t want, std::vector<Chosen>& out) {
    if (pinAllows(whole_[t], before) && (want & bit(after(before))))
      for (const Option& o : priced_[whole_[t]])
        if (stageFits(o) && o.devices <= devicesOf(budget, o.kind)) {
          out.push_back({whole_[t], o});
          return;
        }
    const SpNode& s = tree_.nodes[t];
    COLLAGE_CHECK(s.kind != SpNode::Kind::Leaf, "rebuilding a plan the DP found feasible");
    emitRuns(t, 0, budget, before, want, out);
  }

  // Rebuilds a choice runsFrom found, one that ends in `want`.
  void emitRuns(int t, int i, int budget, int before, uint64_t want, std::vector<Chosen>& out) {
    const SpNode& s = tree_.nodes[t];
    const bool parallel = s.kind == SpNode::Kind::Parallel;
    const int m = static_cast<int>(s.children.size());
    if (i == m) {
      COLLAGE_CHECK(want & bit(before), "rebuilding the stage count the DP found");
      return;
    }
    for (int j = i + (parallel ? 1 : 0); j < m; ++j) {
      const int interval = run_.at({t, i, j});
      if (!pinAllows(interval, before)) continue;
      for (const Option& o : priced_[interval]) {
        if (!stageFits(o) || o.devices > devicesOf(budget, o.kind)) continue;
        const int rest = minus(budget, o.devices * stride(o.kind));
        if (runsFrom(t, j + 1, rest, after(before)) & want) {
          out.push_back({interval, o});
          return emitRuns(t, j + 1, rest, after(before), want, out);
        }
      }
    }
    for (int part = 1; part <= budget; ++part) {
      if (!within(part, budget)) continue;
      const uint64_t mid = whole(s.children[i], part, before);
      for (int a = 0; a <= cap_; ++a)
        if ((mid & bit(a)) && (runsFrom(t, i + 1, minus(budget, part), a) & want)) {
          emitWhole(s.children[i], part, before, bit(a), out);
          return emitRuns(t, i + 1, minus(budget, part), a, want, out);
        }
    }
    COLLAGE_CHECK(false, "rebuilding a node the DP found feasible");
  }

  StageGraph reconstruct(double target) {
    int micro = -1;
    for (int b = 0; b < static_cast<int>(micro_.size()) && micro < 0; ++b)
      if (feasibleAt(target, b)) micro = b;
    COLLAGE_CHECK(micro >= 0, "the least feasible target is feasible");
    std::vector<Chosen> chosen;
    emitWhole(tree_.root, fullBudget(), 0, ~uint64_t{0}, chosen);

    StageGraph plan;
    plan.microBatch = micro_[micro];
    plan.inFlight = opt_.inFlight;
    std::vector<size_t> next(kinds_.size(), 0);
    std::vector<int> stageOf(g_.size(), -1);
    for (const Chosen& c : chosen) {
      PipelineStage st;
      st.nodes = intervals_[c.interval].nodes;
      st.kind = kinds_[c.option.kind];
      const auto ids = topo_.idsOf(st.kind);
      for (int d = 0; d < c.option.devices; ++d)
        st.devices.push_back(ids.at(next[c.option.kind]++));
      st.estimate = c.option.estimate;
      for (int v : st.nodes) {
        COLLAGE_CHECK(stageOf[v] < 0, "a node in two stages");
        stageOf[v] = static_cast<int>(plan.stages.size());
      }
      plan.bottleneckTimePerSample =
          std::max(plan.bottleneckTimePerSample, st.estimate.timePerSample());
      plan.stages.push_back(std::move(st));
    }
    for (int v = 0; v < g_.size(); ++v) COLLAGE_CHECK(stageOf[v] >= 0, "a node in no stage");
    for (const auto& [v, stage] : opt_.pins) COLLAGE_CHECK(stageOf[v] == stage, "a pin honoured");
    COLLAGE_CHECK(plan.bottleneckTimePerSample == target, "the plan's bottleneck is the target");
    std::set<std::pair<int, int>> edges;
    if (relay_) {
      for (int s = 0; s + 1 < static_cast<int>(plan.stages.size()); ++s) edges.insert({s, s + 1});
    } else {
      for (const auto& e : g_.edges())
        if (stageOf[e.from] != stageOf[e.to]) {
          COLLAGE_CHECK(stageOf[e.from] < stageOf[e.to], "stages are emitted in topological order");
          edges.insert({stageOf[e.from], stageOf[e.to]});
        }
    }
    plan.edges.assign(edges.begin(), edges.end());
    return plan;
  }

  // No target is feasible: say what does not fit. A node that fits on no
  // device kind alone (one device, any micro-batch) is named with its need;
  // otherwise the graph fits only on more devices than the topology has.
  [[noreturn]] void explainInfeasible() const {
    for (int v = 0; v < g_.size(); ++v) {
      bool runs = false, fits = false;
      double least = std::numeric_limits<double>::infinity();
      std::string need;
      for (int k = 0; k < static_cast<int>(kinds_.size()) && !fits; ++k)
        for (int b : micro_) {
          const StageEstimate e = estimateStage(cost_, topo_, {v}, kinds_[k], 1, b, 0);
          if (!std::isfinite(e.timePerSample())) continue;
          runs = true;
          const double bytes = e.memoryBytes(opt_.inFlight);
          if (bytes <= topo_.memoryLimit(kinds_[k])) {
            fits = true;
            break;
          }
          if (bytes < least) {
            least = bytes;
            std::ostringstream w;
            w << "on a " << deviceKindName(kinds_[k]) << " device (limit "
              << static_cast<long long>(topo_.memoryLimit(kinds_[k])) << " B) it needs "
              << static_cast<long long>(bytes) << " B: " << static_cast<long long>(e.weightBytes)
              << " B of weights and " << opt_.inFlight << " x "
              << static_cast<long long>(e.activationBytes) << " B of activations at micro-batch "
              << b;
            need = w.str();
          }
        }
      if (!runs)
        throw Error("pipeline: node " + g_.name(v) + " runs on no device kind of the topology");
      if (!fits)
        throw Error("pipeline: no partition fits the memory limits: node " + g_.name(v) +
                    " alone does not fit; " + need);
    }
    if (!opt_.pins.empty()) {
      std::string pins;
      for (const auto& [v, stage] : opt_.pins)
        pins += (pins.empty() ? "" : ", ") + g_.name(v) + " -> stage " + std::to_string(stage);
      throw Error("pipeline: no partition into stages honours the pins (" + pins +
                  ") within the devices and their memory limits: stages are numbered in a "
                  "topological order, so a node cannot be in a stage before its producers'");
    }
    throw Error(
        "pipeline: no partition of the graph into stages fits the devices' memory limits (" +
        std::to_string(topo_.devices().size()) +
        " devices): every node fits alone, but the stages need more devices than there are");
  }

  const PipeGraph& g_;
  const Topology& topo_;
  const StageCostModel& cost_;
  PartitionOptions opt_;
  SeriesParallelTree tree_;
  bool relay_;                 // SPP: tensors relayed down a chain (`tree_` is one)
  std::vector<int> position_;  // relay only: each node's place in the chain
  std::vector<int> micro_;
  std::vector<DeviceKind> kinds_;
  std::vector<int> caps_;
  int budgets_ = 1;
  std::vector<Interval> intervals_;
  std::vector<int> whole_;                        // tree node -> interval
  std::map<std::tuple<int, int, int>, int> run_;  // (series node, i, j) -> interval
  std::vector<std::vector<Option>> priced_;       // interval -> its options
  std::vector<int> pinOfInterval_;                // interval -> pinOf its nodes
  int cap_ = 0;                                   // stage indices told apart (pins)
  double target_ = 0;
  int micro_index_ = 0;
  // (tree node, child or -1, budget, stages before) -> the stage counts it can end at
  std::map<std::tuple<int, int, int, int>, uint64_t> memo_;
};

}  // namespace

StageGraph partitionGraphPipeline(const PipeGraph& graph, const Topology& topology,
                                  const StageCostModel& cost, const PartitionOptions& options) {
  // Two exact searches, the better plan wins (header comment): the
  // series-parallel tree, and runs of the chain with tensors sent directly.
  std::optional<StageGraph> best;
  std::optional<Error> refusal;
  for (bool onTree : {true, false}) {
    try {
      SeriesParallelTree tree = onTree ? decomposeSeriesParallel(graph)
                                       : chainDecomposition(graph, graph.topologicalOrder());
      StageGraph plan = Partitioner(graph, topology, cost, options, std::move(tree), false).run();
      if (!best || plan.bottleneckTimePerSample < best->bottleneckTimePerSample)
        best = std::move(plan);
    } catch (const Error& e) {
      if (!refusal) refusal = e;
    }
  }
  if (!best) throw *refusal;
  return *best;
}

StageGraph partitionSequentialPipeline(const PipeGraph& graph, const Topology& topology,
                                       const StageCostModel& cost,
                                       const PartitionOptions& options) {
  return Partitioner(graph, topology, cost, options,
                     chainDecomposition(graph, graph.topologicalOrder()), true)
      .run();
}

std::map<int, int> pinsByName(const PipeGraph& graph, const std::map<std::string, int>& pins) {
  std::map<std::string, int> ids;
  for (int v = graph.size() - 1; v >= 0; --v) ids[graph.name(v)] = v;  // the first of a name
  std::map<int, int> out;
  for (const auto& [name, stage] : pins) {
    auto it = ids.find(name);
    if (it == ids.end())
      throw Error("pipeline: a pin names the node '" + name + "', which the model lacks");
    out[it->second] = stage;
  }
  return out;
}

std::string StageGraph::toString(const PipeGraph& graph) const {
  std::ostringstream out;
  out << "micro-batch " << microBatch << ", bottleneck " << bottleneckTimePerSample
      << " s/sample\n";
  for (size_t s = 0; s < stages.size(); ++s) {
    const auto& st = stages[s];
    out << "  stage " << s << ": [" << graph.names(st.nodes) << "] on " << deviceKindName(st.kind)
        << " {";
    for (size_t d = 0; d < st.devices.size(); ++d) out << (d ? ", " : "") << st.devices[d];
    out << "}, " << st.estimate.timePerSample() << " s/sample\n";
  }
  for (const auto& [a, b] : edges) out << "  " << a << " -> " << b << "\n";
  return out.str();
}

}  // namespace collage
