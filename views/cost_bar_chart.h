// A small horizontal bar chart of what each backend costs for the selected
// nodes: one bar per backend at its measured median, a whisker over its
// spread (the inter-quartile range, median ± spread/2), the chosen backend
// highlighted, and backends that cannot run the nodes listed greyed out with
// their reason as the tooltip. Painted with QPainter: it sits in the
// inspector dock and must stay cheap to redraw on every selection.
#pragma once

#include <QString>
#include <QVector>
#include <QWidget>
#include <vector>

#include "core/search/plan_override.h"

namespace collage {

struct BackendCost {
  QString backend;
  double medianNs = 0;    // meaningful when `measured`
  double spread = 0;      // relative: (p75 - p25) / median
  bool runnable = false;  // false: `note` says why not
  bool measured = false;  // runnable but not measured yet: no bar, "not measured"
  bool chosen = false;    // the plan runs these nodes on it
  QString note;           // the reason it cannot, or the pattern it would use
};

// One BackendCost per choice, `chosenBackend` marked (empty = none).
QVector<BackendCost> backendCosts(const std::vector<RunOnChoice>& choices,
                                  const QString& chosenBackend);

class CostBarChart : public QWidget {
  Q_OBJECT
 public:
  explicit CostBarChart(QWidget* parent = nullptr);

  void setCosts(QVector<BackendCost> costs);
  const QVector<BackendCost>& costs() const { return costs_; }
  // The row (index into costs()) at a point in widget coordinates, or -1.
  int rowAt(const QPoint& pos) const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;  // tooltips: the reason or the exact figures

 private:
  QVector<BackendCost> costs_;
};

}  // namespace collage
