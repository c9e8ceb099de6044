// A pipeline's stages as a graph (issue #41): one box per stage, an arrow per
// hand-over between two stages, and the memory each device holds.
//
//              ┌ stage 0 [cpu0] ┐
//              │ 12 nodes       │
//              │ 1.20 ms / mb   │
//              └────────────────┘
//        48 KB / mb ╱      ╲ 16 KB / mb
//   ┌ stage 1 [cpu1] ┐   ┌ stage 2 [cpu2] ┐     a graph pipeline's stages
//   └────────────────┘   └────────────────┘     form a DAG, not a chain:
//              ╲          ╱                     branches sit side by side
//              ┌ stage 3 ... ┐
//   memory per device:  cpu0 ▇▇▇▇▇▇ 3.1 MB   cpu1 ▇▇ 1.0 MB ...
//
// Stages are laid out in layers, each a stage's longest path from a stage
// with no producer, in index order within a layer: a handful of stages
// needs no Graphviz (views/graph_layout.h lays out the model's nodes).
// Paint only: the numbers are computed elsewhere and handed in.
#pragma once

#include <QColor>
#include <QRectF>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

namespace collage {

class StageGraphView : public QWidget {
  Q_OBJECT
 public:
  struct Stage {
    QString devices;                // "cpu0, cpu1"
    QColor color;                   // as the graph colours its nodes
    int nodes = 0;                  // operators in the stage
    double simulatedSeconds = 0;    // per micro-batch, as planned and simulated
    double measuredSeconds = -1;    // per micro-batch in a real run; < 0: none yet
    double memoryBytes = 0;         // per device: weights + in-flight activations
  };
  struct HandOver {
    int from = 0, to = 0;           // stage indices
    double bytesPerMicroBatch = 0;  // the tensors that cross
  };
  struct DeviceMemory {
    QString device;
    double simulatedBytes = 0;
    double measuredBytes = -1;  // a real run's; < 0: none yet
    double limitBytes = 0;      // <= 0 or infinite: no limit
  };

  explicit StageGraphView(QWidget* parent = nullptr);

  void setPipeline(const QVector<Stage>& stages, const QVector<HandOver>& edges,
                   const QVector<DeviceMemory>& devices);
  // A real run's seconds per micro-batch, by stage, and memory by device
  // (in setPipeline's device order).
  void setMeasured(const QVector<double>& secondsPerMicroBatch, const QVector<double>& deviceBytes);
  void clear();

  int stageCount() const { return stages_.size(); }
  int edgeCount() const { return edges_.size(); }
  const HandOver& edge(int i) const { return edges_.at(i); }
  // Layer of a stage (0: fed by no other stage), and its box in the widget.
  int layerOf(int stage) const { return layer_.at(stage); }
  QRectF boxOf(int stage) const;
  // The lines drawn in a stage's box ("stage 1 [cpu1]", "12 nodes", ...).
  QStringList boxText(int stage) const;
  // The memory rows ("cpu0: 3.10 MB simulated, 2.95 MB run, limit 8.00 MB").
  QStringList memoryText() const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  void layOut();
  double memoryTop() const;

  QVector<Stage> stages_;
  QVector<HandOver> edges_;
  QVector<DeviceMemory> devices_;
  QVector<int> layer_;
  QVector<QPointF> centre_;  // by stage, in the unscaled layout
  int layers_ = 0, widest_ = 0;
};

}  // namespace collage
