// Why a plan runs a selection of nodes where it does: the GUI-free half of the
// inspector (views/node_inspector.h formats it). For the selected nodes:
// which plan groups hold them and where each choice came from, what every
// backend would cost for exactly these nodes (runOnChoices), and one sentence
// of "why":
//   - pinned by the user;
//   - the only backend with a valid candidate for exactly these nodes;
//   - cheapest for these nodes, by X% over the next;
//   - not the cheapest alone, but cheaper once the switching cost is counted,
//     or once the copies to and from another device are, or cheaper as part
//     of the whole cover;
//   - the optimizer chose a bigger fused group that contains them: that group
//     and its cost against the cheapest other cover of the same nodes;
//   - the nodes span several groups of the plan.
#pragma once

#include <string>
#include <vector>

#include "core/search/optimization_job.h"
#include "core/plan/plan.h"
#include "core/search/plan_override.h"

namespace collage {

struct ChoiceExplanation {
  std::vector<size_t> groups;  // plan groups holding a selected node, in plan order
  bool exactGroup = false;     // the selection is exactly one plan group
  std::string backend;         // when one group holds every selected node
  PlanOrigin origin = PlanOrigin::OpLevel;
  std::vector<RunOnChoice> choices;  // empty without an OptimizationResult
  std::string why;                   // plain text, one or two sentences

  // The enclosing fused group, when one group holds the selection and more:
  Cost groupCostNs = kUnknownCost;        // its kernel cost
  Cost alternativeCostNs = kUnknownCost;  // cheapest other cover of its nodes (+inf: none)
  std::string alternative;                // that cover: "2 kernels: native Conv, native Relu"
};

// `result` may be null (a plan loaded from a file): then only the plan's own
// fields explain the choice. Throws Error for an empty selection.
ChoiceExplanation explainChoice(const Graph& graph, const Plan& plan,
                                const OptimizationResult* result, const NodeSet& nodes);

}  // namespace collage
