// Whether a plan computes the model's numbers: the one check behind
// `collage run --verify`, the end-to-end check and the graph-level search
// (PairedPlanRunner).
//
// One tolerance rule (compareScaled; derivation: docs/measurement.md, "The
// tolerance rule"): a float output is right when its largest error is within
// a bound times its largest |reference value|. A plan's outputs are held to
// the plan's bound (planBound: float32's 1e-4, or the loosest a
// reduced-precision backend of the plan declares); each group rerun alone
// to its own backend's (groupBound), whatever the other groups run in.
//
// First the plan's outputs against the reference executor's. Where they
// differ (or with eachKernel, or in a plan with a reduced-precision group,
// whose loose bound says nothing of its other groups), each group is rerun alone on the reference's
// values of its inputs (the kernel's own error, not what it inherits) and
// must itself be right:
//  - a float output within its group's bound;
//  - an integer output exact, except one step where a quantizer inside the
//    group rounds a value the reference puts near a rounding tie.
// A group beyond its own bound fails the plan, whether or not the outputs
// differ. Where the outputs differ and every group alone is right, the
// difference may come from float32 reordering tipping a quantizer's rounding
// tie (quantization_ties.h) only if that is shown: the plan is replayed
// (the Session itself, its kernels and layouts) with the reference's values
// put back where quantizers round near ties, and its outputs must then match
// within the plan's bound. Otherwise the check fails and names the first
// group whose replayed outputs depart from the reference's.
//
// The reference's values are computed node by node and each is freed after
// its last reader (a node, or a group's rerun), so the check runs on models
// whose intermediate values together would not fit in memory.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/ir/tensor_compare.h"
#include "core/measure/quantization_ties.h"
#include "core/runtime/session.h"

namespace collage {

// One group of a plan rerun alone on the reference's values of its inputs.
struct GroupError {
  size_t group = 0;
  std::string backend;
  std::string what;         // the group's nodes (KernelRequest::toString)
  std::string worstOutput;  // of its float outputs, the one with the largest scaled error
  double maxAbsError = 0;   // on that output
  double scaledError = 0;   // maxAbsError over the largest |reference value| of that output
  double bound = 0;         // what it is held to alone: its backend's (groupBound)
  // The first output the kernel gets wrong, beyond the rules above, with
  // the element; empty when none.
  std::string wrong;
  int64_t tieSteps = 0;     // integer elements one step off at a rounding tie (allowed)
  std::string notRun;       // why it was not rerun alone (on a device, refused), else empty
};

// For each group of `session`'s plan, in plan order, each held to its own
// backend's bound.
std::vector<GroupError> groupErrors(const Session& session, const std::vector<Tensor>& inputs);

// The plan's bound from the backends its Session runs (planBound).
double sessionPlanBound(const Session& session);

// What a check learns that holds for every plan of one model on the same
// inputs: each kernel's verdict rerun alone (keyed by backend and nodes), and
// the quantizers' ties. A caller that checks many plans (the graph-level
// search) keeps one, so a plan made of kernels already rerun costs no rerun.
struct PlanCheckMemo {
  // Both keyed by the bounds too: a bf16 plan's ties are looked for wider.
  std::map<std::string, GroupError> kernels;
  std::map<std::string, std::vector<QuantizerTies>> ties;
};

struct PlanCheckOptions {
  // The plan's outputs are held to this fraction of each one's largest
  // |value|; 0: the plan's declared bound (sessionPlanBound). Groups alone
  // are held to their own backend's bound either way.
  double outputBound = 0;
  bool eachKernel = false;  // rerun every group alone even when the outputs match
  // The reference's outputs on these inputs, when the caller has them
  // (they are computed otherwise).
  const std::vector<Tensor>* expected = nullptr;
  PlanCheckMemo* memo = nullptr;  // optional: verdicts kept across plans
};

struct PlanCheck {
  bool ok = false;
  std::vector<Tensor> outputs;             // the plan's
  std::vector<CompareResult> comparisons;  // per graph output, against the reference
  std::vector<GroupError> groups;          // when the outputs differ, or eachKernel
  std::vector<QuantizerTies> ties;         // quantizers of computed floats, with groups
  std::vector<std::string> problems;       // why not ok: one line each, naming the output or group
  std::string tiesNote;                    // ok though the outputs differ: why, with figures
  double outputBound = 0;                  // what the outputs were held to
  // The replay, when the outputs differed and every group alone was right:
  int64_t substituted = 0;              // values put back at rounding ties
  std::vector<CompareResult> replayed;  // per graph output, after those
};

PlanCheck checkPlan(Session& session, const std::vector<Tensor>& inputs, const PlanCheckOptions& options);

}  // namespace collage
