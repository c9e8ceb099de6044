#include "views/search_chart.h"

#include <QChart>
#include <QCursor>
#include <QLineSeries>
#include <QToolTip>
#include <QValueAxis>

#include <cmath>

using namespace QtCharts;

namespace collage {
namespace {

// Distinct hues per search; a search's mean line is its best line, dashed.
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

// A cost worth drawing: known, possible, and not the 0 a search reports for
// a mean it could not take (a population with no plan that ran).
bool drawable(double costNs) { return std::isfinite(costNs) && costNs > 0; }

}  // namespace

SearchChart::SearchChart(QWidget* parent) : QChartView(parent) {
  auto* chart = new QChart();
  chart->setAnimationOptions(QChart::NoAnimation);  // ~20 updates a second
  chart->legend()->setAlignment(Qt::AlignBottom);
  xAxis_ = new QValueAxis(chart);
  yAxis_ = new QValueAxis(chart);
  // Op-level costs are predicted (sums of kernel medians), graph-level ones
  // measured whole: the same unit, so one axis.
  yAxis_->setTitleText(tr("latency (ms)"));
  chart->addAxis(xAxis_, Qt::AlignBottom);
  chart->addAxis(yAxis_, Qt::AlignLeft);
  setChart(chart);
  setRenderHint(QPainter::Antialiasing);
  setMinimumSize(240, 160);
  updateXAxisTitle();
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
  return it == searches_.end() || it->steps.isEmpty() ? 0 : it->steps.back().evaluations;
}

QString SearchChart::xAxisQuantityName(XAxisQuantity quantity) {
  switch (quantity) {
    case XAxisQuantity::Seconds: return tr("time");
    case XAxisQuantity::Evaluations: return tr("evaluations");
    case XAxisQuantity::Step: return tr("step");
  }
  return {};
}

void SearchChart::setXAxisQuantity(XAxisQuantity quantity) {
  if (quantity == quantity_) return;
  quantity_ = quantity;
  // Replayed in the order the searches appeared, so each continues after
  // the previous one on the new axis as it did on the old.
  QVector<SearchStepEvent> steps;
  for (const QString& name : order_) steps += searches_[name].steps;
  clear();
  updateXAxisTitle();
  addSteps(steps);
}

void SearchChart::updateXAxisTitle() {
  switch (quantity_) {
    case XAxisQuantity::Seconds:
      xAxis_->setTitleText(tr("search time (s; each search continues after the previous one)"));
      xAxis_->setLabelFormat("%.3g");
      break;
    case XAxisQuantity::Evaluations:
      xAxis_->setTitleText(tr("evaluations (each search continues after the previous one)"));
      xAxis_->setLabelFormat("%d");
      break;
    case XAxisQuantity::Step:
      xAxis_->setTitleText(tr("search step (each search continues after the previous one)"));
      xAxis_->setLabelFormat("%d");
      break;
  }
}

double SearchChart::xOf(const Search& search, const SearchStepEvent& event) const {
  switch (quantity_) {
    case XAxisQuantity::Seconds: return search.xOffset + event.elapsedSeconds;
    case XAxisQuantity::Evaluations: return search.xOffset + event.evaluations;
    case XAxisQuantity::Step: return search.xOffset + event.step;
  }
  return search.xOffset;
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
    connect(series, &QLineSeries::hovered, this,
            [this, name](const QPointF& p, bool entered) { showToolTip(name, p, entered); });
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
    s.steps.push_back(e);
    const double x = xOf(s, e);
    auto& [best, mean] = points[name];
    if (drawable(e.bestCostNs)) {
      best.push_back({x, e.bestCostNs / 1e6});
      growRanges(x, e.bestCostNs / 1e6);
    }
    if (drawable(e.meanCostNs)) {
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
  // Only touch the axes when the data leaves them (with head room), or fills
  // less than a quarter of the x axis (a DP's steps take milliseconds of an
  // axis sized for seconds): a range change relayouts every series, an
  // append inside the range does not.
  const double fit = std::max(xMax_ * 1.5, quantity_ == XAxisQuantity::Seconds ? 1e-3 : 1.0);
  if (x > xAxis_->max() || xAxis_->max() > 4 * fit) xAxis_->setMax(fit);
  if (first || yMin_ < yAxis_->min() || yMax_ > yAxis_->max()) {
    const double pad = std::max(1e-3, 0.1 * (yMax_ - yMin_));
    yAxis_->setRange(std::max(0.0, yMin_ - pad), yMax_ + pad);
  }
}

QString SearchChart::stepToolTip(const QString& search, double x) const {
  auto it = searches_.find(search);
  if (it == searches_.end() || it->steps.isEmpty()) return {};
  const SearchStepEvent* nearest = &it->steps.front();
  for (const SearchStepEvent& e : it->steps)
    if (std::abs(xOf(*it, e) - x) < std::abs(xOf(*it, *nearest) - x)) nearest = &e;
  const SearchStepEvent& e = *nearest;
  QString text = tr("%1 step %2").arg(search).arg(e.step);
  if (drawable(e.bestCostNs)) text += tr(": best %1 ms").arg(e.bestCostNs / 1e6, 0, 'f', 3);
  if (drawable(e.meanCostNs)) text += tr(", mean %1 ms").arg(e.meanCostNs / 1e6, 0, 'f', 3);
  text += tr(", %1 evaluations").arg(e.evaluations);
  if (e.cacheHits > 0) text += tr(" (%1 cached)").arg(e.cacheHits);
  text += tr(", %1 s").arg(e.elapsedSeconds, 0, 'f', e.elapsedSeconds < 10 ? 2 : 1);
  if (e.bestChanged) text += tr("; new best");
  return text;
}

void SearchChart::showToolTip(const QString& search, const QPointF& point, bool entered) {
  if (entered)
    QToolTip::showText(QCursor::pos(), stepToolTip(search, point.x()), this);
  else
    QToolTip::hideText();
}

void SearchChart::updateTitle() {
  QStringList parts;
  for (const QString& name : order_) {
    const Search& s = searches_[name];
    if (s.steps.isEmpty()) continue;
    const SearchStepEvent& last = s.steps.back();
    QString part = tr("%1: %2 evaluations").arg(name).arg(last.evaluations);
    if (last.cacheHits > 0) part += tr(" (%1 cached)").arg(last.cacheHits);
    if (drawable(last.bestCostNs)) part += tr(", best %1 ms").arg(last.bestCostNs / 1e6, 0, 'f', 3);
    if (last.timeLeftSeconds >= 0) part += tr(", %1 s left").arg(last.timeLeftSeconds, 0, 'f', 0);
    parts << part;
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
