#include "views/optimize_worker.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QMetaObject>

#include <chrono>
#include <exception>
#include <thread>

namespace collage {
namespace {

// Forwards core events as queued signals, throttled: an event is sent when
// 50 ms passed since the previous one of its kind, or when it is a final one.
// Step events are also collected into batches, so a search that steps faster
// than the throttle (the op-level DP makes its ~64 steps in milliseconds)
// still draws every step.
class ThrottledObserver : public SearchObserver {
 public:
  explicit ThrottledObserver(OptimizeWorker* worker) : worker_(worker) {
    measureClock_.start();
    stepClock_.start();
  }
  void onMeasureProgress(const MeasureProgressEvent& e) override {
    if (e.done < e.total && measureSent_ && measureClock_.elapsed() < kIntervalMs) return;
    measureSent_ = true;
    measureClock_.restart();
    emit worker_->measureProgress(e);
  }
  void onSearchStep(const SearchStepEvent& e) override {
    batch_.push_back(e);
    if (batch_.size() > OptimizeWorker::kMaxBatch) thin();
    if (stepSent_ && stepClock_.elapsed() < kIntervalMs) {
      lastStep_ = e;
      pendingStep_ = true;
      return;
    }
    stepSent_ = true;
    pendingStep_ = false;
    stepClock_.restart();
    emit worker_->searchStep(e);
    sendBatch();
  }
  void onLog(const std::string& line) override { emit worker_->logLine(QString::fromStdString(line)); }
  void flush() {
    if (pendingStep_) emit worker_->searchStep(lastStep_);
    pendingStep_ = false;
    sendBatch();
  }

 private:
  void sendBatch() {
    if (batch_.isEmpty()) return;
    emit worker_->searchSteps(batch_);
    batch_.clear();
  }
  // Keeps every other step (and always the last), halving the batch.
  void thin() {
    QVector<SearchStepEvent> kept;
    kept.reserve(batch_.size() / 2 + 1);
    for (int i = batch_.size() - 1; i >= 0; i -= 2) kept.push_front(batch_[i]);
    batch_ = std::move(kept);
  }

  static constexpr qint64 kIntervalMs = 50;
  OptimizeWorker* worker_;
  QElapsedTimer measureClock_, stepClock_;
  bool measureSent_ = false, stepSent_ = false, pendingStep_ = false;
  SearchStepEvent lastStep_;
  QVector<SearchStepEvent> batch_;
};

}  // namespace

void OptimizeWorker::registerMetaTypes() {
  qRegisterMetaType<collage::MeasureProgressEvent>("collage::MeasureProgressEvent");
  qRegisterMetaType<collage::SearchStepEvent>("collage::SearchStepEvent");
  qRegisterMetaType<QVector<collage::SearchStepEvent>>("QVector<collage::SearchStepEvent>");
  qRegisterMetaType<std::shared_ptr<const collage::OptimizationResult>>(
      "std::shared_ptr<const collage::OptimizationResult>");
  qRegisterMetaType<std::shared_ptr<const collage::Plan>>("std::shared_ptr<const collage::Plan>");
}

OptimizeWorker::OptimizeWorker(std::shared_ptr<const Graph> graph, OptimizationJobOptions options,
                               QObject* parent)
    : QObject(parent), graph_(std::move(graph)), options_(std::move(options)) {
  registerMetaTypes();
  // Our own kill switch, so that abort() reaches the job's measurement worker.
  options_.abort = killSwitch_;
  // Called on the job's thread: the copy is made there and the signal is
  // queued to the receivers, so the search never waits on the UI. A callback
  // the caller set already is kept.
  auto previous = std::move(options_.graphLevelOptions.onBestPlan);
  options_.graphLevelOptions.onBestPlan = [this, previous](const Plan& plan, double ms) {
    if (previous) previous(plan, ms);
    emit bestPlanChanged(std::make_shared<const Plan>(plan), ms);
  };
}

OptimizeWorker::~OptimizeWorker() {
  token_.cancel();
  if (thread_) thread_->wait();
}

void OptimizeWorker::start() {
  if (thread_) return;
  thread_.reset(QThread::create([this] { runJob(); }));
  connect(thread_.get(), &QThread::finished, this, &OptimizeWorker::ended);
  thread_->start();
}

void OptimizeWorker::abort() {
  killSwitch_->cancel();
  token_.cancel();
}

void OptimizeWorker::runJob() {
  // Signals emitted here cross to the receivers' (UI) thread as queued
  // connections: this object lives on the UI thread, the emitter does not.
  //
  // The budget is watched by a thread of its own rather than a QTimer: the
  // job's thread has no event loop while it runs, and the UI thread's timers
  // must not be what stops a job (a test or a modal dialog may hold it).
  std::thread watcher;
  if (budgetSeconds_ > 0) watcher = std::thread([this] { watchBudget(); });
  ThrottledObserver observer(this);
  auto stopWatcher = [&] {
    {
      std::lock_guard<std::mutex> lock(budgetMutex_);
      jobDone_ = true;
    }
    budgetWake_.notify_all();
    if (watcher.joinable()) watcher.join();
  };
  try {
    auto result = std::make_shared<OptimizationResult>(
        runOptimizationJob(*graph_, options_, &observer, &token_));
    stopWatcher();
    observer.flush();
    emit finished(std::move(result));
  } catch (const std::exception& e) {
    stopWatcher();
    observer.flush();
    emit failed(QString::fromStdString(e.what()));
  }
}

void OptimizeWorker::watchBudget() {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(budgetSeconds_));
  std::unique_lock<std::mutex> lock(budgetMutex_);
  if (budgetWake_.wait_until(lock, deadline, [this] { return jobDone_; })) return;
  budgetExpired_.store(true);
  lock.unlock();
  // Signal first, then cancel: the job's finished() is posted only after it
  // sees the cancel, so receivers always get timeBudgetExpired() before it.
  emit timeBudgetExpired();
  token_.cancel();
}

QString findCollageCli(const QString& appDir) {
  QString env = qEnvironmentVariable("COLLAGE_CLI");
  if (!env.isEmpty() && QFileInfo(env).isExecutable()) return env;
  QDir dir(appDir);
  for (const QString& rel : {QStringLiteral("collage"), QStringLiteral("../app/collage")}) {
    QFileInfo f(dir.filePath(rel));
    if (f.isFile() && f.isExecutable()) return f.canonicalFilePath();
  }
  return {};
}

}  // namespace collage
