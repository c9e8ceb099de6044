#include "views/search_chart.h"

#include <QChart>
#include <QLineSeries>
#include <QValueAxis>

#include <cmath>

using namespace QtCharts;

namespace collage {
namespace {

// Distinct hues per search; a search's mean line is its best line, dashed.
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

}  // namespace

SearchChart::SearchChart(QWidget* parent) : QChartView(parent) {
  auto* chart = new QChart();
  chart->setAnimationOptions(QChart::NoAnimation);  // ~20 updates a second
  chart->legend()->setAlignment(Qt::AlignBottom);
  xAxis_ = new QValueAxis(chart);
  xAxis_->setTitleText(tr("search step (each search continues after the previous one)"));
  xAxis_->setLabelFormat("%d");
  yAxis_ = new QValueAxis(chart);
  yAxis_->setTitleText(tr("predicted latency (ms)"));
  chart->addAxis(xAxis_, Qt::AlignBottom);
  chart->addAxis(yAxis_, Qt::AlignLeft);
  setChart(chart);
  setRenderHint(QPainter::Antialiasing);
  setMinimumSize(240, 160);
  clear();
}

QLineSeries* SearchChart::bestSeries(const QString& search) const {
  auto it = searches_.find(search);
  return it == searches_.end() ? nullptr : it->best;
}

QLineSeries* SearchChart::meanSeries(const QString& search) const {
  auto it = searches_.find(search);
  return it == searches_.end() ? nullptr : it->mean;
}

int SearchChart::evaluations(const QString& search) const {
  auto it = searches_.find(search);
  return it == searches_.end() ? 0 : it->evaluations;
}

SearchChart::Search& SearchChart::searchFor(const QString& name) {
  auto it = searches_.find(name);
  if (it != searches_.end()) return *it;
  Search s;
  QColor color(kColors[order_.size() % (sizeof(kColors) / sizeof(kColors[0]))]);
  s.best = new QLineSeries(chart());
  s.best->setName(tr("%1 best").arg(name));
  s.best->setPen(QPen(color, 2));
  s.mean = new QLineSeries(chart());
  s.mean->setName(tr("%1 mean").arg(name));
  s.mean->setPen(QPen(color, 1, Qt::DashLine));
  // Continue after the searches drawn so far (a step 0 would overlap).
  s.xOffset = hasPoints_ ? xMax_ : 0;
  for (QLineSeries* series : {s.best, s.mean}) {
    chart()->addSeries(series);
    series->attachAxis(xAxis_);
    series->attachAxis(yAxis_);
  }
  order_.push_back(name);
  return *searches_.insert(name, s);
}

void SearchChart::addStep(const SearchStepEvent& event) { addSteps({event}); }

void SearchChart::addSteps(const QVector<SearchStepEvent>& events) {
  // Group the points per series so each series is appended (and repainted)
  // once per batch.
  QMap<QString, QPair<QList<QPointF>, QList<QPointF>>> points;
  for (const SearchStepEvent& e : events) {
    const QString name = QString::fromStdString(e.search);
    Search& s = searchFor(name);
    s.evaluations = e.evaluations;
    const double x = s.xOffset + e.step;
    auto& [best, mean] = points[name];
    if (std::isfinite(e.bestCostNs)) {
      best.push_back({x, e.bestCostNs / 1e6});
      s.lastBestMs = e.bestCostNs / 1e6;
      growRanges(x, e.bestCostNs / 1e6);
    }
    if (std::isfinite(e.meanCostNs)) {
      mean.push_back({x, e.meanCostNs / 1e6});
      growRanges(x, e.meanCostNs / 1e6);
    }
  }
  for (auto it = points.begin(); it != points.end(); ++it) {
    const Search& s = searches_[it.key()];
    if (!it->first.isEmpty()) s.best->append(it->first);
    if (!it->second.isEmpty()) s.mean->append(it->second);
  }
  if (!events.isEmpty()) updateTitle();
}

void SearchChart::growRanges(double x, double y) {
  const bool first = !hasPoints_;
  if (first) {
    hasPoints_ = true;
    xMax_ = x;
    yMin_ = yMax_ = y;
  } else {
    xMax_ = std::max(xMax_, x);
    yMin_ = std::min(yMin_, y);
    yMax_ = std::max(yMax_, y);
  }
  // Only touch the axes when the data leaves them (with head room): a range
  // change relayouts every series, an append inside the range does not.
  if (x > xAxis_->max()) xAxis_->setMax(std::max(x, xAxis_->max() * 1.5));
  if (first || yMin_ < yAxis_->min() || yMax_ > yAxis_->max()) {
    const double pad = std::max(1e-3, 0.1 * (yMax_ - yMin_));
    yAxis_->setRange(std::max(0.0, yMin_ - pad), yMax_ + pad);
  }
}

void SearchChart::updateTitle() {
  QStringList parts;
  for (const QString& name : order_) {
    const Search& s = searches_[name];
    parts << tr("%1: %2 evaluations, best %3 ms")
                 .arg(name)
                 .arg(s.evaluations)
                 .arg(s.lastBestMs, 0, 'f', 3);
  }
  chart()->setTitle(parts.join(QStringLiteral("  |  ")));
}

void SearchChart::clear() {
  for (const Search& s : searches_) {
    chart()->removeSeries(s.best);
    chart()->removeSeries(s.mean);
    delete s.best;
    delete s.mean;
  }
  searches_.clear();
  order_.clear();
  hasPoints_ = false;
  xMax_ = yMin_ = yMax_ = 0;
  xAxis_->setRange(0, 10);
  yAxis_->setRange(0, 1);
  chart()->setTitle(tr("Search: no steps yet"));
}

}  // namespace collage
