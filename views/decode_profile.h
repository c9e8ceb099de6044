// Where a decode step's time goes as the context grows: the Decode panel's
// measurement (views/decode_panel.h), run on BackgroundWork's thread.
//
// Shapes are static in this tree, so each context length is its own step
// graph (importDecodeModel for a cache of that many rows) and its own
// Session. The native decode kernel reads only the rows the mask shows, so
// a step costs what its context costs only over a filled cache: the
// measurement writes the cache's first context - 1 rows directly
// (Decoder::fillCache: a prompt's pass there would take far longer than the
// steps timed) and times the step at the last row, which attends over all
// `context` rows (those and its own), `repeats` times after one warm-up, on
// a Session with profiling on. Its plan:
//  - the window's plan, where it was made for this step graph (planCapacity);
//  - else the native default: one node a group, except each decode
//    attention the native rule finds (MatMul, scores, Softmax, MatMul) as
//    one group, which the decode attention kernel runs.
// Both go through plannedDecoder, so the cache is appended in place as
// `collage generate --plan` does.
//
// The split: a group is attention when it holds a node of an attention the
// native rule finds (its codeRule's wholeGroups labelled "...attention...",
// the core and its head split and merge views);
// the rest is the step's time minus the attention kernels' (the other
// kernels, and the step's own overhead).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/decode/decoder_signature.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage {

struct DecodePoint {
  int64_t context = 0;       // the cache's rows
  double stepMs = 0;         // median over the repeats
  double attentionMs = 0;    // median of the attention groups' kernel time
  double restMs = 0;         // stepMs - attentionMs, at least 0
  int attentionGroups = 0;   // groups counted as attention
  int64_t rowsAttended = 0;  // rows the timed step's mask showed (context)
  bool withPlan = false;     // the window's plan ran (else the native default)
};

// One point. `plan` (nullable) is used only where made for this context.
// Error naming the model for one that does not import at `context` rows,
// and the Session's errors (a backend missing, a group refused).
// `stepPlan` (when set, and no window's plan applies): the plan for the step
// graph in place of defaultDecodePlan (decode-parallel times the plan that
// `generate --cache-parallel` runs).
DecodePoint measureDecodeStep(const std::string& modelPath, const DecoderSignature& signature,
                              int64_t context, const Plan* plan, const BackendLookup& backends,
                              int repeats = 5,
                              const std::function<Plan(const Graph&)>& stepPlan = {});

// The native default plan for a step graph (see above); Error when the
// native backend is not in `backends`.
Plan defaultDecodePlan(const Graph& graph, const BackendLookup& backends);

}  // namespace collage
