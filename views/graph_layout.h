// Node and edge geometry of a graph, computed by Graphviz (`dot`, top to
// bottom). No Qt here: the same code runs in the app (tests, and the fallback
// when the CLI is missing) and in `collage layout-worker`, the child process
// the app normally lays out in (views/layout_job.h), so a long layout can be
// cancelled by killing it.
//
// Graphviz is not thread-safe, even with separate contexts, so every layout
// in a process goes through one mutex; callers never run it on the UI thread.
//
// The pipeline:
//
//   Graph --planLayout(options)--> LayoutPlan { LayoutInput (boxes + edges +
//     |                                          settings), item -> node/group }
//     |                                   |
//     |               layoutItems() in process, or in the worker
//     |                (writeLayoutInput -> stdin, stdout -> readLayout)
//     |                                   v
//     +---------------assembleLayout(plan, raw)--> GraphLayout (by NodeId)
//
// Big graphs stay usable in two steps: above kCheapLayoutNodes items Graphviz
// gets cheaper settings (straight edges, bounded crossing minimisation, no
// network simplex iterations); above kGroupLayoutNodes nodes the graph is collapsed into
// groups (blocks by name prefix, cut into topological chunks) drawn as one box
// each, and a group is expanded by laying out again with it open.
#pragma once

#include <atomic>
#include <cstdint>
#include <istream>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "core/ir/graph.h"

namespace collage {

struct LayoutPoint {
  double x = 0, y = 0;  // points, y down
};

struct NodeBox {
  double cx = 0, cy = 0, width = 0, height = 0;  // centre and size, points
  // The node is inside a collapsed group: the box is the group's, and the
  // scene draws the group instead of the node.
  bool collapsed = false;
};

struct EdgePath {
  NodeId from = 0, to = 0;
  ValueId value = 0;                // the tensor the edge carries (one of them, between groups)
  int fromGroup = -1, toGroup = -1;  // the collapsed group an end is drawn at, or -1
  int tensorCount = 1;               // tensors drawn as this edge (> 1 only between groups)
  std::vector<LayoutPoint> points;   // B-spline control points (1 + 3n), from -> to
};

// A collapsed group, drawn as one box.
struct GroupBox {
  int id = 0;  // index into NodeGrouping
  std::string name;
  std::vector<NodeId> nodes;
  NodeBox box;
};

struct GraphLayout {
  std::vector<NodeBox> nodes;  // indexed by NodeId
  std::vector<EdgePath> edges;
  std::vector<GroupBox> groups;  // collapsed groups only
  double width = 0, height = 0;
  bool cancelled = false;
  bool fromCache = false;  // read from the layout cache, Graphviz did not run
};

// Box size the layout reserves for each node (points).
inline constexpr double kNodeBoxWidth = 130;
inline constexpr double kNodeBoxHeight = 40;
inline constexpr double kGroupBoxWidth = 190;
inline constexpr double kGroupBoxHeight = 54;

// Above this many boxes, cheaper Graphviz settings; above this many nodes, a
// group-level layout (LayoutOptions::Mode::Auto).
inline constexpr int kCheapLayoutNodes = 800;
inline constexpr int kGroupLayoutNodes = 1500;
// Largest group of the group-level layout.
inline constexpr int kMaxGroupNodes = 60;

// Graphviz settings, part of the cache key.
struct LayoutSettings {
  bool cheap = false;  // no spline routing, nslimit(1)=0, mclimit, searchsize, remincross=false
};

// What Graphviz sees: boxes and the edges between them, nothing of ONNX.
struct LayoutInput {
  struct Item {
    std::string label;  // the op or the group's name: hashed into the key, not drawn
    double width = kNodeBoxWidth, height = kNodeBoxHeight;
  };
  struct Edge {
    int from = 0, to = 0;  // item indices
    int32_t tag = 0;       // carried back in EdgePath::value
  };
  std::vector<Item> items;
  std::vector<Edge> edges;
  LayoutSettings settings;
};

// A partition of the nodes into groups for the group-level layout.
struct NodeGrouping {
  std::vector<int> groupOf;                  // by NodeId
  std::vector<std::string> names;            // by group
  std::vector<std::vector<NodeId>> members;  // by group, ascending
};

// Blocks of nodes that share a name prefix (the first two components of the
// node name's directory part, e.g. "/layer1/layer1.0" for
// "/layer1/layer1.0/conv1/Conv"), consecutive in topological order, cut into
// chunks of at most `maxGroupNodes`; nodes without a common prefix are packed
// into topological chunks.
NodeGrouping groupNodes(const Graph& graph, int maxGroupNodes = kMaxGroupNodes);

struct LayoutOptions {
  enum class Mode {
    Auto,   // cheap settings and groups by size (see above)
    Full,   // every node, default dot settings: what a small graph gets
    Cheap,  // every node, cheap settings
  };
  Mode mode = Mode::Auto;
  std::set<int> expandedGroups;  // groups of groupNodes() drawn open (Auto, grouped only)
};

// The Graphviz input for `graph` and how its items map back.
struct LayoutPlan {
  LayoutInput input;
  std::vector<NodeId> itemNode;   // by item: the node, or kNoNode for a group
  std::vector<int> itemGroup;     // by item: the collapsed group, or -1
  std::vector<int> nodeItem;      // by NodeId: the item it is drawn as
  std::vector<std::pair<NodeId, NodeId>> edgeNodes;  // by input edge: real endpoints
  std::vector<int> edgeTensors;   // by input edge: how many tensors it stands for
  NodeGrouping grouping;          // empty unless grouped
  bool grouped = false;
};

LayoutPlan planLayout(const Graph& graph, const LayoutOptions& options = {});

// Runs Graphviz on `input` (waits for any other layout in the process first).
// The result's nodes and edges are indexed by item / input edge; throws
// collage::Error if Graphviz fails.
GraphLayout layoutItems(const LayoutInput& input);

// Maps a layoutItems() result back to nodes and groups.
GraphLayout assembleLayout(const LayoutPlan& plan, const GraphLayout& itemLayout);

// Lays out `graph` in this process (every node, default settings below
// kCheapLayoutNodes nodes and cheap ones above). A set `cancel` before the
// layout starts returns an empty, cancelled layout (Graphviz cannot be
// interrupted once it runs: views/layout_job.h can, in a child process).
GraphLayout computeLayout(const Graph& graph, const std::atomic<bool>* cancel = nullptr);
GraphLayout computeLayout(const Graph& graph, const LayoutOptions& options);

// The wire format between the app and the worker, and of the layout cache:
// whitespace-separated text with a version line. read* throw collage::Error
// on malformed input.
void writeLayoutInput(const LayoutInput& input, std::ostream& out);
LayoutInput readLayoutInput(std::istream& in);
void writeItemLayout(const GraphLayout& layout, std::ostream& out);
GraphLayout readItemLayout(std::istream& in);

// Cache key of an input: a stable hash of its items, edges and settings.
std::string layoutKey(const LayoutInput& input);

// `collage layout-worker`: reads one LayoutInput from `in`, writes its item
// layout to `out`. Returns the exit code (errors go to `err`).
int runLayoutWorker(std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace collage
