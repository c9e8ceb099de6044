#include "views/plan_diff_model.h"

#include <algorithm>
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

QString nodesText(const Graph& graph, const QVector<NodeId>& ids) {
  QString text = QObject::tr("%n node(s)", nullptr, ids.size());
  if (ids.isEmpty()) return text;
  text += QStringLiteral(" (") + QString::fromStdString(graph.node(ids.front()).name);
  if (ids.size() > 1)
    text += QStringLiteral(" .. ") + QString::fromStdString(graph.node(ids.back()).name);
  return text + QLatin1Char(')');
}

// "native 1, onednn 2", "onednn region": what a set of groups runs on.
QString backendsText(const std::vector<const PlanGroup*>& groups) {
  std::map<std::string, int> count;
  for (const PlanGroup* g : groups)
    ++count[g->origin == PlanOrigin::GraphLevel ? g->backend + " region" : g->backend];
  QString text;
  for (const auto& [label, n] : count) {
    if (!text.isEmpty()) text += QStringLiteral(", ");
    text += QString::fromStdString(label);
    if (groups.size() > 1 || n > 1) text += QLatin1Char(' ') + QString::number(n);
  }
  return text;
}

double sumOfCosts(const std::vector<const PlanGroup*>& groups) {
  double ns = 0;
  for (const PlanGroup* g : groups) ns += g->costNs;  // NaN (unknown) stays NaN
  return ns;
}

}  // namespace

PlanDiffModel::PlanDiffModel(QObject* parent) : QAbstractTableModel(parent) {}

void PlanDiffModel::setPlans(const Graph& graph, const Plan& base, const Plan& plan) {
  beginResetModel();
  rows_.clear();
  totals_ = PlanDiffTotals{};
  std::map<std::string, size_t> baseGroupOf, planGroupOf;  // node name -> group
  for (size_t g = 0; g < base.groups.size(); ++g)
    for (const std::string& n : base.groups[g].nodes) baseGroupOf[n] = g;
  for (size_t g = 0; g < plan.groups.size(); ++g)
    for (const std::string& n : plan.groups[g].nodes) planGroupOf[n] = g;

  // A change is a connected set of groups of both plans, linked by shared
  // nodes: the smallest unit both cover with whole groups, so its before and
  // after are times of the same nodes.
  std::vector<bool> baseSeen(base.groups.size()), planSeen(plan.groups.size());
  for (size_t start = 0; start < plan.groups.size(); ++start) {
    if (planSeen[start]) continue;
    std::vector<const PlanGroup*> before, after;
    std::vector<size_t> planQueue{start}, baseQueue;
    planSeen[start] = true;
    while (!planQueue.empty() || !baseQueue.empty()) {
      if (!planQueue.empty()) {
        const PlanGroup& g = plan.groups[planQueue.back()];
        planQueue.pop_back();
        after.push_back(&g);
        for (const std::string& n : g.nodes)
          if (auto it = baseGroupOf.find(n); it != baseGroupOf.end() && !baseSeen[it->second]) {
            baseSeen[it->second] = true;
            baseQueue.push_back(it->second);
          }
      } else {
        const PlanGroup& g = base.groups[baseQueue.back()];
        baseQueue.pop_back();
        before.push_back(&g);
        for (const std::string& n : g.nodes)
          if (auto it = planGroupOf.find(n); it != planGroupOf.end() && !planSeen[it->second]) {
            planSeen[it->second] = true;
            planQueue.push_back(it->second);
          }
      }
    }
    // In both plans: the same nodes, on the same backend, as one group.
    if (before.size() == 1 && after.size() == 1 && before[0]->backend == after[0]->backend) {
      ++totals_.unchangedGroups;
      totals_.unchangedNs += after[0]->costNs;
      continue;
    }
    PlanDiffRow row;
    row.baseGroups = static_cast<int>(before.size());
    row.planGroups = static_cast<int>(after.size());
    for (const PlanGroup* g : after) row.region = row.region || g->origin == PlanOrigin::GraphLevel;
    if (before.size() == 1 && after.size() == 1)
      row.kind = PlanDiffRow::Kind::BackendChanged;
    else if (after.size() == 1)
      row.kind = PlanDiffRow::Kind::Merged;
    else if (before.size() == 1)
      row.kind = PlanDiffRow::Kind::Split;
    else
      row.kind = PlanDiffRow::Kind::Regrouped;
    for (const PlanGroup* g : after)
      for (const std::string& n : g->nodes)
        if (auto id = graph.findNode(n)) row.nodeIds.push_back(*id);
    std::sort(row.nodeIds.begin(), row.nodeIds.end());
    row.nodes = nodesText(graph, row.nodeIds);
    row.before = backendsText(before);
    row.after = backendsText(after);
    row.beforeNs = before.empty() ? kUnknown : sumOfCosts(before);
    row.afterNs = sumOfCosts(after);
    totals_.beforeNs += row.beforeNs;
    totals_.afterNs += row.afterNs;
    rows_.push_back(std::move(row));
  }
  endResetModel();
}

