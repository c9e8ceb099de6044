#include "views/stage_graph_view.h"

#include <QPainter>
#include <QPainterPath>
#include <QtMath>
#include <algorithm>
#include <cmath>

namespace collage {

namespace {

constexpr double kBoxWidth = 230, kBoxHeight = 80, kGapX = 36, kGapY = 56, kMargin = 12;
constexpr double kMemoryRow = 18;

QString bytesText(double bytes) {
  if (bytes >= 1e9) return QString::number(bytes / 1e9, 'f', 2) + QStringLiteral(" GB");
  if (bytes >= 1e6) return QString::number(bytes / 1e6, 'f', 2) + QStringLiteral(" MB");
  if (bytes >= 1e3) return QString::number(bytes / 1e3, 'f', 1) + QStringLiteral(" KB");
  return QString::number(bytes, 'f', 0) + QStringLiteral(" B");
}

QString msText(double seconds) { return QString::number(seconds * 1e3, 'f', 3) + QStringLiteral(" ms"); }

}  // namespace

StageGraphView::StageGraphView(QWidget* parent) : QWidget(parent) {
  setObjectName("stage-graph");
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
}

void StageGraphView::setPipeline(const QVector<Stage>& stages, const QVector<HandOver>& edges,
                                 const QVector<DeviceMemory>& devices) {
  stages_ = stages;
  edges_.clear();
  for (const HandOver& e : edges)  // a malformed edge is dropped, not drawn off the graph
    if (e.from >= 0 && e.to >= 0 && e.from < stages.size() && e.to < stages.size() && e.from != e.to)
      edges_ << e;
  devices_ = devices;
  layOut();
  updateGeometry();
  update();
}

void StageGraphView::setMeasured(const QVector<double>& secondsPerMicroBatch,
                                 const QVector<double>& deviceBytes) {
  for (int s = 0; s < stages_.size() && s < secondsPerMicroBatch.size(); ++s)
    stages_[s].measuredSeconds = secondsPerMicroBatch[s];
  for (int d = 0; d < devices_.size() && d < deviceBytes.size(); ++d)
    devices_[d].measuredBytes = deviceBytes[d];
  update();
}

void StageGraphView::clear() {
  stages_.clear();
  edges_.clear();
  devices_.clear();
  layOut();
  updateGeometry();
  update();
}

// Longest-path layers: the file's stages are in a topological order, but an
// edge is only trusted to go forward after a check (a cycle would never end).
void StageGraphView::layOut() {
  const int n = stages_.size();
  layer_.fill(0, n);
  for (int round = 0; round < n; ++round) {
    bool changed = false;
    for (const HandOver& e : edges_)
      if (layer_[e.to] < layer_[e.from] + 1 && layer_[e.from] + 1 < n) {
        layer_[e.to] = layer_[e.from] + 1;
        changed = true;
      }
    if (!changed) break;
  }
  layers_ = 0;
  for (int l : layer_) layers_ = std::max(layers_, l + 1);
  QVector<int> count(layers_, 0);
  for (int l : layer_) ++count[l];
  widest_ = 0;
  for (int c : count) widest_ = std::max(widest_, c);
  centre_.resize(n);
  QVector<int> placed(layers_, 0);
  const double width = widest_ * kBoxWidth + std::max(0, widest_ - 1) * kGapX;
  for (int s = 0; s < n; ++s) {  // index order within a layer
    const int l = layer_[s];
    const double row = count[l] * kBoxWidth + (count[l] - 1) * kGapX;
    const double x = kMargin + (width - row) / 2 + placed[l]++ * (kBoxWidth + kGapX) + kBoxWidth / 2;
    centre_[s] = QPointF(x, kMargin + l * (kBoxHeight + kGapY) + kBoxHeight / 2);
  }
}

QRectF StageGraphView::boxOf(int stage) const {
  const double contentWidth = 2 * kMargin + widest_ * kBoxWidth + std::max(0, widest_ - 1) * kGapX;
  const double offset = std::max(0.0, (width() - contentWidth) / 2);
  const QPointF c = centre_.at(stage) + QPointF(offset, 0);
  return QRectF(c.x() - kBoxWidth / 2, c.y() - kBoxHeight / 2, kBoxWidth, kBoxHeight);
}

QStringList StageGraphView::boxText(int stage) const {
  const Stage& s = stages_.at(stage);
  QStringList lines;
  lines << tr("stage %1 [%2]").arg(stage).arg(s.devices);
  lines << tr("%n node(s), mem %1", nullptr, s.nodes).arg(bytesText(s.memoryBytes));
  lines << tr("sim %1 / micro-batch").arg(msText(s.simulatedSeconds));
  if (s.measuredSeconds >= 0) lines << tr("run %1 / micro-batch").arg(msText(s.measuredSeconds));
  return lines;
}

QStringList StageGraphView::memoryText() const {
  QStringList rows;
  for (const DeviceMemory& d : devices_) {
    QString row = tr("%1: %2 simulated").arg(d.device, bytesText(d.simulatedBytes));
    if (d.measuredBytes >= 0) row += tr(", %1 run").arg(bytesText(d.measuredBytes));
    if (d.limitBytes > 0 && std::isfinite(d.limitBytes)) row += tr(", limit %1").arg(bytesText(d.limitBytes));
    rows << row;
  }
  return rows;
}

double StageGraphView::memoryTop() const {
  return kMargin + layers_ * (kBoxHeight + kGapY) - (layers_ ? kGapY : 0) + 2 * kMargin;
}

QSize StageGraphView::sizeHint() const {
  const double w = 2 * kMargin + std::max(1, widest_) * (kBoxWidth + kGapX);
  const double h = memoryTop() + (devices_.size() + 1) * kMemoryRow + kMargin;
  return QSize(static_cast<int>(std::max(w, 420.0)), static_cast<int>(std::max(h, 120.0)));
}

QSize StageGraphView::minimumSizeHint() const { return QSize(240, 100); }

void StageGraphView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  if (stages_.isEmpty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter, tr("Open a pipeline (Pipeline > Open pipeline...) to see its stages"));
    return;
  }
  const QColor ink = palette().color(QPalette::Text);
  // Hand-overs first, under the boxes: bottom of the producer to the top of
  // the consumer, an arrow head, the bytes at the middle.
  for (const HandOver& e : edges_) {
    const QRectF a = boxOf(e.from), b = boxOf(e.to);
    QPointF from(a.center().x(), a.bottom()), to(b.center().x(), b.top());
    if (layer_[e.to] <= layer_[e.from]) {  // not downwards (never for a DAG's layers): side to side
      from = QPointF(a.right(), a.center().y());
      to = QPointF(b.left(), b.center().y());
    }
    QPainterPath path(from);
    const double dy = std::max(20.0, (to.y() - from.y()) / 2);
    path.cubicTo(from + QPointF(0, dy), to - QPointF(0, dy), to);
    p.setPen(QPen(ink, 1.4));
    p.setBrush(Qt::NoBrush);
    p.drawPath(path);
    const double angle = std::atan2(to.y() - (to - QPointF(0, dy)).y(), to.x() - (to - QPointF(0, dy)).x());
    QPolygonF head;
    head << to << to - QPointF(9 * std::cos(angle - 0.4), 9 * std::sin(angle - 0.4))
         << to - QPointF(9 * std::cos(angle + 0.4), 9 * std::sin(angle + 0.4));
    p.setBrush(ink);
    p.drawPolygon(head);
    const QPointF mid = path.pointAtPercent(0.5);
    const QString label = tr("%1 / mb").arg(bytesText(e.bytesPerMicroBatch));
    const QRectF r(mid.x() + 4, mid.y() - 9, 110, 18);
    p.setPen(palette().color(QPalette::Text));
    p.drawText(r, Qt::AlignLeft | Qt::AlignVCenter, label);
  }
  for (int s = 0; s < stages_.size(); ++s) {
    const QRectF box = boxOf(s);
    p.setPen(QPen(ink, 1));
    p.setBrush(stages_[s].color.isValid() ? stages_[s].color : palette().color(QPalette::Button));
    p.drawRoundedRect(box, 6, 6);
    p.setPen(Qt::black);  // on the light stage colours
    QFont small = font();
    small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1));  // four lines in the box
    p.setFont(small);
    const QStringList lines = boxText(s);
    const double line = std::min(18.0, (box.height() - 8) / 4);
    for (int i = 0; i < lines.size(); ++i)
      p.drawText(QPointF(box.left() + 8, box.top() + 4 + (i + 0.8) * line),
                 p.fontMetrics().elidedText(lines[i], Qt::ElideRight, static_cast<int>(box.width() - 14)));
    p.setFont(font());
  }
  // Memory per device: a bar each, one scale for all (the largest figure).
  double top = memoryTop();
  p.setPen(ink);
  p.drawText(QPointF(kMargin, top), tr("memory per device"));
  double scale = 0;
  for (const DeviceMemory& d : devices_) scale = std::max({scale, d.simulatedBytes, d.measuredBytes});
  const QStringList rows = memoryText();
  const double barWidth = std::max(60.0, width() * 0.3);
  for (int d = 0; d < devices_.size(); ++d) {
    top += kMemoryRow;
    const double fill = scale > 0 ? devices_[d].simulatedBytes / scale : 0;
    p.setPen(Qt::NoPen);
    p.setBrush(palette().color(QPalette::Highlight));
    p.drawRect(QRectF(kMargin, top - 11, barWidth * fill, 6));
    if (devices_[d].measuredBytes >= 0 && scale > 0) {
      p.setBrush(palette().color(QPalette::Mid));
      p.drawRect(QRectF(kMargin, top - 4, barWidth * devices_[d].measuredBytes / scale, 5));
    }
    p.setPen(ink);
    p.drawText(QPointF(kMargin + barWidth + 8, top), rows[d]);
  }
}

}  // namespace collage
