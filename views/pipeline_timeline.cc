#include "views/pipeline_timeline.h"

#include <QPainter>
#include <QPaintEvent>
#include <algorithm>

namespace collage {

namespace {

constexpr int kLaneHeight = 14;
constexpr int kRowGap = 6;
constexpr int kLabelWidth = 150;
constexpr int kLaneLabelWidth = 30;
constexpr int kHeader = 36;  // two summary lines

// A colour per micro-batch, cycling through hues far enough apart that
// neighbours differ.
QColor microBatchColor(int m) {
  return QColor::fromHsv((m * 47) % 360, 110, 225);
}

}  // namespace

PipelineTimeline::PipelineTimeline(QWidget* parent) : QWidget(parent) {
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
}

void PipelineTimeline::setStages(const QStringList& names) {
  names_ = names;
  simulated_.clear();
  measured_.clear();
  simulatedSummary_.clear();
  measuredSummary_.clear();
  updateGeometry();
  update();
}

void PipelineTimeline::setLane(Lane l, const QVector<StageSpans>& stages, const QString& summary) {
  QVector<StageSpans> kept = stages.mid(0, names_.size());
  if (l == Lane::Simulated) {
    simulated_ = kept;
    simulatedSummary_ = summary;
  } else {
    measured_ = kept;
    measuredSummary_ = summary;
  }
  update();
}

void PipelineTimeline::clear() { setStages({}); }

int PipelineTimeline::barCount(int stage, Lane l) const {
  const QVector<StageSpans>& spans = lane(l);
  if (stage < 0 || stage >= spans.size()) return 0;
  return std::min(spans[stage].starts.size(), spans[stage].finishes.size());
}

PipelineTimeline::StageSpans PipelineTimeline::spans(int stage, Lane l) const {
  const QVector<StageSpans>& all = lane(l);
  return stage >= 0 && stage < all.size() ? all[stage] : StageSpans{};
}

QString PipelineTimeline::summary(Lane l) const {
  return l == Lane::Simulated ? simulatedSummary_ : measuredSummary_;
}

double PipelineTimeline::span() const {
  double most = 0;
  for (const auto* spans : {&simulated_, &measured_})
    for (const StageSpans& s : *spans)
      for (double f : s.finishes) most = std::max(most, f);
  return most;
}

QSize PipelineTimeline::sizeHint() const {
  return {640, kHeader + std::max(1, static_cast<int>(names_.size())) * (2 * kLaneHeight + kRowGap) + 20};
}

QSize PipelineTimeline::minimumSizeHint() const { return {320, kHeader + 2 * kLaneHeight + 20}; }

void PipelineTimeline::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing, false);
  const QFontMetrics fm = p.fontMetrics();
  if (names_.isEmpty()) {
    p.setPen(palette().color(QPalette::Disabled, QPalette::Text));
    p.drawText(rect(), Qt::AlignCenter, tr("Open a pipeline file (File > Open pipeline...)"));
    return;
  }
  p.setPen(palette().color(QPalette::Text));
  p.drawText(4, fm.ascent() + 2, simulatedSummary_.isEmpty() ? tr("simulated: -") : simulatedSummary_);
  p.drawText(4, fm.ascent() + 2 + fm.height(),
             measuredSummary_.isEmpty() ? tr("run: not run yet (Pipeline > Run pipeline)") : measuredSummary_);

  const double total = span();
  const int x0 = kLabelWidth + kLaneLabelWidth;
  const int width = std::max(10, this->width() - x0 - 8);
  const double scale = total > 0 ? width / total : 0;
  for (int s = 0; s < names_.size(); ++s) {
    const int y = kHeader + s * (2 * kLaneHeight + kRowGap);
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRect(4, y, kLabelWidth - 8, 2 * kLaneHeight), Qt::AlignVCenter | Qt::AlignLeft,
               fm.elidedText(names_[s], Qt::ElideRight, kLabelWidth - 8));
    for (int l = 0; l < 2; ++l) {
      const Lane which = l == 0 ? Lane::Simulated : Lane::Measured;
      const int ly = y + l * kLaneHeight;
      p.setPen(palette().color(QPalette::Disabled, QPalette::Text));
      p.drawText(QRect(kLabelWidth, ly, kLaneLabelWidth, kLaneHeight), Qt::AlignVCenter,
                 l == 0 ? tr("sim") : tr("run"));
      const int bars = barCount(s, which);
      const StageSpans* spans = bars ? &lane(which)[s] : nullptr;
      for (int m = 0; m < bars; ++m) {
        const int a = x0 + static_cast<int>(spans->starts[m] * scale);
        const int b = x0 + static_cast<int>(spans->finishes[m] * scale);
        const QRect bar(a, ly + 1, std::max(1, b - a), kLaneHeight - 2);
        p.fillRect(bar, microBatchColor(m));
        p.setPen(QColor(90, 90, 90));
        p.drawRect(bar.adjusted(0, 0, -1, -1));
        if (bar.width() > fm.horizontalAdvance(QString::number(m)) + 2)
          p.drawText(bar, Qt::AlignCenter, QString::number(m));
      }
    }
  }
  // The time axis: the span of the longer lane.
  const int axisY = kHeader + names_.size() * (2 * kLaneHeight + kRowGap) + 2;
  p.setPen(palette().color(QPalette::Text));
  p.drawLine(x0, axisY, x0 + width, axisY);
  p.drawText(x0, axisY + fm.ascent() + 2, QStringLiteral("0"));
  const QString end = QString::number(total * 1e3, 'f', 2) + QStringLiteral(" ms");
  p.drawText(x0 + width - fm.horizontalAdvance(end), axisY + fm.ascent() + 2, end);
}

}  // namespace collage
