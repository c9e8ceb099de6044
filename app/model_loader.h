// Loading a model, the window's first controller: import on the thread pool,
// then lay out in a LayoutJob (a child process), each cancellable, and only
// the newest request ever delivered. No widgets: the window shows what the
// signals carry (copies), so nothing is shared with the worker thread.
//
// Invariant: at most one model is pending (imported, being laid out); it is
// delivered by loaded() only if the layout that finished is its own, and a
// re-layout of the model on screen (a group opened or closed) arrives as
// relaidOut() instead, so the window never mistakes one for the other.
//
//   start(path, shapes) ─▶ import (thread pool) ─▶ imported(name, nodes)
//                               │ error                 │
//                               ▼                       ▼ LayoutJob
//                        importFailed(path, msg)   loaded(model, layout)
//                                                  or layoutStopped(name, why)
//
//   auto* loader = new ModelLoader(this);
//   connect(loader, &ModelLoader::loaded, this, [=](const LoadedModel& m, const GraphLayout& l) {
//     loader->setShown(m.graph);  // its re-layouts now come as relaidOut()
//     scene->setGraph(m.graph, l);
//   });
//   loader->start(path, {"input_ids=1x128"});
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <QStringList>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/rewrite/substitution.h"
#include "views/graph_layout.h"

namespace collage {

class LayoutJob;

// A model imported off the UI thread (the layout follows in a LayoutJob).
struct LoadedModel {
  QString path;
  QStringList inputShapes;
  std::shared_ptr<const Graph> graph;  // what the window shows and places
  QString error;
  double importSeconds = 0;
  // When `graph` is the model rewritten by a plan's graph substitutions
  // (docs/substitutions.md): the model as imported, and the nodes the
  // rewrites created or changed, each with the index of its site.
  std::shared_ptr<const Graph> model;  // null: `graph` is the model as imported
  std::vector<SubstitutionSite> sites;
  std::map<std::string, size_t> rewrittenNodes;
  std::vector<std::string> warnings;  // from startRewritten's check
  bool checked = false;               // startRewritten's check ran on `graph`

  // The model as imported, whichever `graph` shows.
  const std::shared_ptr<const Graph>& imported() const { return model ? model : graph; }
};

class ModelLoader : public QObject {
  Q_OBJECT
 public:
  explicit ModelLoader(QObject* parent = nullptr);
  ~ModelLoader() override;  // waits for an import (it cannot be interrupted)

  // Imports `path` with its input-shape bindings ("name=1x128"), then lays
  // it out; a model still being laid out is dropped.
  void start(const QString& path, const QStringList& inputShapes);
  // Shows `model` (a loaded model's imported() graph, path and shapes)
  // rewritten by `sites`: they are replayed on the thread pool, each checked
  // again, then the graph is laid out and loaded() delivers it with
  // `rewrittenNodes` filled. `rewritten`, when given, is that graph already
  // made (an optimisation's): it is shown, and the replay only marks its
  // nodes. `check` runs on the result off the UI thread (a plan's check
  // against the graph: its warnings end up in LoadedModel::warnings). A
  // replay or check that throws gives rewriteFailed(). No sites: the model
  // itself is laid out again, unmarked.
  using RewriteCheck = std::function<std::vector<std::string>(const Graph&)>;
  void startRewritten(const LoadedModel& model, std::vector<SubstitutionSite> sites,
                      std::shared_ptr<const Graph> rewritten = nullptr, RewriteCheck check = {});
  bool isImporting() const { return importWatcher_.isRunning() || rewriteWatcher_.isRunning(); }
  bool isLayingOut() const;
  bool isRunning() const { return isImporting() || isLayingOut(); }
  // A model is on its way to loaded(): imported or replayed, or laid out
  // (a re-layout of the model on screen is not). True from start() or
  // startRewritten() until loaded(), importFailed(), rewriteFailed() or
  // layoutStopped() is emitted, so no check made meanwhile can miss it.
  bool isLoadingModel() const { return importing_ || rewriting_ || pending_.graph != nullptr; }
  // Stops the layout (the pending model's or a re-layout): layoutStopped()
  // with an empty reason follows.
  void cancelLayout();
  // The model on screen, whose re-layouts (LayoutJob::expandGroup,
  // collapseAll) arrive as relaidOut().
  void setShown(std::shared_ptr<const Graph> graph) { shown_ = std::move(graph); }
  LayoutJob* layoutJob() const { return layoutJob_; }

  // The input shapes last used for a model (remembered across runs), and
  // remembering them.
  static QStringList rememberedInputShapes(const QString& path);
  static void rememberInputShapes(const QString& path, const QStringList& shapes);
  // Recently opened models, newest first (at most kMaxRecentFiles).
  static QStringList recentFiles();
  static void addRecentFile(const QString& path);
  static constexpr int kMaxRecentFiles = 10;

 signals:
  void imported(QString fileName, int nodes);  // the layout starts
  void importFailed(QString path, QString message);
  void rewriteFailed(QString message);  // startRewritten's replay or check threw
  void loaded(collage::LoadedModel model, collage::GraphLayout layout);
  void relaidOut(collage::GraphLayout layout);
  // The pending model's layout failed (`why`) or was cancelled (`why` empty);
  // `fileName` is empty when no model was pending (a superseded re-layout).
  void layoutStopped(QString fileName, QString why);

 private:
  void onImportDone();
  void onRewriteDone();
  void onLayoutFinished(const GraphLayout& layout);
  void onLayoutStopped(const QString& why);

  QFutureWatcher<LoadedModel> importWatcher_;
  QFutureWatcher<LoadedModel> rewriteWatcher_;  // startRewritten's replay
  LayoutJob* layoutJob_ = nullptr;
  LoadedModel pending_;  // imported, being laid out
  bool importing_ = false, rewriting_ = false;  // until the watcher's result is handled
  std::shared_ptr<const Graph> shown_;
};

}  // namespace collage
