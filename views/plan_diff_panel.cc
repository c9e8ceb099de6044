#include "views/plan_diff_panel.h"

#include <QHeaderView>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>

#include "views/plan_diff_model.h"

namespace collage {

PlanDiffPanel::PlanDiffPanel(QWidget* parent) : QWidget(parent) {
  qRegisterMetaType<QVector<NodeId>>("QVector<collage::NodeId>");  // for queued receivers and spies
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  model_ = new PlanDiffModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(PlanDiffModel::kSortRole);
  table_ = new QTableView(this);
  table_->setObjectName("planDiffTable");
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(-1, Qt::AscendingOrder);  // the plan's order until a header is clicked
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->horizontalHeader()->setStretchLastSection(true);
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &PlanDiffPanel::onSelection);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(summary_);
  layout->addWidget(table_, 1);
  clear();
}

void PlanDiffPanel::showResult(const Graph& graph, const OptimizationResult& result,
                               const std::map<std::string, size_t>& rewrittenNodes) {
  const std::vector<PlanSubstitution>& rewrites = result.plan.substitutions;
  if (!result.hasPlan || (!result.graphLevelRan && rewrites.empty())) {
    clear();
    return;
  }
  QString text;
  if (result.graphLevelRan) {
    model_->setPlans(graph, result.startPlan, result.plan);
    // The gain measured whole, then the rows' sums: two different figures,
    // each said for what it is.
    text = describeGraphLevelGain(result.graphLevel) + QStringLiteral(".\n") + model_->describeTotals();
  } else {
    model_->clear();
  }
  model_->addRewrites(graph, rewrites, rewrittenNodes);
  if (!rewrites.empty()) {
    if (!text.isEmpty()) text += QLatin1Char('\n');
    text += tr("%n graph substitution(s) against the model as exported", nullptr, int(rewrites.size()));
    if (result.substitutionsRan)
      text += tr(": op-level DP %1 -> %2 ms")
                  .arg(result.substitutions.startCost / 1e6, 0, 'f', 3)
                  .arg(result.substitutions.bestCost / 1e6, 0, 'f', 3);
  }
  summary_->setText(text);
  table_->resizeColumnsToContents();
}

void PlanDiffPanel::clear() {
  model_->clear();
  summary_->setText(tr("No graph-level search yet: Optimize with \"Graph-level search\" checked "
                       "to see what it changes against the op-level plan."));
}

QString PlanDiffPanel::summary() const { return summary_->text(); }

void PlanDiffPanel::onSelection() {
  QVector<NodeId> nodes;
  for (const QModelIndex& index : table_->selectionModel()->selectedRows())
    nodes += model_->row(proxy_->mapToSource(index).row()).nodeIds;
  if (!nodes.isEmpty()) emit nodesActivated(nodes);
}

}  // namespace collage
