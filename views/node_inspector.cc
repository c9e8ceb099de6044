#include "views/node_inspector.h"

#include <cmath>

#include "core/model_stats.h"
#include "core/op_registry.h"

namespace collage {
namespace {

QString esc(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

QString valueRow(const Graph& graph, ValueId v) {
  if (v < 0) return QStringLiteral("<tr><td colspan=2><i>absent</i></td></tr>");
  const Value& value = graph.value(v);
  return QStringLiteral("<tr><td>%1</td><td>%2</td></tr>")
      .arg(esc(value.name), esc(value.type.toString()));
}

}  // namespace

QString describeNodeHtml(const Graph& graph, NodeId node, const Plan* plan) {
  const Node& n = graph.node(node);
  QString html = QStringLiteral("<h3>%1</h3><p><b>%2</b> (node %3)</p>")
                     .arg(esc(n.op), esc(n.name)).arg(node);
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
  if (plan) {
    for (size_t g = 0; g < plan->groups.size(); ++g) {
      const PlanGroup& pg = plan->groups[g];
      bool inGroup = false;
      for (const auto& name : pg.nodes) inGroup = inGroup || name == n.name;
      if (!inGroup) continue;
      QString cost = std::isnan(pg.costNs)   ? QStringLiteral("unknown")
                     : std::isinf(pg.costNs) ? QStringLiteral("cannot run")
                                             : QString::number(pg.costNs / 1000, 'f', 2) + " us";
      html += QStringLiteral("<p><b>Backend</b> %1<br><b>Group</b> %2 (%3 nodes)<br>"
                             "<b>Pattern</b> %4<br><b>Origin</b> %5<br><b>Group cost</b> %6 "
                             "(spread %7 %, %8 samples)</p>")
                  .arg(esc(pg.backend))
                  .arg(g)
                  .arg(pg.nodes.size())
                  .arg(esc(pg.pattern), esc(std::string(planOriginName(pg.origin))), cost)
                  .arg(100 * pg.spread, 0, 'f', 1)
                  .arg(pg.samples);
    }
  }
  return html;
}

}  // namespace collage
