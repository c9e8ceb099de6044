// Runs the optimization job (core/optimization_job.h) on a QThread. Search
// events become queued signals carrying copies, at most ~20 a second (the
// last event of each kind is always delivered); the UI thread never waits on
// the worker. Cancel sets the core's CancellationToken from any thread.
#pragma once

#include <QObject>
#include <QString>
#include <QThread>
#include <memory>

#include "core/graph.h"
#include "core/optimization_job.h"
#include "core/search_events.h"

Q_DECLARE_METATYPE(collage::MeasureProgressEvent)
Q_DECLARE_METATYPE(collage::SearchStepEvent)
Q_DECLARE_METATYPE(std::shared_ptr<const collage::OptimizationResult>)

namespace collage {

class OptimizeWorker : public QObject {
  Q_OBJECT
 public:
  // `graph` must be the model at options.modelPath imported with its shapes.
  OptimizeWorker(std::shared_ptr<const Graph> graph, OptimizationJobOptions options,
                 QObject* parent = nullptr);
  ~OptimizeWorker() override;

  // Starts the job on its own thread; returns at once.
  void start();
  bool isRunning() const { return thread_ && thread_->isRunning(); }
  // Thread-safe; the job stops at its next check and reports what it has.
  void cancel() { token_.cancel(); }
  // Blocks until the thread ends (tests and shutdown only).
  bool wait(unsigned long ms) { return !thread_ || thread_->wait(ms); }

  static void registerMetaTypes();

 signals:
  void measureProgress(collage::MeasureProgressEvent event);
  void searchStep(collage::SearchStepEvent event);
  void logLine(QString line);
  void finished(std::shared_ptr<const collage::OptimizationResult> result);
  void failed(QString message);

 private:
  void runJob();  // on thread_

  std::shared_ptr<const Graph> graph_;
  OptimizationJobOptions options_;
  CancellationToken token_;
  std::unique_ptr<QThread> thread_;
};

// Where the `collage` CLI (the measurement worker) is: $COLLAGE_CLI, then next
// to `appDir`, then `appDir`/../app (the build tree). Empty if not found.
QString findCollageCli(const QString& appDir);

}  // namespace collage
