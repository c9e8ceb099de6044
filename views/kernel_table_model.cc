#include "views/kernel_table_model.h"

#include <cmath>
#include <limits>

#include "core/measure/candidate_costs.h"

namespace collage {

KernelTableModel::KernelTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void KernelTableModel::setPlan(const Graph& graph, const Plan& plan, const QVector<bool>& fromCache) {
  // Resolve before the reset: a plan that does not match throws with the
  // model untouched.
  std::vector<NodeSet> groups = resolvePlanGroups(plan, graph);
  beginResetModel();
  mode_ = Mode::PlanGroups;
  rows_.clear();
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
    row.pattern = QString::fromStdString(pg.pattern);
    groups[g].forEach([&](NodeId n) { row.nodes.push_back(n); });
    rows_.push_back(std::move(row));
  }
  endResetModel();
}

void KernelTableModel::setCandidates(const Graph& graph, const OptimizationResult& result) {
  QVector<int> groupOf(static_cast<int>(result.candidates.size()), -1);
  if (result.hasPlan)
    for (size_t g = 0; g < result.chosen.size(); ++g) {
      const int32_t c = result.chosen[g];
      if (c >= 0 && c < groupOf.size()) groupOf[c] = static_cast<int>(g);
    }
  beginResetModel();
  mode_ = Mode::AllCandidates;
  rows_.clear();
  rows_.reserve(static_cast<int>(result.candidates.size()));
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const Candidate& cand = result.candidates[i];
    KernelRow row;
    row.candidate = static_cast<int>(i);
    row.group = groupOf[static_cast<int>(i)];
    row.chosen = row.group >= 0;
    row.ops = QString::fromStdString(opsLabel(graph, cand.nodes));
    row.backend = QString::fromStdString(cand.backend);
    row.pattern = QString::fromStdString(cand.origin);
    if (i < result.measurements.size()) {
      const Measurement& m = result.measurements[i];
      row.cached = m.fromCache;
      if (m.status == MeasurementStatus::Ok) {
        row.medianNs = m.medianNs;
        row.spread = m.spread;
        row.samples = m.samples;
      } else {
        row.medianNs = kInvalidCost;
        // `measured` says which candidates were skipped: excluded by a pin
        // or forbid, or not reached before a cancel.
        const bool skipped = i < result.measured.size() && !result.measured[i];
        const bool excluded = i < result.allowed.size() && !result.allowed[i];
        row.status = excluded  ? QStringLiteral("excluded")
                     : skipped ? QStringLiteral("not measured")
                               : QString::fromStdString(std::string(measurementStatusName(m.status)))
                                     .replace('_', ' ');
      }
    } else {
      row.medianNs = kUnknownCost;
      row.status = QStringLiteral("not measured");
    }
    cand.nodes.forEach([&](NodeId n) { row.nodes.push_back(n); });
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
      case Median:
        if (std::isnan(r.medianNs)) return -1.0;
        if (std::isinf(r.medianNs)) return std::numeric_limits<double>::max();
        return r.medianNs;
      case Spread: return r.spread;
      case Samples: return r.samples;
      case Chosen: return r.chosen ? 1 : 0;
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
  if (role == Qt::ToolTipRole) {
    QString tip = tr("%1 on %2 (%3)").arg(r.ops, r.backend, r.pattern);
    if (!r.status.isEmpty()) tip += tr(": %1").arg(r.status);
    return tip;
  }
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Group:
      if (r.group < 0) return QString();
      return r.group;
    case Ops: return r.ops;
    case Backend: return r.backend;
    case Median:
      if (!r.status.isEmpty()) return r.status;
      if (std::isnan(r.medianNs)) return QStringLiteral("unknown");
      if (std::isinf(r.medianNs)) return QStringLiteral("cannot run");
      return QString::number(r.medianNs / 1000.0, 'f', 2) + QStringLiteral(" us");
    case Spread: return QString::number(100 * r.spread, 'f', 1) + QStringLiteral(" %");
    case Samples: return r.samples;
    case Source:
      if (r.status == QLatin1String("not measured") || r.status == QLatin1String("excluded"))
        return QString();
      return r.cached ? QStringLiteral("cached") : QStringLiteral("fresh");
    case Chosen: return r.chosen ? tr("chosen") : QString();
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
    case Chosen: return tr("Chosen");
    default: return {};
  }
}

}  // namespace collage
