// `collage decode-parallel model.onnx [--devices 1,2,8] [--contexts 2048,131072]
// [--requests FILE] [--memory-limit BYTES]`: measures the decoder's step on
// this machine (attention against the rest, at a few filled contexts, on the
// plan `generate --cache-parallel` runs: views/decode_profile.h), fits the attention
// to a line in the rows read, takes the MPI link between two ranks of this
// host from the measurement database (`mpirun -n 2 collage link --mpi`), and
// prints the DP / TP / CP simulation and the planner's pick for each device
// count and context (core/decode/decode_parallel_sim.h, docs/decoding.md),
// and under each device count the runs measured on that many ranks at that
// context (`mpirun -n N collage generate --cache-parallel | --data-parallel`,
// stored in the database: core/decode/decode_runs.h), each beside its own
// simulation and the error.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "backends/native/native_cache_parallel.h"
#include "core/decode/decode_parallel_sim.h"
#include "core/decode/decode_runs.h"
#include "core/decode/decoder.h"
#include "core/ir/error.h"
#include "core/pipeline/link_measurement.h"
#include "views/decode_comparison.h"
#include "views/decode_profile.h"

namespace collage::cli {
namespace {

struct DecodeParallelOptions {
  std::string modelPath;
  std::vector<int> devices{1, 2, 8};
  std::vector<int64_t> contexts{2048, 32768, 131072};
  std::vector<int64_t> measureContexts{128, 512, 2048};
  std::string requests;
  int batch = 8;
  double memoryLimit = 0;
  int repeats = 5;
  double linkLatency = -1;
  double linkBandwidth = -1;
  std::string db = MeasurementDb::defaultPath();
};

// The batch at one context: the file's requests (a line "OUTPUT" takes the
// context as its prompt, "PROMPT OUTPUT" its own; # starts a comment), else
// `batch` requests at the context whose outputs vary: 32, 64, 96, 128, ...
std::vector<DecodeRequest> requestsAt(const DecodeParallelOptions& o, int64_t context) {
  if (o.requests.empty()) return variedDecodeRequests(context, o.batch);
  std::vector<DecodeRequest> out;
  std::ifstream in(o.requests);
  if (!in) throw Error(o.requests + ": cannot be read");
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    if (fields.empty()) continue;
    std::vector<int64_t> v;
    for (const std::string& f : fields) {
      size_t used = 0;
      long long x = -1;
      try {
        x = std::stoll(f, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != f.size() || x < 0)
        throw Error(o.requests + ":" + std::to_string(number) + ": '" + f +
                    "' is not a token count");
      v.push_back(x);
    }
    if (v.size() > 2)
      throw Error(o.requests + ":" + std::to_string(number) +
                  ": a request is 'OUTPUT' or 'PROMPT OUTPUT', not " + std::to_string(v.size()) +
                  " numbers");
    DecodeRequest r = v.size() == 1 ? DecodeRequest{context, v[0]} : DecodeRequest{v[0], v[1]};
    if (r.output < 1)
      throw Error(o.requests + ":" + std::to_string(number) +
                  ": a request decodes 1 token at least");
    out.push_back(r);
  }
  if (out.empty()) throw Error(o.requests + ": no request in it");
  return out;
}

std::string megabytes(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MB", bytes / 1e6);
  return b;
}

int run(const DecodeParallelOptions& o) {
  if (!o.requests.empty()) requestsAt(o, 0);  // a bad file is refused before measuring
  const DecoderSignature signature = probeDecoderSignature(o.modelPath);
  std::unique_ptr<Backend> native = createBackend("native");
  Backend* nb = native.get();
  const BackendLookup backends = [nb](const std::string& n) {
    return n == "native" ? nb : nullptr;
  };

  // The model's shape from its smallest step graph, then the measured points.
  const DecodeModel shapeModel =
      importDecodeModel(o.modelPath, o.measureContexts.front(), &signature);
  DecodeStepCosts costs = decodeStepShape(shapeModel.graph, signature);
  std::vector<DecodeCostPoint> points;
  std::printf("measured step (native decode attention plan, cache filled, median of %d):\n",
              o.repeats);
  for (int64_t context : o.measureContexts) {
    DecodePoint p;
    try {
      p = measureDecodeStep(o.modelPath, signature, context, nullptr, backends, o.repeats,
                            native::decodeAttentionPlan);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (timing the step at " + std::to_string(context) +
                  " rows: a model whose positions end sooner needs smaller --measure-contexts)");
    }
    std::printf("  %8lld rows: step %.3f ms, attention %.3f ms, rest %.3f ms\n",
                static_cast<long long>(context), p.stepMs, p.attentionMs, p.restMs);
    points.push_back({context, p.attentionMs / 1e3, p.restMs / 1e3});
  }
  fitDecodeStepCosts(points, costs);
  std::printf(
      "model: %d layer(s), %d query head(s) on %d KV head(s) of %d; weights %s, cache %.0f B a "
      "row\n",
      costs.layers, costs.queryHeads, costs.kvHeads, costs.headDim,
      megabytes(costs.weightBytes).c_str(), costs.cacheBytesPerRow);
  std::printf("costs: rest %.4f ms; attention %.4f ms + %.3g ms a row\n", costs.restSeconds * 1e3,
              costs.attentionSeconds * 1e3, costs.attentionSecondsPerRow * 1e3);
  std::printf("TP leaves %s of weight MatMuls whole (%.1f %% of the rest runs on every device)\n",
              megabytes(costs.replicatedWeightBytes).c_str(), costs.replicatedRestShare * 100);

  LinkCost link = assumedDecodeLink();
  if (o.linkLatency >= 0 || o.linkBandwidth > 0) {
    if (o.linkLatency >= 0) link.latencyS = o.linkLatency;
    if (o.linkBandwidth > 0) link.bandwidthBytesPerS = o.linkBandwidth;
    std::printf("link: latency %.3g s, bandwidth %.3g B/s (as given)\n", link.latencyS,
                link.bandwidthBytesPerS);
  } else if (std::optional<LinkRecord> stored = storedMpiLink(o.db)) {
    link = linkCostOf(*stored);
    std::printf("link: latency %.3g s, bandwidth %.3g B/s (mpi, %s, measured %s)\n", link.latencyS,
                link.bandwidthBytesPerS, stored->key.endpoints.c_str(), stored->measuredAt.c_str());
  } else {
    std::printf(
        "link: latency %.3g s, bandwidth %.3g B/s (a default: no MPI link of this host is "
        "measured; run `mpirun -n 2 collage link --mpi`)\n",
        link.latencyS, link.bandwidthBytesPerS);
  }
  if (o.memoryLimit > 0)
    std::printf("memory limit: %s a device\n", megabytes(o.memoryLimit).c_str());
  // The runs measured on ranks for this model, shown under their device
  // count and context.
  const std::vector<DecodeRunRecord> runs = storedDecodeRuns(o.db, decodeModelKey(o.modelPath));
  size_t runsShown = 0;
  // Their exchanges price the simulated ones of their strategy on as many
  // devices; the link the rest (decode_runs.h: measuredExchanges).
  const std::vector<MeasuredExchange> exchanges = measuredExchanges(runs, costs);
  if (exchanges.empty())
    std::printf("exchanges: priced by the link (no run on ranks with an exchange is stored)\n");
  for (const MeasuredExchange& e : exchanges)
    std::printf(
        "exchanges: %s on %d devices priced by %d measured run(s): %.4f ms + %.3g ms a row an "
        "exchange (%s); other splits and device counts by the link\n",
        e.strategy.c_str(), e.devices, e.runs, e.seconds * 1e3, e.secondsPerRow * 1e3,
        e.strategy == "TP" ? "two a layer" : "one a layer");

  for (int64_t context : o.contexts) {
    const std::vector<DecodeRequest> requests = requestsAt(o, context);
    std::printf("\ncontext %lld: %zu request(s), outputs", static_cast<long long>(context),
                requests.size());
    for (const DecodeRequest& r : requests) std::printf(" %lld", static_cast<long long>(r.output));
    std::printf("\n  %7s  %-13s  %11s  %11s  %11s  %11s  %12s  %s\n", "devices", "strategy",
                "tokens/s", "step ms", "max ms", "talk ms", "memory", "fits");
    for (int n : o.devices) {
      std::vector<DecodeSimulation> sims;
      std::string pick;
      try {
        const DecodeParallelPlan plan =
            planDecodeParallel(costs, link, n, requests, o.memoryLimit, &exchanges);
        sims = plan.options;
        const DecodeStrategy& s = plan.best().strategy;
        pick = s.name + " (projections " + toString(s.projections) + ", attention " +
               toString(s.attention) + ")";
      } catch (const Error& e) {
        for (const DecodeStrategy& s : decodeStrategies())
          sims.push_back(
              simulateDecodeParallel(costs, link, n, requests, s, o.memoryLimit, &exchanges));
        pick = e.what();
      }
      for (const DecodeSimulation& s : sims)
        std::printf("  %7d  %-13s  %11.1f  %11.4f  %11.4f  %11.3f  %12s  %s\n", n,
                    s.strategy.name.c_str(), s.tokensPerSecond, s.medianStepSeconds * 1e3,
                    s.maxStepSeconds * 1e3, s.communicationSeconds * 1e3,
                    megabytes(s.memoryBytes).c_str(), s.fits ? "yes" : "no");
      std::printf("  plan for %d device(s): %s\n", n, pick.c_str());
      for (const DecodeRunRecord& run : runs)
        if (run.ranks == n && run.context == context) {
          std::printf("  %s\n",
                      describeMeasuredRun(compareMeasuredRun(costs, link, run, &exchanges)).c_str());
          ++runsShown;
          // The attention's gain over the same run on one rank (#42's CP
          // goal), where that run is stored too.
          for (const DecodeRunRecord& one : runs)
            if (n > 1 && one.ranks == 1 && one.strategy == run.strategy &&
                one.context == context && one.threadsPerRank == run.threadsPerRank &&
                run.attentionMs > 0)
              std::printf("  %s attention on %d ranks against 1: %.2fx (%.4f ms against %.4f ms)\n",
                          run.strategy.c_str(), n, one.attentionMs / run.attentionMs,
                          run.attentionMs, one.attentionMs);
        }
    }
  }
  if (runs.empty())
    std::printf(
        "\nNo run on ranks is stored for this model (mpirun -n N collage generate ... "
        "--cache-parallel or --data-parallel stores one).\n");
  else if (runsShown < runs.size())
    std::printf(
        "\n%zu stored run(s) of this model are at other contexts or device counts (--contexts, "
        "--devices show them).\n",
        runs.size() - runsShown);
  std::printf(
      "\nThe costs above are one device's, measured here; contexts beyond the measured\n"
      "ones extrapolate the attention's line.\n");
  return 0;
}

}  // namespace

Action addDecodeParallelCommand(CLI::App& app) {
  auto* command = app.add_subcommand(
      "decode-parallel",
      "simulate decoding a batch of requests on N devices with data, tensor or cache "
      "parallelism, from this machine's measured step, and pick the split");
  auto o = std::make_shared<DecodeParallelOptions>();
  command->add_option("model", o->modelPath, "ONNX decoder with past_key_values inputs")
      ->required();
  command->add_option("--devices", o->devices, "device counts to simulate (default 1,2,8)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--contexts", o->contexts,
                   "the requests' prompt rows (default 2048,32768,131072)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  command
      ->add_option("--measure-contexts", o->measureContexts,
                   "cache rows to time the step at, two at least (default 128,512,2048)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 40));
  command->add_option("--requests", o->requests,
                      "one request a line: OUTPUT (the context is its prompt) or PROMPT OUTPUT");
  command
      ->add_option("--batch", o->batch,
                   "without --requests: requests per context, outputs 32, 64, 96, 128, ...")
      ->check(CLI::PositiveNumber);
  command->add_option("--memory-limit", o->memoryLimit, "bytes a device holds (default: no limit)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--repeats", o->repeats, "timed steps per measured context (default 5)")
      ->check(CLI::PositiveNumber);
  command->add_option("--link-latency", o->linkLatency, "seconds, in place of the measured link's")
      ->check(CLI::NonNegativeNumber);
  command
      ->add_option("--link-bandwidth", o->linkBandwidth,
                   "bytes per second, in place of the measured link's")
      ->check(CLI::PositiveNumber);
  command->add_option("--db", o->db,
                      "the measurement database of the MPI link and the measured runs (default: "
                      "this machine's)");
  return [o]() {
    if (o->measureContexts.size() < 2)
      throw Error("--measure-contexts needs two cache sizes at least (the attention is a line)");
    return run(*o);
  };
}

}  // namespace collage::cli
