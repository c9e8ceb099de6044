#include "views/override_commands.h"

#include <QAction>
#include <QMenu>
#include <QPointer>
#include <QUndoStack>

#include "core/ir/error.h"
#include "core/measure/measurer.h"
#include "views/background_work.h"

namespace collage {

OverrideController::OverrideController(QObject* parent) : QObject(parent) {
  qRegisterMetaType<collage::Plan>("collage::Plan");
  stack_ = new QUndoStack(this);
}

OverrideController::~OverrideController() = default;

void OverrideController::setResult(std::shared_ptr<const Graph> graph,
                                   std::shared_ptr<const OptimizationResult> result) {
  stack_->clear();
  ++stateGeneration_;
  measuring_ = false;
  graph_ = std::move(graph);
  if (!graph_ || !result || !result->hasPlan) {
    result_.reset();
    plan_.reset();
    return;
  }
  result_ = std::make_shared<OptimizationResult>(*result);
  constraints_ = result_->constraints;
  plan_ = result_->plan;
  emit pinsChanged();
  emit planChanged(*plan_);
}

void OverrideController::clear() {
  stack_->clear();
  ++stateGeneration_;
  measuring_ = false;
  graph_.reset();
  result_.reset();
  plan_.reset();
  constraints_ = PlacementConstraints{};
  emit pinsChanged();
}

NodeSet OverrideController::toNodeSet(const QVector<NodeId>& nodes) const {
  NodeSet set(graph_ ? graph_->numNodes() : 0);
  if (!graph_) return set;
  for (NodeId n : nodes)
    if (n >= 0 && n < graph_->numNodes()) set.insert(n);
  return set;
}

std::vector<RunOnChoice> OverrideController::choices(const QVector<NodeId>& nodes) const {
  NodeSet set = toNodeSet(nodes);
  if (!hasResult() || set.empty()) return {};
  return runOnChoices(*graph_, *result_, set, &*plan_);
}

bool OverrideController::isOverridden(const QVector<NodeId>& nodes) const {
  if (!graph_) return false;
  NodeSet set = toNodeSet(nodes);
  for (const auto& pin : constraints_.pins) {
    try {
      if (pinNodes(*graph_, pin).intersects(set)) return true;
    } catch (const Error&) {
      // A pin naming nodes this model lacks touches none of them.
    }
  }
  return false;
}

bool OverrideController::needsMeasuring(const PlacementConstraints& after) const {
  if (!measure_) return false;
  std::vector<bool> allowed;
  try {
    // What the re-plan itself would use: nothing inside the regions it keeps.
    allowed = replanCandidates(*graph_, *result_, after, keptRegions(*graph_, *result_, after));
  } catch (const Error&) {
    return false;  // replanWithPins refuses it at once, with the reason
  }
  for (size_t i = 0; i < allowed.size(); ++i) {
    const bool measured = i < result_->measured.size() ? result_->measured[i]
                                                       : !isMissingMeasurement(result_->measurements[i]);
    if (allowed[i] && !measured) return true;
  }
  return false;
}

bool OverrideController::change(const PlacementConstraints& after, const QString& text) {
  if (work_ && needsMeasuring(after)) {
    changeInBackground(after, text);
    return true;
  }
  try {
    ReplanResult r = replanWithPins(*graph_, *result_, after, measure_);
    // Keep the base plan's identity fields: only the placement changed.
    r.plan.createdAt = plan_->createdAt;
    stack_->push(new OverrideCommand(this, constraints_, *plan_, after, std::move(r.plan), text));
    return true;
  } catch (const std::exception& e) {
    emit refused(QString::fromStdString(e.what()));
    return false;
  }
}

void OverrideController::changeInBackground(const PlacementConstraints& after, const QString& text) {
  // The thread works on its own copies; the controller's state may change
  // meanwhile (undo, another override), and then the answer is dropped.
  struct Replan {
    std::shared_ptr<OptimizationResult> result;
    ReplanResult out;
    QString error;
    bool aborted = false;
  };
  auto replan = std::make_shared<Replan>();
  replan->result = std::make_shared<OptimizationResult>(*result_);
  const quint64 base = stateGeneration_;
  measuring_ = true;
  emit measuring(tr("%1: measuring what it needs...").arg(text));
  QPointer<OverrideController> self(this);
  work_->measureOverride(
      [replan, graph = graph_, after, measure = measure_] {
        try {
          replan->out = replanWithPins(*graph, *replan->result, after, measure);
        } catch (const MeasurementAborted&) {
          replan->aborted = true;  // nobody waits for it any more
        } catch (const std::exception& e) {
          replan->error = QString::fromStdString(e.what());
        }
      },
      [self, replan, base, after, text] {
        if (!self || self->stateGeneration_ != base || replan->aborted) return;
        self->measuring_ = false;
        self->result_ = replan->result;  // keeps what was measured, as change() does
        if (!replan->error.isEmpty()) {
          emit self->refused(replan->error);
          return;
        }
        replan->out.plan.createdAt = self->plan_->createdAt;
        self->stack_->push(new OverrideCommand(self, self->constraints_, *self->plan_, after,
                                               std::move(replan->out.plan), text));
      });
}

bool OverrideController::applyOverride(const QVector<NodeId>& nodes, const QString& backend) {
  NodeSet set = toNodeSet(nodes);
  if (!hasResult()) {
    emit refused(tr("override refused: optimise the model first"));
    return false;
  }
  if (set.empty()) {
    emit refused(tr("override refused: select the nodes to run elsewhere"));
    return false;
  }
  const std::string name = backend.toStdString();
  try {
    checkOverride(*graph_, *result_, set, name);
  } catch (const std::exception& e) {
    emit refused(QString::fromStdString(e.what()));
    return false;
  }
  QString what = set.count() == 1 ? QString::fromStdString(graph_->node(set.first()).name)
                                  : tr("%1 nodes").arg(set.count());
  return change(withOverride(*graph_, constraints_, set, name),
                tr("Run %1 on %2").arg(what, backend));
}

bool OverrideController::clearOverride(const QVector<NodeId>& nodes) {
  if (!hasResult() || !isOverridden(nodes)) return false;
  NodeSet set = toNodeSet(nodes);
  return change(withoutOverride(*graph_, constraints_, set),
                tr("Let the optimizer place %1 node(s)").arg(set.count()));
}

void OverrideController::setState(const PlacementConstraints& constraints, const Plan& plan) {
  ++stateGeneration_;
  measuring_ = false;
  constraints_ = constraints;
  plan_ = plan;
  emit pinsChanged();
  emit planChanged(*plan_);
}

OverrideCommand::OverrideCommand(OverrideController* controller, PlacementConstraints before,
                                 Plan planBefore, PlacementConstraints after, Plan planAfter,
                                 const QString& text)
    : QUndoCommand(text),
      controller_(controller),
      before_(std::move(before)),
      after_(std::move(after)),
      planBefore_(std::move(planBefore)),
      planAfter_(std::move(planAfter)) {}

void OverrideCommand::undo() { controller_->setState(before_, planBefore_); }
void OverrideCommand::redo() { controller_->setState(after_, planAfter_); }

void populateRunOnMenu(QMenu* menu, OverrideController* controller, const QVector<NodeId>& nodes) {
  menu->setToolTipsVisible(true);
  std::vector<RunOnChoice> choices = controller->choices(nodes);
  if (choices.empty()) {
    QAction* none = menu->addAction(QObject::tr("Optimise the model first"));
    none->setEnabled(false);
    return;
  }
  for (const auto& c : choices) {
    const QString backend = QString::fromStdString(c.backend);
    QString text = backend;
    if (c.runnable)
      text += c.measured ? QStringLiteral("\t%1").arg(QString::fromStdString(costToString(c.medianNs)))
                         : QObject::tr("\tnot measured yet");
    else
      text += QStringLiteral(" \u2014 ") +
              QString::fromStdString(c.reason).left(70) + (c.reason.size() > 70 ? "..." : "");
    QAction* action = menu->addAction(text);
    action->setCheckable(true);
    action->setChecked(c.current);
    action->setEnabled(c.runnable);
    action->setToolTip(QString::fromStdString(c.runnable ? c.pattern : c.reason));
    action->setData(backend);
    QObject::connect(action, &QAction::triggered, controller,
                     [controller, nodes, backend] { controller->applyOverride(nodes, backend); });
  }
  if (controller->isOverridden(nodes)) {
    menu->addSeparator();
    QAction* automatic = menu->addAction(QObject::tr("Let the optimizer choose"));
    QObject::connect(automatic, &QAction::triggered, controller,
                     [controller, nodes] { controller->clearOverride(nodes); });
  }
}

}  // namespace collage
