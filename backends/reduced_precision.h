// Reduced precision as the user's choice. A backend that trades precision
// for speed (cublas_tf32, onednn_bf16; backend_list.h's ReducedPrecision)
// joins a backend set only when it is named or its precision is allowed
// (`collage optimize --allow-precision bf16`, the app's Optimize dialog,
// the API's OptimizeOptions::allowPrecisions); a plan that uses one is then
// verified within the loosest tolerance its reduced-precision groups
// declare, and a plan that uses none within float32's (kFloat32Bound); each
// group alone within its own backend's bound (groupBound).
#pragma once

#include <string>
#include <vector>

#include "core/ir/tensor_compare.h"
#include "core/measure/plan_check.h"
#include "core/plan/plan.h"

namespace collage {

// The precisions some compiled-in backend declares ("bf16", "tf32"), sorted.
std::vector<std::string> knownPrecisions();

// `names` (defaultBackendNames() when empty) with every available backend
// of each precision in `allowed` added after them. An unknown precision, or
// one no backend here can run, is an Error that says which are known or why.
std::vector<std::string> withAllowedPrecisions(std::vector<std::string> names,
                                               const std::vector<std::string>& allowed);

// What `collage run --verify` checks a plan's outputs with, and why.
struct PlanTolerance {
  Tolerance tolerance;
  std::vector<std::string> reducedBackends;  // the plan's reduced-precision backends, plan order
  std::string why;  // "float32 (...)" or "bf16 on onednn_bf16 (...): its declared tolerance"
  double bound = kFloat32Bound;  // as the plan check applies it (planBound, session.h)
};
// The plan's loosest declared tolerance: each bound (rtol, atol) the largest
// over its reduced-precision backends'; kPlanTolerance for a plan of float32
// backends only, never looser.
PlanTolerance planTolerance(const Plan& plan);

// The groups on a reduced-precision backend that, rerun alone on the
// reference's inputs (groupErrors), err beyond the kernel bound their
// backend declares: one line each ("group 3 on onednn_bf16 ..."). A plan's
// loose whole-output tolerance absorbs rounding compounded over depth; a
// kernel beyond its own bound is wrong, not rounded.
std::vector<std::string> kernelsBeyondDeclared(const std::vector<GroupError>& errors);

// For `explain`: "runs in bf16: <arithmetic>; checked within rtol R, atol A";
// empty for a float32 backend.
std::string precisionNote(const std::string& backend);

}  // namespace collage
