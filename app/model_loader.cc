#include "app/model_loader.h"

#include <QElapsedTimer>
#include <QFileInfo>
#include <QSettings>
#include <QtConcurrent/QtConcurrent>

#include "core/onnx/onnx_import.h"
#include "core/rewrite/equivalence_check.h"
#include "views/layout_job.h"

namespace collage {
namespace {

LoadedModel importModel(const QString& path, const QStringList& inputShapes) {
  LoadedModel out;
  out.path = path;
  out.inputShapes = inputShapes;
  QElapsedTimer clock;
  clock.start();
  try {
    ImportOptions options;
    for (const QString& binding : inputShapes) {
      auto [name, shape] = parseInputShapeBinding(binding.toStdString());
      options.inputShapes[name] = shape;
    }
    out.graph = std::make_shared<Graph>(importOnnx(path.toStdString(), options));
  } catch (const std::exception& e) {
    out.error = QString::fromStdString(e.what());
  }
  out.importSeconds = clock.elapsed() / 1000.0;
  return out;
}

LoadedModel rewriteModel(LoadedModel model, const std::vector<SubstitutionSite>& sites,
                         const std::shared_ptr<const Graph>& rewritten,
                         const ModelLoader::RewriteCheck& check) {
  std::shared_ptr<const Graph> imported = model.imported();
  model.model = sites.empty() ? nullptr : imported;
  model.sites = sites;
  model.rewrittenNodes.clear();
  model.warnings.clear();
  try {
    model.graph = imported;
    if (!sites.empty()) {
      std::vector<RewriteEffect> effects;
      Graph replayed = replaySubstitutions(*imported, sites, &effects);
      model.graph = rewritten ? rewritten : std::make_shared<const Graph>(std::move(replayed));
      model.rewrittenNodes = rewrittenNodeSites(*model.graph, effects);
    }
    if (check) {
      model.warnings = check(*model.graph);
      model.checked = true;
    }
  } catch (const std::exception& e) {
    model.error = QString::fromStdString(e.what());
  }
  return model;
}

QString inputShapesKey(const QString& path) {
  return QStringLiteral("inputShapes/") + QFileInfo(path).absoluteFilePath();
}

}  // namespace

ModelLoader::ModelLoader(QObject* parent) : QObject(parent) {
  qRegisterMetaType<LoadedModel>("collage::LoadedModel");
  layoutJob_ = new LayoutJob(this);
  connect(&importWatcher_, &QFutureWatcher<LoadedModel>::finished, this, &ModelLoader::onImportDone);
  connect(&rewriteWatcher_, &QFutureWatcher<LoadedModel>::finished, this, &ModelLoader::onRewriteDone);
  connect(layoutJob_, &LayoutJob::finished, this, &ModelLoader::onLayoutFinished);
  connect(layoutJob_, &LayoutJob::failed, this, &ModelLoader::onLayoutStopped);
  connect(layoutJob_, &LayoutJob::cancelled, this, [this] { onLayoutStopped(QString()); });
}

ModelLoader::~ModelLoader() {
  importWatcher_.waitForFinished();
  rewriteWatcher_.waitForFinished();
  layoutJob_->cancel();
}

bool ModelLoader::isLayingOut() const { return layoutJob_->isRunning(); }

void ModelLoader::cancelLayout() { layoutJob_->cancel(); }

void ModelLoader::start(const QString& path, const QStringList& inputShapes) {
  layoutJob_->cancel();  // a model still being laid out is dropped
  importing_ = true;
  importWatcher_.setFuture(QtConcurrent::run(importModel, path, inputShapes));
}

void ModelLoader::startRewritten(const LoadedModel& model, std::vector<SubstitutionSite> sites,
                                 std::shared_ptr<const Graph> rewritten, RewriteCheck check) {
  layoutJob_->cancel();  // as start(): a model still being laid out is dropped
  rewriting_ = true;
  rewriteWatcher_.setFuture(QtConcurrent::run(rewriteModel, model, std::move(sites), std::move(rewritten),
                                              std::move(check)));
}

void ModelLoader::onRewriteDone() {
  LoadedModel rewritten = rewriteWatcher_.result();
  rewriting_ = false;
  if (!rewritten.error.isEmpty()) {
    emit rewriteFailed(rewritten.error);
    return;
  }
  pending_ = std::move(rewritten);
  layoutJob_->start(pending_.graph);
}

void ModelLoader::onImportDone() {
  LoadedModel loaded = importWatcher_.result();
  importing_ = false;
  if (!loaded.error.isEmpty()) {
    emit importFailed(loaded.path, loaded.error);
    return;
  }
  pending_ = std::move(loaded);
  emit imported(QFileInfo(pending_.path).fileName(), pending_.graph->numNodes());
  layoutJob_->start(pending_.graph);
}

void ModelLoader::onLayoutFinished(const GraphLayout& layout) {
  if (shown_ && layoutJob_->graph() == shown_) {
    emit relaidOut(layout);  // a group expanded or collapsed
    return;
  }
  if (!pending_.graph || layoutJob_->graph() != pending_.graph) return;
  LoadedModel model = std::move(pending_);
  pending_ = LoadedModel{};
  emit loaded(model, layout);
}

void ModelLoader::onLayoutStopped(const QString& why) {
  const QString name = pending_.graph ? QFileInfo(pending_.path).fileName() : QString();
  pending_ = LoadedModel{};
  emit layoutStopped(name, why);
}

QStringList ModelLoader::rememberedInputShapes(const QString& path) {
  return QSettings().value(inputShapesKey(path)).toStringList();
}

void ModelLoader::rememberInputShapes(const QString& path, const QStringList& shapes) {
  if (!shapes.isEmpty()) QSettings().setValue(inputShapesKey(path), shapes);
}

QStringList ModelLoader::recentFiles() {
  return QSettings().value(QStringLiteral("recentFiles")).toStringList();
}

void ModelLoader::addRecentFile(const QString& path) {
  QStringList files = recentFiles();
  const QString absolute = QFileInfo(path).absoluteFilePath();
  files.removeAll(absolute);
  files.prepend(absolute);
  while (files.size() > kMaxRecentFiles) files.removeLast();
  QSettings().setValue(QStringLiteral("recentFiles"), files);
}

}  // namespace collage
