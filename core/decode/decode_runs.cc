#include "core/decode/decode_runs.h"

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <map>

#include "core/ir/error.h"
#include "core/ir/hashing.h"
#include "core/pipeline/link_measurement.h"

namespace collage {

std::string decodeModelKey(const std::string& modelPath) {
  return "sha256:" + sha256File(modelPath);
}

std::optional<DecodeStrategy> simulatedStrategyOf(const std::string& runStrategy) {
  // What each runtime runs: --cache-parallel replicates the projections.
  const std::string name = runStrategy == "CP" ? "CP-replicated" : runStrategy;
  for (const DecodeStrategy& s : decodeStrategies())
    if (s.name == name) return s;
  return std::nullopt;
}

std::vector<DecodeRequest> requestsOfRun(const DecodeRunRecord& run) {
  const DecodeRequest one{run.context, run.steps};
  if (run.strategy == "DP") return std::vector<DecodeRequest>(static_cast<size_t>(run.ranks), one);
  return {one};
}

MeasuredRunComparison compareMeasuredRun(const DecodeStepCosts& costs, const LinkCost& link,
                                         const DecodeRunRecord& run,
                                         const std::vector<MeasuredExchange>* exchanges) {
  MeasuredRunComparison c;
  c.run = run;
  const std::optional<DecodeStrategy> strategy = simulatedStrategyOf(run.strategy);
  if (!strategy) {
    c.why = "the simulator has no strategy '" + run.strategy + "'";
    return c;
  }
  if (run.steps < 1 || run.ranks < 1) {
    c.why = "the run timed no step";
    return c;
  }
  c.simulation =
      simulateDecodeParallel(costs, link, run.ranks, requestsOfRun(run), *strategy, 0, exchanges);
  c.simulated = true;
  c.simulatedStepMs = c.simulation.medianStepSeconds * 1e3;
  c.simulatedTokensPerSecond = c.simulation.tokensPerSecond;
  // The messages of all steps over the steps of one request (every request
  // of a run has as many).
  c.simulatedTalkMsPerStep =
      c.simulation.communicationSeconds * 1e3 / static_cast<double>(run.steps);
  if (run.stepMs > 0) c.stepError = c.simulatedStepMs / run.stepMs - 1;
  if (run.tokensPerSecond > 0)
    c.tokensPerSecondError = c.simulatedTokensPerSecond / run.tokensPerSecond - 1;
  return c;
}

std::vector<MeasuredExchange> measuredExchanges(const std::vector<DecodeRunRecord>& runs,
                                                const DecodeStepCosts& costs) {
  std::vector<MeasuredExchange> out;
  if (costs.layers < 1) return out;
  // Per (strategy, ranks): the points (context, seconds per exchange).
  std::map<std::pair<std::string, int>, std::vector<std::pair<double, double>>> points;
  for (const DecodeRunRecord& r : runs) {
    if (r.ranks < 2 || !(r.exchangeMs > 0) || (r.strategy != "CP" && r.strategy != "TP")) continue;
    const double perStep = r.strategy == "TP" ? 2.0 * costs.layers : costs.layers;
    points[{r.strategy, r.ranks}].push_back(
        {static_cast<double>(r.context), r.exchangeMs * 1e-3 / perStep});
  }
  for (auto& [key, p] : points) {
    MeasuredExchange e;
    e.strategy = key.first;
    e.devices = key.second;
    e.runs = static_cast<int>(p.size());
    double mx = 0, my = 0;
    for (const auto& [x, y] : p) {
      mx += x;
      my += y;
    }
    mx /= static_cast<double>(p.size());
    my /= static_cast<double>(p.size());
    double sxx = 0, sxy = 0;
    for (const auto& [x, y] : p) {
      sxx += (x - mx) * (x - mx);
      sxy += (x - mx) * (y - my);
    }
    if (sxx > 0) {
      e.secondsPerRow = std::max(0.0, sxy / sxx);
      e.seconds = my - e.secondsPerRow * mx;
      if (e.seconds < 0) {
        // Through the origin, as the attention's fit does.
        double xx = 0, xy = 0;
        for (const auto& [x, y] : p) {
          xx += x * x;
          xy += x * y;
        }
        e.seconds = 0;
        e.secondsPerRow = xx > 0 ? std::max(0.0, xy / xx) : 0;
      }
    } else {
      std::vector<double> ys;
      for (const auto& pt : p) ys.push_back(pt.second);
      std::sort(ys.begin(), ys.end());
      e.seconds = ys[ys.size() / 2];
    }
    out.push_back(e);
  }
  return out;
}

std::vector<DecodeRunRecord> storedDecodeRuns(const std::string& dbPath,
                                              const std::string& modelKey, int ranks) {
  std::error_code ec;
  if (!std::filesystem::exists(dbPath, ec)) return {};
  MeasurementDb db(dbPath);
  std::vector<DecodeRunRecord> out;
  for (DecodeRunRecord& r : db.findDecodeRuns(linkFingerprint(), modelKey))
    if (ranks == 0 || r.ranks == ranks) out.push_back(std::move(r));
  return out;
}

std::string describeMeasuredRun(const MeasuredRunComparison& c) {
  const DecodeRunRecord& r = c.run;
  char b[640];
  const int requests = r.strategy == "DP" ? r.ranks : 1;
  int n = std::snprintf(b, sizeof b,
                        "measured %s, %d rank(s) x %d thread(s), %d request(s) at %lld rows, %lld "
                        "step(s): step %.4f ms",
                        r.strategy.c_str(), r.ranks, r.threadsPerRank, requests,
                        static_cast<long long>(r.context), static_cast<long long>(r.steps),
                        r.stepMs);
  std::string out(b, static_cast<size_t>(n));
  if (c.simulated) {
    n = std::snprintf(b, sizeof b, " (simulated %.4f ms, %+.1f %%)", c.simulatedStepMs,
                      c.stepError * 100);
    out.append(b, static_cast<size_t>(n));
  }
  n = std::snprintf(b, sizeof b, ", attention %.4f ms", r.attentionMs);
  out.append(b, static_cast<size_t>(n));
  if (r.exchangeMs > 0 || (c.simulated && c.simulatedTalkMsPerStep > 0)) {
    n = std::snprintf(b, sizeof b, ", exchange %.4f ms", r.exchangeMs);
    out.append(b, static_cast<size_t>(n));
    if (c.simulated) {
      n = std::snprintf(b, sizeof b, " (simulated %.4f ms, ", c.simulatedTalkMsPerStep);
      out.append(b, static_cast<size_t>(n));
      out += c.simulation.talkPricedBy == "measured"
                 ? "measured, " + std::to_string(c.simulation.talkMeasuredRuns) + " run(s))"
                 : "link)";
    }
  }
  n = std::snprintf(b, sizeof b, ", %.1f tokens/s", r.tokensPerSecond);
  out.append(b, static_cast<size_t>(n));
  if (c.simulated) {
    n = std::snprintf(b, sizeof b, " (simulated %.1f, %+.1f %%)", c.simulatedTokensPerSecond,
                      c.tokensPerSecondError * 100);
    out.append(b, static_cast<size_t>(n));
  } else {
    out += " (not simulated: " + c.why + ")";
  }
  if (!r.detail.empty()) out += "; " + r.detail;
  return out;
}

}  // namespace collage
