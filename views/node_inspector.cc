#include "views/node_inspector.h"

#include <QTextBrowser>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "core/search/choice_explanation.h"
#include "core/ir/error.h"
#include "core/ops/model_stats.h"
#include "core/ops/op_registry.h"
#include "views/cost_bar_chart.h"

namespace collage {
namespace {

QString esc(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

QString valueRow(const Graph& graph, ValueId v) {
  if (v < 0) return QStringLiteral("<tr><td colspan=2><i>absent</i></td></tr>");
  const Value& value = graph.value(v);
  return QStringLiteral("<tr><td>%1</td><td>%2</td></tr>")
      .arg(esc(value.name), esc(value.type.toString()));
}

QString costHtml(Cost c) {
  if (std::isnan(c)) return QStringLiteral("unknown");
  if (std::isinf(c)) return QStringLiteral("cannot run");
  return esc(costToString(c));
}

// Where a choice came from, in words an engineer reads at a glance.
QString originText(PlanOrigin origin) {
  switch (origin) {
    case PlanOrigin::OpLevel: return QStringLiteral("op-level optimizer");
    case PlanOrigin::GraphLevel: return QStringLiteral("graph-level search");
    case PlanOrigin::User: return QStringLiteral("pinned by the user");
  }
  return QString();
}

// Op, attributes, shapes and FLOPs of one node.
QString nodeDetailsHtml(const Graph& graph, NodeId node) {
  const Node& n = graph.node(node);
  QString html = QStringLiteral("<h3>%1</h3><p><b>%2</b> (node %3)</p>")
                     .arg(esc(n.op), esc(n.name))
                     .arg(node);
  html += QStringLiteral("<p><b>Attributes</b><br>%1</p>")
              .arg(n.attrs.size() == 0 ? QStringLiteral("none") : esc(n.attrs.toString()));
  html += QStringLiteral("<p><b>Inputs</b></p><table>");
  for (ValueId v : n.inputs) html += valueRow(graph, v);
  html += QStringLiteral("</table><p><b>Outputs</b></p><table>");
  for (ValueId v : n.outputs) html += valueRow(graph, v);
  html += QStringLiteral("</table>");
  try {
    html += QStringLiteral("<p><b>FLOPs</b> %1</p>").arg(esc(formatFlops(flopsOf(graph, node))));
  } catch (const std::exception&) {
    // An op without a FLOP formula: say nothing rather than something wrong.
  }
  return html;
}

// A list of the selected nodes, with their total FLOPs.
QString selectionDetailsHtml(const Graph& graph, const QVector<NodeId>& nodes) {
  QString html = QStringLiteral("<h3>%1 nodes</h3><p>").arg(nodes.size());
  double flops = 0;
  bool allFlops = true;
  for (int i = 0; i < nodes.size(); ++i) {
    const Node& n = graph.node(nodes[i]);
    if (i < 12)
      html += QStringLiteral("%1%2 <i>%3</i>")
                  .arg(i ? QStringLiteral("<br>") : QString(), esc(n.name), esc(n.op));
    try {
      flops += flopsOf(graph, nodes[i]);
    } catch (const std::exception&) {
      allFlops = false;
    }
  }
  if (nodes.size() > 12) html += QStringLiteral("<br>... %1 more").arg(nodes.size() - 12);
  html += QStringLiteral("</p>");
  html += QStringLiteral("<p><b>FLOPs</b> %1%2</p>")
              .arg(esc(formatFlops(flops)), allFlops ? QString() : QStringLiteral(" (at least)"));
  return html;
}

QString placementHtml(const Graph& graph, const NodeSet& set, const Plan& plan,
                      const OptimizationResult* result) {
  ChoiceExplanation e;
  try {
    e = explainChoice(graph, plan, result, set);
  } catch (const std::exception& ex) {
    return QStringLiteral("<p><b>Placement</b> unavailable: %1</p>").arg(esc(ex.what()));
  }
  QString html = QStringLiteral("<h4>Placement</h4>");
  for (size_t g : e.groups) {
    const PlanGroup& pg = plan.groups[g];
    html += QStringLiteral("<p><b>Backend</b> %1<br><b>Group</b> %2 (%3)<br>"
                           "<b>Pattern</b> %4<br><b>Origin</b> %5 (%6)<br><b>Group cost</b> %7 "
                           "(spread %8 %, %9 samples)</p>")
                .arg(esc(pg.backend))
                .arg(g)
                .arg(pg.nodes.size() == 1 ? QStringLiteral("1 node")
                                          : QStringLiteral("%1 nodes").arg(pg.nodes.size()))
                .arg(esc(pg.pattern), esc(std::string(planOriginName(pg.origin))),
                     originText(pg.origin), costHtml(pg.costNs))
                .arg(100 * pg.spread, 0, 'f', 1)
                .arg(pg.samples);
  }
  if (!e.why.empty()) html += QStringLiteral("<p><b>Why</b> %1</p>").arg(esc(e.why));
  if (e.choices.empty()) return html;

  html += QStringLiteral("<p><b>Cost of exactly %1 on each backend</b></p><table>")
              .arg(set.count() == 1 ? QStringLiteral("this node")
                                    : QStringLiteral("these %1 nodes").arg(set.count()));
  const QString chosen = e.exactGroup ? QString::fromStdString(e.backend) : QString();
  for (const auto& c : e.choices) {
    QString name = esc(c.backend);
    if (QString::fromStdString(c.backend) == chosen) name = QStringLiteral("<b>%1</b> (chosen)").arg(name);
    QString cost = !c.runnable   ? QStringLiteral("cannot run")
                   : !c.measured ? QStringLiteral("not measured yet")
                                 : QStringLiteral("%1 &plusmn; %2 %")
                                       .arg(costHtml(c.medianNs))
                                       .arg(100 * c.spread, 0, 'f', 1);
    html += QStringLiteral("<tr><td>%1</td><td>%2</td><td><i>%3</i></td></tr>")
                .arg(name, cost, esc(c.runnable ? c.pattern : std::string()));
  }
  html += QStringLiteral("</table>");
  QString cannot;
  for (const auto& c : e.choices)
    if (!c.runnable) {
      // Most reasons start with the backend's name: bold it rather than repeat it.
      const std::string prefix = c.backend + " ";
      cannot += c.reason.rfind(prefix, 0) == 0
                    ? QStringLiteral("<li><b>%1</b> %2</li>")
                          .arg(esc(c.backend), esc(c.reason.substr(prefix.size())))
                    : QStringLiteral("<li><b>%1</b>: %2</li>").arg(esc(c.backend), esc(c.reason));
    }
  if (!cannot.isEmpty()) html += QStringLiteral("<p><b>Cannot run it</b></p><ul>%1</ul>").arg(cannot);
  return html;
}

NodeSet toNodeSet(const Graph& graph, const QVector<NodeId>& nodes) {
  NodeSet set(graph.numNodes());
  for (NodeId n : nodes)
    if (n >= 0 && n < graph.numNodes()) set.insert(n);
  return set;
}

}  // namespace

QString describeNodeHtml(const Graph& graph, NodeId node, const Plan* plan,
                         const OptimizationResult* result) {
  return describeSelectionHtml(graph, QVector<NodeId>{node}, plan, result);
}

QString describeSelectionHtml(const Graph& graph, const QVector<NodeId>& nodes, const Plan* plan,
                              const OptimizationResult* result) {
  NodeSet set = toNodeSet(graph, nodes);
  if (set.empty()) return QStringLiteral("<p>Select a node to inspect it.</p>");
  QVector<NodeId> sorted;
  set.forEach([&](NodeId n) { sorted.push_back(n); });
  QString html = sorted.size() == 1 ? nodeDetailsHtml(graph, sorted.front())
                                    : selectionDetailsHtml(graph, sorted);
  if (plan) html += placementHtml(graph, set, *plan, result);
  return html;
}

InspectorPanel::InspectorPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  browser_ = new QTextBrowser(this);
  chart_ = new CostBarChart(this);
  chart_->setVisible(false);
  layout->addWidget(browser_, 1);
  layout->addWidget(chart_);
}

void InspectorPanel::clear() {
  browser_->clear();
  chart_->setCosts({});
  chart_->setVisible(false);
}

void InspectorPanel::showSelection(const Graph* graph, const QVector<NodeId>& nodes,
                                   const Plan* plan, const OptimizationResult* result) {
  if (!graph) {
    clear();
    return;
  }
  QString html = describeSelectionHtml(*graph, nodes, plan, result);
  QStringList rewrites;
  for (NodeId n : nodes)
    if (n >= 0 && n < graph->numNodes())
      if (auto it = rewrittenBy_.find(QString::fromStdString(graph->node(n).name)); it != rewrittenBy_.end())
        rewrites << tr("<b>%1</b> was made by the graph substitution %2")
                        .arg(QString::fromStdString(graph->node(n).name).toHtmlEscaped(), it->toHtmlEscaped());
  if (!rewrites.isEmpty()) html += QStringLiteral("<p>") + rewrites.join(QStringLiteral("<br>")) + QStringLiteral("</p>");
  browser_->setHtml(html);
  QVector<BackendCost> costs;
  NodeSet set = toNodeSet(*graph, nodes);
  if (plan && result && !set.empty()) {
    try {
      ChoiceExplanation e = explainChoice(*graph, *plan, result, set);
      costs = backendCosts(e.choices, e.exactGroup ? QString::fromStdString(e.backend) : QString());
    } catch (const std::exception&) {
      // The HTML already says why there is nothing to compare.
    }
  }
  chart_->setCosts(costs);
  chart_->setVisible(!costs.isEmpty());
}

}  // namespace collage
