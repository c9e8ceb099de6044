#include "views/graph_scene.h"

#include <algorithm>

#include <QBrush>
#include <QFont>
#include <QGraphicsItemGroup>
#include <QGraphicsPathItem>
#include <QGraphicsRectItem>
#include <QGraphicsSimpleTextItem>
#include <QPainterPath>
#include <QPen>
#include <QStringList>

namespace collage {
namespace {

const QColor kDefaultFill(0xf4, 0xf4, 0xf4);

QString shortName(const std::string& name) {
  QString s = QString::fromStdString(name);
  int slash = s.lastIndexOf('/');
  if (slash >= 0 && slash + 1 < s.size()) s = s.mid(slash + 1);
  if (s.size() > 20) s = s.left(9) + QChar(0x2026) + s.right(9);
  return s;
}

QString shapeText(const Graph& graph, ValueId v) {
  const Value& value = graph.value(v);
  QStringList dims;
  for (int64_t d : value.type.shape) dims << QString::number(d);
  return QString::fromStdString(value.name) + ": [" + dims.join(QStringLiteral(", ")) + "]";
}

// Black or white text, whichever reads better on `fill`.
QColor textOn(const QColor& fill) { return fill.lightnessF() < 0.5 ? Qt::white : Qt::black; }

}  // namespace

GraphScene::GraphScene(QObject* parent) : QGraphicsScene(parent) {}

void GraphScene::setGraph(std::shared_ptr<const Graph> graph, const GraphLayout& layout) {
  clear();
  nodeItems_.clear();
  edgeCount_ = 0;
  graph_ = std::move(graph);
  if (!graph_) return;

  QPen edgePen(QColor(0x70, 0x70, 0x70), 1.2);
  for (const EdgePath& e : layout.edges) {
    if (e.points.size() < 2) continue;
    QPainterPath path(QPointF(e.points[0].x, e.points[0].y));
    size_t i = 1;
    for (; i + 2 < e.points.size(); i += 3)
      path.cubicTo(QPointF(e.points[i].x, e.points[i].y), QPointF(e.points[i + 1].x, e.points[i + 1].y),
                   QPointF(e.points[i + 2].x, e.points[i + 2].y));
    for (; i < e.points.size(); ++i) path.lineTo(QPointF(e.points[i].x, e.points[i].y));
    auto* item = addPath(path, edgePen);
    item->setToolTip(shapeText(*graph_, e.value));
    item->setZValue(0);
    ++edgeCount_;
  }

  QFont opFont;
  opFont.setBold(true);
  opFont.setPointSizeF(9);
  QFont nameFont;
  nameFont.setPointSizeF(7.5);
  for (NodeId n = 0; n < graph_->numNodes(); ++n) {
    const Node& node = graph_->node(n);
    const NodeBox& box = layout.nodes.at(static_cast<size_t>(n));
    auto* rect = addRect(QRectF(box.cx - box.width / 2, box.cy - box.height / 2, box.width, box.height),
                         QPen(QColor(0x40, 0x40, 0x40), 1), QBrush(kDefaultFill));
    rect->setFlag(QGraphicsItem::ItemIsSelectable);
    rect->setData(kNodeIdRole, n);
    rect->setZValue(1);
    rect->setToolTip(QString::fromStdString(node.op + " " + node.name));
    auto* op = new QGraphicsSimpleTextItem(QString::fromStdString(node.op), rect);
    op->setFont(opFont);
    QRectF ob = op->boundingRect();
    op->setPos(box.cx - ob.width() / 2, box.cy - box.height / 2 + 3);
    auto* name = new QGraphicsSimpleTextItem(shortName(node.name), rect);
    name->setFont(nameFont);
    QRectF nb = name->boundingRect();
    name->setPos(box.cx - nb.width() / 2, box.cy + box.height / 2 - nb.height() - 3);
    nodeItems_.push_back(rect);
  }
  setSceneRect(itemsBoundingRect().adjusted(-20, -20, 20, 20));
}

void GraphScene::setNodeColors(const QVector<QColor>& colors, const QMap<QString, QColor>& legend) {
  for (int n = 0; n < nodeItems_.size(); ++n) {
    QColor fill = n < colors.size() && colors[n].isValid() ? colors[n] : kDefaultFill;
    auto* rect = nodeItems_[n];
    rect->setBrush(fill);
    for (QGraphicsItem* child : rect->childItems())
      if (auto* text = dynamic_cast<QGraphicsSimpleTextItem*>(child)) text->setBrush(textOn(fill));
  }
  rebuildLegend(legend);
}

void GraphScene::clearNodeColors() { setNodeColors({}, {}); }

QColor GraphScene::nodeColor(NodeId n) const {
  if (n < 0 || n >= nodeItems_.size()) return {};
  return nodeItems_[n]->brush().color();
}

void GraphScene::rebuildLegend(const QMap<QString, QColor>& legend) {
  for (QGraphicsItem* item : items())
    if (item->data(1).toBool()) {
      removeItem(item);
      delete item;
    }
  if (legend.isEmpty()) return;
  QRectF bounds = sceneRect();
  double x = bounds.left() + 10, y = bounds.top() + 10;
  for (auto it = legend.begin(); it != legend.end(); ++it) {
    auto* swatch = addRect(QRectF(x, y, 14, 14), QPen(Qt::black), QBrush(it.value()));
    swatch->setData(1, true);
    swatch->setZValue(3);
    auto* label = addSimpleText(it.key());
    label->setPos(x + 20, y - 1);
    label->setData(1, true);
    label->setZValue(3);
    y += 20;
  }
}

void GraphScene::selectNodes(const QVector<NodeId>& nodes) {
  clearSelection();
  for (NodeId n : nodes)
    if (n >= 0 && n < nodeItems_.size()) nodeItems_[n]->setSelected(true);
}

QVector<NodeId> GraphScene::selectedNodes() const {
  QVector<NodeId> out;
  for (QGraphicsItem* item : selectedItems()) {
    QVariant v = item->data(kNodeIdRole);
    if (v.isValid()) out.push_back(v.toInt());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace collage
