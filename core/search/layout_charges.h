// What the op-level DP charges for layout changes at kernel boundaries.
//
// A kernel may offer its own layout (oneDNN's nhwc or nChw16c) for a value it
// writes or reads (Kernel::nativeOutputLayout / nativeInputLayout). The
// Session hands a value over in that layout when its producer and every
// consumer offer the same one, and both reorders go (session.h). Measured
// alone, a kernel pays those reorders; between kernels of its own library it
// does not. So the DP charges each such candidate its cost measured with
// every offered boundary in the native layout, and adds a reorder back for
// each boundary where the hand-over cannot happen:
//
//   producer offers L, every consumer offers L         -> nothing
//   producer offers L, some consumer does not (or the
//   value is a graph output)                           -> a reorder for the
//                                                         producer and one for
//                                                         each consumer offering L
//   a participant offers a layout nobody else does     -> a reorder for it
//
// The state: a value is *pending* while some participant that offered a layout
// is placed and others are not, and no participant refused. A candidate that
// offers the pending layout keeps it pending; one that does not makes the
// hand-over impossible, and the reorders of the participants placed so far are
// charged then (each reorder costs the value's modelled reorder time, so the
// state keeps only how many kernels offered it). A value whose participants
// are all placed while pending is handed over: free. Only
// pending values are in the DP's state, so where no candidate offers a layout
// the states are the bare NodeSets, as before.
//
// A layout-agnostic participant (an elementwise pass, Kernel::layoutAgnostic)
// takes part in a hand-over like any other but is charged no reorder of its
// own where it fails.
//
// The reorder time of a value is a model fitted to measurements: the boundary
// reorders of a candidate cost (its cost measured with plain boundaries) -
// (its cost with native ones), fitted as a fixed time per reorder plus a time
// per byte over all candidates that offer layouts and reorder themselves
// (fitReorderModel).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/cost.h"
#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/patterns/candidate.h"
#include "core/plan/plan.h"

namespace collage {

// The layouts a candidate's kernel offers at its boundary.
struct LayoutOffers {
  struct Offer {
    ValueId value = kNoValue;
    bool output = false;  // written (else read) by the candidate
    std::string layout;   // NativeLayout::name
  };
  std::vector<Offer> offers;  // empty: plain at every boundary
  Cost nativeNs = kUnknownCost;  // measured with every offered boundary native; NaN = unmeasured
  // The kernel costs the same in its offered layouts as in plain memory
  // (Kernel::layoutAgnostic): nativeNs is its plain cost, and it reorders
  // nothing itself where a hand-over fails.
  bool agnostic = false;
};

// The time of one reorder of `bytes`: fixed + perByte * bytes.
struct ReorderModel {
  double fixedNs = 0;
  double perByteNs = 0;
  int samples = 0;  // candidates it was fitted on (0: no charges at all)
  double ns(size_t bytes) const { return fixedNs + perByteNs * static_cast<double>(bytes); }
  std::string toString() const;
};

// Over candidates with offers, not layout-agnostic, and both costs known, a robust line (Theil-Sen)
// through (bytes per offered boundary, (plain - native) per offered
// boundary); both coefficients floored at 0.
ReorderModel fitReorderModel(const Graph& graph, const std::vector<Cost>& plainNs,
                             const std::vector<LayoutOffers>& offers);

class LayoutCharges {
 public:
  // A pending value packed for the state key: value, how many placed kernels
  // offered its layout, the layout's index.
  using Pending = uint64_t;

  // `offers` per candidate (empty = none offer); `model` prices a reorder.
  LayoutCharges(const Graph& graph, const CandidateSet& candidates,
                std::vector<LayoutOffers> offers, ReorderModel model);

  // Whether any candidate offers a layout and the model can price it.
  bool active() const { return active_; }

  // The cost the DP charges for the kernel itself: measured with native
  // boundaries where it offers layouts and that was measured, else `plainNs`.
  Cost kernelNs(int32_t candidate, Cost plainNs) const;

  // The reorders made certain by adding `candidate` to a cover `covered` with
  // pending values `pending` (sorted); `next` receives the pending values
  // after it. Zero for a candidate that charges its plain cost.
  Cost add(const NodeSet& covered, const std::vector<Pending>& pending, int32_t candidate,
           std::vector<Pending>* next) const;

  // How much more than a state with pending values `other` a state with
  // `ref` (the same covered set) can pay in reorders, at most, on any
  // completion: per value whose entries differ, the reorders `ref` has
  // deferred on it, and where `other` has it pending too, one per
  // participant not yet covered. So a state costing more than `ref`'s by at
  // least this cannot lead to a cheaper plan, and the DP drops it.
  Cost pendingSpread(const NodeSet& covered, const std::vector<Pending>& ref,
                     const std::vector<Pending>& other) const;

  // The one participant of v not in `covered` (kNoNode if none or several):
  // a pending value whose hand-over is decided there, by whichever candidate
  // covers that node, and by nothing else.
  NodeId lastParticipant(const NodeSet& covered, ValueId v) const;
  static ValueId pendingValue(Pending p) { return static_cast<ValueId>(p >> 24); }

  // The reorders a complete cover pays, as the Session would make them.
  Cost coverCost(const std::vector<int32_t>& chosen) const;

  const ReorderModel& model() const { return model_; }
  // What it was made from, per candidate: kept by the job so that re-planning
  // after an override charges layouts as the job's DP did.
  const std::vector<LayoutOffers>& offers() const { return offers_; }

 private:
  struct Boundary {
    ValueId value;
    uint16_t layout;  // index + 1 into layouts_; 0 = plain
    bool reorders;    // the candidate pays a reorder here where the hand-over fails
    // The reorders this boundary adds where the hand-over fails.
    int charged() const { return layout != 0 && reorders ? 1 : 0; }
  };
  Cost reorderNs(ValueId v) const;
  bool charged(int32_t candidate) const;  // its kernelNs is the native cost

  const Graph& graph_;
  const CandidateSet& candidates_;
  std::vector<LayoutOffers> offers_;
  ReorderModel model_;
  bool active_ = false;
  std::vector<std::string> layouts_;
  std::vector<std::vector<Boundary>> boundaries_;  // per candidate: every value it reads or writes outside
  std::vector<std::vector<NodeId>> participants_;  // per value: producer and consumer nodes
};

// A plan's groups priced as the DP charged them: the kernel of each group
// made from a candidate (its index in `candidates` of `charges`) in its own
// layout where it hands tensors over (kernelNs), so that with coverCost the
// groups add up to the prediction. A measurement with plain boundaries pays
// reorders the plan does not, and, taken on a busy machine, can be far off.
// Groups of no candidate (graph-level regions) keep their cost.
void chargeKernelsAsTheDp(const LayoutCharges& charges, std::vector<PlanGroup>& groups);

}  // namespace collage
