// The graph as a QGraphicsScene: one box per node (op and short name), one
// path per edge (its tensor's name and type as tooltip), a legend of
// backends. The scene is built once from a layout; everything else is paint
// on those items and never lays out again: node colors (a plan, an
// override, a search step), frames around fused groups and around the
// regions of a graph-level plan, highlighted nodes.
//
// A group-level layout (views/graph_layout.h) draws each collapsed group as
// one dashed box; double-clicking it asks for the group to be expanded
// (groupExpandRequested), which the owner turns into a new layout
// (LayoutJob::expandGroup) and a setGraph() with the same graph, which keeps
// the colors, frames and highlight.
//
// Z order: edges 0, group frames 0.5, nodes and group boxes 1, legend 3.
#pragma once

#include <QColor>
#include <QGraphicsScene>
#include <QMap>
#include <QSet>
#include <QVector>
#include <memory>

#include "core/ir/graph.h"
#include "views/graph_layout.h"

class QGraphicsRectItem;
class QGraphicsItem;

namespace collage {

class GraphScene : public QGraphicsScene {
  Q_OBJECT
 public:
  explicit GraphScene(QObject* parent = nullptr);

  // Replaces the scene with `graph` drawn at `layout`. With the graph shown
  // already (a relayout), colors, legend, frames and highlight stay.
  void setGraph(std::shared_ptr<const Graph> graph, const GraphLayout& layout);
  const Graph* graph() const { return graph_.get(); }
  // Node boxes drawn (nodes inside collapsed groups are not).
  int nodeItemCount() const { return nodeItemCount_; }
  int edgeItemCount() const { return edgeCount_; }
  int groupBoxCount() const { return groupBoxes_.size(); }
  int frameItemCount() const { return frames_.size(); }
  int regionFrameCount() const;
  // Whether node n is inside a collapsed group (drawn as the group's box).
  bool isCollapsed(NodeId n) const;
  // The scene rectangle node n is drawn in (its box, or its group's box).
  QRectF nodeRect(NodeId n) const;
  // The item drawn for node n: its box, or its collapsed group's box.
  QGraphicsItem* itemForNode(NodeId n) const;

  // Fills node n with colors[n] (invalid color = default) and shows a legend
  // of `legend` (backend name -> color). Never lays out again.
  void setNodeColors(const QVector<QColor>& colors, const QMap<QString, QColor>& legend);
  QColor nodeColor(NodeId n) const;
  void clearNodeColors();

  // A frame around some nodes of a plan: a fused group, or a region the
  // graph-level search hands whole to a graph library. A region spans dozens
  // of nodes, so it must not read as one more fused group: a thicker dashed
  // outline with no fill, and a label on its top edge.
  struct GroupFrame {
    QVector<NodeId> nodes;
    QColor color;
    bool region = false;
    QString label;  // shown for regions ("onednn region, 62 nodes")
  };
  // Draws each frame of at least two nodes, behind the nodes; replaces the
  // previous frames. Empty clears them. Never lays out again.
  void setFrames(const QVector<GroupFrame>& frames);
  // setFrames with a fused-group frame in colors[i] around groups[i].
  void setGroups(const QVector<QVector<NodeId>>& groups, const QVector<QColor>& colors);
  // Thick outline on these nodes (e.g. a pattern's matches); empty clears.
  void setHighlightedNodes(const QVector<NodeId>& nodes);
  const QVector<NodeId>& highlightedNodes() const { return highlighted_; }
  bool isHighlighted(NodeId n) const;
  // Dashed violet outline on the nodes a graph substitution created or
  // changed (docs/substitutions.md); kept across re-layouts, empty clears.
  void setRewrittenNodes(const QVector<NodeId>& nodes);
  bool isRewritten(NodeId n) const { return rewritten_.contains(n); }

  // Selects exactly these nodes (and scrolls nothing: the view decides). A
  // node in a collapsed group selects the group's box.
  void selectNodes(const QVector<NodeId>& nodes);
  // Selected nodes, ascending; a selected group box stands for its nodes.
  QVector<NodeId> selectedNodes() const;

  static constexpr int kNodeIdRole = 0;   // QGraphicsItem::data key holding the NodeId
  static constexpr int kLegendRole = 1;   // set on legend items
  static constexpr int kGroupIdRole = 2;  // GroupBox::id of a collapsed group's box
  static constexpr int kFrameRole = 3;    // set on group frames (regions' too)
  static constexpr int kRegionRole = 4;   // set on region frames

 signals:
  // A collapsed group's box was double-clicked.
  void groupExpandRequested(int group);

 protected:
  void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) override;

 private:
  void rebuildLegend(const QMap<QString, QColor>& legend);
  void applyColors();
  void applyHighlight();
  void rebuildFrames();
  QGraphicsRectItem* boxOf(NodeId n) const;

  std::shared_ptr<const Graph> graph_;
  QVector<QGraphicsRectItem*> nodeItems_;  // by NodeId; nullptr when collapsed
  QVector<int> groupOfNode_;               // by NodeId: index into groupBoxes_, or -1
  QVector<QGraphicsRectItem*> groupBoxes_;
  QVector<QVector<NodeId>> groupMembers_;  // by index into groupBoxes_
  QVector<QGraphicsItem*> frames_;
  int nodeItemCount_ = 0;
  int edgeCount_ = 0;

  // Paint state, kept across a relayout of the same graph.
  QVector<QColor> colors_;
  QMap<QString, QColor> legend_;
  QVector<GroupFrame> frameSpecs_;
  QVector<NodeId> highlighted_;
  QSet<NodeId> rewritten_;
};

}  // namespace collage
