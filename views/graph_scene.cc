#include "views/graph_scene.h"

#include <QFontMetricsF>

#include <algorithm>
#include <set>

#include <QBrush>
#include <QFont>
#include <QGraphicsPathItem>
#include <QGraphicsRectItem>
#include <QGraphicsSceneMouseEvent>
#include <QGraphicsSimpleTextItem>
#include <QPainterPath>
#include <QPainterPathStroker>
#include <QPen>
#include <QStringList>

namespace collage {
namespace {

const QColor kDefaultFill(0xf4, 0xf4, 0xf4);
const QColor kGroupFill(0xe4, 0xe8, 0xee);
const QPen kNodePen(QColor(0x40, 0x40, 0x40), 1);
const QPen kHighlightPen(QColor(0xff, 0x8c, 0x00), 5);
const QPen kRewrittenPen(QColor(0x7b, 0x2f, 0xbe), 3, Qt::DashLine);

// The part of a node's name that tells it apart. PyTorch exports name nodes
// "/layer1/layer1.0/conv1/Conv": the last part repeats the op, so the one
// before it ("conv1") is shown instead.
QString shortName(const std::string& name, const std::string& op) {
  QStringList parts = QString::fromStdString(name).split('/', Qt::SkipEmptyParts);
  if (parts.size() >= 2 && parts.back().startsWith(QString::fromStdString(op))) parts.removeLast();
  QString s = parts.isEmpty() ? QString::fromStdString(name) : parts.back();
  if (s.size() > 20) s = s.left(9) + QChar(0x2026) + s.right(9);
  return s;
}

// "x.3: float32[1x64x56x56]".
QString edgeText(const Graph& graph, const EdgePath& e) {
  const Value& value = graph.value(e.value);
  QString text = QString::fromStdString(value.name) + ": " + QString::fromStdString(value.type.toString());
  if (e.tensorCount > 1)
    text += QObject::tr("\n(and %1 more tensors between these groups)").arg(e.tensorCount - 1);
  return text;
}

// Black or white text, whichever reads better on `fill`.
QColor textOn(const QColor& fill) { return fill.lightnessF() < 0.5 ? Qt::white : Qt::black; }

// An edge whose hover area is wider than its 1-point stroke, so its tooltip
// is easy to reach.
class EdgeItem : public QGraphicsPathItem {
 public:
  using QGraphicsPathItem::QGraphicsPathItem;
  QPainterPath shape() const override {
    QPainterPathStroker stroker;
    stroker.setWidth(8);
    return stroker.createStroke(path());
  }
  QRectF boundingRect() const override { return QGraphicsPathItem::boundingRect().adjusted(-4, -4, 4, 4); }
};

QRectF boxRect(const NodeBox& box) {
  return QRectF(box.cx - box.width / 2, box.cy - box.height / 2, box.width, box.height);
}

void setTextColor(QGraphicsItem* parent, const QColor& fill) {
  for (QGraphicsItem* child : parent->childItems())
    if (auto* text = dynamic_cast<QGraphicsSimpleTextItem*>(child)) text->setBrush(textOn(fill));
}

}  // namespace

GraphScene::GraphScene(QObject* parent) : QGraphicsScene(parent) {}

void GraphScene::setGraph(std::shared_ptr<const Graph> graph, const GraphLayout& layout) {
  const bool relayout = graph && graph == graph_;
  clear();
  nodeItems_.clear();
  groupOfNode_.clear();
  groupBoxes_.clear();
  groupMembers_.clear();
  frames_.clear();
  nodeItemCount_ = 0;
  edgeCount_ = 0;
  graph_ = std::move(graph);
  if (!relayout) {
    colors_.clear();
    legend_.clear();
    frameSpecs_.clear();
    highlighted_.clear();
  }
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
    auto* item = new EdgeItem(path);
    item->setPen(edgePen);
    item->setToolTip(edgeText(*graph_, e));
    item->setZValue(0);
    addItem(item);
    ++edgeCount_;
  }

