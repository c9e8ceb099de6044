// What one plan changed against another: the graph-level plan against the
// op-level plan it started from (OptimizationResult::startPlan), as hotspot
// diffs two recordings. A row is one *change*: the smallest set of nodes
// that both plans cover with whole groups of their own, so that what it ran
// as before and what it runs as now cover exactly the same nodes and their
// times compare:
//
//   base:  [Conv: onednn] [Relu: native] [MatMul: openblas] [Add Tanh: native]
//   plan:  [Conv Relu MatMul: onednn region]                [Add: native] [Tanh: onednn]
//   rows:  merged 3 groups (region) | 3 nodes | native 1, onednn 1, openblas 1 | onednn region
//          split 1 group into 2     | 2 nodes | native 1                       | native 1, onednn 1
//
// Before is the sum of the replaced groups' medians, after the sum of the
// new groups' medians, each kernel measured alone (a region measured as one
// kernel: its time is all of its nodes', so it is never set against one of
// the groups it merged). Hence the rows add up: the base plan's sum of group
// costs = the unchanged groups + every row's before, and the plan's = the
// unchanged groups + every row's after (totals()). The whole plan's measured
// gain is the search's (describeGraphLevelGain): kernels in sequence share
// caches that medians measured alone do not see, so the sums differ from it.
// GUI-free apart from Qt's model classes, so tests check it with
// QAbstractItemModelTester.
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <QVector>
#include <map>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/plan/plan.h"
#include "core/search/graph_level_search.h"

namespace collage {

struct PlanDiffRow {
  // Merged: several base groups became one group; Split: one became several;
  // BackendChanged: the same nodes as one group elsewhere (into a region:
  // "moved into a region"); Regrouped: several became several. Rewritten: a
  // graph substitution the plan was made with (the model as exported is its
  // base): before = its source nodes, after = the nodes that now compute
  // them, savedNs = what the op-level DP said it bought. Rewritten rows are
  // not in the totals, which compare groups.
  enum class Kind { Merged, Split, BackendChanged, Regrouped, Rewritten };
  Kind kind = Kind::Merged;
  int baseGroups = 0;       // whole groups of the base plan it replaces
  int planGroups = 0;       // whole groups of the plan that replace them
  bool region = false;      // one of them is a region of the graph-level search
  QString nodes;            // "62 nodes (conv1 .. relu3)"
  QString before;           // "native 1, onednn 1, openblas 28"
  QString after;            // "onednn region", "native 1, onednn 1"
  double beforeNs = 0;      // the base groups' medians summed; NaN = one is unknown
  double afterNs = 0;       // the new groups' medians summed; NaN = one is unknown
  QVector<NodeId> nodeIds;  // to select them in the graph, in graph order
  QString rule;             // Rewritten: the substitution rule
  double savedNs = 0;       // Rewritten: the DP's cost before its move minus after (NaN = unknown)
};

// The rows summed, and what did not change: each side adds up to its plan's
// sum of group costs (Plan::sumOfGroupCosts).
struct PlanDiffTotals {
  int unchangedGroups = 0;
  double unchangedNs = 0;  // the groups in both plans, counted once
  double beforeNs = 0;     // every row's before
  double afterNs = 0;      // every row's after
};

class PlanDiffModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Change, Nodes, Before, After, BeforeMs, AfterMs, ColumnCount };
  // Raw value for sorting (numbers sort as numbers).
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit PlanDiffModel(QObject* parent = nullptr);

  // The changes from `base` to `plan` (both of `graph`), in `plan`'s order.
  void setPlans(const Graph& graph, const Plan& base, const Plan& plan);
  // Adds a Rewritten row per substitution, first: `rewrittenNodes` maps a
  // node of `graph` to the index in `substitutions` of the one that made it
  // (rewrittenNodeSites).
  void addRewrites(const Graph& graph, const std::vector<PlanSubstitution>& substitutions,
                   const std::map<std::string, size_t>& rewrittenNodes);
  void clear();
  const PlanDiffRow& row(int r) const { return rows_.at(r); }
  const PlanDiffTotals& totals() const { return totals_; }
  static QString kindName(const PlanDiffRow& row);  // "merged 30 groups (region)"
  // "Changed groups, each kernel measured alone: 1.234 ms before, 0.987 ms
  // after; 12 unchanged groups 3.210 ms"
  QString describeTotals() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  QVector<PlanDiffRow> rows_;
  PlanDiffTotals totals_;
};

// One line on what the graph-level search gained, measured whole: "23.10 ->
// 20.61 ms (1.12x faster, paired); 14 generations, 84 plans run", or why the
// starting plan was kept, or that a cancelled search's best was not timed
// again.
QString describeGraphLevelGain(const GraphLevelResult& result);

}  // namespace collage
