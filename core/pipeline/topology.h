// The devices a pipeline can use and the links between them, as the user's
// topology file describes them (format: docs/pipeline.md).
//
//   cpu0 (4 cores) ──25 GB/s, 2 µs── cpu1 (4 cores)
//      └────────────12 GB/s, 10 µs── gpu0 (80 GB)
//
// A device runs one stage: a group of CPU cores with its own pinned thread
// pool, or a GPU. A stage on d devices of one kind runs data-parallel across
// them. Links are symmetric; a pair the file does not list takes the file's
// "default_link", and a file with a pair that has neither is refused (a plan
// must know what every crossing costs). The numbers are the user's, or the
// link measurements' (link_measurement.h); the planner only reads them.
#pragma once

#include <limits>
#include <string>
#include <vector>

namespace collage {

enum class DeviceKind { Cpu, Gpu };
const char* deviceKindName(DeviceKind kind);  // "cpu", "gpu"

struct PipeDevice {
  std::string id;
  DeviceKind kind = DeviceKind::Cpu;
  int cores = 0;  // CPU devices: the cores of the group; 0 for a GPU
  // Bytes the device may hold; +inf when the file sets none (CPU only).
  double memoryLimitBytes = std::numeric_limits<double>::infinity();
};

struct LinkCost {
  double bandwidthBytesPerS = std::numeric_limits<double>::infinity();
  double latencyS = 0;
  // Latency plus bytes over the bandwidth; 0 for nothing to move.
  double seconds(double bytes) const {
    return bytes > 0 ? latencyS + bytes / bandwidthBytesPerS : 0;
  }
};

struct PipeLink {
  std::string a, b;  // device ids, a != b
  LinkCost cost;
};

class Topology {
 public:
  Topology() = default;
  // Checks what a file could get wrong (ids unique, links between known
  // devices, every pair priced); throws collage::Error naming `origin`.
  Topology(std::vector<PipeDevice> devices, std::vector<PipeLink> links,
           const LinkCost* defaultLink, const std::string& origin);

  const std::vector<PipeDevice>& devices() const { return devices_; }
  const PipeDevice* find(const std::string& id) const;  // nullptr if absent
  LinkCost link(const std::string& a, const std::string& b) const;

  // The kinds present, in DeviceKind order, and how many devices each has.
  std::vector<DeviceKind> kinds() const;
  int count(DeviceKind kind) const;
  // The ids of a kind's devices, in file order.
  std::vector<std::string> idsOf(DeviceKind kind) const;
  // The smallest memory limit among a kind's devices: the partitioner treats
  // a kind's devices as alike, so it plans for the tightest of them.
  double memoryLimit(DeviceKind kind) const;
  // The slowest link with a device of `kind` at one end (least bandwidth,
  // most latency, taken apart). The partitioner prices a stage's inputs on it
  // before it knows which concrete devices the stages get, so the time it
  // predicts holds for any assignment. +inf bandwidth if the kind has no link
  // (a single device never receives from another stage).
  LinkCost slowestLinkInto(DeviceKind kind) const;

  std::string toString() const;

 private:
  std::vector<PipeDevice> devices_;
  std::vector<PipeLink> links_;  // every unordered pair, defaults filled in
};

// Parses a topology file's text; `displayPath` names it in errors
// ("machine.json: links[1]: names the device \"gpu7\", which \"devices\" does not list").
Topology topologyFromJson(const std::string& text, const std::string& displayPath);
// Reads and parses `path`.
Topology loadTopologyFile(const std::string& path);

}  // namespace collage
