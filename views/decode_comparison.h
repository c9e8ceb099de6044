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
// A measured run on N devices (mpirun) is not stored anywhere yet, so no
// measured point sits on the N-device lines.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/decode/decode_parallel_sim.h"
#include "core/decode/decoder_signature.h"
#include "core/measure/measurement_db.h"
#include "core/pipeline/topology.h"
#include "views/decode_profile.h"

namespace collage {

// `batch` requests at `context` rows whose outputs are 32, 64, 96, 128, 32, ...
std::vector<DecodeRequest> variedDecodeRequests(int64_t context, int batch);

// The MPI link between two ranks of this host, as `collage link --mpi`
// stored it in the default measurement database; nullopt where it holds none.
std::optional<LinkRecord> storedMpiLink();
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
  DecodeStepCosts costs;
  LinkCost link;
  std::string linkSource;  // "measured mpi link ..." or "assumed ..."
};

// The contexts charted: the measured ones, and powers of two from the
// shortest measured one up to max(options.maxContext, the longest measured).
std::vector<int64_t> comparisonContexts(const std::vector<DecodePoint>& measured,
                                        int64_t maxContext);

// The comparison for the decoder at `modelPath` (its shape from its step
// graph at the shortest measured context) from the steps measured; the link
// is the stored MPI link, else assumedDecodeLink(). Error for fewer than two
// measured context lengths, and the simulator's.
DecodeComparison compareDecodeParallel(const std::string& modelPath,
                                       const DecoderSignature& signature,
                                       const std::vector<DecodePoint>& measured,
                                       const DecodeComparisonOptions& options);
// The same on a given shape and link (no file, no database).
DecodeComparison compareDecodeParallel(DecodeStepCosts shape, const LinkCost& link,
                                       std::string linkSource,
                                       const std::vector<DecodePoint>& measured,
                                       const DecodeComparisonOptions& options);

}  // namespace collage
