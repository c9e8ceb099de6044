// The DP / TP / CP comparison chart beside the Decode panel's step curve:
// tokens per second against the context (log axis) for a batch of requests
// on N devices, one line per strategy, with the measured single-device steps
// and the fit through them, and the runs measured on N ranks (stored by
// `mpirun -n N collage generate --cache-parallel | --data-parallel`) beside
// their own simulations (views/decode_comparison.h says what each is).
//
// The simulation runs on the thread pool (QtConcurrent, as the pattern
// editor's matching does), never on the UI thread: it imports the model's
// step graph and reads the measurement database for the link. The newest
// request wins: a result older than the last simulate() or clear() is
// dropped. The devices and requests boxes simulate again on the points last
// given.
//
//   chart->setDecoder(path, signature);  // a model loaded
//   chart->simulate(points);              // the panel's measurement is done
//   // simulated(error) when its result (or error) is shown
#pragma once

#include <QChartGlobal>
#include <QFutureWatcher>
#include <QMetaType>
#include <QString>
#include <QVector>
#include <QWidget>
#include <optional>
#include <string>

#include "core/decode/decoder_signature.h"
#include "views/decode_comparison.h"
#include "views/decode_profile.h"

QT_CHARTS_BEGIN_NAMESPACE
class QChartView;
class QLineSeries;
class QLogValueAxis;
class QScatterSeries;
class QValueAxis;
QT_CHARTS_END_NAMESPACE
class QLabel;
class QSpinBox;

namespace collage {

class DecodeParallelChart : public QWidget {
  Q_OBJECT
 public:
  explicit DecodeParallelChart(QWidget* parent = nullptr);
  ~DecodeParallelChart() override;

  // The model the comparison is for; none: simulate() says so.
  void setDecoder(const QString& modelPath, const std::optional<DecoderSignature>& signature);

  // The strategies' lines ("DP", "TP", "CP"), in that order.
  const QVector<QtCharts::QLineSeries*>& strategySeries() const { return strategies_; }
  QtCharts::QLineSeries* fitSeries() const { return fit_; }
  QtCharts::QScatterSeries* measuredSeries() const { return measured_; }
  // The runs stored for this model on the chart's device count (context,
  // tokens/s), and the same runs simulated, point for point.
  QtCharts::QScatterSeries* runSeries() const { return runs_; }
  QtCharts::QScatterSeries* runSimulatedSeries() const { return runsSimulated_; }
  QSpinBox* devices() const { return devices_; }
  QSpinBox* requests() const { return requests_; }
  QString statusText() const;
  bool isSimulating() const { return watcher_.isRunning(); }
  DecodeComparisonOptions options() const;

 public slots:
  // Forgets the lines and the points (a new model, a new measurement).
  void clear();
  // Simulates on `points` (two context lengths at least) off the UI thread.
  void simulate(const QVector<collage::DecodePoint>& points);

 signals:
  // A simulation's result is on the chart (`error` empty) or its error shown.
  void simulated(QString error);

 private:
  struct Result {
    quint64 generation = 0;
    DecodeComparison comparison;
    QString error;
  };
  void onFinished();
  void showComparison(const DecodeComparison& c);

  QtCharts::QChartView* view_ = nullptr;
  QVector<QtCharts::QLineSeries*> strategies_;
  QtCharts::QLineSeries* fit_ = nullptr;
  QtCharts::QScatterSeries* measured_ = nullptr;
  QtCharts::QScatterSeries* runs_ = nullptr;
  QtCharts::QScatterSeries* runsSimulated_ = nullptr;
  QtCharts::QLogValueAxis* xAxis_ = nullptr;
  QtCharts::QLogValueAxis* yAxis_ = nullptr;
  QSpinBox* devices_ = nullptr;
  QSpinBox* requests_ = nullptr;
  QLabel* status_ = nullptr;
  QString modelPath_;
  std::optional<DecoderSignature> signature_;
  QVector<DecodePoint> points_;  // the last simulate()'s
  quint64 generation_ = 0;
  QFutureWatcher<Result> watcher_;
};

}  // namespace collage
