#include "core/pipeline/topology.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/ir/error.h"
#include "core/ir/json_text.h"

namespace collage {

using json = nlohmann::ordered_json;

const char* deviceKindName(DeviceKind kind) { return kind == DeviceKind::Gpu ? "gpu" : "cpu"; }

Topology::Topology(std::vector<PipeDevice> devices, std::vector<PipeLink> links,
                   const LinkCost* defaultLink, const std::string& origin)
    : devices_(std::move(devices)) {
  if (devices_.empty()) throw Error(origin + ": \"devices\" is empty; a pipeline needs a device");
  std::set<std::string> ids;
  for (const auto& d : devices_)
    if (!ids.insert(d.id).second)
      throw Error(origin + ": the device id \"" + d.id + "\" appears twice in \"devices\"");
  std::set<std::pair<std::string, std::string>> priced;
  for (size_t i = 0; i < links.size(); ++i) {
    auto& l = links[i];
    const std::string where = origin + ": links[" + std::to_string(i) + "]";
    for (const auto* id : {&l.a, &l.b})
      if (!find(*id))
        throw Error(where + ": names the device \"" + *id + "\", which \"devices\" does not list");
    if (l.a == l.b) throw Error(where + ": links the device \"" + l.a + "\" to itself");
    auto key = std::minmax(l.a, l.b);
    if (!priced.insert({key.first, key.second}).second)
      throw Error(where + ": a second link between \"" + l.a + "\" and \"" + l.b + "\"");
    links_.push_back(l);
  }
  for (size_t i = 0; i < devices_.size(); ++i)
    for (size_t j = i + 1; j < devices_.size(); ++j) {
      auto key = std::minmax(devices_[i].id, devices_[j].id);
      if (priced.count({key.first, key.second})) continue;
      if (!defaultLink)
        throw Error(origin + ": no link between \"" + devices_[i].id + "\" and \"" +
                    devices_[j].id +
                    "\" and no \"default_link\"; every pair of devices needs a price");
      links_.push_back({devices_[i].id, devices_[j].id, *defaultLink});
    }
}

const PipeDevice* Topology::find(const std::string& id) const {
  for (const auto& d : devices_)
    if (d.id == id) return &d;
  return nullptr;
}

LinkCost Topology::link(const std::string& a, const std::string& b) const {
  for (const auto& l : links_)
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return l.cost;
  if (a == b) return LinkCost{};  // same device: nothing crosses a link
  throw Error("topology: no link between \"" + a + "\" and \"" + b + "\"");
}

std::vector<DeviceKind> Topology::kinds() const {
  std::vector<DeviceKind> out;
  for (DeviceKind k : {DeviceKind::Cpu, DeviceKind::Gpu})
    if (count(k) > 0) out.push_back(k);
  return out;
}

int Topology::count(DeviceKind kind) const {
  return static_cast<int>(std::count_if(devices_.begin(), devices_.end(),
                                        [&](const PipeDevice& d) { return d.kind == kind; }));
}

std::vector<std::string> Topology::idsOf(DeviceKind kind) const {
  std::vector<std::string> out;
  for (const auto& d : devices_)
    if (d.kind == kind) out.push_back(d.id);
  return out;
}

double Topology::memoryLimit(DeviceKind kind) const {
  double limit = std::numeric_limits<double>::infinity();
  for (const auto& d : devices_)
    if (d.kind == kind) limit = std::min(limit, d.memoryLimitBytes);
  return limit;
}

LinkCost Topology::slowestLinkInto(DeviceKind kind) const {
  LinkCost worst;  // +inf bandwidth, 0 latency
  for (const auto& l : links_)
    if (find(l.a)->kind == kind || find(l.b)->kind == kind) {
      worst.bandwidthBytesPerS = std::min(worst.bandwidthBytesPerS, l.cost.bandwidthBytesPerS);
      worst.latencyS = std::max(worst.latencyS, l.cost.latencyS);
    }
  return worst;
}

std::string Topology::toString() const {
  std::ostringstream out;
  for (const auto& d : devices_) {
    out << d.id << ": " << deviceKindName(d.kind);
    if (d.kind == DeviceKind::Cpu) out << ", " << d.cores << " cores";
    if (std::isfinite(d.memoryLimitBytes)) out << ", " << d.memoryLimitBytes << " B";
    out << "\n";
  }
  for (const auto& l : links_)
    out << l.a << " -- " << l.b << ": " << l.cost.bandwidthBytesPerS << " B/s, " << l.cost.latencyS
        << " s\n";
  return out.str();
}

namespace {

// Reads the fields of one JSON object, naming it in every error, and refuses
// fields it does not know (a misspelt "bandwith_bytes_per_s" would otherwise
// be silently ignored and the link left at a default).
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string where, std::set<std::string> known)
      : j_(j), where_(std::move(where)) {
    if (!j.is_object()) throw Error(where_ + ": expected an object");
    for (const auto& [key, value] : j.items())
      if (!known.count(key)) throw Error(where_ + ": unknown field \"" + key + "\"");
  }
  bool has(const std::string& key) const { return j_.contains(key); }
  const json& at(const std::string& key) const {
    if (!has(key)) throw Error(where_ + ": missing field \"" + key + "\"");
    return j_.at(key);
  }
  std::string string(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_string()) throw Error(where_ + ": \"" + key + "\" must be a string");
    return v.get<std::string>();
  }
  // A number > 0 (or >= 0 when `zeroAllowed`), finite.
  double number(const std::string& key, bool zeroAllowed) const {
    const json& v = at(key);
    if (!v.is_number()) throw Error(where_ + ": \"" + key + "\" must be a number");
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < 0 || (!zeroAllowed && x == 0))
      throw Error(where_ + ": \"" + key + "\" is " + v.dump() + "; it must be " +
                  (zeroAllowed ? ">= 0" : "> 0"));
    return x;
  }
  const std::string& where() const { return where_; }

 private:
  const json& j_;
  std::string where_;
};

