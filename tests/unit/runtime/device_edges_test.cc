// Which plan edges cross devices, with fake devices (no GPU involved): the
// copies a Session would insert and the search would charge.
#include "core/runtime/device_edges.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

const Device kCpu{DeviceType::CPU, 0};
const Device kGpu0{DeviceType::CUDA, 0};
const Device kGpu1{DeviceType::CUDA, 1};

NodeSet nodes(const Graph& g, std::initializer_list<int> ids) {
  NodeSet s(g.numNodes());
  for (int id : ids) s.insert(id);
  return s;
}

// x -> Relu(0) -> Sigmoid(1) -> Tanh(2) -> out; Sigmoid's result also feeds Add(3) with a constant.
struct Chain {
  GraphBuilder b;
  Chain() {
    ValueId r = b.op("Relu", {b.input({4, 8})});
    ValueId s = b.op("Sigmoid", {r});
    ValueId t = b.op("Tanh", {s});
    b.finish(b.op("Add", {t, b.op("Add", {s, b.constant({4, 8})})}));
  }
  const Graph& g() { return b.graph(); }
};

TEST(DeviceEdges, OneDeviceNeedsNoCopy) {
  Chain c;
  const Graph& g = c.g();
  std::vector<NodeSet> groups = {nodes(g, {0, 1}), nodes(g, {2, 3, 4})};
  EXPECT_TRUE(crossDeviceEdges(g, groups, {kCpu, kCpu}).empty());
}

TEST(DeviceEdges, CopiesWhereTheDeviceChangesOncePerDestination) {
  Chain c;
  const Graph& g = c.g();
  // Relu and Sigmoid on the GPU; Tanh and the first Add on the CPU, the last Add on the GPU.
  const std::vector<NodeSet> groups = {nodes(g, {0, 1}), nodes(g, {2}), nodes(g, {3}),
                                       nodes(g, {4})};
  const std::vector<Device> devices = {kGpu0, kCpu, kCpu, kGpu0};
  const std::vector<DeviceEdge> edges = crossDeviceEdges(g, groups, devices);
  std::vector<std::string> text;
  for (const auto& e : edges) text.push_back(e.toString(g));
  // The input goes up; Sigmoid's result comes down once for two CPU groups;
  // Tanh's and the first Add's results go up for the last Add; its result comes home.
  ASSERT_EQ(edges.size(), 5u) << ::testing::PrintToString(text);
  EXPECT_EQ(edges[0].from, kCpu);
  EXPECT_EQ(edges[0].to, kGpu0);
  EXPECT_EQ(edges[0].consumers, std::vector<int>{0});
  EXPECT_EQ(edges[0].bytes, 4u * 8u * 4u);
  const DeviceEdge& sigmoid = edges[1];
  EXPECT_EQ(sigmoid.to, kCpu);
  EXPECT_EQ(sigmoid.consumers, (std::vector<int>{1, 2}));
  EXPECT_TRUE(edges.back().consumers.empty());  // the graph output back to the host
  EXPECT_EQ(edges.back().to, kCpu);
  EXPECT_EQ(edges.back().value, g.outputs()[0]);
}

TEST(DeviceEdges, ConstantsNeverCrossAndDevicesAreDistinguished) {
  Chain c;
  const Graph& g = c.g();
  const std::vector<NodeSet> groups = {nodes(g, {0, 1, 2}), nodes(g, {3, 4})};
  const auto edges = crossDeviceEdges(g, groups, {kGpu0, kGpu1});
  for (const auto& e : edges) EXPECT_FALSE(g.value(e.value).isConstant()) << e.toString(g);
  ASSERT_EQ(edges.size(), 4u);  // x up, Tanh's and Sigmoid's results across, the output home
  EXPECT_EQ(edges[1].from, kGpu0);
  EXPECT_EQ(edges[1].to, kGpu1);
}

TEST(DeviceEdges, CopyCostIsUnknownUntilMeasured) {
  Chain c;
  const Graph& g = c.g();
  const std::vector<NodeSet> groups = {nodes(g, {0, 1, 2, 3, 4})};
  const auto edges = crossDeviceEdges(g, groups, {kGpu0});
  ASSERT_EQ(edges.size(), 2u);
  EXPECT_TRUE(std::isnan(copyCostNs(edges, CopyCostModel{})));
  const CopyCostModel measured{1000, 10, 2000, 5};
  EXPECT_DOUBLE_EQ(copyCostNs(edges, measured), 1000 + 128.0 / 10 + 2000 + 128.0 / 5);
  EXPECT_EQ(copyCostNs({}, CopyCostModel{}), 0.0);
}

}  // namespace
}  // namespace collage
