// A pipeline's timeline: one row per stage, one bar per micro-batch from its
// start to its finish, so fill, drain and the bottleneck stage show at a
// glance. Two lanes per row, drawn to one time scale:
//
//   stage 0 [cpu0]  sim  ▇0▇1▇2▇3
//                   run  ▇0 ▇1 ▇2 ▇3
//   stage 1 [cpu1]  sim     ▇0▇1▇2▇3
//                   run       ▇0 ▇1  ▇2 ▇3
//
// "sim" is the simulator's schedule (core/pipeline/pipeline_simulator.h),
// "run" a real run's Session::run spans (PipelineRunReport's starts and
// finishes). Each bar is coloured by its micro-batch, the same colour in both
// lanes, so one micro-batch can be followed across the stages. Paint only:
// the schedules are computed elsewhere (on a worker) and handed in.
#pragma once

#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

namespace collage {

class PipelineTimeline : public QWidget {
  Q_OBJECT
 public:
  // A stage's micro-batches: starts[m] to finishes[m], in seconds from the
  // schedule's start.
  struct StageSpans {
    QVector<double> starts, finishes;
  };
  enum class Lane { Simulated, Measured };

  explicit PipelineTimeline(QWidget* parent = nullptr);

  // The rows, one per stage ("stage 0 [cpu0]"); clears both lanes.
  void setStages(const QStringList& names);
  // A lane's spans, by stage (as many as setStages gave; extra are dropped).
  // `summary` is shown above the rows ("simulated: 812 samples/s").
  void setLane(Lane lane, const QVector<StageSpans>& stages, const QString& summary);
  void clear();

  int stageRows() const { return names_.size(); }
  // Bars drawn in a stage's lane (0 when the lane is empty).
  int barCount(int stage, Lane lane) const;
  QString summary(Lane lane) const;
  // A stage's spans in a lane (empty when the lane is).
  StageSpans spans(int stage, Lane lane) const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  const QVector<StageSpans>& lane(Lane l) const { return l == Lane::Simulated ? simulated_ : measured_; }
  double span() const;  // the longest lane's last finish (seconds)

  QStringList names_;
  QVector<StageSpans> simulated_, measured_;
  QString simulatedSummary_, measuredSummary_;
};

}  // namespace collage
