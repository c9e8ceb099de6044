#include "views/background_work.h"

#include <QThread>

#include "views/session_runner.h"

namespace collage {

// One request: exactly one of an optimisation, a plan run or an override's
// measurement. Made (and its result signals connected) when requested,
// started when it becomes the running piece.
struct BackgroundWork::Piece {
  quint64 generation = 0;
  std::unique_ptr<OptimizeWorker> optimizer;
  std::shared_ptr<SessionRunner> runner;  // shared: lastPlanRun_ keeps a finished one
  std::function<void()> measure, done;    // an override's
  std::unique_ptr<QThread> thread;        // runs `measure`

  // Thread-safe, and harmless on a piece that has finished.
  void abort(CancellationToken& overrideKillSwitch) const {
    if (optimizer) optimizer->abort();
    if (runner) runner->cancel();
    if (measure) overrideKillSwitch.cancel();
  }
  bool wait(unsigned long ms) const {
    if (optimizer) return optimizer->wait(ms);
    if (runner) return runner->wait(ms);
    return !thread || thread->wait(ms);
  }
};

BackgroundWork::BackgroundWork(QObject* parent) : QObject(parent) {
  OptimizeWorker::registerMetaTypes();
}

BackgroundWork::~BackgroundWork() {
  ++generation_;
  pending_.reset();  // never started: nothing to wait for
  if (!current_) return;
  current_->abort(*overrideKillSwitch_);
  if (current_->wait(kShutdownWaitMs)) return;
  // Still inside something that cannot be interrupted: the thread keeps its
  // objects (and they the graph and backends, by shared_ptr) until the
  // process ends. Its signals no longer reach us (we are their context).
  (void)current_.release();
}

void BackgroundWork::optimize(std::shared_ptr<const Graph> graph, OptimizationJobOptions options,
                              double timeBudgetSeconds) {
  auto piece = std::make_unique<Piece>();
  const quint64 generation = generation_ + 1;  // submit() gives it this one
  piece->optimizer = std::make_unique<OptimizeWorker>(std::move(graph), std::move(options));
  OptimizeWorker* w = piece->optimizer.get();
  w->setTimeBudget(timeBudgetSeconds);
  // Emitted on the job's thread, so queued here; each is dropped once a newer
  // request (or abortAll) made this one stale.
  connect(w, &OptimizeWorker::measureProgress, this, [this, generation](const MeasureProgressEvent& e) {
    if (isCurrent(generation)) emit measureProgress(e);
  });
  connect(w, &OptimizeWorker::searchStep, this, [this, generation](const SearchStepEvent& e) {
    if (isCurrent(generation)) emit searchStep(e);
  });
  connect(w, &OptimizeWorker::searchSteps, this,
          [this, generation](const QVector<SearchStepEvent>& events) {
            if (isCurrent(generation)) emit searchSteps(events);
          });
  connect(w, &OptimizeWorker::bestPlanChanged, this,
          [this, generation](std::shared_ptr<const Plan> plan, double ms) {
            if (isCurrent(generation)) emit bestPlanChanged(std::move(plan), ms);
          });
  connect(w, &OptimizeWorker::timeBudgetExpired, this, [this, generation] {
    if (isCurrent(generation)) emit timeBudgetExpired();
  });
  connect(w, &OptimizeWorker::logLine, this, [this, generation](const QString& line) {
    if (isCurrent(generation)) emit logLine(line);
  });
  connect(w, &OptimizeWorker::finished, this,
          [this, generation](std::shared_ptr<const OptimizationResult> result) {
            if (!isCurrent(generation)) return;
            optimizing_ = false;
            emit optimizationFinished(std::move(result));
          });
  connect(w, &OptimizeWorker::failed, this, [this, generation](const QString& message) {
    if (!isCurrent(generation)) return;
    optimizing_ = false;
    emit optimizationFailed(message);
  });
  // Queued, so the worker is never deleted inside its own signal.
  connect(w, &OptimizeWorker::ended, this, &BackgroundWork::onEnded, Qt::QueuedConnection);
  submit(std::move(piece));
  optimizing_ = true;
}

void BackgroundWork::runPlan(std::shared_ptr<const Graph> graph, Plan plan, BackendLookup backends,
                             int repeats) {
  auto piece = std::make_unique<Piece>();
  const quint64 generation = generation_ + 1;
  piece->runner = std::make_shared<SessionRunner>(std::move(graph), std::move(plan),
                                                  std::move(backends), repeats);
  std::weak_ptr<SessionRunner> runner = piece->runner;
  connect(piece->runner.get(), &SessionRunner::finished, this,
          [this, generation, runner](double ms, double spread, qint64 peakBytes) {
            if (!isCurrent(generation)) return;
            lastPlanRun_ = runner.lock();
            emit planRunFinished(ms, spread, peakBytes);
          });
  connect(piece->runner.get(), &SessionRunner::failed, this, [this, generation](const QString& message) {
    if (isCurrent(generation)) emit planRunFailed(message);
  });
  connect(piece->runner.get(), &SessionRunner::ended, this, &BackgroundWork::onEnded,
          Qt::QueuedConnection);
  submit(std::move(piece));
}

void BackgroundWork::measureOverride(std::function<void()> measure, std::function<void()> done) {
  auto piece = std::make_unique<Piece>();
  piece->measure = std::move(measure);
  piece->done = std::move(done);
  submit(std::move(piece));
}

void BackgroundWork::cancelOptimization() {
  if (!optimizing_) return;
  // One still waiting starts cancelled: it stops at its first check and
  // reports, so the window hears the end of every optimisation it started.
  for (Piece* p : {current_.get(), pending_.get()})
    if (p && p->optimizer) p->optimizer->cancel();
}

void BackgroundWork::abortAll() {
  ++generation_;
  optimizing_ = false;
  pending_.reset();
  lastPlanRun_.reset();  // its timings are of a plan that is gone
  if (current_) current_->abort(*overrideKillSwitch_);
  else emit idle();
}

void BackgroundWork::submit(std::unique_ptr<Piece> piece) {
  piece->generation = ++generation_;
  // A request for something else supersedes an optimisation still waiting or running.
  optimizing_ = false;
  pending_ = std::move(piece);  // a piece waiting before is dropped: it never started
  if (current_)
    current_->abort(*overrideKillSwitch_);  // pending_ starts when its thread has ended
  else
    startPending();
}

void BackgroundWork::startPending() {
  if (current_) return;
  if (!pending_) {
    emit idle();
    return;
  }
  current_ = std::move(pending_);
  Piece& p = *current_;
  if (p.optimizer) {
    p.optimizer->start();
  } else if (p.runner) {
    p.runner->start();
  } else {
    // Nothing else runs now, so the switch belongs to this measurement.
    overrideKillSwitch_->reset();
    p.thread.reset(QThread::create(p.measure));
    connect(p.thread.get(), &QThread::finished, this, &BackgroundWork::onEnded, Qt::QueuedConnection);
    p.thread->start();
  }
}

void BackgroundWork::onEnded() {
  if (!current_) return;
  // The thread has returned, so destroying the piece waits for nothing.
  std::unique_ptr<Piece> ended = std::move(current_);
  if (ended->done && isCurrent(ended->generation)) ended->done();
  startPending();
}

}  // namespace collage
