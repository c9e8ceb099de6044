// The app's background work that runs kernels: the optimisation job, the plan
// runner and the measurements an override needs. One piece at a time, never
// on the UI thread, and the UI thread never waits for it.
//
// Why one at a time: two threads running kernels share the cores, caches and
// memory bandwidth, so each one's timings measure both, and the plan would be
// chosen on contaminated numbers (core/runtime/kernel_activity.h counts it).
//
//   request ──▶ pending ──(the running piece's thread has ended)──▶ running
//                                                                    │ queued signals, each
//                                  dropped when stale ◀── generation ┘ tagged with its request
//
// The newest request wins: it aborts the piece that runs and replaces the one
// that waits, and starts once the aborted piece's thread has ended (signalled,
// never waited for). Aborting kills the measurement worker process at once
// (OptimizationJobOptions::abort), so even a graph-level search's two-minute
// plan comparison stops in milliseconds; a plan run stops between two runs.
// Every request and abortAll() bump a generation counter, and a result is
// delivered only if no request came after it, as views/layout_job does: a
// cancelled runner never reports a plan of a model that is gone.
// Cancel (cancelOptimization) is the gentle stop: the job finishes at its
// next check and delivers the best plan it has.
//
//   auto* work = new BackgroundWork(this);
//   connect(work, &BackgroundWork::optimizationFinished, this, &MainWindow::onOptimizationDone);
//   connect(work, &BackgroundWork::planRunFinished, this, [=](double ms, double spread, qint64) {...});
//   work->optimize(graph, options, budgetSeconds);
//   // later: work->runPlan(graph, plan, backends);  // aborts nothing that is done
//   // an override that must measure:
//   //   work->measureOverride([=] { /* measure, on the thread */ }, [=] { /* use it, UI thread */ });
#pragma once

#include <QObject>
#include <QString>
#include <QVector>
#include <functional>
#include <memory>

#include "core/ir/graph.h"
#include "core/ir/search_events.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"
#include "core/search/optimization_job.h"
#include "views/optimize_worker.h"

namespace collage {

class SessionRunner;

class BackgroundWork : public QObject {
  Q_OBJECT
 public:
  explicit BackgroundWork(QObject* parent = nullptr);
  // Aborts the running piece and waits for it at most kShutdownWaitMs; a
  // piece still running then (inside one kernel compile or plan run, which
  // cannot be interrupted) is left to finish on its own, its objects kept
  // alive for it, rather than hold a closing window.
  ~BackgroundWork() override;
  static constexpr unsigned long kShutdownWaitMs = 1000;

  // Optimises `graph` (OptimizeWorker; timeBudgetSeconds 0 = none).
  void optimize(std::shared_ptr<const Graph> graph, OptimizationJobOptions options,
                double timeBudgetSeconds);
  // Runs `plan` end to end in a Session (SessionRunner). `backends` must stay
  // valid while it runs (capture the BackendSet's shared_ptr in it).
  void runPlan(std::shared_ptr<const Graph> graph, Plan plan, BackendLookup backends,
               int repeats = 10);
  // Runs `measure` on a thread of its own, then `done` on the UI thread unless
  // a newer request came. A MeasureFn that `measure` calls must be built with
  // overrideKillSwitch() as its OptimizationJobOptions::abort, so that an
  // abort kills its worker (it then throws MeasurementAborted: catch it).
  void measureOverride(std::function<void()> measure, std::function<void()> done);

  // The gentle stop: the optimisation finishes at its next check and
  // delivers what it has (the best plan so far, or none while measuring).
  void cancelOptimization();
  // Aborts what runs, drops what waits and every result not delivered yet
  // (a new model, a closing window).
  void abortAll();

  // From optimize() until its result (or failure) is delivered or aborted.
  bool isOptimizing() const { return optimizing_; }
  // Nothing runs and nothing waits.
  bool isIdle() const { return !current_ && !pending_; }
  std::shared_ptr<const CancellationToken> overrideKillSwitch() const { return overrideKillSwitch_; }
  // The last plan run that finished (its kernel timings, for the trace
  // export), or null.
  const SessionRunner* lastPlanRun() const { return lastPlanRun_.get(); }

 signals:
  // The optimisation's (OptimizeWorker's signals, current requests only).
  void measureProgress(collage::MeasureProgressEvent event);
  void searchStep(collage::SearchStepEvent event);
  void searchSteps(QVector<collage::SearchStepEvent> events);
  void bestPlanChanged(std::shared_ptr<const collage::Plan> plan, double ms);
  void timeBudgetExpired();
  void logLine(QString line);
  void optimizationFinished(std::shared_ptr<const collage::OptimizationResult> result);
  void optimizationFailed(QString message);
  // The plan run's (SessionRunner's signals, current requests only).
  void planRunFinished(double medianMs, double spread, qint64 peakBytes);
  void planRunFailed(QString message);
  // Nothing runs and nothing waits any more.
  void idle();

 private:
  struct Piece;
  // Makes `piece` the newest request: aborts the running one, replaces the
  // waiting one, starts it when nothing runs.
  void submit(std::unique_ptr<Piece> piece);
  void startPending();
  void onEnded();
  bool isCurrent(quint64 generation) const { return generation == generation_; }

  std::unique_ptr<Piece> current_;  // its thread runs
  std::unique_ptr<Piece> pending_;  // starts when current_'s thread has ended
  quint64 generation_ = 0;          // bumps on every request and abortAll()
  bool optimizing_ = false;
  std::shared_ptr<CancellationToken> overrideKillSwitch_ = std::make_shared<CancellationToken>();
  std::shared_ptr<SessionRunner> lastPlanRun_;
};

}  // namespace collage
