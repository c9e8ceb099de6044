// A live chart of any search that reports core SearchStepEvents: for each
// search name ("op-level", later "graph-level", ...) a best-cost and a
// mean-cost line, in predicted milliseconds against the step. A new name adds
// its two lines and continues the x axis after the previous search, so the
// searches of one optimisation read left to right; the title keeps each
// search's number of evaluations. Nothing here knows which search it draws.
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
  explicit SearchChart(QWidget* parent = nullptr);

  // The lines of a search (nullptr for a name not seen since clear()).
  QtCharts::QLineSeries* bestSeries(const QString& search) const;
  QtCharts::QLineSeries* meanSeries(const QString& search) const;
  int searchCount() const { return searches_.size(); }
  // Evaluations reported by the latest step of `search` (0 if none).
  int evaluations(const QString& search) const;

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
    int evaluations = 0;
    double lastBestMs = 0;
  };
  Search& searchFor(const QString& name);
  void updateTitle();
  void growRanges(double x, double y);

  QtCharts::QValueAxis* xAxis_ = nullptr;
  QtCharts::QValueAxis* yAxis_ = nullptr;
  QMap<QString, Search> searches_;
  QStringList order_;  // names in the order they first appeared
  double xMax_ = 0;
  double yMin_ = 0, yMax_ = 0;
  bool hasPoints_ = false;
};

}  // namespace collage
