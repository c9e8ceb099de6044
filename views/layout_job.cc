#include "views/layout_job.h"

#include <QCoreApplication>
#include <QFutureWatcher>
#include <QPointer>
#include <QProcess>
#include <QTimer>
#include <QtConcurrent/QtConcurrent>
#include <sstream>

#include "views/optimize_worker.h"

namespace collage {
namespace {

struct InProcessResult {
  GraphLayout layout;
  QString error;
};

}  // namespace

LayoutJob::LayoutJob(QObject* parent) : QObject(parent) {
  qRegisterMetaType<collage::GraphLayout>("collage::GraphLayout");
  workerPath_ = findCollageCli(QCoreApplication::applicationDirPath());
}

LayoutJob::~LayoutJob() {
  ++generation_;
  stopWorker();
}

void LayoutJob::start(std::shared_ptr<const Graph> graph, const LayoutOptions& options) {
  cancel();
  if (!graph) return;
  const quint64 generation = ++generation_;
  graph_ = std::move(graph);
  options_ = options;
  running_ = true;
  clock_.start();
  try {
    plan_ = std::make_shared<const LayoutPlan>(planLayout(*graph_, options_));
    std::ostringstream text;
    writeLayoutInput(plan_->input, text);
    std::string input = text.str();
    key_ = layoutKey(plan_->input);
    if (cacheEnabled_) {
      if (std::optional<GraphLayout> cached = cache_.load(key_);
          cached && cached->nodes.size() == plan_->input.items.size() &&
          cached->edges.size() == plan_->input.edges.size()) {
        // Queued, so the caller has returned from start() before finished().
        QTimer::singleShot(0, this, [this, generation, layout = std::move(*cached)] {
          deliver(generation, layout, false);
        });
        return;
      }
    }
    if (!workerPath_.isEmpty())
      startWorker(input);
    else
      startInProcess();
  } catch (const std::exception& e) {
    QString message = QString::fromStdString(e.what());
    QTimer::singleShot(0, this, [this, generation, message] { fail(generation, message); });
  }
}

void LayoutJob::startWorker(const std::string& inputText) {
  const quint64 generation = generation_;
  process_ = new QProcess(this);
  connect(process_, qOverload<int, QProcess::ExitStatus>(&QProcess::finished), this,
          [this, generation] { onWorkerDone(generation); });
  connect(process_, &QProcess::errorOccurred, this, [this, generation](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart)
      fail(generation, tr("Cannot start the layout worker %1").arg(workerPath_));
  });
  process_->start(workerPath_, {QStringLiteral("layout-worker")});
  // Buffered until the process runs; the worker reads to the end of input.
  process_->write(inputText.data(), static_cast<qint64>(inputText.size()));
  process_->closeWriteChannel();
}

void LayoutJob::startInProcess() {
  const quint64 generation = generation_;
  auto plan = plan_;
  auto* watcher = new QFutureWatcher<InProcessResult>(this);
  connect(watcher, &QFutureWatcher<InProcessResult>::finished, this, [this, watcher, generation] {
    InProcessResult r = watcher->result();
    watcher->deleteLater();
    if (!r.error.isEmpty())
      fail(generation, r.error);
    else
      deliver(generation, r.layout, true);
  });
  watcher->setFuture(QtConcurrent::run([plan] {
    InProcessResult r;
    try {
      r.layout = layoutItems(plan->input);
    } catch (const std::exception& e) {
      r.error = QString::fromStdString(e.what());
    }
    return r;
  }));
}

void LayoutJob::onWorkerDone(quint64 generation) {
  if (generation != generation_ || !process_) return;
  QProcess* p = process_;
  process_ = nullptr;
  p->deleteLater();
  if (p->exitStatus() != QProcess::NormalExit || p->exitCode() != 0) {
    QString err = QString::fromLocal8Bit(p->readAllStandardError()).trimmed();
    fail(generation, err.isEmpty() ? tr("The layout worker stopped (exit code %1)").arg(p->exitCode())
                                   : err);
    return;
  }
  QByteArray out = p->readAllStandardOutput();
  try {
    std::istringstream in(std::string(out.constData(), static_cast<size_t>(out.size())));
    deliver(generation, readItemLayout(in), true);
  } catch (const std::exception& e) {
    fail(generation, tr("Bad layout from the worker: %1").arg(QString::fromStdString(e.what())));
  }
}

void LayoutJob::deliver(quint64 generation, const GraphLayout& itemLayout, bool store) {
  if (generation != generation_ || !running_) return;
  GraphLayout layout;
  try {
    layout = assembleLayout(*plan_, itemLayout);
  } catch (const std::exception& e) {
    fail(generation, QString::fromStdString(e.what()));
    return;
  }
  if (store && cacheEnabled_) cache_.store(key_, itemLayout);
  running_ = false;
  lastElapsedMs_ = clock_.elapsed();
  emit finished(layout);
}

void LayoutJob::fail(quint64 generation, const QString& message) {
  if (generation != generation_ || !running_) return;
  running_ = false;
  stopWorker();
  emit failed(message);
}

void LayoutJob::stopWorker() {
  if (!process_) return;
  QProcess* p = process_;
  process_ = nullptr;
  p->disconnect(this);
  p->kill();
  // SIGKILL cannot be ignored: reaping takes milliseconds, and leaves no zombie.
  p->waitForFinished(1000);
  p->deleteLater();  // we may be inside one of its signals (errorOccurred)
}

qint64 LayoutJob::workerPid() const { return process_ ? process_->processId() : 0; }

void LayoutJob::cancel() {
  if (!running_) return;
  ++generation_;
  running_ = false;
  stopWorker();
  emit cancelled();
}

void LayoutJob::expandGroup(int group) {
  if (!graph_) return;
  LayoutOptions options = options_;
  options.expandedGroups.insert(group);
  start(graph_, options);
}

void LayoutJob::collapseGroup(int group) {
  if (!graph_) return;
  LayoutOptions options = options_;
  options.expandedGroups.erase(group);
  start(graph_, options);
}

void LayoutJob::collapseAll() {
  if (!graph_) return;
  LayoutOptions options = options_;
  options.expandedGroups.clear();
  start(graph_, options);
}

}  // namespace collage
