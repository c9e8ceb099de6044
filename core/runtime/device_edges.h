// Where a plan's tensors must cross between devices, as pure logic: given
// the groups a plan runs and the device each runs on, which values need a
// copy, from where to where. The Session would insert exactly these copies
// (and no others: tensors cross backend boundaries on one device without a
// copy), and the search would charge their measured cost.
//
//   x (host input) --> [conv: cuda] --> y --> [relu: cuda] --> z --> [topk: cpu]
//        copy host->cuda:0 (x)              no copy (same device)     copy cuda:0->host (z)
//
// A value is copied at most once per destination device, however many
// groups there read it. Graph inputs live on the host, where the caller
// hands them over; graph outputs produced on a device are copied back to
// it. Constants never cross: a kernel takes them at compile time and uploads
// them itself.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "core/ir/device.h"
#include "core/ir/graph.h"
#include "core/ir/node_set.h"

namespace collage {

struct DeviceEdge {
  ValueId value = kNoValue;
  Device from;
  Device to;
  std::vector<int>
      consumers;  // groups on `to` that read it (none: a graph output back to the host)
  size_t bytes = 0;
  // "x: cpu -> cuda:0 (1024 B, groups 0 2)"
  std::string toString(const Graph& graph) const;
};

// The copies a plan needs. `groups[i]` runs on `devices[i]`; the groups are
// disjoint and cover the nodes that run. Ordered by value, then destination.
std::vector<DeviceEdge> crossDeviceEdges(const Graph& graph, const std::vector<NodeSet>& groups,
                                         const std::vector<Device>& devices);

// What copying costs: a fixed latency per copy plus bytes over a bandwidth,
// per direction, as measured on the machine (by the backend that owns the
// device). Unmeasured (the default) is NaN, so a plan with copies has an
// unknown cost rather than a wrong one.
struct CopyCostModel {
  double toDeviceLatencyNs = std::numeric_limits<double>::quiet_NaN();
  double toDeviceBytesPerNs = std::numeric_limits<double>::quiet_NaN();
  double toHostLatencyNs = std::numeric_limits<double>::quiet_NaN();
  double toHostBytesPerNs = std::numeric_limits<double>::quiet_NaN();
};

// Nanoseconds of all the copies (0 when there are none, whatever the model).
double copyCostNs(const std::vector<DeviceEdge>& edges, const CopyCostModel& model);

}  // namespace collage
