// A simulation of decoding a batch of requests on N devices with data,
// tensor or cache parallelism, from one device's measured step costs and a
// measured link (docs/decoding.md, "The parallelism simulator"), and the
// planner that picks, per component (the projections and MLP; the
// attention), the split with the most tokens per second that fits memory.
//
//   one step, one request, one device:  rest (projections, MLP, logits)
//                                     + attention(rows) = a + b * rows
//   DP  requests spread (request i on device i mod N); each device steps its
//       own requests, one after another, and never waits for another device
//   TP  heads split: the rest's sharded share / N and its whole share
//       (the weight MatMuls TP cannot shard, e.g. a vocabulary-wide LM
//       head, by their weights' bytes) on every device, attention x its
//       heads' share, two all-reduces of the active requests' hidden rows
//       per layer
//   CP  the cache split along the sequence (device d holds rows
//       [d C / N, (d + 1) C / N) of a C-row cache, as --cache-parallel does):
//       every device attends over its rows of every active request; each
//       request's projections run on one device (by requests) and its Q and
//       new K, V rows go to every device, its partials (out, max, sum) back
//   CP-replicated  the same attention; every device runs every request's
//       projections (what `generate --cache-parallel` runs), and the ranks
//       all-gather their partials
//
// Why it has this shape: a decode step reads the weights and the cache once,
// so its time is the rest (one token's projections, constant in the context)
// plus the attention (linear in the rows read). DP splits neither within a
// request, so it pays nothing to talk but leaves devices idle when requests
// are fewer than devices or end at different times (output lengths vary);
// TP splits both, but its attention no finer than the KV heads, and pays
// 4(N - 1) link latencies per layer; CP splits the attention as finely as
// the rows, pays 2(N - 1) per layer, and leaves the rest unsplit. Which wins
// is then a matter of the measured costs: the simulator hard-codes no order.
//
// Synchronous strategies (TP, CP) take one step for all active requests at
// once: its time is the slowest device's compute, then the layers' messages
// (each device sends its messages one after another: a ring all-reduce is
// 2(N - 1) messages of bytes / N). The prompt's pass is not simulated, nor
// are activations in memory, nor is batching's reuse of weights: a device
// runs its requests' steps one after another, as the batch-1 step graph does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/decode/decoder_signature.h"
#include "core/ir/graph.h"
#include "core/pipeline/topology.h"

