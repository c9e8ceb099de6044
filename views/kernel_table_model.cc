#include "views/kernel_table_model.h"

#include <cmath>
#include <limits>

#include "core/measure/candidate_costs.h"

namespace collage {

KernelTableModel::KernelTableModel(QObject* parent) : QAbstractTableModel(parent) {}

namespace {

KernelRow::Provenance provenanceOf(const Measurement& m) {
  return m.fromCache ? KernelRow::Provenance::Cached : KernelRow::Provenance::Fresh;
}

// A row for a plan group from the group itself (its recorded cost).
KernelRow groupRow(const Graph& graph, const PlanGroup& pg, int group, const NodeSet& nodes) {
  KernelRow row;
  row.group = group;
  row.ops = QString::fromStdString(opsLabel(graph, nodes));
  row.backend = QString::fromStdString(pg.backend);
  row.medianNs = pg.costNs;
  row.spread = pg.spread;
  row.samples = pg.samples;
  row.pattern = QString::fromStdString(pg.pattern);
  row.provenance = pg.origin == PlanOrigin::GraphLevel || pg.pattern == "region"
                       ? KernelRow::Provenance::Region
                       : KernelRow::Provenance::Unknown;
  nodes.forEach([&](NodeId n) { row.nodes.push_back(n); });
  return row;
}

}  // namespace

void KernelTableModel::setPlan(const Graph& graph, const Plan& plan, const OptimizationResult* result) {
  // Resolve before the reset: a plan that does not match throws with the
  // model untouched.
  std::vector<NodeSet> groups = resolvePlanGroups(plan, graph);
  beginResetModel();
  mode_ = Mode::PlanGroups;
  rows_.clear();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    KernelRow row = groupRow(graph, plan.groups[g], static_cast<int>(g), groups[g]);
    if (result)
      if (auto c = groupCandidate(*result, graph, plan.groups[g]);
          c && static_cast<size_t>(*c) < result->measurements.size()) {
        const Measurement& m = result->measurements[static_cast<size_t>(*c)];
        row.provenance = provenanceOf(m);
        row.shared = m.fromShared;
        row.machines = m.machines;
      }
    rows_.push_back(std::move(row));
  }
  endResetModel();
}

void KernelTableModel::setCandidates(const Graph& graph, const OptimizationResult& result,
                                     const Plan* shown) {
  // The shown plan's groups: the candidate each runs as, or a row of its own.
  QVector<int> groupOf(static_cast<int>(result.candidates.size()), -1);
  std::vector<KernelRow> extraRows;
  if (shown) {
    const std::vector<NodeSet> groups = resolvePlanGroups(*shown, graph);
    for (size_t g = 0; g < shown->groups.size(); ++g) {
      if (auto c = groupCandidate(result, graph, shown->groups[g])) {
        groupOf[*c] = static_cast<int>(g);
        continue;
      }
      KernelRow row = groupRow(graph, shown->groups[g], static_cast<int>(g), groups[g]);
      row.chosen = true;
      extraRows.push_back(std::move(row));
    }
  }
  beginResetModel();
  mode_ = Mode::AllCandidates;
  rows_.clear();
  rows_.reserve(static_cast<int>(result.candidates.size() + extraRows.size()));
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
      row.provenance = provenanceOf(m);
      row.shared = m.fromShared;
      row.machines = m.machines;
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
        // A skipped reference kernel says why: its estimate, and what the
        // faster candidates for its nodes take.
        if (m.status == MeasurementStatus::Skipped && !excluded)
          row.reason = QString::fromStdString(m.message);
      }
    } else {
      row.medianNs = kUnknownCost;
      row.status = QStringLiteral("not measured");
    }
    cand.nodes.forEach([&](NodeId n) { row.nodes.push_back(n); });
    rows_.push_back(std::move(row));
  }
  for (KernelRow& row : extraRows) rows_.push_back(std::move(row));
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
    if (!r.reason.isEmpty()) tip += tr(" (%1)").arg(r.reason);
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
      // Nothing was measured for these: no source to name.
      if (r.status == QLatin1String("not measured") || r.status == QLatin1String("excluded") ||
          r.status == QLatin1String("skipped"))
        return QString();
      switch (r.provenance) {
        case KernelRow::Provenance::Cached:
          if (!r.shared) return QStringLiteral("cached");
          return r.machines > 0 ? tr("shared store, %n machine(s)", nullptr, r.machines)
                                : tr("shared store (copy in the local file)");
        case KernelRow::Provenance::Fresh: return QStringLiteral("fresh");
        case KernelRow::Provenance::Region: return tr("region, measured alone");
        case KernelRow::Provenance::Unknown: return QString();
      }
      return {};
    case Chosen: return r.chosen ? tr("chosen") : QString();
    default: return {};
  }
}

QVariant KernelTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation == Qt::Horizontal && role == Qt::ToolTipRole) {
    switch (section) {
      case Median: return tr("The kernel's median time, measured alone (a region: the whole region as one kernel)");
      case Source: return tr("Where the median comes from: this machine's database (cached), a team's "
                             "shared store (the median of the machines' medians), this run (fresh), or the "
                             "graph-level search (a region)");
      case Chosen: return tr("A group of the plan shown (a graph-level region has a row of its own)");
      default: return {};
    }
  }
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
