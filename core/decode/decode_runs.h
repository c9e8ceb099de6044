// Decode runs measured on N ranks (`mpirun -n N collage generate
// --cache-parallel | --data-parallel | --tensor-parallel`), stored in the
// measurement database by rank 0 (MeasurementDb::storeDecodeRun), and set
// beside the parallelism simulator's figure for the same run
// (core/decode/decode_parallel_sim.h): what `collage decode-parallel` prints
// and the app's DP/TP/CP chart draws (docs/decoding.md, "Measured runs on N
// ranks").
//
// A run is the simulator's workload of its own, not the chart's batch: a
// CP or TP run decodes one request (its prompt the context, its steps the
// output) on all ranks; a DP run decodes that request on every rank at once,
// each on its own (N requests). Its simulation is that workload on the same
// step costs and link, with the strategy the runtime runs: CP is
// `CP-replicated` (every rank runs the projections, as --cache-parallel
// does), TP and DP as named. The error is simulated over measured, minus 1.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/decode/decode_parallel_sim.h"
#include "core/measure/measurement_db.h"

namespace collage {

// The model's key in the database: "sha256:" and the file's sha256.
std::string decodeModelKey(const std::string& modelPath);

// The simulator's strategy for a stored run's strategy name ("CP" ->
// CP-replicated); nullopt for a name it does not simulate.
std::optional<DecodeStrategy> simulatedStrategyOf(const std::string& runStrategy);

// The requests a stored run decoded: one {context, steps} for CP and TP,
// one per rank for DP.
std::vector<DecodeRequest> requestsOfRun(const DecodeRunRecord& run);

struct MeasuredRunComparison {
  DecodeRunRecord run;
  bool simulated = false;   // false: a strategy the simulator lacks (why says so)
  std::string why;
  DecodeSimulation simulation;
  double simulatedStepMs = 0;       // the simulation's median step
  double simulatedTokensPerSecond = 0;
  double simulatedTalkMsPerStep = 0;  // its messages per step of one request
  double stepError = 0;             // simulated / measured - 1
  double tokensPerSecondError = 0;  // simulated / measured - 1
};

// The run simulated on `costs` and `link`, its exchanges priced by
// `exchanges` where it has one for the run's strategy and ranks.
MeasuredRunComparison compareMeasuredRun(const DecodeStepCosts& costs, const LinkCost& link,
                                         const DecodeRunRecord& run,
                                         const std::vector<MeasuredExchange>* exchanges = nullptr);

// The exchanges the stored runs measured, for the simulator
// (MeasuredExchange; docs/decoding.md, "The exchange: measured or the
// link"). Per strategy ("CP", "TP") and rank count above 1, each run's
// exchange per step (DecodeRunRecord::exchangeMs) over the exchanges a step
// makes (CP: one a layer; TP: two a layer; `costs.layers`) is one point at
// the run's context; the points are fitted to a line in the context by
// least squares, both parts at least 0 (at one context: their median, flat).
// Runs with no exchange time (0) are left out; DP has none. Empty for no
// such run, or a model of no layer.
std::vector<MeasuredExchange> measuredExchanges(const std::vector<DecodeRunRecord>& runs,
                                                const DecodeStepCosts& costs);

// The stored runs of the model on this machine (linkFingerprint) with
// `ranks` ranks (0: any), from the database at `dbPath`; none when the file
// does not exist.
std::vector<DecodeRunRecord> storedDecodeRuns(const std::string& dbPath,
                                              const std::string& modelKey, int ranks = 0);

// One line for a run beside the simulation:
// "measured CP, 2 rank(s) x 1 thread(s), 1 request at 64 rows, 31 steps: step 0.210 ms
//  (simulated 0.180 ms, -14.3 %), attention 0.100 ms, exchange 0.020 ms (simulated 0.004 ms,
//  link), 4761.9 tokens/s (simulated 5555.6, +16.7 %)" (the simulated exchange
// says what priced it: "link", or "measured, N run(s)")
std::string describeMeasuredRun(const MeasuredRunComparison& c);

}  // namespace collage
