// The measurements behind the current plan and model. Two modes:
//  - PlanGroups (setPlan): one row per plan group: group, ops, backend,
//    median, spread, samples, and where the median comes from;
//  - AllCandidates (setCandidates): one row per candidate the optimizer
//    costed, chosen or not, with a "chosen" column, so that filtering by ops
//    or backend shows every alternative the choice was made from. "Chosen"
//    means "a group of the plan shown": exactly one row per group of it, so
//    a region of the graph-level search (no candidate) gets a row of its own,
//    and a candidate the shown plan no longer runs is never marked.
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
  // Where the median comes from: a candidate's measurement, from the
  // database or taken by this run; a region the graph-level search measured
  // as one kernel; or not known here (a plan read from a file).
  enum class Provenance { Cached, Fresh, Region, Unknown };
  Provenance provenance = Provenance::Unknown;
  // Cached from a team's shared store (docs/shared-measurements.md), and the
  // median of how many machines' medians (0: not known here: the local
  // file's copy of a shared row).
  bool shared = false;
  int machines = 0;
  QVector<NodeId> nodes;
  bool chosen = true;  // a group of the plan shown (always, in PlanGroups mode)
  int candidate = -1;  // index into the result's candidates; -1 for a region or a file's group
  QString pattern;     // "pattern:conv_relu", "rule:op"
  QString status;      // "" when measured; else "invalid", "timed out", "not measured", "skipped", ...
  QString reason;      // why, when the measurement says (a skipped reference kernel: its estimate)
};

class KernelTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Group, Ops, Backend, Median, Spread, Samples, Source, Chosen, ColumnCount };
  enum class Mode { PlanGroups, AllCandidates };
  // Raw value for sorting (numbers sort as numbers).
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit KernelTableModel(QObject* parent = nullptr);

  // Rows from a plan for `graph`. `result` (optional: the optimisation the
  // plan's groups were chosen from) says whether each group's measurement
  // came from the database or from this run (groupCandidate).
  void setPlan(const Graph& graph, const Plan& plan, const OptimizationResult* result);
  // Every candidate of an optimisation result with its measurement, then one
  // row per group of `shown` that is no candidate of it (a region). Rows of
  // `shown`'s groups are chosen and carry their group in the Group column
  // (blank for the others). `shown` null: nothing chosen (a result without a
  // plan; candidates the cancelled run did not reach say "not measured").
  void setCandidates(const Graph& graph, const OptimizationResult& result, const Plan* shown);
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
