// Node and edge geometry of a graph, computed by Graphviz (`dot`, top to
// bottom). Graphviz is not thread-safe, even with separate contexts, so every
// layout in the process goes through one mutex; callers run computeLayout()
// on a worker thread, never on the UI thread.
#pragma once

#include <atomic>
#include <vector>

#include "core/graph.h"

namespace collage {

struct LayoutPoint {
  double x = 0, y = 0;  // points, y down
};

struct NodeBox {
  double cx = 0, cy = 0, width = 0, height = 0;  // centre and size, points
};

struct EdgePath {
  NodeId from = 0, to = 0;
  ValueId value = 0;               // the tensor the edge carries
  std::vector<LayoutPoint> points;  // B-spline control points (1 + 3n), from -> to
};

struct GraphLayout {
  std::vector<NodeBox> nodes;  // indexed by NodeId
  std::vector<EdgePath> edges;
  double width = 0, height = 0;
  bool cancelled = false;
};

// Box size the layout reserves for each node (points).
inline constexpr double kNodeBoxWidth = 130;
inline constexpr double kNodeBoxHeight = 40;

// Lays out `graph`; waits for any other layout in the process to finish
// first. A set `cancel` before the layout starts returns an empty, cancelled
// layout (Graphviz cannot be interrupted once it runs). Above a few thousand
// nodes, cheaper settings are used (straight edges, fewer crossing passes).
GraphLayout computeLayout(const Graph& graph, const std::atomic<bool>* cancel = nullptr);

}  // namespace collage
