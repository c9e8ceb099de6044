// The topology file: devices and links read as written, and every mistake a
// user can make named with the file and the device, link or field at fault.
#include "core/pipeline/topology.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/ir/error.h"

namespace collage {
namespace {

const char* kGood = R"({
  "devices": [
    {"id": "cpu0", "kind": "cpu", "cores": 4, "memory_bytes": 8e9},
    {"id": "cpu1", "kind": "cpu", "cores": 4},
    {"id": "gpu0", "kind": "gpu", "memory_bytes": 80e9}
  ],
  "links": [
    {"between": ["cpu0", "cpu1"], "bandwidth_bytes_per_s": 2.5e10, "latency_s": 2e-6},
    {"between": ["gpu0", "cpu0"], "bandwidth_bytes_per_s": 1.2e10, "latency_s": 1e-5}
  ],
  "default_link": {"bandwidth_bytes_per_s": 1e9, "latency_s": 5e-5}
})";

std::string errorOf(const std::string& text) {
  try {
    topologyFromJson(text, "machine.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PipelineTopology, ReadsDevicesLinksAndTheDefault) {
  const Topology t = topologyFromJson(kGood, "machine.json");
  ASSERT_EQ(t.devices().size(), 3u);
  EXPECT_EQ(t.find("cpu0")->cores, 4);
  EXPECT_EQ(t.find("cpu0")->memoryLimitBytes, 8e9);
  EXPECT_TRUE(std::isinf(t.find("cpu1")->memoryLimitBytes));  // no limit given
  EXPECT_EQ(t.find("gpu0")->kind, DeviceKind::Gpu);
  EXPECT_EQ(t.count(DeviceKind::Cpu), 2);
  EXPECT_EQ(t.memoryLimit(DeviceKind::Cpu), 8e9);                // the tightest of the kind
  EXPECT_EQ(t.link("cpu1", "cpu0").bandwidthBytesPerS, 2.5e10);  // links are symmetric
  EXPECT_EQ(t.link("gpu0", "cpu1").bandwidthBytesPerS, 1e9);     // the default fills the gap
  // The slowest link touching a gpu: the default one to cpu1.
  EXPECT_EQ(t.slowestLinkInto(DeviceKind::Gpu).bandwidthBytesPerS, 1e9);
  EXPECT_EQ(t.slowestLinkInto(DeviceKind::Gpu).latencyS, 5e-5);
  EXPECT_DOUBLE_EQ(t.link("cpu0", "cpu1").seconds(2.5e10), 1 + 2e-6);
}

TEST(PipelineTopology, ReadsAFile) {
  const std::string path = testing::TempDir() + "pipeline_topology_test.json";
  std::ofstream(path) << kGood;
  EXPECT_EQ(loadTopologyFile(path).devices().size(), 3u);
  std::remove(path.c_str());
  try {
    loadTopologyFile(path);
    FAIL() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

struct BadCase {
  const char* name;
  const char* text;
  std::vector<const char*> mustSay;
};

TEST(PipelineTopology, BadFilesSayWhatAndWhere) {
  const std::vector<BadCase> cases = {
      {"not json", "{\"devices\": [", {"machine.json", "not valid JSON"}},
      {"no devices", "{}", {"machine.json", "missing field \"devices\""}},
      {"unknown device in a link",
       R"({"devices": [{"id": "cpu0", "kind": "cpu", "cores": 2}],
           "links": [{"between": ["cpu0", "gpu7"], "bandwidth_bytes_per_s": 1, "latency_s": 0}]})",
       {"machine.json", "links[0]", "\"gpu7\"", "does not list"}},
      {"missing cores",
       R"({"devices": [{"id": "cpu0", "kind": "cpu"}]})",
       {"machine.json", "devices[0] (\"cpu0\")", "missing field \"cores\""}},
      {"gpu without memory",
       R"({"devices": [{"id": "g", "kind": "gpu"}]})",
       {"devices[0] (\"g\")", "memory_bytes"}},
      {"negative cores",
       R"({"devices": [{"id": "cpu0", "kind": "cpu", "cores": -2}]})",
       {"devices[0] (\"cpu0\")", "\"cores\" is -2", "> 0"}},
      {"fractional cores",
       R"({"devices": [{"id": "cpu0", "kind": "cpu", "cores": 1.5}]})",
       {"devices[0] (\"cpu0\")", "whole number"}},
      {"negative memory",
       R"({"devices": [{"id": "cpu0", "kind": "cpu", "cores": 1, "memory_bytes": -1}]})",
       {"devices[0] (\"cpu0\")", "\"memory_bytes\" is -1"}},
      {"negative bandwidth",
       R"({"devices": [{"id": "a", "kind": "cpu", "cores": 1}, {"id": "b", "kind": "cpu", "cores": 1}],
           "links": [{"between": ["a", "b"], "bandwidth_bytes_per_s": -5, "latency_s": 0}]})",
       {"links[0]", "\"bandwidth_bytes_per_s\" is -5"}},
      {"negative latency",
       R"({"devices": [{"id": "a", "kind": "cpu", "cores": 1}, {"id": "b", "kind": "cpu", "cores": 1}],
           "links": [{"between": ["a", "b"], "bandwidth_bytes_per_s": 5, "latency_s": -1e-6}]})",
       {"links[0]", "\"latency_s\"", ">= 0"}},
      {"missing latency",
       R"({"devices": [{"id": "a", "kind": "cpu", "cores": 1}, {"id": "b", "kind": "cpu", "cores": 1}],
           "links": [{"between": ["a", "b"], "bandwidth_bytes_per_s": 5}]})",
       {"links[0]", "missing field \"latency_s\""}},
      {"misspelt field",
       R"({"devices": [{"id": "a", "kind": "cpu", "cores": 1}, {"id": "b", "kind": "cpu", "cores": 1}],
           "links": [{"between": ["a", "b"], "bandwith_bytes_per_s": 5, "latency_s": 0}]})",
       {"links[0]", "unknown field \"bandwith_bytes_per_s\""}},
      {"unpriced pair",
       R"({"devices": [{"id": "a", "kind": "cpu", "cores": 1}, {"id": "b", "kind": "cpu", "cores": 1}]})",
       {"machine.json", "no link between \"a\" and \"b\"", "default_link"}},
      {"duplicate id",
       R"({"devices": [{"id": "a", "kind": "cpu", "cores": 1}, {"id": "a", "kind": "cpu", "cores": 1}],
           "default_link": {"bandwidth_bytes_per_s": 1, "latency_s": 0}})",
       {"machine.json", "\"a\" appears twice"}},
      {"unknown kind",
       R"({"devices": [{"id": "t", "kind": "tpu"}]})",
       {"devices[0] (\"t\")", "\"kind\" is \"tpu\""}},
      {"self link",
       R"({"devices": [{"id": "a", "kind": "cpu", "cores": 1}],
           "links": [{"between": ["a", "a"], "bandwidth_bytes_per_s": 5, "latency_s": 0}]})",
       {"links[0]", "to itself"}},
  };
  for (const auto& c : cases) {
    const std::string what = errorOf(c.text);
    for (const char* part : c.mustSay)
      EXPECT_NE(what.find(part), std::string::npos)
          << c.name << ": \"" << what << "\" lacks \"" << part << "\"";
  }
}

}  // namespace
}  // namespace collage