  QFont opFont;
  opFont.setBold(true);
  opFont.setPointSizeF(9);
  QFont nameFont;
  nameFont.setPointSizeF(7.5);
  auto addLabel = [](QGraphicsItem* parent, const QString& text, const QFont& font, const QRectF& r,
                     bool top) {
    auto* label = new QGraphicsSimpleTextItem(text, parent);
    label->setFont(font);
    QRectF b = label->boundingRect();
    label->setPos(r.center().x() - b.width() / 2, top ? r.top() + 3 : r.bottom() - b.height() - 3);
  };

  nodeItems_.fill(nullptr, graph_->numNodes());
  groupOfNode_.fill(-1, graph_->numNodes());
  for (NodeId n = 0; n < graph_->numNodes(); ++n) {
    const NodeBox& box = layout.nodes.at(static_cast<size_t>(n));
    if (box.collapsed) continue;
    const Node& node = graph_->node(n);
    QRectF r = boxRect(box);
    auto* rect = addRect(r, kNodePen, QBrush(kDefaultFill));
    rect->setFlag(QGraphicsItem::ItemIsSelectable);
    rect->setData(kNodeIdRole, n);
    rect->setZValue(1);
    rect->setToolTip(QString::fromStdString(node.op + " " + node.name));
    addLabel(rect, QString::fromStdString(node.op), opFont, r, true);
    addLabel(rect, shortName(node.name, node.op), nameFont, r, false);
    nodeItems_[n] = rect;
    ++nodeItemCount_;
  }

  for (const GroupBox& g : layout.groups) {
    QRectF r = boxRect(g.box);
    auto* rect = addRect(r, QPen(QColor(0x30, 0x40, 0x60), 1.5, Qt::DashLine), QBrush(kGroupFill));
    rect->setFlag(QGraphicsItem::ItemIsSelectable);
    rect->setData(kGroupIdRole, g.id);
    rect->setZValue(1);
    QString name = QString::fromStdString(g.name);
    rect->setToolTip(tr("%1\n%2 nodes (double-click to expand)").arg(name).arg(g.nodes.size()));
    addLabel(rect, tr("%1 nodes").arg(g.nodes.size()), opFont, r, true);
    QString shown = name.size() > 28 ? QChar(0x2026) + name.right(27) : name;
    addLabel(rect, shown, nameFont, r, false);
    QVector<NodeId> members;
    for (NodeId n : g.nodes) {
      members.push_back(n);
      if (n >= 0 && n < groupOfNode_.size()) groupOfNode_[n] = groupBoxes_.size();
    }
    groupBoxes_.push_back(rect);
    groupMembers_.push_back(members);
  }
  setSceneRect(itemsBoundingRect().adjusted(-20, -20, 20, 20));
  applyColors();
  rebuildLegend(legend_);
  rebuildFrames();
  applyHighlight();
}

bool GraphScene::isCollapsed(NodeId n) const {
  return n >= 0 && n < groupOfNode_.size() && groupOfNode_[n] >= 0;
}

QGraphicsRectItem* GraphScene::boxOf(NodeId n) const {
  if (n < 0 || n >= nodeItems_.size()) return nullptr;
  if (nodeItems_[n]) return nodeItems_[n];
  int g = groupOfNode_[n];
  return g >= 0 ? groupBoxes_[g] : nullptr;
}

QGraphicsItem* GraphScene::itemForNode(NodeId n) const { return boxOf(n); }

QRectF GraphScene::nodeRect(NodeId n) const {
  QGraphicsRectItem* item = boxOf(n);
  return item ? item->sceneBoundingRect() : QRectF();
}

void GraphScene::setNodeColors(const QVector<QColor>& colors, const QMap<QString, QColor>& legend) {
  colors_ = colors;
  legend_ = legend;
  applyColors();
  rebuildLegend(legend_);
}

