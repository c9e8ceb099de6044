#include "views/decode_parallel_chart.h"

#include <QChart>
#include <QChartView>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPen>
#include <QScatterSeries>
#include <QSpinBox>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>
#include <algorithm>
#include <cmath>
#include <exception>

using namespace QtCharts;

namespace collage {

DecodeParallelChart::DecodeParallelChart(QWidget* parent) : QWidget(parent) {
  auto* chart = new QChart();
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->legend()->setAlignment(Qt::AlignBottom);
  xAxis_ = new QLogValueAxis(chart);
  xAxis_->setBase(2);
  xAxis_->setLabelFormat("%g");
  xAxis_->setTitleText(tr("context (cache rows)"));
  yAxis_ = new QLogValueAxis(chart);
  yAxis_->setBase(10);
  yAxis_->setLabelFormat("%g");
  yAxis_->setTitleText(tr("tokens/s"));
  chart->addAxis(xAxis_, Qt::AlignBottom);
  chart->addAxis(yAxis_, Qt::AlignLeft);
  for (const char* name : {"DP", "TP", "CP"}) {
    auto* s = new QLineSeries(chart);
    s->setName(QString::fromLatin1(name));
    strategies_ << s;
  }
  fit_ = new QLineSeries(chart);
  fit_->setName(tr("one step, 1 device (fit)"));
  QPen dashed = fit_->pen();
  dashed.setStyle(Qt::DashLine);
  fit_->setPen(dashed);
  measured_ = new QScatterSeries(chart);
  measured_->setName(tr("one step, 1 device (measured)"));
  measured_->setMarkerSize(9);
  // The runs on N ranks: filled diamonds-like squares, their simulations hollow.
  runs_ = new QScatterSeries(chart);
  runs_->setName(tr("run on N devices (measured)"));
  runs_->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
  runs_->setMarkerSize(11);
  runsSimulated_ = new QScatterSeries(chart);
  runsSimulated_->setName(tr("the same run (simulated)"));
  runsSimulated_->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
  runsSimulated_->setMarkerSize(11);
  runsSimulated_->setBrush(Qt::NoBrush);
  QVector<QXYSeries*> all(strategies_.begin(), strategies_.end());
  all << fit_ << measured_ << runs_ << runsSimulated_;
  for (QXYSeries* s : all) {
    chart->addSeries(s);
    s->attachAxis(xAxis_);
    s->attachAxis(yAxis_);
  }
  view_ = new QChartView(chart, this);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setMinimumSize(240, 160);

  devices_ = new QSpinBox(this);
  devices_->setRange(1, 64);
  devices_->setValue(2);
  devices_->setSuffix(tr(" devices"));
  devices_->setToolTip(tr("devices the strategies split the batch over"));
  requests_ = new QSpinBox(this);
  requests_->setRange(1, 256);
  requests_->setValue(8);
  requests_->setSuffix(tr(" requests"));
  requests_->setToolTip(
      tr("requests in the batch, each with the context as its prompt and 32, 64, 96, 128, ... "
         "new tokens"));
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  // A box changed: the same points, simulated again.
  for (QSpinBox* box : {devices_, requests_})
    connect(box, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
      if (points_.size() >= 2) simulate(points_);
    });
  connect(&watcher_, &QFutureWatcher<Result>::finished, this, &DecodeParallelChart::onFinished);

  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("DP / TP / CP, simulated:"), this));
  controls->addWidget(devices_);
  controls->addWidget(requests_);
  controls->addStretch();
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(controls);
  layout->addWidget(view_, 1);
  layout->addWidget(status_);
  clear();
}

DecodeParallelChart::~DecodeParallelChart() {
  // The task reads only its copies; waiting keeps its result from arriving
  // at a watcher that is gone.
  watcher_.waitForFinished();
}

void DecodeParallelChart::setDecoder(const QString& modelPath,
                                     const std::optional<DecoderSignature>& signature) {
  modelPath_ = modelPath;
  signature_ = signature;
  clear();
}

DecodeComparisonOptions DecodeParallelChart::options() const {
  DecodeComparisonOptions o;
  o.devices = devices_->value();
  o.requests = requests_->value();
  return o;
}

QString DecodeParallelChart::statusText() const { return status_->text(); }

void DecodeParallelChart::clear() {
  ++generation_;  // a simulation running now is dropped
  points_.clear();
  for (QLineSeries* s : strategies_) s->clear();
  fit_->clear();
  measured_->clear();
  runs_->clear();
  runsSimulated_->clear();
  xAxis_->setRange(16, 131072);
  yAxis_->setRange(1, 1000);
  status_->setText(
      tr("Measure the step at two context lengths or more to simulate DP, TP and CP "
         "from it."));
}

