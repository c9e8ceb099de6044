// The measurements behind the current plan, one row per plan group: group,
// ops, backend, median, spread, samples, cached or fresh. GUI-free apart from
// Qt's model classes, so tests check it with QAbstractItemModelTester.
#pragma once

#include <QAbstractTableModel>
#include <QVector>

#include "core/graph.h"
#include "core/measurement.h"
#include "core/plan.h"

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
};

class KernelTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Group, Ops, Backend, Median, Spread, Samples, Source, ColumnCount };
  // Raw value for sorting (numbers sort as numbers).
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit KernelTableModel(QObject* parent = nullptr);

  // Rows from a plan for `graph`; `fromCache[g]` says whether group g's
  // measurement came from the database (empty = unknown, shown as cached).
  void setPlan(const Graph& graph, const Plan& plan, const QVector<bool>& fromCache);
  void clear();
  const KernelRow& row(int r) const { return rows_.at(r); }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QVector<KernelRow> rows_;
};

}  // namespace collage
