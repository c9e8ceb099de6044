// The Decode panel: for a decoder model (decoderSignature), the decode
// step's latency against the context length, split into the attention
// kernels and the rest (views/decode_profile.h measures a point). The panel
// only draws and asks: Measure emits measureRequested with the context
// lengths (16, 32, 64, ... up to the max set), and the window runs them on
// its BackgroundWork, handing each point back with addPoint as it arrives.
// Beside the curve, the DP / TP / CP comparison (views/decode_parallel_chart.h)
// simulates on the points once a measurement ends with two or more.
//
//   connect(panel, &DecodePanel::measureRequested, window, &MainWindow::measureDecode);
//   panel->addPoint(point);  // UI thread, one per context length
#pragma once

#include <QChartGlobal>
#include <QMetaType>
#include <QObject>
#include <QVector>
#include <QWidget>

#include "views/decode_parallel_chart.h"
#include "views/decode_profile.h"

Q_DECLARE_METATYPE(collage::DecodePoint)

QT_CHARTS_BEGIN_NAMESPACE
class QChartView;
class QLineSeries;
class QValueAxis;
QT_CHARTS_END_NAMESPACE
class QLabel;
class QPushButton;
class QSpinBox;

namespace collage {

class DecodePanel : public QWidget {
  Q_OBJECT
 public:
  explicit DecodePanel(QWidget* parent = nullptr);

  // 16, 32, 64, ... up to `max` (at least one length: `max` itself if below 16).
  static QVector<qint64> contextLengths(qint64 max);

  // The stacked lines: attention, and attention + rest (the step).
  QtCharts::QLineSeries* attentionSeries() const { return attention_; }
  QtCharts::QLineSeries* stepSeries() const { return step_; }
  const QVector<DecodePoint>& points() const { return points_; }
  QPushButton* measureButton() const { return measure_; }
  QSpinBox* maxContext() const { return max_; }
  DecodeParallelChart* parallelChart() const { return parallel_; }
  QString statusText() const;

 public slots:
  // Forgets the points (a new model, a new measurement).
  void clear();
  void addPoint(const collage::DecodePoint& point);
  // A measurement started (the button waits) or ended (`error` empty: done);
  // its end, with points at two lengths or more, simulates the comparison.
  void setMeasuring(bool measuring);
  void setError(const QString& error);

 signals:
  void measureRequested(QVector<qint64> contextLengths);

 private:
  void growRanges(double x, double y);

  QtCharts::QChartView* view_ = nullptr;
  QtCharts::QLineSeries* attention_ = nullptr;
  QtCharts::QLineSeries* step_ = nullptr;
  QtCharts::QValueAxis* xAxis_ = nullptr;
  QtCharts::QValueAxis* yAxis_ = nullptr;
  QPushButton* measure_ = nullptr;
  QSpinBox* max_ = nullptr;
  QLabel* status_ = nullptr;
  DecodeParallelChart* parallel_ = nullptr;
  bool measuring_ = false;
  QVector<DecodePoint> points_;
};

// Carries each point from the measuring thread to the UI thread: emitted
// there (thread-safe), delivered queued to whatever it is connected to, and
// to nothing once that is gone.
class DecodePointRelay : public QObject {
  Q_OBJECT
 signals:
  void point(collage::DecodePoint point);
};

}  // namespace collage