void DecodeParallelChart::simulate(const QVector<DecodePoint>& points) {
  const quint64 generation = ++generation_;
  points_ = points;
  if (!signature_) {
    status_->setText(tr("No decoder is loaded."));
    emit simulated(status_->text());
    return;
  }
  status_->setText(tr("Simulating %1 device(s)...").arg(devices_->value()));
  const std::string path = modelPath_.toStdString();
  const DecoderSignature signature = *signature_;
  const std::vector<DecodePoint> measured(points.begin(), points.end());
  const DecodeComparisonOptions options = this->options();
  // A running task is not waited for: its result, one generation old, is
  // dropped in onFinished (the watcher reports the newest future only).
  watcher_.setFuture(QtConcurrent::run([=]() -> Result {
    Result r;
    r.generation = generation;
    try {
      r.comparison = compareDecodeParallel(path, signature, measured, options);
    } catch (const std::exception& e) {
      r.error = QString::fromStdString(e.what());
    }
    return r;
  }));
}

void DecodeParallelChart::onFinished() {
  const Result r = watcher_.result();
  if (r.generation != generation_) return;  // cleared or asked again meanwhile
  if (!r.error.isEmpty()) {
    status_->setText(tr("Simulation failed: %1").arg(r.error));
    emit simulated(r.error);
    return;
  }
  showComparison(r.comparison);
  emit simulated(QString());
}

void DecodeParallelChart::showComparison(const DecodeComparison& c) {
  double xMin = INFINITY, xMax = 0, yMin = INFINITY, yMax = 0;
  auto plot = [&](QXYSeries* s, const std::vector<DecodeCurvePoint>& points) {
    s->clear();
    for (const DecodeCurvePoint& p : points) {
      // A log axis takes positive values only.
      if (!(p.tokensPerSecond > 0) || !std::isfinite(p.tokensPerSecond)) continue;
      s->append(double(p.context), p.tokensPerSecond);
      xMin = std::min(xMin, double(p.context));
      xMax = std::max(xMax, double(p.context));
      yMin = std::min(yMin, p.tokensPerSecond);
      yMax = std::max(yMax, p.tokensPerSecond);
    }
  };
  for (int s = 0; s < strategies_.size() && s < int(c.curves.size()); ++s)
    plot(strategies_[s], c.curves[size_t(s)]);
  plot(fit_, c.fit);
  plot(measured_, c.measured);
  std::vector<DecodeCurvePoint> runs, runsSimulated;
  QString runText;
  for (const MeasuredRunComparison& r : c.runs) {
    runs.push_back({r.run.context, r.run.tokensPerSecond});
    if (r.simulated) runsSimulated.push_back({r.run.context, r.simulatedTokensPerSecond});
    runText += QStringLiteral(" ") + QString::fromStdString(describeMeasuredRun(r)) + ".";
  }
  plot(runs_, runs);
  plot(runsSimulated_, runsSimulated);
  runs_->setName(tr("run on %1 device(s) (measured)").arg(c.devices));
  if (xMax > 0) {
    xAxis_->setRange(xMin / 1.2, xMax * 1.2);
    yAxis_->setRange(yMin / 1.5, yMax * 1.5);
  }
  // The winner at the longest context, and where the numbers come from.
  QString best;
  double bestRate = 0;
  for (size_t s = 0; s < c.curves.size(); ++s)
    if (!c.curves[s].empty() && c.curves[s].back().tokensPerSecond > bestRate) {
      bestRate = c.curves[s].back().tokensPerSecond;
      best = QString::fromStdString(c.strategies[s]);
    }
  const int64_t last = c.fit.empty() ? 0 : c.fit.back().context;
  status_->setText(
      tr("%1 device(s), %2 request(s): at %3 rows %4 is fastest (%5 tokens/s). Step: rest %6 ms, "
         "attention %7 ms + %8 us a row (fit to %9 measured point(s)); %10, %11 GB/s, %12 us.")
          .arg(c.devices)
          .arg(c.requests)
          .arg(last)
          .arg(best)
          .arg(bestRate, 0, 'f', 1)
          .arg(c.costs.restSeconds * 1e3, 0, 'f', 3)
          .arg(c.costs.attentionSeconds * 1e3, 0, 'f', 3)
          .arg(c.costs.attentionSecondsPerRow * 1e6, 0, 'g', 3)
          .arg(c.measured.size())
          .arg(QString::fromStdString(c.linkSource))
          .arg(c.link.bandwidthBytesPerS / 1e9, 0, 'g', 3)
          .arg(c.link.latencyS * 1e6, 0, 'g', 3) +
      (c.runs.empty()
           ? tr(" No run on %1 device(s) is stored for this model (mpirun -n %1 collage generate "
                "--cache-parallel or --data-parallel).")
                 .arg(c.devices)
           : tr(" Runs on %1 device(s):").arg(c.devices) + runText));
}

}  // namespace collage
