#include "views/kernel_table_model.h"

#include <cmath>

#include "core/candidate_costs.h"

namespace collage {

KernelTableModel::KernelTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void KernelTableModel::setPlan(const Graph& graph, const Plan& plan, const QVector<bool>& fromCache) {
  beginResetModel();
  rows_.clear();
  std::vector<NodeSet> groups = resolvePlanGroups(plan, graph);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const PlanGroup& pg = plan.groups[g];
    KernelRow row;
    row.group = static_cast<int>(g);
    row.ops = QString::fromStdString(opsLabel(graph, groups[g]));
    row.backend = QString::fromStdString(pg.backend);
    row.medianNs = pg.costNs;
    row.spread = pg.spread;
    row.samples = pg.samples;
    row.cached = static_cast<int>(g) < fromCache.size() ? fromCache[static_cast<int>(g)] : true;
    groups[g].forEach([&](NodeId n) { row.nodes.push_back(n); });
    rows_.push_back(std::move(row));
  }
  endResetModel();
}

void KernelTableModel::clear() {
  beginResetModel();
  rows_.clear();
  endResetModel();
}

int KernelTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : rows_.size();
}

int KernelTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant KernelTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rows_.size()) return {};
  const KernelRow& r = rows_[index.row()];
  if (role == kSortRole) {
    switch (index.column()) {
      case Group: return r.group;
      case Median: return std::isnan(r.medianNs) ? -1.0 : r.medianNs;
      case Spread: return r.spread;
      case Samples: return r.samples;
      default: break;
    }
    role = Qt::DisplayRole;
  }
  if (role == Qt::TextAlignmentRole) {
    switch (index.column()) {
      case Group: case Median: case Spread: case Samples:
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
      default: return {};
    }
  }
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  switch (index.column()) {
    case Group: return r.group;
    case Ops: return r.ops;
    case Backend: return r.backend;
    case Median:
      if (std::isnan(r.medianNs)) return QStringLiteral("unknown");
      if (std::isinf(r.medianNs)) return QStringLiteral("cannot run");
      return QString::number(r.medianNs / 1000.0, 'f', 2) + QStringLiteral(" us");
    case Spread: return QString::number(100 * r.spread, 'f', 1) + QStringLiteral(" %");
    case Samples: return r.samples;
    case Source: return r.cached ? QStringLiteral("cached") : QStringLiteral("fresh");
    default: return {};
  }
}

QVariant KernelTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Group: return tr("Group");
    case Ops: return tr("Ops");
    case Backend: return tr("Backend");
    case Median: return tr("Median");
    case Spread: return tr("Spread");
    case Samples: return tr("Samples");
    case Source: return tr("Source");
    default: return {};
  }
}

}  // namespace collage
