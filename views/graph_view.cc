#include "views/graph_view.h"

#include <QMouseEvent>
#include <QWheelEvent>

#include "views/graph_scene.h"

namespace collage {

GraphView::GraphView(QWidget* parent) : QGraphicsView(parent) {
  setRenderHint(QPainter::Antialiasing);
  setDragMode(QGraphicsView::RubberBandDrag);
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  setViewportUpdateMode(QGraphicsView::SmartViewportUpdate);
}

void GraphView::fitAll() {
  if (scene()) fitInView(scene()->sceneRect(), Qt::KeepAspectRatio);
}

void GraphView::centerOnNodes(const QVector<NodeId>& nodes) {
  auto* graphScene = qobject_cast<GraphScene*>(scene());
  if (!graphScene) return;
  QRectF area;
  for (NodeId n : nodes) area |= graphScene->nodeRect(n);
  if (area.isNull()) return;
  QRectF visible = mapToScene(viewport()->rect()).boundingRect();
  if (area.width() > visible.width() * 0.9 || area.height() > visible.height() * 0.9)
    fitInView(area.adjusted(-40, -40, 40, 40), Qt::KeepAspectRatio);
  centerOn(area.center());
}

void GraphView::zoomBy(double factor) {
  double current = transform().m11();
  // Keep the zoom within a range where the view stays usable.
  if ((current > 8 && factor > 1) || (current < 0.01 && factor < 1)) return;
  scale(factor, factor);
}

void GraphView::wheelEvent(QWheelEvent* event) {
  zoomBy(event->angleDelta().y() > 0 ? 1.15 : 1 / 1.15);
  event->accept();
}

void GraphView::mousePressEvent(QMouseEvent* event) {
  if (event->button() == Qt::MiddleButton ||
      (event->button() == Qt::LeftButton && (event->modifiers() & Qt::ControlModifier))) {
    setDragMode(QGraphicsView::ScrollHandDrag);
    // ScrollHandDrag pans on the left button: replay the press as one.
    QMouseEvent press(event->type(), event->localPos(), Qt::LeftButton, Qt::LeftButton,
                      Qt::NoModifier);
    QGraphicsView::mousePressEvent(&press);
    return;
  }
  QGraphicsView::mousePressEvent(event);
}

void GraphView::mouseReleaseEvent(QMouseEvent* event) {
  if (dragMode() == QGraphicsView::ScrollHandDrag) {
    QMouseEvent release(event->type(), event->localPos(), Qt::LeftButton, Qt::NoButton,
                        Qt::NoModifier);
    QGraphicsView::mouseReleaseEvent(&release);
    setDragMode(QGraphicsView::RubberBandDrag);
    return;
  }
  QGraphicsView::mouseReleaseEvent(event);
}

}  // namespace collage
