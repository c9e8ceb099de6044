#include "views/optimize_worker.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QMetaObject>

#include <exception>

namespace collage {
namespace {

// Forwards core events as queued signals, throttled: an event is sent when
// 50 ms passed since the previous one of its kind, or when it is a final one.
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
    if (stepSent_ && stepClock_.elapsed() < kIntervalMs) {
      lastStep_ = e;
      pendingStep_ = true;
      return;
    }
    stepSent_ = true;
    pendingStep_ = false;
    stepClock_.restart();
    emit worker_->searchStep(e);
  }
  void onLog(const std::string& line) override { emit worker_->logLine(QString::fromStdString(line)); }
  void flush() {
    if (pendingStep_) emit worker_->searchStep(lastStep_);
    pendingStep_ = false;
  }

 private:
  static constexpr qint64 kIntervalMs = 50;
  OptimizeWorker* worker_;
  QElapsedTimer measureClock_, stepClock_;
  bool measureSent_ = false, stepSent_ = false, pendingStep_ = false;
  SearchStepEvent lastStep_;
};

}  // namespace

void OptimizeWorker::registerMetaTypes() {
  qRegisterMetaType<collage::MeasureProgressEvent>("collage::MeasureProgressEvent");
  qRegisterMetaType<collage::SearchStepEvent>("collage::SearchStepEvent");
  qRegisterMetaType<std::shared_ptr<const collage::OptimizationResult>>(
      "std::shared_ptr<const collage::OptimizationResult>");
}

OptimizeWorker::OptimizeWorker(std::shared_ptr<const Graph> graph, OptimizationJobOptions options,
                               QObject* parent)
    : QObject(parent), graph_(std::move(graph)), options_(std::move(options)) {
  registerMetaTypes();
}

OptimizeWorker::~OptimizeWorker() {
  token_.cancel();
  if (thread_) thread_->wait();
}

void OptimizeWorker::start() {
  if (thread_) return;
  thread_.reset(QThread::create([this] { runJob(); }));
  thread_->start();
}

void OptimizeWorker::runJob() {
  // Signals emitted here cross to the receivers' (UI) thread as queued
  // connections: this object lives on the UI thread, the emitter does not.
  ThrottledObserver observer(this);
  try {
    auto result = std::make_shared<OptimizationResult>(
        runOptimizationJob(*graph_, options_, &observer, &token_));
    observer.flush();
    emit finished(std::move(result));
  } catch (const std::exception& e) {
    observer.flush();
    emit failed(QString::fromStdString(e.what()));
  }
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
