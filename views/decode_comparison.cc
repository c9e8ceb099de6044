#include "views/decode_comparison.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "backends/native/native_tensor_parallel.h"
#include "core/decode/decoder.h"
#include "core/ir/error.h"
#include "core/pipeline/link_measurement.h"

namespace collage {

std::vector<DecodeRequest> variedDecodeRequests(int64_t context, int batch) {
  std::vector<DecodeRequest> out;
  for (int i = 0; i < batch; ++i) out.push_back({context, 32 * (1 + i % 4)});
  return out;
}

std::optional<LinkRecord> storedMpiLink(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return std::nullopt;
  try {
    MeasurementDb db(path);
    return db.findLink(linkFingerprint(), mpiLinkKey("mpi", std::string(host) + "|" + host));
  } catch (const Error&) {
    return std::nullopt;
  }
}

LinkCost assumedDecodeLink() { return LinkCost{5e9, 5e-6}; }

std::vector<int64_t> comparisonContexts(const std::vector<DecodePoint>& measured,
                                        int64_t maxContext) {
  std::set<int64_t> out;
  int64_t first = INT64_MAX, last = maxContext;
  for (const DecodePoint& p : measured) {
    out.insert(p.context);
    first = std::min(first, p.context);
    last = std::max(last, p.context);
  }
  if (first == INT64_MAX) return {};
  for (int64_t c = first; c <= last; c *= 2) out.insert(c);
  out.insert(last);
  return {out.begin(), out.end()};
}

DecodeComparison compareDecodeParallel(DecodeStepCosts costs, const LinkCost& link,
                                       std::string linkSource,
                                       const std::vector<DecodePoint>& measured,
                                       const DecodeComparisonOptions& options,
                                       const std::vector<DecodeRunRecord>& runs) {
  if (options.devices < 1 || options.requests < 1)
    throw Error("the comparison needs one device and one request at least");
  std::vector<DecodeCostPoint> points;
  std::set<int64_t> lengths;
  for (const DecodePoint& p : measured) {
    points.push_back({p.context, p.attentionMs / 1e3, p.restMs / 1e3});
    lengths.insert(p.context);
  }
  if (lengths.size() < 2)
    throw Error(
        "the DP/TP/CP comparison needs the step measured at two context lengths at "
        "least (Measure, up to 32 rows or more)");
  fitDecodeStepCosts(points, costs);

  DecodeComparison out;
  out.devices = options.devices;
  out.requests = options.requests;
  out.costs = costs;
  out.link = link;
  out.linkSource = std::move(linkSource);
  // The exchanges the stored runs measured price the simulated ones of
  // their strategy on as many devices (decode_runs.h).
  const std::vector<MeasuredExchange> exchanges = measuredExchanges(runs, costs);
  for (const MeasuredExchange& e : exchanges)
    if (e.devices == options.devices)
      out.linkSource += "; " + e.strategy + "'s exchanges from " + std::to_string(e.runs) +
                        " measured run(s)";
  const std::vector<DecodeStrategy> all = decodeStrategies();
  for (size_t s = 0; s < 3; ++s) out.strategies.push_back(all[s].name);  // DP, TP, CP
  out.curves.resize(out.strategies.size());
  for (int64_t context : comparisonContexts(measured, options.maxContext)) {
    const std::vector<DecodeRequest> requests = variedDecodeRequests(context, options.requests);
    for (size_t s = 0; s < out.strategies.size(); ++s)
      out.curves[s].push_back(
          {context,
           simulateDecodeParallel(costs, link, options.devices, requests, all[s], 0, &exchanges)
               .tokensPerSecond});
    // A step at context L reads L rows (views/decode_profile.h).
    const double step = costs.restSeconds + costs.attentionAt(static_cast<double>(context));
    out.fit.push_back({context, step > 0 ? 1.0 / step : 0.0});
  }
  for (const DecodePoint& p : measured)
    if (p.stepMs > 0) out.measured.push_back({p.context, 1e3 / p.stepMs});
  for (const DecodeRunRecord& run : runs)
    if (run.ranks == options.devices)
      out.runs.push_back(compareMeasuredRun(costs, link, run, &exchanges));
  return out;
}

DecodeStepCosts decodeStepShape(const Graph& stepGraph, const DecoderSignature& signature) {
  DecodeStepCosts costs = decodeModelShape(stepGraph, signature);
  try {
    const native::TensorParallelWeights w =
        native::tensorParallelWeights(stepGraph, native::findTensorParallelSplit(stepGraph));
    costs.replicatedWeightBytes = w.replicated;
    if (w.sharded + w.replicated > 0)
      costs.replicatedRestShare = w.replicated / (w.sharded + w.replicated);
  } catch (const Error&) {
    // No decode attention TP can split: its simulation divides the rest.
  }
  return costs;
}

DecodeComparison compareDecodeParallel(const std::string& modelPath,
                                       const DecoderSignature& signature,
                                       const std::vector<DecodePoint>& measured,
                                       const DecodeComparisonOptions& options,
                                       const std::string& dbPath) {
  if (measured.empty())
    throw Error("the DP/TP/CP comparison needs the step measured first (Measure)");
  int64_t shortest = INT64_MAX;
  for (const DecodePoint& p : measured) shortest = std::min(shortest, p.context);
  const DecodeModel model = importDecodeModel(modelPath, shortest, &signature);
  const DecodeStepCosts shape = decodeStepShape(model.graph, signature);
  std::vector<DecodeRunRecord> runs;
  try {
    runs = storedDecodeRuns(dbPath, decodeModelKey(modelPath), options.devices);
  } catch (const Error&) {
    // A database that cannot be read: the simulation without measured runs.
  }
  if (std::optional<LinkRecord> stored = storedMpiLink(dbPath))
    return compareDecodeParallel(shape, linkCostOf(*stored),
                                 "mpi link measured " + stored->measuredAt, measured, options,
                                 runs);
  return compareDecodeParallel(shape, assumedDecodeLink(),
                               "assumed link (no MPI link of this host is measured: mpirun -n 2 "
                               "collage link --mpi)",
                               measured, options, runs);
}

}  // namespace collage
