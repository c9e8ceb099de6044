#include "views/plan_diff_model.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>

namespace collage {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

QString formatMs(double ns) {
  if (std::isnan(ns)) return QObject::tr("unknown");
  if (std::isinf(ns)) return QObject::tr("cannot run");
  return QString::number(ns / 1e6, 'f', 3);
}

QString nodesText(const PlanGroup& group) {
  QString text = QObject::tr("%n node(s)", nullptr, static_cast<int>(group.nodes.size()));
  if (group.nodes.empty()) return text;
  text += QStringLiteral(" (") + QString::fromStdString(group.nodes.front());
  if (group.nodes.size() > 1)
    text += QStringLiteral(" .. ") + QString::fromStdString(group.nodes.back());
  return text + QLatin1Char(')');
}

}  // namespace

PlanDiffModel::PlanDiffModel(QObject* parent) : QAbstractTableModel(parent) {}

void PlanDiffModel::setPlans(const Graph& graph, const Plan& base, const Plan& plan) {
  beginResetModel();
  rows_.clear();
  std::map<std::string, size_t> baseGroupOf;  // node name -> base group
  for (size_t g = 0; g < base.groups.size(); ++g)
    for (const std::string& n : base.groups[g].nodes) baseGroupOf[n] = g;
  // A group that is in both plans (same nodes, same backend) did not change.
  std::set<std::pair<std::set<std::string>, std::string>> unchanged;
  for (const PlanGroup& g : base.groups)
    unchanged.insert({std::set<std::string>(g.nodes.begin(), g.nodes.end()), g.backend});

  for (const PlanGroup& group : plan.groups) {
    const std::set<std::string> nodes(group.nodes.begin(), group.nodes.end());
    if (unchanged.count({nodes, group.backend})) continue;
    std::set<size_t> touched;
    for (const std::string& n : group.nodes)
      if (auto it = baseGroupOf.find(n); it != baseGroupOf.end()) touched.insert(it->second);
    bool wholeGroups = true;  // every base group it touches lies inside it
    std::map<std::string, int> backends;
    double beforeNs = 0;
    for (size_t b : touched) {
      const PlanGroup& old = base.groups[b];
      for (const std::string& n : old.nodes) wholeGroups = wholeGroups && nodes.count(n);
      ++backends[old.backend];
      beforeNs += old.costNs;  // NaN (unknown) stays NaN
    }
    PlanDiffRow row;
    row.baseGroups = static_cast<int>(touched.size());
    row.region = group.origin == PlanOrigin::GraphLevel;
    if (touched.size() == 1 && wholeGroups)
      row.kind = PlanDiffRow::Kind::BackendChanged;
    else if (touched.size() == 1)
      row.kind = PlanDiffRow::Kind::Split;
    else if (wholeGroups)
      row.kind = PlanDiffRow::Kind::Merged;
    else
      row.kind = PlanDiffRow::Kind::Regrouped;
    row.nodes = nodesText(group);
    for (const auto& [backend, count] : backends)
      row.before += (row.before.isEmpty() ? QString() : QStringLiteral(", ")) +
                    QString::fromStdString(backend) + QLatin1Char(' ') + QString::number(count);
    row.after = QString::fromStdString(group.backend);
    // Only whole groups have a cost to compare: a piece of one does not.
    row.beforeNs = wholeGroups && !touched.empty() ? beforeNs : kUnknown;
    row.afterNs = group.costNs;
    for (const std::string& n : group.nodes)
      if (auto id = graph.findNode(n)) row.nodeIds.push_back(*id);
    rows_.push_back(std::move(row));
  }
  endResetModel();
}

void PlanDiffModel::clear() {
  beginResetModel();
  rows_.clear();
  endResetModel();
}

QString PlanDiffModel::kindName(const PlanDiffRow& row) {
  QString text;
  switch (row.kind) {
    case PlanDiffRow::Kind::Merged:
      text = tr("merged %1 groups").arg(row.baseGroups);
      break;
    case PlanDiffRow::Kind::Split:
      text = tr("split from a group");
      break;
    case PlanDiffRow::Kind::BackendChanged:
      text = tr("backend changed");
      break;
    case PlanDiffRow::Kind::Regrouped:
      text = tr("regrouped from %1 groups").arg(row.baseGroups);
      break;
  }
  return row.region ? text + tr(" (region)") : text;
}

int PlanDiffModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : rows_.size();
}

int PlanDiffModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant PlanDiffModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rows_.size()) return {};
  const PlanDiffRow& r = rows_[index.row()];
  // Unknown costs sort after every known one.
  auto sortable = [](double ns) {
    return std::isfinite(ns) ? ns : std::numeric_limits<double>::max();
  };
  if (role == kSortRole) {
    switch (index.column()) {
      case Nodes: return r.nodeIds.size();
      case BeforeMs: return sortable(r.beforeNs);
      case AfterMs: return sortable(r.afterNs);
      default: return data(index, Qt::DisplayRole);
    }
  }
  if (role == Qt::TextAlignmentRole && (index.column() == BeforeMs || index.column() == AfterMs))
    return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Change: return kindName(r);
    case Nodes: return r.nodes;
    case Before: return r.before;
    case After: return r.after;
    case BeforeMs: return formatMs(r.beforeNs);
    case AfterMs: return formatMs(r.afterNs);
    default: return {};
  }
}

QVariant PlanDiffModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Change: return tr("Change");
    case Nodes: return tr("Nodes");
    case Before: return tr("Before (groups per backend)");
    case After: return tr("After");
    case BeforeMs: return tr("Before (ms, kernels alone)");
    case AfterMs: return tr("After (ms, kernel alone)");
    default: return {};
  }
}

QString describeGraphLevelGain(const GraphLevelResult& r) {
  const QString effort = QObject::tr("%1 generations, %2 plans run")
                             .arg(r.evolution.generations)
                             .arg(r.evolution.evaluations);
  const QString verdict = QString::fromStdString(r.verdict);
  if (r.improved && r.baseMs > 0 && r.bestMs > 0)
    return QObject::tr("Graph-level plan: %1 -> %2 ms measured whole (%3x faster, paired); %4")
        .arg(r.baseMs, 0, 'f', 3)
        .arg(r.bestMs, 0, 'f', 3)
        .arg(r.gain, 0, 'f', 2)
        .arg(effort);
  if (r.improved)  // cancelled: the best kept without its final check
    return QObject::tr("Graph-level plan, not timed again: %1; %2").arg(verdict, effort);
  return QObject::tr("The op-level plan was kept: %1; %2").arg(verdict, effort);
}

}  // namespace collage
