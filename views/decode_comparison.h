// The DP / TP / CP comparison the Decode panel charts
// (views/decode_parallel_chart.h): the parallelism simulator
// (core/decode/decode_parallel_sim.h) fed with the steps the panel measured
// on this machine (views/decode_profile.h), as `collage decode-parallel`
// feeds it, at every context from the shortest measured one to a long one.
// No Qt: the CLI shares the link and the requests with it.
//
// What is on the chart, and why those quantities:
//  - per strategy, the tokens per second of a batch of requests on N
//    devices, each request's prompt the context, their outputs 32, 64, 96,
//    128, ... tokens (decode-parallel's default batch: outputs that vary
//    leave data parallelism's devices idle at the end);
//  - the fit through the measured points: one request's step on one device,
//    1 / (rest + attention(context)), in tokens per second;
//  - the measured points themselves, 1000 / step ms: one request's step at
//    that context on this machine, the same quantity as the fit, so the
//    distance between them is the fit's error. The simulated strategies are
//    built on that fit.
//  - the runs measured on the chart's N devices (mpirun -n N collage generate
//    --cache-parallel | --data-parallel, stored in the database:
//    core/decode/decode_runs.h), each at its context and tokens per second,
//    and beside it its own simulation: a run is one request on all ranks
//    (CP, TP) or one per rank (DP), not the chart's batch, so it is set
//    beside the simulation of that run, and the distance between the two
//    is the simulator's error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/decode/decode_parallel_sim.h"
#include "core/decode/decode_runs.h"
#include "core/decode/decoder_signature.h"
#include "core/measure/measurement_db.h"
#include "core/pipeline/topology.h"
#include "views/decode_profile.h"

namespace collage {

// `batch` requests at `context` rows whose outputs are 32, 64, 96, 128, 32, ...
std::vector<DecodeRequest> variedDecodeRequests(int64_t context, int batch);

// The MPI link between two ranks of this host, as `collage link --mpi`
// stored it in the measurement database (the default one unless named);
// nullopt where it holds none.
std::optional<LinkRecord> storedMpiLink(const std::string& dbPath = MeasurementDb::defaultPath());
// A link assumed where none is measured: 5 GB/s, 5 us.
LinkCost assumedDecodeLink();

struct DecodeComparisonOptions {
  int devices = 2;
  int requests = 8;
  int64_t maxContext = 131072;  // the chart's last context (or the longest measured)
};

struct DecodeCurvePoint {
  int64_t context = 0;
  double tokensPerSecond = 0;
};

struct DecodeComparison {
  int devices = 0;
  int requests = 0;
  // DP, TP and CP (decodeStrategies()' first three), one point a context.
  std::vector<std::string> strategies;
  std::vector<std::vector<DecodeCurvePoint>> curves;
  std::vector<DecodeCurvePoint> fit;       // one request's step on one device
  std::vector<DecodeCurvePoint> measured;  // the measured steps, the same quantity
  // The runs stored for this model on `devices` ranks, each with its own
  // simulation (its point: run.context, run.tokensPerSecond).
  std::vector<MeasuredRunComparison> runs;
  DecodeStepCosts costs;
  LinkCost link;
  std::string linkSource;  // "measured mpi link ..." or "assumed ..."
};

// decodeModelShape with TP's whole share: the weight MatMuls `generate
// --tensor-parallel` cannot shard (native_tensor_parallel.h) run whole on
// every device, so that share of the rest does not divide. A step graph TP
// cannot split keeps the whole rest dividing.
DecodeStepCosts decodeStepShape(const Graph& stepGraph, const DecoderSignature& signature);

// The contexts charted: the measured ones, and powers of two from the
// shortest measured one up to max(options.maxContext, the longest measured).
std::vector<int64_t> comparisonContexts(const std::vector<DecodePoint>& measured,
                                        int64_t maxContext);

// The comparison for the decoder at `modelPath` (its shape from its step
// graph at the shortest measured context) from the steps measured; the link
// is the stored MPI link, else assumedDecodeLink(), and the runs those
// stored for the model on options.devices ranks, both from the database at
// `dbPath`. Error for fewer than two measured context lengths, and the
// simulator's.
DecodeComparison compareDecodeParallel(const std::string& modelPath,
                                       const DecoderSignature& signature,
                                       const std::vector<DecodePoint>& measured,
                                       const DecodeComparisonOptions& options,
                                       const std::string& dbPath = MeasurementDb::defaultPath());
// The same on a given shape and link (no file, no database), with `runs`
// (those on options.devices ranks) simulated beside the curves.
DecodeComparison compareDecodeParallel(DecodeStepCosts shape, const LinkCost& link,
                                       std::string linkSource,
                                       const std::vector<DecodePoint>& measured,
                                       const DecodeComparisonOptions& options,
                                       const std::vector<DecodeRunRecord>& runs = {});

}  // namespace collage
