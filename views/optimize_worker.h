// Runs the optimization job (core/search/optimization_job.h) on a QThread. Search
// events become queued signals carrying copies, at most ~20 a second per
// signal (the last event of each kind is always delivered); the UI thread
// never waits on the worker. Cancel sets the core's CancellationToken from
// any thread. A time budget cancels the job when it runs out, so the job
// keeps what it has (the best plan so far, or none while still measuring).
// With options.graphLevel, each new best plan of the graph-level search is
// sent as a copy (bestPlanChanged) so the window can recolour the graph
// while the search goes on.
//
//   auto* w = new OptimizeWorker(graph, options, this);
//   w->setTimeBudget(settings.timeBudgetSeconds);
//   connect(w, &OptimizeWorker::searchSteps, chart, &SearchChart::addSteps);
//   connect(w, &OptimizeWorker::bestPlanChanged, window, &MainWindow::showBestPlanSoFar);
//   w->start();
#pragma once

#include <QObject>
#include <QString>
#include <QThread>
#include <QVector>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "core/ir/graph.h"
#include "core/plan/plan.h"
#include "core/search/optimization_job.h"
#include "core/ir/search_events.h"

Q_DECLARE_METATYPE(collage::MeasureProgressEvent)
Q_DECLARE_METATYPE(collage::SearchStepEvent)
Q_DECLARE_METATYPE(std::shared_ptr<const collage::OptimizationResult>)
Q_DECLARE_METATYPE(std::shared_ptr<const collage::Plan>)

namespace collage {

class OptimizeWorker : public QObject {
  Q_OBJECT
 public:
  // `graph` must be the model at options.modelPath imported with its shapes.
  OptimizeWorker(std::shared_ptr<const Graph> graph, OptimizationJobOptions options,
                 QObject* parent = nullptr);
  ~OptimizeWorker() override;

  // Wall-clock seconds from start() after which the job is cancelled
  // (0 = no budget). Call before start().
  void setTimeBudget(double seconds) { budgetSeconds_ = seconds; }
  double timeBudget() const { return budgetSeconds_; }
  // True once the budget ran out and cancelled the job (any thread).
  bool budgetExpired() const { return budgetExpired_.load(); }

  // Starts the job on its own thread; returns at once.
  void start();
  bool isRunning() const { return thread_ && thread_->isRunning(); }
  // Thread-safe; the job stops at its next check and reports what it has.
  void cancel() { token_.cancel(); }
  // Thread-safe, for a job whose result nobody wants any more: kills the
  // measurement worker at once (OptimizationJobOptions::abort) and cancels;
  // failed() follows instead of finished().
  void abort();
  // Blocks until the thread ends (tests and shutdown only).
  bool wait(unsigned long ms) { return !thread_ || thread_->wait(ms); }

  static void registerMetaTypes();
  static constexpr int kMaxBatch = 512;

 signals:
  void measureProgress(collage::MeasureProgressEvent event);
  // The latest step (throttled: intermediate steps may be skipped).
  void searchStep(collage::SearchStepEvent event);
  // Every step since the previous batch, in order (throttled by batching,
  // nothing skipped unless a batch grows past kMaxBatch, then it is thinned
  // evenly, keeping its last step): what a chart wants.
  void searchSteps(QVector<collage::SearchStepEvent> events);
  // The time budget ran out and the job was told to stop; finished() follows.
  void timeBudgetExpired();
  // The graph-level search found a faster plan: a copy of it and its
  // measured time. Sent for every new best (a search finds a few a minute,
  // each after whole plans ran), so nothing is throttled or skipped.
  void bestPlanChanged(std::shared_ptr<const collage::Plan> plan, double ms);
  void logLine(QString line);
  void finished(std::shared_ptr<const collage::OptimizationResult> result);
  void failed(QString message);
  // The job's thread has returned (after finished() or failed()): nothing of
  // this job runs any more, so other work may run kernels.
  void ended();

 private:
  void runJob();  // on thread_
  void watchBudget();  // on its own std::thread while the job runs

  std::shared_ptr<const Graph> graph_;
  OptimizationJobOptions options_;
  CancellationToken token_;
  std::shared_ptr<CancellationToken> killSwitch_ = std::make_shared<CancellationToken>();
  std::unique_ptr<QThread> thread_;
  double budgetSeconds_ = 0;
  std::atomic<bool> budgetExpired_{false};
  // The budget watcher sleeps on this until the deadline or the job's end.
  std::mutex budgetMutex_;
  std::condition_variable budgetWake_;
  bool jobDone_ = false;
};

// Where the `collage` CLI (the measurement worker) is: $COLLAGE_CLI, then next
// to `appDir`, then `appDir`/../app (the build tree). Empty if not found.
QString findCollageCli(const QString& appDir);

}  // namespace collage
