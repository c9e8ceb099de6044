#include "core/decode/decode_parallel_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ir/error.h"

namespace collage {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

constexpr double kFloatBytes = 4;

// Rows [first, end) of a request's cache that device d of n holds, the
// runtime's split (generate --cache-parallel): [d C / n, (d + 1) C / n).
struct RowRange {
  int64_t first = 0, end = 0;
};
RowRange slice(int64_t capacity, int d, int n) {
  return {d * capacity / n, (d + 1) * capacity / n};
}

// Rows device `range` reads at a step with `filled` rows already in the
// cache: its filled rows, and the new token's row when it holds it.
int64_t rowsRead(RowRange range, int64_t filled) {
  const int64_t old = std::max<int64_t>(0, std::min(filled, range.end) - range.first);
  return old + (filled >= range.first && filled < range.end ? 1 : 0);
}

// The share of the heads' work one of n devices does when the heads are
// split: ceil(h / n) of h heads, for the query heads and for the KV heads
// (a KV head is read whole by the device holding any of its query heads,
// so beyond the KV heads the cache is read on several devices).
double headShare(int heads, int n) {
  if (heads <= 0) return 1.0 / n;
  return static_cast<double>((heads + n - 1) / n) / heads;
}

void check(const DecodeStepCosts& c, int devices, const std::vector<DecodeRequest>& requests) {
  if (devices < 1)
    throw Error("decode simulation: " + std::to_string(devices) +
                " device(s): at least one is needed");
  for (double x : {c.restSeconds, c.attentionSeconds, c.attentionSecondsPerRow, c.hiddenBytes,
                   c.weightBytes, c.cacheBytesPerRow, c.replicatedWeightBytes})
    if (!(x >= 0) || !std::isfinite(x))
      throw Error("decode simulation: a step cost is negative or not finite");
  if (!(c.replicatedRestShare >= 0 && c.replicatedRestShare <= 1))
    throw Error("decode simulation: the rest's share left whole by TP is " +
                std::to_string(c.replicatedRestShare) + ", not within [0, 1]");
  if (requests.empty()) throw Error("decode simulation: no request to decode");
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].prompt < 0)
      throw Error("decode simulation: request " + std::to_string(i) + " has a negative prompt (" +
                  std::to_string(requests[i].prompt) + " rows)");
    if (requests[i].output < 1)
      throw Error("decode simulation: request " + std::to_string(i) + " decodes " +
                  std::to_string(requests[i].output) + " token(s): at least one");
  }
}

struct Timeline {
  double seconds = 0;
  double communication = 0;
  std::vector<double> tokenSteps;  // per token, the step it came from
};

// DP: device d steps requests d, d + N, ... on its own; a step runs each
// active request's whole step, one after another.
Timeline dataParallel(const DecodeStepCosts& c, int n, const std::vector<DecodeRequest>& rs) {
  Timeline out;
  for (int d = 0; d < n; ++d) {
    double finish = 0;
    for (int64_t t = 0;; ++t) {
      double step = 0;
      int active = 0;
      for (size_t i = static_cast<size_t>(d); i < rs.size(); i += static_cast<size_t>(n))
        if (t < rs[i].output) {
          step += c.restSeconds + c.attentionAt(static_cast<double>(rs[i].prompt + t + 1));
          ++active;
        }
      if (active == 0) break;
      finish += step;
      out.tokenSteps.insert(out.tokenSteps.end(), static_cast<size_t>(active), step);
    }
    out.seconds = std::max(out.seconds, finish);
  }
  return out;
}

// The synchronous strategies: one step for every active request at once,
// until the longest output is done. `stepOf` gives a step's compute and
// communication seconds from the active requests' indices and the step.
template <typename StepOf>
Timeline synchronous(const std::vector<DecodeRequest>& rs, StepOf stepOf) {
  Timeline out;
  std::vector<size_t> active;
  for (int64_t t = 0;; ++t) {
    active.clear();
    for (size_t i = 0; i < rs.size(); ++i)
      if (t < rs[i].output) active.push_back(i);
    if (active.empty()) break;
    const auto [compute, talk] = stepOf(active, t);
    out.seconds += compute + talk;
    out.communication += talk;
    out.tokenSteps.insert(out.tokenSteps.end(), active.size(), compute + talk);
  }
  return out;
}

}  // namespace

