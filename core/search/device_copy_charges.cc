#include "core/search/device_copy_charges.h"

#include <algorithm>

#include "core/ir/error.h"

namespace collage {

namespace {

constexpr size_t kMaxDevices = 8;  // a device set is one byte of a packed open value

struct OpenEntry {
  ValueId value = kNoValue;
  uint8_t home = 0;  // device index + 1; 0 = its producer is not covered yet
  uint8_t on = 0;    // bit per device index: on it, or asked for there
};

DeviceCopyCharges::OpenValue pack(const OpenEntry& e) {
  return (static_cast<uint64_t>(e.value) << 16) | (static_cast<uint64_t>(e.home) << 8) | e.on;
}

OpenEntry unpack(DeviceCopyCharges::OpenValue v) {
  return OpenEntry{static_cast<ValueId>(v >> 16), static_cast<uint8_t>((v >> 8) & 0xff),
                   static_cast<uint8_t>(v & 0xff)};
}

}  // namespace

DeviceCopyCharges::DeviceCopyCharges(const Graph& graph, const CandidateSet& candidates,
                                     const BackendDeviceFn& deviceOf, const CopyCostFn& copyCost)
    : graph_(graph), candidates_(candidates), devices_{Device{}}, models_{CopyCostModel{}} {
  deviceIndex_.assign(candidates.size(), 0);
  if (!deviceOf) return;
  for (size_t c = 0; c < candidates.size(); ++c) {
    const Device device = deviceOf(candidates[c].backend);
    auto it = std::find(devices_.begin(), devices_.end(), device);
    if (it == devices_.end()) {
      if (devices_.size() == kMaxDevices)
        throw Error("the op-level search places on at most " + std::to_string(kMaxDevices) +
                    " devices; backend '" + candidates[c].backend + "' adds " + device.toString());
      devices_.push_back(device);
      models_.push_back(copyCost ? copyCost(device) : CopyCostModel{});
      it = devices_.end() - 1;
    }
    deviceIndex_[c] = static_cast<uint8_t>(it - devices_.begin());
  }
  active_ = devices_.size() > 1;
  if (!active_) return;
  reads_.resize(candidates.size());
  makes_.resize(candidates.size());
  for (size_t c = 0; c < candidates.size(); ++c) {
    const NodeSet& nodes = candidates[c].nodes;
    nodes.forEach([&](NodeId n) {
      for (ValueId v : graph.node(n).inputs) {
        if (v == kNoValue || graph.value(v).isConstant()) continue;
        const NodeId p = graph.value(v).producer;
        if (p != kNoNode && nodes.contains(p)) continue;
        if (std::find(reads_[c].begin(), reads_[c].end(), v) == reads_[c].end())
          reads_[c].push_back(v);
      }
      for (ValueId v : graph.node(n).outputs)
        if (v != kNoValue) makes_[c].push_back(v);
    });
  }
}

const Device& DeviceCopyCharges::deviceOf(int32_t candidate) const {
  return devices_[deviceIndex_[static_cast<size_t>(candidate)]];
}

Cost DeviceCopyCharges::copyNs(size_t bytes, uint8_t from, uint8_t to) const {
  if (from != 0 && to != 0) return kInvalidCost;  // device to device: the Session does not copy so
  DeviceEdge edge;
  edge.from = devices_[from];
  edge.to = devices_[to];
  edge.bytes = bytes;
  return copyCostNs({edge}, models_[from != 0 ? from : to]);
}

Cost DeviceCopyCharges::add(const NodeSet& covered, const std::vector<OpenValue>& open,
                            int32_t candidate, std::vector<OpenValue>* next) const {
  const size_t c = static_cast<size_t>(candidate);
  const uint8_t d = deviceIndex_[c];
  const uint8_t here = static_cast<uint8_t>(1u << d);
  std::vector<OpenEntry> entries;
  entries.reserve(open.size() + reads_[c].size() + makes_[c].size());
  for (OpenValue v : open) entries.push_back(unpack(v));
  // The entry of a value, made on first use: a graph input is on the host;
  // a value whose producer is uncovered is nowhere yet.
  auto entry = [&](ValueId v) -> OpenEntry& {
    auto it = std::lower_bound(entries.begin(), entries.end(), v,
                               [](const OpenEntry& e, ValueId x) { return e.value < x; });
    if (it != entries.end() && it->value == v) return *it;
    OpenEntry fresh{v, 0, 0};
    if (graph_.value(v).producer == kNoNode)
      fresh = OpenEntry{v, 1, 1};
    else
      COLLAGE_CHECK(!covered.contains(graph_.value(v).producer),
                    "value '" + graph_.value(v).name +
                        "' was dropped from the search state while still read");
    return *entries.insert(it, fresh);
  };

  Cost cost = 0;
  for (ValueId v : reads_[c]) {
    OpenEntry& e = entry(v);
    if (e.home != 0 && !(e.on & here))
      cost += copyNs(graph_.value(v).type.byteSize(), e.home - 1, d);
    e.on |= here;  // copied here now, or asked for here until its producer is placed
  }
  for (ValueId v : makes_[c]) {
    OpenEntry& e = entry(v);
    uint8_t wanted = e.on;
    if (graph_.value(v).isGraphOutput) wanted |= 1u;  // the caller reads it on the host
    for (uint8_t b = 0; b < devices_.size(); ++b)
      if (b != d && (wanted & (1u << b))) cost += copyNs(graph_.value(v).type.byteSize(), d, b);
    e.home = static_cast<uint8_t>(d + 1);
    e.on = static_cast<uint8_t>(wanted | here);
  }

  const NodeSet after = covered | candidates_[c].nodes;
  next->clear();
  for (const OpenEntry& e : entries) {
    const Value& value = graph_.value(e.value);
    const bool made = value.producer == kNoNode || after.contains(value.producer);
    const bool readByAll = std::all_of(value.consumers.begin(), value.consumers.end(),
                                       [&](NodeId n) { return after.contains(n); });
    if (made && readByAll) continue;  // settled: nothing more to charge
    if (value.producer == kNoNode && e.on == 1u)
      continue;  // a graph input only on the host: the default
    next->push_back(pack(e));
  }
  return cost;
}

Cost DeviceCopyCharges::coverCost(const std::vector<int32_t>& chosen) const {
  if (!active_) return 0;
  std::vector<NodeSet> groups;
  std::vector<Device> devices;
  for (int32_t c : chosen) {
    groups.push_back(candidates_[static_cast<size_t>(c)].nodes);
    devices.push_back(deviceOf(c));
  }
  Cost total = 0;
  for (const DeviceEdge& e : crossDeviceEdges(graph_, groups, devices)) {
    const auto from = std::find(devices_.begin(), devices_.end(), e.from) - devices_.begin();
    const auto to = std::find(devices_.begin(), devices_.end(), e.to) - devices_.begin();
    total += copyNs(e.bytes, static_cast<uint8_t>(from), static_cast<uint8_t>(to));
  }
  return total;
}

std::string DeviceCopyCharges::unmeasuredReason(int32_t candidate) const {
  const uint8_t d = deviceIndex_[static_cast<size_t>(candidate)];
  if (d == 0) return "";
  const CopyCostModel& m = models_[d];
  if (isKnown(m.toDeviceLatencyNs) && isKnown(m.toDeviceBytesPerNs) && isKnown(m.toHostLatencyNs) &&
      isKnown(m.toHostBytesPerNs))
    return "";
  return "copies between cpu and " + devices_[d].toString() + " are not measured";
}

}  // namespace collage
