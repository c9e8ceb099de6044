// What one plan changed against another, a row per group of the new plan
// that the old plan did not have: the graph-level plan against the op-level
// plan it started from (OptimizationResult::startPlan), as hotspot diffs two
// recordings. A row says how its nodes were grouped before (which groups,
// on which backends) and how now:
//
//   base:  [Conv: onednn] [Relu: native] [MatMul: openblas]
//   plan:  [Conv Relu MatMul: onednn region]
//   row:   merged 3 groups (region) | 3 nodes | native 1, onednn 1, openblas 1 | onednn | ...
//
// Kinds: merged (several whole groups became one), split (part of one
// group), backend changed (the same nodes on another backend), regrouped
// (parts of several groups). Costs are each kernel's isolated median; the
// whole plan's measured gain is the search's (describeGraphLevelGain), as
// kernels in sequence share caches the isolated medians do not see.
// GUI-free apart from Qt's model classes, so tests check it with
// QAbstractItemModelTester.
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <QVector>

#include "core/ir/graph.h"
#include "core/plan/plan.h"
#include "core/search/graph_level_search.h"

namespace collage {

struct PlanDiffRow {
  enum class Kind { Merged, Split, BackendChanged, Regrouped };
  Kind kind = Kind::Merged;
  int baseGroups = 0;       // groups of the base plan it takes nodes from
  bool region = false;      // made by the graph-level search
  QString nodes;            // "62 nodes (conv1 .. relu3)"
  QString before;           // "native 1, onednn 1, openblas 28"
  QString after;            // "onednn"
  double beforeNs = 0;      // the base groups' medians summed (whole groups only); NaN = unknown
  double afterNs = 0;       // NaN = unknown
  QVector<NodeId> nodeIds;  // to select them in the graph
};

class PlanDiffModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Change, Nodes, Before, After, BeforeMs, AfterMs, ColumnCount };
  // Raw value for sorting (numbers sort as numbers).
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit PlanDiffModel(QObject* parent = nullptr);

  // The groups of `plan` (of `graph`) not in `base`, in `plan`'s order.
  void setPlans(const Graph& graph, const Plan& base, const Plan& plan);
  void clear();
  const PlanDiffRow& row(int r) const { return rows_.at(r); }
  static QString kindName(const PlanDiffRow& row);  // "merged 30 groups (region)"

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  QVector<PlanDiffRow> rows_;
};

// One line on what the graph-level search gained, measured whole: "23.10 ->
// 20.61 ms (1.12x faster, paired); 14 generations, 84 plans run", or why the
// starting plan was kept, or that a cancelled search's best was not timed
// again.
QString describeGraphLevelGain(const GraphLevelResult& result);

}  // namespace collage