std::vector<DecodeStrategy> decodeStrategies() {
  return {{"DP", ProjectionSplit::Requests, AttentionSplit::Requests},
          {"TP", ProjectionSplit::Heads, AttentionSplit::Heads},
          {"CP", ProjectionSplit::Requests, AttentionSplit::Sequence},
          {"CP-replicated", ProjectionSplit::Replicated, AttentionSplit::Sequence}};
}

std::string toString(ProjectionSplit split) {
  switch (split) {
    case ProjectionSplit::Requests:
      return "by requests";
    case ProjectionSplit::Heads:
      return "by heads";
    case ProjectionSplit::Replicated:
      return "replicated";
  }
  return "?";
}

std::string toString(AttentionSplit split) {
  switch (split) {
    case AttentionSplit::Requests:
      return "by requests";
    case AttentionSplit::Heads:
      return "by heads";
    case AttentionSplit::Sequence:
      return "by sequence";
  }
  return "?";
}

void fitDecodeStepCosts(const std::vector<DecodeCostPoint>& points, DecodeStepCosts& costs) {
  std::vector<double> rests;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const DecodeCostPoint& p : points) {
    if (!(p.attentionSeconds >= 0) || !(p.restSeconds >= 0) || p.rows < 0)
      throw Error("decode costs: the point at " + std::to_string(p.rows) +
                  " rows has a negative time or row count");
    const double x = static_cast<double>(p.rows);
    sx += x;
    sy += p.attentionSeconds;
    sxx += x * x;
    sxy += x * p.attentionSeconds;
    rests.push_back(p.restSeconds);
  }
  const double m = static_cast<double>(points.size());
  const double spread = sxx - sx * sx / std::max(m, 1.0);
  if (points.size() < 2 || !(spread > 0))
    throw Error("decode costs: the attention's line needs points at two row counts at least");
  double slope = (sxy - sx * sy / m) / spread;
  double fixed = (sy - slope * sx) / m;
  if (fixed < 0) {  // through the origin
    fixed = 0;
    slope = sxy / sxx;
  }
  costs.attentionSecondsPerRow = std::max(0.0, slope);
  costs.attentionSeconds = fixed;
  costs.restSeconds = median(rests);
}

DecodeStepCosts decodeModelShape(const Graph& graph, const DecoderSignature& signature) {
  DecodeStepCosts c;
  if (signature.cache.empty()) throw Error(graph.sourcePath + ": the decoder has no cache");
  c.layers = static_cast<int>((signature.cache.size() + 1) / 2);
  for (const KvCachePair& pair : signature.cache) {
    const std::optional<ValueId> v = graph.findValue(pair.past);
    if (!v) throw Error(graph.sourcePath + ": no past input named '" + pair.past + "'");
    const TensorType& type = graph.value(*v).type;
    const auto axis = static_cast<size_t>(pair.sequenceAxis);
    if (type.rank() != 4 || axis != 2 || type.shape[axis] < 1)
      throw Error(graph.sourcePath + ": past '" + pair.past + "' is " + type.toString() +
                  ", not [batch, KV heads, rows, head dim]: the simulator cannot read its heads");
    if (c.kvHeads == 0) {
      c.kvHeads = static_cast<int>(type.shape[1]);
      c.headDim = static_cast<int>(type.shape[3]);
    }
    c.cacheBytesPerRow +=
        static_cast<double>(type.byteSize()) / static_cast<double>(type.shape[axis]);
  }
  c.queryHeads = c.kvHeads;
  for (const Node& node : graph.nodes())
    if (node.op == "Softmax" && !node.inputs.empty() && node.inputs[0] != kNoValue) {
      const TensorType& t = graph.value(node.inputs[0]).type;
      if (t.rank() == 4) {
        c.queryHeads = static_cast<int>(t.shape[1]);
        break;
      }
    }
  c.hiddenBytes = kFloatBytes * c.queryHeads * c.headDim;
  for (const Value& v : graph.values())
    if (v.isConstant()) c.weightBytes += static_cast<double>(v.constant->byteSize());
  return c;
}