void GraphScene::applyColors() {
  auto fillOf = [&](int n) { return n < colors_.size() && colors_[n].isValid() ? colors_[n] : kDefaultFill; };
  for (int n = 0; n < nodeItems_.size(); ++n) {
    auto* rect = nodeItems_[n];
    if (!rect) continue;
    QColor fill = fillOf(n);
    rect->setBrush(fill);
    setTextColor(rect, fill);
  }
  // A collapsed group shows the color most of its nodes have.
  for (int g = 0; g < groupBoxes_.size(); ++g) {
    QMap<QRgb, int> votes;
    for (NodeId n : groupMembers_[g])
      if (n < colors_.size() && colors_[n].isValid()) ++votes[colors_[n].rgba()];
    QColor fill = kGroupFill;
    int best = 0;
    for (auto it = votes.begin(); it != votes.end(); ++it)
      if (it.value() > best) {
        best = it.value();
        fill = QColor::fromRgba(it.key());
      }
    groupBoxes_[g]->setBrush(fill);
    setTextColor(groupBoxes_[g], fill);
  }
}

void GraphScene::clearNodeColors() { setNodeColors({}, {}); }

QColor GraphScene::nodeColor(NodeId n) const {
  if (n < 0 || n >= nodeItems_.size()) return {};
  if (nodeItems_[n]) return nodeItems_[n]->brush().color();
  return n < colors_.size() && colors_[n].isValid() ? colors_[n] : kDefaultFill;
}

void GraphScene::rebuildLegend(const QMap<QString, QColor>& legend) {
  for (QGraphicsItem* item : items())
    if (item->data(kLegendRole).toBool()) {
      removeItem(item);
      delete item;
    }
  if (legend.isEmpty()) return;
  // Left of the drawing, so it never covers a node or a frame.
  QRectF bounds = itemsBoundingRect();
  double width = 0;
  for (auto it = legend.begin(); it != legend.end(); ++it)
    width = std::max(width, QFontMetricsF(font()).horizontalAdvance(it.key()) + 20);
  double x = bounds.left() - width - 30, y = bounds.top();
  for (auto it = legend.begin(); it != legend.end(); ++it) {
    auto* swatch = addRect(QRectF(x, y, 14, 14), QPen(Qt::black), QBrush(it.value()));
    swatch->setData(kLegendRole, true);
    swatch->setZValue(3);
    auto* label = addSimpleText(it.key());
    label->setPos(x + 20, y - 1);
    label->setData(kLegendRole, true);
    label->setZValue(3);
    y += 20;
  }
}

void GraphScene::setGroups(const QVector<QVector<NodeId>>& groups, const QVector<QColor>& colors) {
  QVector<GroupFrame> frames;
  for (int i = 0; i < groups.size(); ++i)
    frames.push_back({groups[i], colors.value(i), false, QString()});
  setFrames(frames);
}

void GraphScene::setFrames(const QVector<GroupFrame>& frames) {
  frameSpecs_ = frames;
  rebuildFrames();
}

int GraphScene::regionFrameCount() const {
  auto isRegion = [](const QGraphicsItem* frame) { return frame->data(kRegionRole).toBool(); };
  return static_cast<int>(std::count_if(frames_.begin(), frames_.end(), isRegion));
}

