// Lays out a Graph off the UI thread, cancellably. Graphviz is not
// thread-safe and cannot be interrupted in process, so the layout runs in a
// child process, `collage layout-worker` (views/graph_layout.h for the wire
// format): cancel() kills it at once. Without the CLI, the layout runs in this
// process on the thread pool as a fallback; cancel() then only drops the
// result (Graphviz finishes in the background, serialised by its mutex).
//
// One layout at a time: start() while a layout runs cancels that one first
// (its cancelled() is emitted), so only the newest request is ever delivered.
// Results go through the layout cache (views/layout_cache.h): a structure laid
// out before is delivered without Graphviz, with GraphLayout::fromCache set.
// Every signal is emitted on the thread that owns the job, after start()
// returns.
//
//   auto* job = new LayoutJob(this);
//   connect(job, &LayoutJob::finished, this, [=](const GraphLayout& layout) {
//     scene->setGraph(job->graph(), layout);
//   });
//   connect(scene, &GraphScene::groupExpandRequested, job, &LayoutJob::expandGroup);
//   job->start(graph);
#pragma once

#include <QElapsedTimer>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <memory>
#include <optional>

#include "core/ir/graph.h"
#include "views/graph_layout.h"
#include "views/layout_cache.h"

class QProcess;

Q_DECLARE_METATYPE(collage::GraphLayout)

namespace collage {

class LayoutJob : public QObject {
  Q_OBJECT
 public:
  explicit LayoutJob(QObject* parent = nullptr);
  ~LayoutJob() override;  // kills a running worker

  // The `collage` executable to run the worker from; empty = lay out in
  // process. Defaults to findCollageCli(the application's directory).
  void setWorkerPath(const QString& cli) { workerPath_ = cli; }
  const QString& workerPath() const { return workerPath_; }
  // Cache directory (empty = LayoutCache::defaultDirectory()); caching can be
  // switched off (then nothing is read or written).
  void setCacheDirectory(const QString& dir) { cache_ = LayoutCache(dir); }
  void setCacheEnabled(bool on) { cacheEnabled_ = on; }

  // Lays out `graph` (see LayoutOptions: Auto groups and simplifies big
  // graphs). Cancels a layout still running first.
  void start(std::shared_ptr<const Graph> graph, const LayoutOptions& options = {});
  bool isRunning() const { return running_; }
  // The graph and options of the latest start() (what finished() belongs to).
  std::shared_ptr<const Graph> graph() const { return graph_; }
  const LayoutOptions& options() const { return options_; }
  // Milliseconds from the latest start() to its finished().
  qint64 lastElapsedMs() const { return lastElapsedMs_; }
  // The running worker's process id, or 0 (tests check it is gone after cancel()).
  qint64 workerPid() const;

 public slots:
  // Kills the worker (or drops the in-process result); emits cancelled() if
  // a layout was running. The scene is never touched by a cancelled layout.
  void cancel();
  // Lays out the current graph again with group `group` (GroupBox::id) open
  // or closed; ignored without a graph.
  void expandGroup(int group);
  void collapseGroup(int group);
  void collapseAll();

 signals:
  void finished(collage::GraphLayout layout);
  void failed(QString message);
  void cancelled();

 private:
  void startWorker(const std::string& inputText);
  void startInProcess();
  void onWorkerDone(quint64 generation);
  void deliver(quint64 generation, const GraphLayout& itemLayout, bool store);
  void fail(quint64 generation, const QString& message);
  void stopWorker();

  QString workerPath_;
  LayoutCache cache_;
  bool cacheEnabled_ = true;
  std::shared_ptr<const Graph> graph_;
  LayoutOptions options_;
  std::shared_ptr<const LayoutPlan> plan_;
  std::string key_;
  QProcess* process_ = nullptr;
  quint64 generation_ = 0;  // bumps on every start and cancel; stale results are dropped
  bool running_ = false;
  QElapsedTimer clock_;
  qint64 lastElapsedMs_ = -1;
};

}  // namespace collage