const MeasuredExchange* findMeasuredExchange(const std::vector<MeasuredExchange>& exchanges,
                                             const DecodeStrategy& strategy, int devices) {
  const char* name = strategy.attention == AttentionSplit::Sequence ? "CP"
                     : strategy.attention == AttentionSplit::Heads  ? "TP"
                                                                    : nullptr;
  if (!name) return nullptr;
  for (const MeasuredExchange& e : exchanges)
    if (e.strategy == name && e.devices == devices) return &e;
  return nullptr;
}

DecodeSimulation simulateDecodeParallel(const DecodeStepCosts& c, const LinkCost& link, int n,
                                        const std::vector<DecodeRequest>& rs,
                                        const DecodeStrategy& strategy, double memoryLimitBytes,
                                        const std::vector<MeasuredExchange>* exchanges) {
  check(c, n, rs);
  DecodeSimulation sim;
  sim.strategy = strategy;
  sim.devices = n;
  sim.memoryLimitBytes = memoryLimitBytes;
  const auto capacity = [&](size_t i) { return rs[i].prompt + rs[i].output; };
  const double nMinus1 = n - 1;
  // The exchanges' price: the link's, or the measured one's (`rounds`
  // exchanges at the step's largest request's rows, plus the link's time
  // for the bytes beyond one request's: `link1` is the link's price of the
  // same messages for one request).
  const MeasuredExchange* measured =
      n > 1 && exchanges ? findMeasuredExchange(*exchanges, strategy, n) : nullptr;
  if (n > 1 && strategy.attention != AttentionSplit::Requests) {
    sim.talkPricedBy = measured ? "measured" : "link";
    sim.talkMeasuredRuns = measured ? measured->runs : 0;
  }
  const auto priced = [&](double linkSeconds, double link1, double rounds,
                          const std::vector<size_t>& active, int64_t t) {
    if (!measured) return linkSeconds;
    int64_t rows = 0;
    for (size_t i : active) rows = std::max(rows, rs[i].prompt + t);
    return rounds * measured->at(static_cast<double>(rows)) + std::max(0.0, linkSeconds - link1);
  };

  Timeline tl;
  if (strategy.attention == AttentionSplit::Requests) {
    tl = dataParallel(c, n, rs);
    for (int d = 0; d < n; ++d) {
      double bytes = c.weightBytes;
      for (size_t i = static_cast<size_t>(d); i < rs.size(); i += static_cast<size_t>(n))
        bytes += c.cacheBytesPerRow * static_cast<double>(capacity(i));
      sim.memoryBytes = std::max(sim.memoryBytes, bytes);
    }
  } else if (strategy.attention == AttentionSplit::Heads) {
    const double share = std::max(headShare(c.queryHeads, n), headShare(c.kvHeads, n));
    // A ring all-reduce: 2 (N - 1) messages of bytes / N, one after another.
    const auto allReduce = [&](double bytes) {
      return 2 * nMinus1 * link.seconds(n > 1 ? bytes / n : 0);
    };
    tl = synchronous(rs, [&](const std::vector<size_t>& active, int64_t t) {
      double compute = 0;
      const double rest =
          c.restSeconds * (c.replicatedRestShare + (1 - c.replicatedRestShare) / n);
      for (size_t i : active)
        compute += rest + share * c.attentionAt(static_cast<double>(rs[i].prompt + t + 1));
      const double talk =
          c.layers * 2 *
          priced(allReduce(c.hiddenBytes * static_cast<double>(active.size())),
                 allReduce(c.hiddenBytes), 1, active, t);
      return std::pair{compute, talk};
    });
    sim.memoryBytes = (c.weightBytes - c.replicatedWeightBytes) / n + c.replicatedWeightBytes;
    for (size_t i = 0; i < rs.size(); ++i)
      sim.memoryBytes +=
          headShare(c.kvHeads, n) * c.cacheBytesPerRow * static_cast<double>(capacity(i));
  } else {
    const bool replicated = strategy.projections == ProjectionSplit::Replicated;
    const double qkvBytes = kFloatBytes * (c.queryHeads + 2.0 * c.kvHeads) * c.headDim;
    const double partialBytes = kFloatBytes * c.queryHeads * (c.headDim + 2.0);
    std::vector<double> compute(static_cast<size_t>(n));
    std::vector<double> owned(static_cast<size_t>(n));
    tl = synchronous(rs, [&](const std::vector<size_t>& active, int64_t t) {
      std::fill(compute.begin(), compute.end(), 0.0);
      std::fill(owned.begin(), owned.end(), 0.0);
      for (size_t i : active) {
        const int64_t filled = rs[i].prompt + t;
        const auto owner = static_cast<size_t>(i % static_cast<size_t>(n));
        owned[owner] += 1;
        for (int d = 0; d < n; ++d) {
          auto& dev = compute[static_cast<size_t>(d)];
          dev += c.attentionAt(static_cast<double>(rowsRead(slice(capacity(i), d, n), filled)));
          if (replicated || static_cast<size_t>(d) == owner) dev += c.restSeconds;
        }
      }
      double talk = 0;
      if (n > 1) {
        const double b = static_cast<double>(active.size());
        double layer = 0;
        if (replicated) {
          // Every rank sends its partials of every active request to each peer.
          layer = priced(nMinus1 * link.seconds(b * partialBytes),
                         nMinus1 * link.seconds(partialBytes), 1, active, t);
        } else {
          // An owner sends its requests' Q and new K, V rows to each peer;
          // then each device sends each owner the partials of its requests.
          double gather = 0, scatter = 0;
          for (int d = 0; d < n; ++d) {
            gather =
                std::max(gather, nMinus1 * link.seconds(owned[static_cast<size_t>(d)] * qkvBytes));
            double sends = 0;
            for (int o = 0; o < n; ++o)
              if (o != d) sends += link.seconds(owned[static_cast<size_t>(o)] * partialBytes);
            scatter = std::max(scatter, sends);
          }
          layer = priced(gather + scatter,
                         nMinus1 * (link.seconds(qkvBytes) + link.seconds(partialBytes)), 2,
                         active, t);
        }
        talk = c.layers * layer;
      }
      return std::pair{*std::max_element(compute.begin(), compute.end()), talk};
    });
    for (int d = 0; d < n; ++d) {
      double bytes = c.weightBytes;
      for (size_t i = 0; i < rs.size(); ++i) {
        const RowRange r = slice(capacity(i), d, n);
        bytes += c.cacheBytesPerRow * static_cast<double>(r.end - r.first);
      }
      sim.memoryBytes = std::max(sim.memoryBytes, bytes);
    }
  }

  sim.tokens = static_cast<int64_t>(tl.tokenSteps.size());
  sim.seconds = tl.seconds;
  sim.tokensPerSecond = tl.seconds > 0 ? static_cast<double>(sim.tokens) / tl.seconds
                                       : std::numeric_limits<double>::infinity();
  sim.medianStepSeconds = median(tl.tokenSteps);
  sim.maxStepSeconds = *std::max_element(tl.tokenSteps.begin(), tl.tokenSteps.end());
  sim.communicationSeconds = tl.communication;
  sim.fits = memoryLimitBytes <= 0 || sim.memoryBytes <= memoryLimitBytes;
  return sim;
}