LinkCost readLinkCost(const ObjectReader& r) {
  LinkCost c;
  c.bandwidthBytesPerS = r.number("bandwidth_bytes_per_s", false);
  c.latencyS = r.number("latency_s", true);
  return c;
}

}  // namespace

Topology topologyFromJson(const std::string& text, const std::string& displayPath) {
  const json j = parseJsonText(text, displayPath);
  ObjectReader top(j, displayPath, {"devices", "links", "default_link"});
  const json& devs = top.at("devices");
  if (!devs.is_array()) throw Error(displayPath + ": \"devices\" must be an array");

  std::vector<PipeDevice> devices;
  for (size_t i = 0; i < devs.size(); ++i) {
    std::string where = displayPath + ": devices[" + std::to_string(i) + "]";
    if (devs[i].is_object() && devs[i].contains("id") && devs[i]["id"].is_string())
      where += " (\"" + devs[i]["id"].get<std::string>() + "\")";
    ObjectReader r(devs[i], where, {"id", "kind", "cores", "memory_bytes"});
    PipeDevice d;
    d.id = r.string("id");
    if (d.id.empty()) throw Error(where + ": \"id\" is empty");
    const std::string kind = r.string("kind");
    if (kind == "cpu") {
      d.kind = DeviceKind::Cpu;
      const double cores = r.number("cores", false);
      if (cores != std::floor(cores) || cores > 1 << 20)
        throw Error(where + ": \"cores\" is " + r.at("cores").dump() +
                    "; it must be a whole number");
      d.cores = static_cast<int>(cores);
    } else if (kind == "gpu") {
      d.kind = DeviceKind::Gpu;
      if (r.has("cores")) throw Error(where + ": \"cores\" is for a cpu device, not a gpu");
      if (!r.has("memory_bytes"))
        throw Error(where + ": missing field \"memory_bytes\" (a gpu's memory is its limit)");
    } else {
      throw Error(where + ": \"kind\" is \"" + kind + "\"; it must be \"cpu\" or \"gpu\"");
    }
    if (r.has("memory_bytes")) d.memoryLimitBytes = r.number("memory_bytes", false);
    devices.push_back(d);
  }

  std::vector<PipeLink> links;
  if (top.has("links")) {
    const json& ls = top.at("links");
    if (!ls.is_array()) throw Error(displayPath + ": \"links\" must be an array");
    for (size_t i = 0; i < ls.size(); ++i) {
      const std::string where = displayPath + ": links[" + std::to_string(i) + "]";
      ObjectReader r(ls[i], where, {"between", "bandwidth_bytes_per_s", "latency_s"});
      const json& between = r.at("between");
      if (!between.is_array() || between.size() != 2 || !between[0].is_string() ||
          !between[1].is_string())
        throw Error(where + ": \"between\" must be two device ids, [\"a\", \"b\"]");
      links.push_back(
          {between[0].get<std::string>(), between[1].get<std::string>(), readLinkCost(r)});
    }
  }
  LinkCost fallback;
  const bool hasDefault = top.has("default_link");
  if (hasDefault)
    fallback = readLinkCost(ObjectReader(top.at("default_link"), displayPath + ": default_link",
                                         {"bandwidth_bytes_per_s", "latency_s"}));
  return Topology(std::move(devices), std::move(links), hasDefault ? &fallback : nullptr,
                  displayPath);
}

Topology loadTopologyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the topology file");
  std::stringstream ss;
  ss << in.rdbuf();
  return topologyFromJson(ss.str(), path);
}

}  // namespace collage
