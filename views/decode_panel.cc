#include "views/decode_panel.h"

#include <QChart>
#include <QChartView>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineSeries>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QVBoxLayout>
#include <QValueAxis>

using namespace QtCharts;

namespace collage {

DecodePanel::DecodePanel(QWidget* parent) : QWidget(parent) {
  qRegisterMetaType<collage::DecodePoint>("collage::DecodePoint");
  qRegisterMetaType<QVector<qint64>>("QVector<qint64>");
  auto* chart = new QChart();
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->legend()->setAlignment(Qt::AlignBottom);
  xAxis_ = new QValueAxis(chart);
  yAxis_ = new QValueAxis(chart);
  xAxis_->setTitleText(tr("context length (cache rows)"));
  yAxis_->setTitleText(tr("ms"));
  chart->addAxis(xAxis_, Qt::AlignBottom);
  chart->addAxis(yAxis_, Qt::AlignLeft);
  // Stacked as lines: the attention kernels, and above them the whole step,
  // so the gap between the two is the rest (projections, MLP, overhead).
  attention_ = new QLineSeries(chart);
  attention_->setName(tr("attention"));
  attention_->setPointsVisible(true);
  step_ = new QLineSeries(chart);
  step_->setName(tr("step (attention + rest)"));
  step_->setPointsVisible(true);
  for (QLineSeries* s : {attention_, step_}) {
    chart->addSeries(s);
    s->attachAxis(xAxis_);
    s->attachAxis(yAxis_);
  }
  view_ = new QChartView(chart, this);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setMinimumSize(240, 160);

  max_ = new QSpinBox(this);
  max_->setRange(4, 1 << 16);
  max_->setValue(256);
  max_->setPrefix(tr("up to "));
  max_->setSuffix(tr(" rows"));
  max_->setToolTip(tr("the longest context measured (16, 32, 64, ... up to it)"));
  measure_ = new QPushButton(tr("Measure"), this);
  measure_->setToolTip(
      tr("time a decode step at each context length, with the plan where it was made for that "
         "length, else the native default"));
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  connect(measure_, &QPushButton::clicked, this,
          [this] { emit measureRequested(contextLengths(max_->value())); });

  auto* controls = new QHBoxLayout;
  controls->addWidget(max_);
  controls->addWidget(measure_);
  controls->addStretch();
  parallel_ = new DecodeParallelChart(this);
  auto* charts = new QSplitter(Qt::Horizontal, this);
  charts->addWidget(view_);
  charts->addWidget(parallel_);
  charts->setStretchFactor(0, 1);
  charts->setStretchFactor(1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(controls);
  layout->addWidget(charts, 1);
  layout->addWidget(status_);
  clear();
}

QVector<qint64> DecodePanel::contextLengths(qint64 max) {
  QVector<qint64> out;
  for (qint64 l = 16; l <= max; l *= 2) out << l;
  if (out.isEmpty() || out.back() != max) out << max;
  return out;
}

QString DecodePanel::statusText() const { return status_->text(); }

void DecodePanel::clear() {
  points_.clear();
  attention_->clear();
  step_->clear();
  xAxis_->setRange(0, 1);
  yAxis_->setRange(0, 1);
  status_->setText(tr("Measure times a decode step at each context length."));
  parallel_->clear();
}

void DecodePanel::growRanges(double x, double y) {
  double xMax = x, yMax = y;
  for (const DecodePoint& p : points_) {
    xMax = std::max(xMax, double(p.context));
    yMax = std::max(yMax, p.stepMs);
  }
  xAxis_->setRange(0, xMax * 1.05);
  yAxis_->setRange(0, yMax > 0 ? yMax * 1.1 : 1);
}

void DecodePanel::addPoint(const DecodePoint& point) {
  points_ << point;
  attention_->append(point.context, point.attentionMs);
  step_->append(point.context, point.stepMs);
  growRanges(point.context, point.stepMs);
  status_->setText(tr("context %1: step %2 ms, attention %3 ms (%4 group(s)), rest %5 ms, %6")
                       .arg(point.context)
                       .arg(point.stepMs, 0, 'f', 3)
                       .arg(point.attentionMs, 0, 'f', 3)
                       .arg(point.attentionGroups)
                       .arg(point.restMs, 0, 'f', 3)
                       .arg(point.withPlan ? tr("the plan") : tr("native default")));
}

void DecodePanel::setMeasuring(bool measuring) {
  measure_->setEnabled(!measuring);
  max_->setEnabled(!measuring);
  if (measuring) status_->setText(tr("Measuring..."));
  // A measurement's end (not the window's idle, which says it again).
  if (measuring_ && !measuring && points_.size() >= 2) parallel_->simulate(points_);
  measuring_ = measuring;
}

void DecodePanel::setError(const QString& error) {
  status_->setText(tr("Measurement failed: %1").arg(error));
}

}  // namespace collage