DecodeParallelPlan planDecodeParallel(const DecodeStepCosts& costs, const LinkCost& link,
                                      int devices, const std::vector<DecodeRequest>& requests,
                                      double memoryLimitBytes,
                                      const std::vector<MeasuredExchange>* exchanges) {
  DecodeParallelPlan plan;
  double smallest = std::numeric_limits<double>::infinity();
  std::string smallestName;
  for (const DecodeStrategy& s : decodeStrategies()) {
    plan.options.push_back(
        simulateDecodeParallel(costs, link, devices, requests, s, memoryLimitBytes, exchanges));
    const DecodeSimulation& sim = plan.options.back();
    if (sim.memoryBytes < smallest) {
      smallest = sim.memoryBytes;
      smallestName = s.name;
    }
    if (sim.fits && (plan.chosen < 0 || sim.tokensPerSecond > plan.best().tokensPerSecond))
      plan.chosen = static_cast<int>(plan.options.size() - 1);
  }
  if (plan.chosen < 0)
    throw Error("decode plan: no split fits " + std::to_string(devices) + " device(s) of " +
                std::to_string(static_cast<long long>(memoryLimitBytes)) +
                " bytes: the smallest, " + smallestName + ", needs " +
                std::to_string(static_cast<long long>(std::ceil(smallest))) + " bytes per device");
  return plan;
}

}  // namespace collage