void PlanDiffModel::addRewrites(const Graph& graph, const std::vector<PlanSubstitution>& substitutions,
                                const std::map<std::string, size_t>& rewrittenNodes) {
  if (substitutions.empty()) return;
  QVector<PlanDiffRow> rows;
  for (const PlanSubstitution& s : substitutions) {
    PlanDiffRow row;
    row.kind = PlanDiffRow::Kind::Rewritten;
    row.rule = QString::fromStdString(s.site.rule);
    row.before = QString::fromStdString(s.site.toString()).section(QStringLiteral(" at "), 1);
    row.savedNs = s.savedNs;
    row.beforeNs = row.afterNs = kUnknown;
    rows.push_back(std::move(row));
  }
  for (const auto& [name, site] : rewrittenNodes)
    if (auto id = graph.findNode(name); id && site < size_t(rows.size())) rows[int(site)].nodeIds.push_back(*id);
  for (PlanDiffRow& row : rows) {
    std::sort(row.nodeIds.begin(), row.nodeIds.end());
    row.nodes = nodesText(graph, row.nodeIds);
    row.after = tr("%n node(s) rewritten", nullptr, row.nodeIds.size());
  }
  beginInsertRows({}, 0, rows.size() - 1);
  rows_ = rows + rows_;
  endInsertRows();
}

void PlanDiffModel::clear() {
  beginResetModel();
  rows_.clear();
  totals_ = PlanDiffTotals{};
  endResetModel();
}

QString PlanDiffModel::kindName(const PlanDiffRow& row) {
  QString text;
  switch (row.kind) {
    case PlanDiffRow::Kind::Merged:
      text = tr("merged %1 groups").arg(row.baseGroups);
      break;
    case PlanDiffRow::Kind::Split:
      text = tr("split 1 group into %1").arg(row.planGroups);
      break;
    case PlanDiffRow::Kind::BackendChanged:
      if (row.region) return tr("moved into a region");
      text = tr("backend changed");
      break;
    case PlanDiffRow::Kind::Regrouped:
      text = tr("regrouped %1 groups into %2").arg(row.baseGroups).arg(row.planGroups);
      break;
    case PlanDiffRow::Kind::Rewritten:
      return tr("rewritten: %1").arg(row.rule);
  }
  return row.region ? text + tr(" (region)") : text;
}

QString PlanDiffModel::describeTotals() const {
  if (std::none_of(rows_.begin(), rows_.end(),
                   [](const PlanDiffRow& r) { return r.kind != PlanDiffRow::Kind::Rewritten; }))
    return tr("No group changed.");
  return tr("Changed groups, each kernel measured alone: %1 ms before, %2 ms after; "
            "%n unchanged group(s) %3 ms",
            nullptr, totals_.unchangedGroups)
      .arg(formatMs(totals_.beforeNs), formatMs(totals_.afterNs), formatMs(totals_.unchangedNs));
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
    case BeforeMs:
      return r.kind == PlanDiffRow::Kind::Rewritten ? QString() : formatMs(r.beforeNs);
    case AfterMs:
      if (r.kind == PlanDiffRow::Kind::Rewritten)
        return std::isnan(r.savedNs) ? QString()
                                     : tr("%1 ms saved (op-level DP)").arg(formatMs(r.savedNs));
      return formatMs(r.afterNs);
    default: return {};
  }
}

QVariant PlanDiffModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case Before: return tr("The starting plan's groups that covered these nodes, per backend");
      case After: return tr("The groups that cover them now, per backend (a region: one kernel "
                            "a graph library compiles whole)");
      case BeforeMs:
        return tr("The sum of the medians of the groups in Before, each kernel measured alone");
      case AfterMs:
        return tr("The sum of the medians of the groups in After, each kernel measured alone; a "
                  "region is measured as one kernel, so its time is that of all its nodes");
      default: return {};
    }
  }
  if (role != Qt::DisplayRole) return {};
  switch (section) {
    case Change: return tr("Change");
    case Nodes: return tr("Nodes");
    case Before: return tr("Before (groups per backend)");
    case After: return tr("After (groups per backend)");
    case BeforeMs: return tr("Before (ms, sum of kernels alone)");
    case AfterMs: return tr("After (ms, sum of kernels alone)");
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
