#include "core/runtime/device_edges.h"

#include <map>
#include <utility>

#include "core/ir/error.h"

namespace collage {

std::string DeviceEdge::toString(const Graph& graph) const {
  std::string s = graph.value(value).name + ": " + from.toString() + " -> " + to.toString() + " (" +
                  std::to_string(bytes) + " B, ";
  if (consumers.empty()) return s + "graph output)";
  s += "groups";
  for (int g : consumers) s += " " + std::to_string(g);
  return s + ")";
}

namespace {
// Devices ordered for the map key: type, then index.
std::pair<int, int> key(const Device& d) { return {static_cast<int>(d.type), d.index}; }
}  // namespace

std::vector<DeviceEdge> crossDeviceEdges(const Graph& graph, const std::vector<NodeSet>& groups,
                                         const std::vector<Device>& devices) {
  COLLAGE_CHECK(groups.size() == devices.size(), "one device per group");
  std::vector<int> groupOf(static_cast<size_t>(graph.numNodes()), -1);
  for (size_t i = 0; i < groups.size(); ++i)
    groups[i].forEach([&](NodeId n) {
      COLLAGE_CHECK(groupOf[static_cast<size_t>(n)] < 0,
                    "node '" + graph.node(n).name + "' is in two groups");
      groupOf[static_cast<size_t>(n)] = static_cast<int>(i);
    });
  const Device host{};
  auto home = [&](ValueId v) {
    const NodeId p = graph.value(v).producer;
    if (p == kNoNode || groupOf[static_cast<size_t>(p)] < 0) return host;
    return devices[static_cast<size_t>(groupOf[static_cast<size_t>(p)])];
  };
  std::map<std::pair<ValueId, std::pair<int, int>>, DeviceEdge> edges;
  auto need = [&](ValueId v, const Device& to, int consumer) {
    const Device from = home(v);
    if (from == to) return;
    DeviceEdge& e = edges[{v, key(to)}];
    e.value = v;
    e.from = from;
    e.to = to;
    e.bytes = graph.value(v).type.byteSize();
    if (consumer >= 0 && (e.consumers.empty() || e.consumers.back() != consumer))
      e.consumers.push_back(consumer);
  };
  for (size_t i = 0; i < groups.size(); ++i)
    groups[i].forEach([&](NodeId n) {
      for (ValueId v : graph.node(n).inputs) {
        if (v == kNoValue || graph.value(v).isConstant()) continue;
        const NodeId p = graph.value(v).producer;
        if (p != kNoNode && groupOf[static_cast<size_t>(p)] == static_cast<int>(i)) continue;
        need(v, devices[i], static_cast<int>(i));
      }
    });
  for (ValueId v : graph.outputs())
    if (!graph.value(v).isConstant()) need(v, host, -1);
  std::vector<DeviceEdge> out;
  for (auto& [k, e] : edges) out.push_back(std::move(e));
  return out;
}

double copyCostNs(const std::vector<DeviceEdge>& edges, const CopyCostModel& model) {
  double total = 0;
  for (const DeviceEdge& e : edges) {
    const bool toHost = e.to.type == DeviceType::CPU;
    const double latency = toHost ? model.toHostLatencyNs : model.toDeviceLatencyNs;
    const double bandwidth = toHost ? model.toHostBytesPerNs : model.toDeviceBytesPerNs;
    total += latency + static_cast<double>(e.bytes) / bandwidth;
  }
  return total;
}

}  // namespace collage
