// Whether a plan computes the model's numbers: the one check behind
// `collage run --verify`, the end-to-end check and the graph-level search
// (PairedPlanRunner).
//
// First the plan's outputs against the reference executor's, within the
// plan's float tolerance. Where they differ, each group is rerun alone on the
// reference's values of its inputs (the kernel's own error, not what it
// inherits from the kernels before it) and must itself be right:
//  - a float output within tolerance.rtol of its largest |value| (a
//    summation order moves an element by a fraction of the terms it sums,
//    not of the element), or within tolerance.atol;
//  - an integer output exact, except one step where a quantizer inside the
//    group rounds a value the reference puts at a rounding tie.
// A plan whose every kernel is right passes when computed floats reach a
// quantizer with values at a rounding tie (quantization_ties.h): its outputs
// then differ from the reference's only by which side of a tie a summation
// order fell, and the check says so, with the figures. Without such a tie a
// difference in the outputs fails the plan even when each kernel alone is
// right: it arose between kernels (a value handed over wrongly).
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
  // The first output the kernel gets wrong, beyond the rules above, with
  // the element; empty when none.
  std::string wrong;
  int64_t tieSteps = 0;     // integer elements one step off at a rounding tie (allowed)
  std::string notRun;       // why it was not rerun alone (on a device, refused), else empty
};

// For each group of `session`'s plan, in plan order.
std::vector<GroupError> groupErrors(const Session& session, const std::vector<Tensor>& inputs,
                                    Tolerance tolerance = kPlanTolerance);

// What a check learns that holds for every plan of one model on the same
// inputs: each kernel's verdict rerun alone (keyed by backend and nodes), and
// the quantizers' ties. A caller that checks many plans (the graph-level
// search) keeps one, so a plan made of kernels already rerun costs no rerun.
struct PlanCheckMemo {
  // Both keyed by the tolerance too: a bf16 plan is checked with another.
  std::map<std::string, GroupError> kernels;
  std::map<std::string, std::vector<QuantizerTies>> ties;
};

struct PlanCheckOptions {
  Tolerance tolerance = kPlanTolerance;
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
};

PlanCheck checkPlan(Session& session, const std::vector<Tensor>& inputs, const PlanCheckOptions& options);

}  // namespace collage
