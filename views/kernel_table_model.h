// The measurements behind the current plan and model. Two modes:
//  - PlanGroups (setPlan): one row per plan group: group, ops, backend,
//    median, spread, samples, cached or fresh;
//  - AllCandidates (setCandidates): one row per candidate the optimizer
//    costed, chosen or not, with a "chosen" column, so that filtering by ops
//    or backend shows every alternative the choice was made from.
// GUI-free apart from Qt's model classes, so tests check it with
// QAbstractItemModelTester.
#pragma once

#include <QAbstractTableModel>
#include <QVector>

#include "core/ir/graph.h"
#include "core/measure/measurement.h"
#include "core/search/optimization_job.h"
#include "core/plan/plan.h"

namespace collage {

struct KernelRow {
  int group = 0;
  QString ops;      // "Conv+Relu"
  QString backend;
  double medianNs = 0;  // NaN = unknown, +inf = cannot run
  double spread = 0;
  int samples = 0;
  bool cached = false;
  QVector<NodeId> nodes;
  bool chosen = true;  // in the plan (always, in PlanGroups mode)
  int candidate = -1;  // index into the result's candidates (AllCandidates mode)
  QString pattern;     // "pattern:conv_relu", "rule:op"
  QString status;      // "" when measured; else "invalid", "timed out", "not measured", ...
};

class KernelTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Group, Ops, Backend, Median, Spread, Samples, Source, Chosen, ColumnCount };
  enum class Mode { PlanGroups, AllCandidates };
  // Raw value for sorting (numbers sort as numbers).
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit KernelTableModel(QObject* parent = nullptr);

  // Rows from a plan for `graph`; `fromCache[g]` says whether group g's
  // measurement came from the database (empty = unknown, shown as cached).
  void setPlan(const Graph& graph, const Plan& plan, const QVector<bool>& fromCache);
  // Every candidate of an optimisation result with its measurement; rows of
  // chosen candidates carry their plan group in the Group column (blank for
  // the others). Works for a result without a plan too (nothing chosen;
  // candidates the cancelled run did not reach say "not measured").
  void setCandidates(const Graph& graph, const OptimizationResult& result);
  void clear();
  Mode mode() const { return mode_; }
  const KernelRow& row(int r) const { return rows_.at(r); }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QVector<KernelRow> rows_;
  Mode mode_ = Mode::PlanGroups;
};

}  // namespace collage