void GraphScene::rebuildFrames() {
  for (QGraphicsItem* item : frames_) {
    removeItem(item);
    delete item;
  }
  frames_.clear();
  for (const GroupFrame& spec : frameSpecs_) {
    if (spec.nodes.size() < 2) continue;
    QRectF area;
    for (NodeId n : spec.nodes) area |= nodeRect(n);
    if (area.isNull()) continue;
    const QColor color = spec.color.isValid() ? spec.color : QColor(Qt::darkGray);
    QPainterPath path;
    QGraphicsPathItem* frame = nullptr;
    if (spec.region) {
      // Wider than a fused group's frame and unfilled: a region's bounding
      // box can take in nodes of other groups laid out beside it, and they
      // keep their own colours.
      path.addRoundedRect(area.adjusted(-16, -16, 16, 16), 16, 16);
      frame = addPath(path, QPen(color, 4, Qt::DashLine), Qt::NoBrush);
      frame->setData(kRegionRole, true);
      auto* label = new QGraphicsSimpleTextItem(spec.label, frame);
      label->setBrush(color);
      QFont font = label->font();
      font.setBold(true);
      label->setFont(font);
      label->setPos(area.left() - 16, area.top() - 18 - label->boundingRect().height());
    } else {
      path.addRoundedRect(area.adjusted(-8, -8, 8, 8), 12, 12);
      QColor fill = color;
      fill.setAlpha(40);
      frame = addPath(path, QPen(color, 2.5), QBrush(fill));
    }
    frame->setZValue(0.5);
    frame->setData(kFrameRole, true);
    frames_.push_back(frame);
  }
  // A region's frame and label reach past the margin the scene rectangle
  // leaves around the nodes: grow it, or the view cannot scroll to them.
  QRectF shown = sceneRect();
  for (QGraphicsItem* frame : frames_)
    shown |= (frame->sceneBoundingRect() | frame->mapRectToScene(frame->childrenBoundingRect()))
                 .adjusted(-4, -4, 4, 4);
  setSceneRect(shown);
}

void GraphScene::setHighlightedNodes(const QVector<NodeId>& nodes) {
  highlighted_ = nodes;
  applyHighlight();
}

bool GraphScene::isHighlighted(NodeId n) const { return highlighted_.contains(n); }

void GraphScene::setRewrittenNodes(const QVector<NodeId>& nodes) {
  rewritten_ = QSet<NodeId>(nodes.begin(), nodes.end());
  applyHighlight();
}

void GraphScene::applyHighlight() {
  std::set<QGraphicsRectItem*> on;
  for (NodeId n : highlighted_)
    if (QGraphicsRectItem* item = boxOf(n)) on.insert(item);
  for (NodeId n = 0; n < nodeItems_.size(); ++n)
    if (QGraphicsRectItem* item = nodeItems_[n])
      item->setPen(on.count(item) ? kHighlightPen : rewritten_.contains(n) ? kRewrittenPen : kNodePen);
  for (QGraphicsRectItem* item : groupBoxes_) {
    QPen pen = on.count(item) ? kHighlightPen : QPen(QColor(0x30, 0x40, 0x60), 1.5);
    pen.setStyle(Qt::DashLine);
    item->setPen(pen);
  }
}

void GraphScene::selectNodes(const QVector<NodeId>& nodes) {
  clearSelection();
  for (NodeId n : nodes)
    if (QGraphicsRectItem* item = boxOf(n)) item->setSelected(true);
}

QVector<NodeId> GraphScene::selectedNodes() const {
  QVector<NodeId> out;
  for (QGraphicsItem* item : selectedItems()) {
    QVariant v = item->data(kNodeIdRole);
    if (v.isValid()) out.push_back(v.toInt());
    QVariant g = item->data(kGroupIdRole);
    if (g.isValid()) {
      int index = groupBoxes_.indexOf(static_cast<QGraphicsRectItem*>(item));
      if (index >= 0) out += groupMembers_[index];
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void GraphScene::mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) {
  for (QGraphicsItem* item : items(event->scenePos())) {
    for (QGraphicsItem* it = item; it; it = it->parentItem()) {  // a label's box
      QVariant g = it->data(kGroupIdRole);
      if (g.isValid()) {
        emit groupExpandRequested(g.toInt());
        event->accept();
        return;
      }
    }
  }
  QGraphicsScene::mouseDoubleClickEvent(event);
}

}  // namespace collage
