// The inspector: what the engineer sees about the selected node or group.
// Op, attributes, input and output types and shapes, FLOPs; and, when a plan
// places it: its backend, group and pattern, where the choice came from
// (op-level optimizer, graph-level search, pinned by the user), what every
// backend costs for exactly these nodes (median ± spread), why the chosen one
// won, and why the others cannot run them. The reasoning is the core's
// (core/search/choice_explanation.h); this file only formats it.
#pragma once

#include <QString>
#include <QVector>
#include <QHash>
#include <QWidget>

#include "core/ir/graph.h"
#include "core/search/optimization_job.h"
#include "core/plan/plan.h"

class QTextBrowser;

namespace collage {

class CostBarChart;

// HTML for a QTextBrowser. `plan` and `result` may be null (no plan yet; a
// plan loaded from a file has no measurements to compare).
QString describeNodeHtml(const Graph& graph, NodeId node, const Plan* plan,
                         const OptimizationResult* result = nullptr);
// The same for a group or any multi-selection (one node gives describeNodeHtml's
// text). An empty selection gives a short hint.
QString describeSelectionHtml(const Graph& graph, const QVector<NodeId>& nodes, const Plan* plan,
                              const OptimizationResult* result);

// The inspector dock's content: the HTML above over a CostBarChart of the
// backends' costs for the selection (hidden when there is nothing to chart).
class InspectorPanel : public QWidget {
  Q_OBJECT
 public:
  explicit InspectorPanel(QWidget* parent = nullptr);

  // Shows `nodes` of `graph` (null: clears). Pointers are not kept.
  void showSelection(const Graph* graph, const QVector<NodeId>& nodes, const Plan* plan,
                     const OptimizationResult* result);
  void clear();
  // Node name -> the graph substitution that created or changed it
  // ("merge-siblings at q, k, v"), said under the node's details.
  void setRewrittenNodes(const QHash<QString, QString>& rewrittenBy) { rewrittenBy_ = rewrittenBy; }

  QTextBrowser* browser() const { return browser_; }
  CostBarChart* chart() const { return chart_; }

 private:
  QTextBrowser* browser_ = nullptr;
  CostBarChart* chart_ = nullptr;
  QHash<QString, QString> rewrittenBy_;
};

}  // namespace collage
