// Manual overrides in the app: "Run on <backend>" for the selected nodes,
// undoable. The OverrideController holds the state an override changes (the
// user's pins and the plan they give) and the QUndoStack; each applied
// override is one OverrideCommand that swaps between the state before and
// after, so undo restores the previous pins and EXACTLY the previous plan
// (stored, not recomputed). The re-planning itself is the core's
// (core/search/plan_override.h): the last optimisation's plan with the
// regions the pins leave alone, and the op-level DP over the costs it
// measured for the rest, so the plan and its predicted cost update at once.
//
// An override that needs a candidate nobody measured yet waits for that
// measurement (up to a minute) off the UI thread, through the app's
// BackgroundWork (views/background_work.h): measuring() is emitted at once,
// planChanged() or refused() when it is done. Re-planning from what is
// already measured takes milliseconds and stays on the UI thread.
//
// Wiring (the main window):
//   controller_ = new OverrideController(this);
//   controller_->setBackgroundWork(work_);
//   editMenu->addAction(controller_->undoStack()->createUndoAction(this));
//   editMenu->addAction(controller_->undoStack()->createRedoAction(this));
//   connect(controller_, &OverrideController::planChanged, this, [this](const Plan& p) { ... });
//   connect(controller_, &OverrideController::refused, status_, &QLabel::setText);
//   // after an optimisation:   controller_->setResult(graph_, result);
//   // before the next one:     options.constraints = controller_->constraints();
//   // context menu:            populateRunOnMenu(menu.addMenu(tr("Run on")), controller_, nodes);
#pragma once

#include <QObject>
#include <QString>
#include <QUndoCommand>
#include <QVector>
#include <memory>
#include <optional>
#include <vector>

#include "core/measure/candidate_costs.h"
#include "core/ir/graph.h"
#include "core/search/optimization_job.h"
#include "core/search/placement_constraints.h"
#include "core/plan/plan.h"
#include "core/search/plan_override.h"

class QMenu;
class QUndoStack;

Q_DECLARE_METATYPE(collage::Plan)

namespace collage {

class BackgroundWork;

class OverrideController : public QObject {
  Q_OBJECT
 public:
  explicit OverrideController(QObject* parent = nullptr);
  ~OverrideController() override;

  // A finished optimisation becomes the base of re-planning: its plan is the
  // current plan, its constraints the current pins. The undo history is
  // cleared (its plans were made from the previous measurements). A result
  // without a plan (cancelled early) clears everything but the pins.
  void setResult(std::shared_ptr<const Graph> graph,
                 std::shared_ptr<const OptimizationResult> result);
  // A new model: no result, no pins, no history.
  void clear();
  // How a candidate that was never measured gets measured when an override
  // needs it (the app: the isolated worker, storing into the database, with
  // BackgroundWork::overrideKillSwitch() as its abort switch). Unset: such an
  // override is refused.
  void setMeasureFn(MeasureFn measure) { measure_ = std::move(measure); }
  // Where measure functions run (on one of its threads); null (the default):
  // on the calling thread, for tests of the controller alone.
  void setBackgroundWork(BackgroundWork* work) { work_ = work; }
  // An override waits for measurements.
  bool isMeasuring() const { return measuring_; }

  QUndoStack* undoStack() const { return stack_; }
  // The pins to pass to the next optimisation (OptimizationJobOptions::constraints).
  const PlacementConstraints& constraints() const { return constraints_; }
  // The plan with the overrides applied; null before the first result.
  const Plan* plan() const { return plan_ ? &*plan_ : nullptr; }
  // The result re-planning works on, with any measurement taken since; null
  // before the first result. For the inspector's costs.
  const OptimizationResult* result() const { return result_.get(); }
  const Graph* graph() const { return graph_.get(); }
  bool hasResult() const { return graph_ && result_ && plan_; }

  // What "Run on" offers for `nodes`: every backend with its cost or the
  // reason it cannot (empty without a result or for an empty selection).
  std::vector<RunOnChoice> choices(const QVector<NodeId>& nodes) const;
  // Whether a pin of the user touches one of `nodes`.
  bool isOverridden(const QVector<NodeId>& nodes) const;

 public slots:
  // Runs exactly `nodes` as one kernel of `backend`: re-plans at once and
  // pushes an undoable command. On refusal emits refused() with the reason
  // and changes nothing. Returns whether it was applied, or, when it must
  // measure first (measuring() was emitted), whether it was accepted.
  bool applyOverride(const QVector<NodeId>& nodes, const QString& backend);
  // Drops the pins that touch `nodes` (the optimizer decides again), undoable.
  bool clearOverride(const QVector<NodeId>& nodes);

 signals:
  // The current plan changed (an override, its undo or redo, a new result).
  void planChanged(const collage::Plan& plan);
  // The pins changed (for a list of overrides, or to mark pinned nodes).
  void pinsChanged();
  // An override was refused: why, naming the nodes.
  void refused(QString message);
  // An override waits for measurements taken in the background: what.
  void measuring(QString message);

 private:
  friend class OverrideCommand;
  // Sets pins and plan (what a command's undo/redo does) and tells the views.
  void setState(const PlacementConstraints& constraints, const Plan& plan);
  bool change(const PlacementConstraints& after, const QString& text);
  // Whether re-planning under `after` must measure a candidate first.
  bool needsMeasuring(const PlacementConstraints& after) const;
  // change() when it must measure: replans on `work_`, pushes when done.
  void changeInBackground(const PlacementConstraints& after, const QString& text);
  NodeSet toNodeSet(const QVector<NodeId>& nodes) const;

  QUndoStack* stack_ = nullptr;
  std::shared_ptr<const Graph> graph_;
  std::shared_ptr<OptimizationResult> result_;  // our copy: re-planning adds measurements
  PlacementConstraints constraints_;
  std::optional<Plan> plan_;
  MeasureFn measure_;
  BackgroundWork* work_ = nullptr;
  bool measuring_ = false;
  // Bumps whenever the pins or the plan change (a command, a new result, a
  // clear): a background re-plan made from an older state is dropped.
  quint64 stateGeneration_ = 0;
};

// One override (or its removal): the pins and plan before and after.
class OverrideCommand : public QUndoCommand {
 public:
  OverrideCommand(OverrideController* controller, PlacementConstraints before, Plan planBefore,
                  PlacementConstraints after, Plan planAfter, const QString& text);
  void undo() override;
  void redo() override;

 private:
  OverrideController* controller_;
  PlacementConstraints before_, after_;
  Plan planBefore_, planAfter_;
};

// Fills `menu` (the "Run on" submenu) for `nodes`: one checkable action per
// backend, showing its cost and checked when the plan runs exactly these
// nodes there; backends that cannot run them are disabled, with the reason in
// the text and the tooltip; then "Let the optimizer choose" when a pin touches
// them. Triggering an action calls the controller.
void populateRunOnMenu(QMenu* menu, OverrideController* controller, const QVector<NodeId>& nodes);

}  // namespace collage
