// A QGraphicsView for GraphScene: wheel zooms around the cursor, dragging
// with the middle button (or with Ctrl) pans, rubber band selects.
#pragma once

#include <QGraphicsView>
#include <QVector>

#include "core/ir/graph.h"

namespace collage {

class GraphView : public QGraphicsView {
  Q_OBJECT
 public:
  explicit GraphView(QWidget* parent = nullptr);

 public slots:
  void fitAll();
  // Scrolls so these nodes (of the GraphScene shown) are in the middle,
  // zooming out only if they do not fit; nothing without a GraphScene.
  void centerOnNodes(const QVector<collage::NodeId>& nodes);
  void zoomIn() { zoomBy(1.25); }
  void zoomOut() { zoomBy(0.8); }

 protected:
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;

 private:
  void zoomBy(double factor);
};

}  // namespace collage