namespace collage {

// One decode step of one request on one device, and the model's shape.
struct DecodeStepCosts {
  double restSeconds = 0;             // everything but the attention kernels
  double attentionSeconds = 0;        // the attention's fixed part, every layer
  double attentionSecondsPerRow = 0;  // and per cache row read, every layer
  int layers = 0;
  int queryHeads = 0;
  int kvHeads = 0;
  int headDim = 0;
  double hiddenBytes = 0;       // one token's rows between layers (TP's all-reduce)
  double weightBytes = 0;       // every constant of the step graph
  // TP: the weights of the MatMuls it leaves whole (every device holds and
  // reads them), and their share of the weight MatMuls' bytes: the share of
  // the rest that does not divide (the rest is one token's weight reads).
  double replicatedWeightBytes = 0;
  double replicatedRestShare = 0;
  double cacheBytesPerRow = 0;  // K and V, every layer and KV head
  double attentionAt(double rows) const { return attentionSeconds + attentionSecondsPerRow * rows; }
};

// One measured point: a step attending `rows` rows (DecodePoint in seconds).
struct DecodeCostPoint {
  int64_t rows = 0;
  double attentionSeconds = 0;
  double restSeconds = 0;
};

// Fills `costs`' times from points at two or more distinct row counts: the
// rest is the points' median, the attention a least-squares line (its fixed
// part at least 0, refitted through the origin when the free fit goes below;
// its slope at least 0). Error for fewer than two row counts or a negative
// time.
void fitDecodeStepCosts(const std::vector<DecodeCostPoint>& points, DecodeStepCosts& costs);

// The shape of a decoder's step graph (imported for a cache of some rows):
// layers (cache pairs / 2), KV heads and head dim from the first past
// ([batch, KV heads, rows, head dim]), query heads from the first 4-D Softmax
// (the KV heads when none), the hidden rows as query heads x head dim
// float32, the weights (every constant) and the cache bytes per row. Times
// stay 0. Error naming the past whose shape is not [b, heads, rows, dim].
DecodeStepCosts decodeModelShape(const Graph& graph, const DecoderSignature& signature);

struct DecodeRequest {
  int64_t prompt = 0;  // rows in the cache when decoding starts
  int64_t output = 0;  // decode steps (new tokens), at least 1
};

// How each component is split across the devices.
enum class ProjectionSplit { Requests, Heads, Replicated };
enum class AttentionSplit { Requests, Heads, Sequence };

struct DecodeStrategy {
  std::string name;  // "DP", "TP", "CP", "CP-replicated"
  ProjectionSplit projections = ProjectionSplit::Requests;
  AttentionSplit attention = AttentionSplit::Requests;
};
// DP, TP, CP, CP-replicated: the combinations above, in that order.
std::vector<DecodeStrategy> decodeStrategies();
std::string toString(ProjectionSplit split);
std::string toString(AttentionSplit split);

// The exchanges measured in runs on ranks (decode_runs.h: measuredExchanges),
// which price the simulated exchanges of that strategy on that many devices
// in place of the link fit (docs/decoding.md, "The exchange: measured or
// the link"): one exchange's time, a line in the rows in the cache (the
// measured exchange holds the wait for the slower rank, which grows with
// them). An exchange is CP's all-gather of a layer's partials, or one of
// TP's two all-reduces a layer.
struct MeasuredExchange {
  std::string strategy;  // "CP" (CP and CP-replicated) or "TP"
  int devices = 0;
  double seconds = 0;        // one exchange of one request at 0 rows
  double secondsPerRow = 0;  // and per row in the cache
  int runs = 0;              // the stored runs it was fitted from
  double at(double rows) const { return seconds + secondsPerRow * rows; }
};
// The one for `strategy`'s attention split (sequence: "CP"; heads: "TP") on
// `devices` devices, or null.
const MeasuredExchange* findMeasuredExchange(const std::vector<MeasuredExchange>& exchanges,
                                             const DecodeStrategy& strategy, int devices);

struct DecodeSimulation {
  DecodeStrategy strategy;
  int devices = 0;
  int64_t tokens = 0;            // decode steps over all requests
  double seconds = 0;            // until the last device finishes
  double tokensPerSecond = 0;    // tokens over seconds
  double medianStepSeconds = 0;  // over tokens: the step each came from
  double maxStepSeconds = 0;
  double communicationSeconds = 0;  // the steps' messages, summed over steps
  // What priced them: "link" (latency + bytes / bandwidth per message),
  // "measured" (a MeasuredExchange), or empty (no message: DP, one device).
  std::string talkPricedBy;
  int talkMeasuredRuns = 0;  // "measured": the runs behind it
  double memoryBytes = 0;           // the fullest device: weights + its caches
  double memoryLimitBytes = 0;      // 0: none
  bool fits = true;
};

// Error naming the request with no output or a negative prompt, for fewer
// than one device or a negative cost. With `exchanges` holding one for the
// strategy and device count, a step's exchanges cost its time at the step's
// largest request's rows, plus what the link's bandwidth adds for a batch's
// bytes beyond one request's (a measured run decodes one request); else
// the link's.
DecodeSimulation simulateDecodeParallel(const DecodeStepCosts& costs, const LinkCost& link,
                                        int devices, const std::vector<DecodeRequest>& requests,
                                        const DecodeStrategy& strategy,
                                        double memoryLimitBytes = 0,
                                        const std::vector<MeasuredExchange>* exchanges = nullptr);

struct DecodeParallelPlan {
  std::vector<DecodeSimulation> options;  // decodeStrategies()' order
  int chosen = -1;                        // the fitting option with the most tokens/s
  const DecodeSimulation& best() const { return options.at(static_cast<size_t>(chosen)); }
};

// Every strategy simulated, and the fitting one with the most tokens per
// second (the first in decodeStrategies()' order on a tie). Error when none
// fits, naming the smallest memory per device any needs and the limit.
DecodeParallelPlan planDecodeParallel(const DecodeStepCosts& costs, const LinkCost& link,
                                      int devices, const std::vector<DecodeRequest>& requests,
                                      double memoryLimitBytes = 0,
                                      const std::vector<MeasuredExchange>* exchanges = nullptr);

}  // namespace collage
