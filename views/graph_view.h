// A QGraphicsView for GraphScene: wheel zooms around the cursor, dragging
// with the middle button (or with Ctrl) pans, rubber band selects.
#pragma once

#include <QGraphicsView>

namespace collage {

class GraphView : public QGraphicsView {
  Q_OBJECT
 public:
  explicit GraphView(QWidget* parent = nullptr);

 public slots:
  void fitAll();
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
