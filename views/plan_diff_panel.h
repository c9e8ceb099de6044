// The Plan diff dock: what the graph-level search changed against the plan
// it started from, and the graph substitutions the plan was made with
// (against the model as exported). A line with the measured gain (describeGraphLevelGain)
// over a sortable table of the changed groups (PlanDiffModel); selecting a
// row selects its nodes in the graph (nodesActivated).
//
//   panel->showResult(graph, *result);  // after an optimisation
//   connect(panel, &PlanDiffPanel::nodesActivated, window, ...select and centre...);
#pragma once

#include <QVector>
#include <QWidget>
#include <map>
#include <string>

#include "core/ir/graph.h"
#include "core/search/optimization_job.h"

class QLabel;
class QSortFilterProxyModel;
class QTableView;

namespace collage {

class PlanDiffModel;

class PlanDiffPanel : public QWidget {
  Q_OBJECT
 public:
  explicit PlanDiffPanel(QWidget* parent = nullptr);

  // The result's plan against its startPlan when the graph-level search ran,
  // and a row per substitution of the plan (`rewrittenNodes`: the nodes of
  // `graph` each one made, as rewrittenNodeSites gives them); otherwise says
  // how to get a diff.
  void showResult(const Graph& graph, const OptimizationResult& result,
                  const std::map<std::string, size_t>& rewrittenNodes = {});
  void clear();

  PlanDiffModel* model() const { return model_; }
  QString summary() const;
  QTableView* table() const { return table_; }

 signals:
  void nodesActivated(QVector<collage::NodeId> nodes);

 private:
  void onSelection();

  QLabel* summary_ = nullptr;
  PlanDiffModel* model_ = nullptr;
  QSortFilterProxyModel* proxy_ = nullptr;
  QTableView* table_ = nullptr;
};

}  // namespace collage
