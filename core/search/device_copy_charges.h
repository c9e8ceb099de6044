// What the op-level DP charges for copies between devices (the Session makes
// them where a plan edge crosses devices, core/runtime/device_edges.h).
//
// A DP state is a covered NodeSet; which device a value lives on depends on
// which candidates covered it, so the set alone cannot say what a copy costs.
// When some backend runs off the host, the state also carries its *open*
// values: those with a producer or a consumer still uncovered. For each, the
// device it was made on (once its producer is covered) and the devices it is
// or will be on: copied there, or asked for there by a consumer placed before
// its producer (a group may read a value whose producer has a higher index).
// A copy is charged once, on the transition that makes it certain:
//
//   consumer on d placed, value already made on h != d, not yet on d -> h to d
//   producer placed on h, value asked for on d != h (or a graph output,
//   asked for on the host)                                           -> h to d
//
// so a value crosses to each device once, as in crossDeviceEdges, and a
// complete cover's copy charges sum to copyCostNs(crossDeviceEdges(...)).
// Values whose producer and consumers are all covered leave the state. With
// every backend on the host nothing is tracked and the states are the bare
// NodeSets, exactly as before.
//
// Unmeasured copies: a CopyCostModel that is NaN makes a transition that
// copies unknown, and the DP never takes an unknown step (as with an
// unmeasured kernel): a plan that needs such a copy is not chosen rather
// than treated as free. Copies between two devices (not through the host)
// are invalid: the Session does not make them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ir/cost.h"
#include "core/ir/device.h"
#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/patterns/candidate.h"
#include "core/runtime/device_edges.h"

namespace collage {

using BackendDeviceFn = std::function<Device(const std::string& backend)>;
// The copy model of a device other than the host (copies to it and back).
using CopyCostFn = std::function<CopyCostModel(const Device& device)>;

class DeviceCopyCharges {
 public:
  // An open value packed for the state key: value, home device, devices.
  using OpenValue = uint64_t;

  // `deviceOf` null: every backend on the host. `copyCost` null: unmeasured.
  DeviceCopyCharges(const Graph& graph, const CandidateSet& candidates,
                    const BackendDeviceFn& deviceOf, const CopyCostFn& copyCost);

  // Whether any candidate runs off the host (else the DP tracks nothing).
  bool active() const { return active_; }
  const Device& deviceOf(int32_t candidate) const;

  // The copies made certain by adding `candidate` to a cover `covered` with
  // open values `open` (sorted); `next` receives the open values after it.
  // NaN when a needed copy is unmeasured, +inf when it cannot be made.
  Cost add(const NodeSet& covered, const std::vector<OpenValue>& open, int32_t candidate,
           std::vector<OpenValue>* next) const;

  // Every copy of a complete cover, as the Session would make them.
  Cost coverCost(const std::vector<int32_t>& chosen) const;

  // Why a candidate's copies have no cost ("copies between cpu and cuda:0
  // are not measured"), or "".
  std::string unmeasuredReason(int32_t candidate) const;

 private:
  Cost copyNs(size_t bytes, uint8_t from, uint8_t to) const;

  const Graph& graph_;
  const CandidateSet& candidates_;
  bool active_ = false;
  std::vector<Device> devices_;              // [0] is the host; a state names devices by index
  std::vector<CopyCostModel> models_;        // per device index (the host's unused)
  std::vector<uint8_t> deviceIndex_;         // per candidate
  std::vector<std::vector<ValueId>> reads_;  // per candidate: non-constant values from outside
  std::vector<std::vector<ValueId>> makes_;  // per candidate: values its nodes produce
};

}  // namespace collage
