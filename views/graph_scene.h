// The graph as a QGraphicsScene: one box per node (op and short name), one
// path per edge (its tensor's shape as tooltip), a legend of backends. The
// scene is built once from a layout; a new plan only recolors the boxes.
#pragma once

#include <QColor>
#include <QGraphicsScene>
#include <QMap>
#include <QVector>
#include <memory>

#include "core/graph.h"
#include "views/graph_layout.h"

class QGraphicsRectItem;

namespace collage {

class GraphScene : public QGraphicsScene {
  Q_OBJECT
 public:
  explicit GraphScene(QObject* parent = nullptr);

  // Replaces the scene with `graph` drawn at `layout`.
  void setGraph(std::shared_ptr<const Graph> graph, const GraphLayout& layout);
  const Graph* graph() const { return graph_.get(); }
  int nodeItemCount() const { return nodeItems_.size(); }
  int edgeItemCount() const { return edgeCount_; }

  // Fills node n with colors[n] (invalid color = default) and shows a legend
  // of `legend` (backend name -> color). Never lays out again.
  void setNodeColors(const QVector<QColor>& colors, const QMap<QString, QColor>& legend);
  QColor nodeColor(NodeId n) const;
  void clearNodeColors();

  // Selects exactly these nodes (and scrolls nothing: the view decides).
  void selectNodes(const QVector<NodeId>& nodes);
  QVector<NodeId> selectedNodes() const;

  static constexpr int kNodeIdRole = 0;  // QGraphicsItem::data key holding the NodeId

 private:
  void rebuildLegend(const QMap<QString, QColor>& legend);

  std::shared_ptr<const Graph> graph_;
  QVector<QGraphicsRectItem*> nodeItems_;
  int edgeCount_ = 0;
};

}  // namespace collage
