#include "views/cost_bar_chart.h"

#include <QEvent>
#include <QFontMetrics>
#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>
#include <cmath>

#include "core/ir/cost.h"

namespace collage {
namespace {

constexpr int kRowHeight = 20;
constexpr int kMargin = 4;

QString costText(const BackendCost& c) {
  if (!c.runnable) return QStringLiteral("cannot run");
  if (!c.measured) return QStringLiteral("not measured");
  return QString::fromStdString(costToString(c.medianNs)) +
         QStringLiteral(" \u00b1%1%").arg(100 * c.spread, 0, 'f', 1);
}

}  // namespace

QVector<BackendCost> backendCosts(const std::vector<RunOnChoice>& choices,
                                  const QString& chosenBackend) {
  QVector<BackendCost> out;
  for (const auto& c : choices) {
    BackendCost b;
    b.backend = QString::fromStdString(c.backend);
    b.runnable = c.runnable;
    b.measured = c.measured;
    b.medianNs = c.measured ? c.medianNs : 0;
    b.spread = c.spread;
    b.chosen = b.backend == chosenBackend;
    b.note = QString::fromStdString(c.runnable ? c.pattern : c.reason);
    out.push_back(b);
  }
  return out;
}

CostBarChart::CostBarChart(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  setMouseTracking(true);
}

void CostBarChart::setCosts(QVector<BackendCost> costs) {
  costs_ = std::move(costs);
  updateGeometry();
  update();
}

QSize CostBarChart::sizeHint() const {
  return QSize(320, 2 * kMargin + std::max<int>(1, costs_.size()) * kRowHeight);
}

QSize CostBarChart::minimumSizeHint() const {
  return QSize(160, 2 * kMargin + std::max<int>(1, costs_.size()) * kRowHeight);
}

int CostBarChart::rowAt(const QPoint& pos) const {
  int row = (pos.y() - kMargin) / kRowHeight;
  if (pos.y() < kMargin || row < 0 || row >= costs_.size()) return -1;
  return row;
}

bool CostBarChart::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    int row = rowAt(help->pos());
    if (row < 0) {
      QToolTip::hideText();
      e->ignore();
      return true;
    }
    const BackendCost& c = costs_[row];
    QString text = QStringLiteral("<b>%1</b>%2: %3")
                       .arg(c.backend.toHtmlEscaped(),
                            c.chosen ? tr(" (chosen)") : QString(), costText(c).toHtmlEscaped());
    if (!c.note.isEmpty()) text += QStringLiteral("<br>") + c.note.toHtmlEscaped();
    QToolTip::showText(help->globalPos(), text, this);
    return true;
  }
  return QWidget::event(e);
}

void CostBarChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QPalette pal = palette();
  if (costs_.isEmpty()) {
    p.setPen(pal.color(QPalette::Disabled, QPalette::Text));
    p.drawText(rect(), Qt::AlignCenter, tr("no costs for this selection"));
    return;
  }
  QFont bold = font();
  bold.setBold(true);
  QFontMetrics fm(bold);  // the widest: the chosen row is bold
  int labelWidth = 0, valueWidth = 0;
  double maxNs = 0;
  for (const auto& c : costs_) {
    labelWidth = std::max(labelWidth, fm.horizontalAdvance(c.backend));
    valueWidth = std::max(valueWidth, fm.horizontalAdvance(costText(c)));
    if (c.runnable && c.measured) maxNs = std::max(maxNs, c.medianNs * (1 + c.spread / 2));
  }
  const int barLeft = kMargin + labelWidth + 8;
  const int barRight = std::max(barLeft + 20, width() - kMargin - valueWidth - 8);
  const double scale = maxNs > 0 ? (barRight - barLeft) / maxNs : 0;
  const QColor chosen = pal.color(QPalette::Highlight);
  const QColor other = pal.color(QPalette::Mid);
  for (int i = 0; i < costs_.size(); ++i) {
    const BackendCost& c = costs_[i];
    const int top = kMargin + i * kRowHeight;
    const QRect row(0, top, width(), kRowHeight);
    QFont f = font();
    f.setBold(c.chosen);
    p.setFont(f);
    p.setPen(c.runnable ? pal.color(QPalette::Text) : pal.color(QPalette::Disabled, QPalette::Text));
    p.drawText(QRect(kMargin, top, labelWidth + 4, kRowHeight), Qt::AlignVCenter | Qt::AlignLeft,
               c.backend);
    p.drawText(QRect(barRight + 8, top, valueWidth + 4, kRowHeight),
               Qt::AlignVCenter | Qt::AlignLeft, costText(c));
    if (!(c.runnable && c.measured) || !std::isfinite(c.medianNs)) continue;
    const int h = kRowHeight - 8;
    const int w = std::max(1, static_cast<int>(std::lround(c.medianNs * scale)));
    p.fillRect(QRect(barLeft, top + 4, w, h), c.chosen ? chosen : other);
    // Whisker over the inter-quartile range.
    const double lo = c.medianNs * std::max(0.0, 1 - c.spread / 2);
    const double hi = c.medianNs * (1 + c.spread / 2);
    const int x0 = barLeft + static_cast<int>(std::lround(lo * scale));
    const int x1 = barLeft + static_cast<int>(std::lround(hi * scale));
    const int mid = row.center().y();
    p.setPen(QPen(pal.color(QPalette::Text), 1));
    p.drawLine(x0, mid, x1, mid);
    p.drawLine(x0, mid - 3, x0, mid + 3);
    p.drawLine(x1, mid - 3, x1, mid + 3);
  }
}

}  // namespace collage
