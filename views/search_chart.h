// A live chart of any search that reports core SearchStepEvents: for each
// search name ("op-level", "graph-level", ...) a best-cost and a mean-cost
// line, in milliseconds, against the search's time, its evaluations or its
// step (setXAxisQuantity). A new name adds its two lines and continues the x
// axis after the previous search, so the searches of one optimisation read
// left to right; the title keeps each search's evaluations (and cache hits
// and time left, when the search reports them), and hovering a line shows
// the step under the cursor. Nothing here knows which search it draws.
//
//   connect(worker, &OptimizeWorker::searchSteps, chart, &SearchChart::addSteps);
#pragma once

#include <QChartView>
#include <QMap>
#include <QString>
#include <QVector>

#include "core/ir/search_events.h"

QT_CHARTS_BEGIN_NAMESPACE
class QLineSeries;
class QValueAxis;
QT_CHARTS_END_NAMESPACE

namespace collage {

class SearchChart : public QtCharts::QChartView {
  Q_OBJECT
 public:
  // What the x axis counts. Time shows where a long search spends its
  // budget; evaluations show what each plan or state bought; the step is
  // the search's own count (DP batch, generation).
  enum class XAxisQuantity { Seconds, Evaluations, Step };

  explicit SearchChart(QWidget* parent = nullptr);

  // The lines of a search (nullptr for a name not seen since clear()).
  QtCharts::QLineSeries* bestSeries(const QString& search) const;
  QtCharts::QLineSeries* meanSeries(const QString& search) const;
  int searchCount() const { return searches_.size(); }
  // Evaluations reported by the latest step of `search` (0 if none).
  int evaluations(const QString& search) const;

  XAxisQuantity xAxisQuantity() const { return quantity_; }
  // Redraws every step received since clear() against `quantity`.
  void setXAxisQuantity(XAxisQuantity quantity);
  static QString xAxisQuantityName(XAxisQuantity quantity);  // "time", "evaluations", "step"

  // What hovering `search`'s lines at x shows: the step drawn nearest to x
  // ("graph-level generation 7: best 20.61 ms, mean 22.10 ms, 84 evaluations
  // (12 cached), 31.2 s"); empty when the search has no steps.
  QString stepToolTip(const QString& search, double x) const;

 public slots:
  void addStep(const collage::SearchStepEvent& event);
  // A batch in order; each series gets one append (one repaint) per batch.
  void addSteps(const QVector<collage::SearchStepEvent>& events);
  void clear();

 private:
  struct Search {
    QtCharts::QLineSeries* best = nullptr;
    QtCharts::QLineSeries* mean = nullptr;
    double xOffset = 0;  // where this search starts on the shared x axis
    QVector<SearchStepEvent> steps;  // every step received, to redraw and to describe
  };
  Search& searchFor(const QString& name);
  double xOf(const Search& search, const SearchStepEvent& event) const;
  void showToolTip(const QString& search, const QPointF& point, bool entered);
  void updateTitle();
  void updateXAxisTitle();
  void growRanges(double x, double y);

  QtCharts::QValueAxis* xAxis_ = nullptr;
  QtCharts::QValueAxis* yAxis_ = nullptr;
  XAxisQuantity quantity_ = XAxisQuantity::Seconds;
  QMap<QString, Search> searches_;
  QStringList order_;  // names in the order they first appeared
  double xMax_ = 0;
  double yMin_ = 0, yMax_ = 0;
  bool hasPoints_ = false;
};

}  // namespace collage
