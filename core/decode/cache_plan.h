// A plan for the decode step graph whose cache Concats can run in place.
//
// The decode loop appends in place (Session::appendInPlace) only when a
// cache pair's Concat(past, new) -> present is a group of its own: then the
// Session skips its kernel and writes the new rows into the cache buffer.
// The optimizer does not know the Concat is special and, on the exported
// graphs, fuses it with the new K's or V's Reshape and Transpose into one
// native group: run as measured, every step would copy the whole cache into
// a fresh present. This rewrite keeps the measured plan and only takes each
// cache Concat (found by the decoder signature, never by a name) out of its
// group: the group's nodes that feed the Concat become one group, the Concat
// one, the rest (nodes that read its output, if any) a third, all on the
// group's backend. Each part of a convex group is convex (a path between two
// nodes of a part stays in the group, and cannot pass through the Concat
// without making one end an ancestor of it and the other a descendant).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/decode/decoder.h"
#include "core/decode/decoder_signature.h"
#include "core/ir/graph.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage {

// `plan` (for `graph`, the step graph) with every cache pair's Concat in a
// group of its own. The parts' costs are unknown (NaN): they were not
// measured apart. `split` (optional) gets one line per group split ("group 3
// (native ...): Concat 'x' taken out"). Error naming the present whose
// Concat the plan does not hold.
Plan planWithCacheConcatsAlone(const Plan& plan, const Graph& graph,
                               const DecoderSignature& signature,
                               std::vector<std::string>* split = nullptr);

// The decode loop on a plan for model.graph: a Session on
// planWithCacheConcatsAlone's plan and a Decoder appending in place on it.
// When that cannot be (a backend refuses a part of a split group, a Concat's
// input reaches it in a backend's own layout), the plan as given with its
// Session as the Decoder's step function (the cache copied into each
// present, as before), and `fallback` says why. Errors of the plan itself
// (a backend missing, a group it refuses) are thrown as the Session's.
// The prompt runs in one pass on a Session of `plan` for the model imported
// for its length (Decoder::setPrefillRunner), or one token a step where the
// plan does not compile for that graph, or, for a merged decoder, whose
// prompt runs its other branch (not named by the plan), one token a step.
// `plan` for a prompt's graph (importPrefillGraph's): the graph's nodes no
// group of the plan names run alone on `backend` (the callers pass the
// native backend; core names none). That is the
// Gather taking the last position's logits, which a step plan lacks, and so
// does a prompt plan made on the model without --last-row (it measured the
// LM head over every position; it runs it over one).
Plan planForPrompt(const Plan& plan, const Graph& prompt, const std::string& backend);

struct PlannedDecoder {
  std::unique_ptr<Session> session;
  std::unique_ptr<Decoder> decoder;
  std::vector<std::string> split;  // planWithCacheConcatsAlone's lines
  std::string fallback;            // empty: in place
};
// With a `share` other than the default (this device holds part of the
// cache: Decoder's CacheShare), there is no fallback: a plan whose
// Concats cannot run in place is an Error.
// `promptBackend`: where the prompt's default pass on `plan` runs the nodes
// the plan does not name (planForPrompt); empty: it runs one token a step.
PlannedDecoder plannedDecoder(const DecodeModel& model, const Plan& plan, BackendLookup backends,
                              const CacheShare& share = {}, const std::string& promptBackend = {});

// A merged decoder's plans (signature.useCacheFlag set): the decode loop runs
// each branch inlined, its flag a constant (the steps: true, the prompt's
// pass: false; decoder.h), so a plan must be made for that graph: optimized
// with --input-value FLAG=true or =false beside the --input-shape bindings
// (useCacheBinding). Error naming the plan, the model and the flag for a
// plan that lists the flag among its inputs: it was made with the flag
// unbound, the If kept, and names nodes of both branches. (A plan for the
// other branch has other input shapes, which checkPlanAgainst refuses; one
// for the separate form's file another sha256.) Nothing for the separate
// form.
void checkMergedDecoderPlan(const Plan& plan, const DecoderSignature& signature,
                            const std::string& model, bool prompt);

}  // namespace collage
