#include "app/main_window.h"

#include "app/input_shape_dialog.h"

#include <QApplication>
#include <QCloseEvent>
#include <QCheckBox>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QGraphicsItem>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QTableView>

#include <algorithm>

#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/plan/plan_export.h"
#include "views/background_work.h"
#include "views/decode_panel.h"
#include "views/graph_scene.h"
#include "views/graph_view.h"
#include "views/kernel_table_model.h"
#include "views/layout_job.h"
#include "views/node_inspector.h"
#include "views/optimize_worker.h"
#include "views/override_commands.h"
#include "views/pattern_editor.h"
#include "views/plan_diff_panel.h"
#include "views/search_chart.h"

namespace collage {
namespace {

// The Ops column's widest fit: a fused group's ops ("Conv+Add+Relu+...") can
// be wider than the screen and push Backend and Median out of sight. Longer
// text is elided in the middle; the tooltip has all of it.
constexpr int kMaxOpsColumnWidth = 360;

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  OptimizeWorker::registerMetaTypes();
  buildUi();
  reloadPatternEditorSpecs();
  setAcceptDrops(true);
  QSettings settings;
  restoreGeometry(settings.value("window/geometry").toByteArray());
  restoreState(settings.value("window/state").toByteArray());
  decodeDock_->hide();  // a saved state may show it: only for a decoder
}

MainWindow::~MainWindow() {
  // Aborts and waits at most about a second (BackgroundWork's destructor),
  // before the views its signals would reach are gone; then the loader waits
  // for an import and kills a layout worker.
  delete optimiser_;
  optimiser_ = nullptr;
  work_ = nullptr;
  loader_->disconnect(this);  // a layout it cancels now has no window to report to
  delete loader_;
  loader_ = nullptr;
}

// ---- Loading: ModelLoader imports and lays out; the window asks for input
// shapes, shows progress and, once laid out, makes the model the open one.

void MainWindow::openModelDialog() {
  QString path = QFileDialog::getOpenFileName(this, tr("Open ONNX model"), QString(),
                                              tr("ONNX models (*.onnx);;All files (*)"));
  if (!path.isEmpty()) openModel(path);
}

bool MainWindow::dialogsAllowed() const {
  return !qEnvironmentVariableIsSet("COLLAGE_STUDIO_NO_DIALOGS") &&
         QGuiApplication::platformName() != QLatin1String("offscreen");
}

void MainWindow::openModel(const QString& path, const QStringList& inputShapes) {
  if (loader_->isImporting()) {
    status_->setText(tr("Still importing the previous model"));
    return;
  }
  if (isOptimizing()) {
    status_->setText(tr("Cancel the optimisation before opening another model"));
    return;
  }
  std::optional<QStringList> shapes = inputShapes;
  if (inputShapes.isEmpty()) shapes = askInputShapes(path);
  if (!shapes) {
    status_->setText(tr("Opening %1 cancelled").arg(QFileInfo(path).fileName()));
    return;
  }
  startLoad(path, *shapes);
}

std::optional<QStringList> MainWindow::askInputShapes(const QString& path) {
  // The declared inputs are read without the weights (milliseconds even
  // for BERT-base), so asking before the import costs nothing.
  std::vector<DeclaredInput> declared;
  try {
    declared = readDeclaredInputs(path.toStdString());
  } catch (const std::exception&) {
    // The import reports the same problem with the full message.
  }
  const bool dynamic = std::any_of(declared.begin(), declared.end(),
                                   [](const DeclaredInput& d) { return d.isDynamic(); });
  if (!dynamic) return QStringList();
  const QStringList previous = ModelLoader::rememberedInputShapes(path);
  if (!dialogsAllowed()) return previous;
  InputShapeDialog dialog(QFileInfo(path).fileName(), declared, previous, this);
  if (dialog.exec() != QDialog::Accepted) return std::nullopt;
  return dialog.bindings();
}

void MainWindow::startLoad(const QString& path, const QStringList& inputShapes) {
  // First: a model still being laid out is dropped, and what that says is
  // then overwritten here; so is a plan waiting for its rewritten graph.
  pendingPlan_.reset();
  pendingResult_.reset();
  pendingFor_.reset();
  loader_->start(path, inputShapes);
  status_->setText(tr("Loading %1...").arg(QFileInfo(path).fileName()));
  progress_->setRange(0, 0);
  progress_->setVisible(true);
}

bool MainWindow::isLoading() const { return loader_->isRunning(); }

void MainWindow::onImportFailed(const QString& path, const QString& message) {
  progress_->setVisible(isOptimizing());
  status_->setText(tr("Cannot open %1").arg(path));
  if (dialogsAllowed()) QMessageBox::warning(this, tr("Cannot open model"), message);
  emit loadFailed(message);
}

void MainWindow::onImported(const QString& fileName, int nodes) {
  status_->setText(tr("Laying out %1 (%2 nodes)...").arg(fileName).arg(nodes));
  cancel_->setVisible(true);
  cancel_->setEnabled(true);
}

void MainWindow::onModelLoaded(const LoadedModel& model, const GraphLayout& layout) {
  modelPath_ = model.path;
  inputShapes_ = model.inputShapes;
  ModelLoader::rememberInputShapes(modelPath_, inputShapes_);
  ModelLoader::addRecentFile(modelPath_);
  graph_ = model.graph;
  modelGraph_ = model.imported();
  rewriteSites_ = model.sites;
  rewrittenNodes_ = model.rewrittenNodes;
  loader_->setShown(graph_);
  plan_.reset();
  lastResult_.reset();
  closePipeline();  // made for the model before
  // A plan run or an override measurement of the previous model: stopped, and
  // whatever it would still report is dropped.
  work_->abortAll();
  planSummary_->clear();
  chart_->clear();
  planDiff_->clear();
  // The Decode panel, for a decoder only. The signature is structural (the
  // cache Concats, the roles' names), so the graph as imported for any
  // binding says it.
  ++decodeRun_;
  decoder_.reset();
  try {
    decoder_ = decoderSignature(*modelGraph_, modelPath_.toStdString());
  } catch (const std::exception&) {
    // Not a decoder: no panel.
  }
  decodePanel_->setMeasuring(false);
  decodePanel_->parallelChart()->setDecoder(modelPath_, decoder_);
  decodePanel_->clear();
  decodeDock_->toggleViewAction()->setEnabled(decoder_.has_value());
  decodeDock_->setVisible(decoder_.has_value());
  if (decoder_) decodeDock_->raise();
  measureAction_->setEnabled(false);
  kernels_->clear();
  scene_->setGraph(graph_, layout);
  QVector<NodeId> rewritten;
  QHash<QString, QString> rewrittenBy;  // node name -> the site that made it
  for (const auto& [name, site] : model.rewrittenNodes) {
    if (auto n = graph_->findNode(name)) rewritten << *n;
    rewrittenBy.insert(QString::fromStdString(name), QString::fromStdString(model.sites[site].toString()));
  }
  scene_->setRewrittenNodes(rewritten);
  showGraphStart();
  inspector_->clear();
  inspector_->setRewrittenNodes(rewrittenBy);
  overrides_->clear();
  patternEditor_->setGraph(graph_);
  optimizeAction_->setEnabled(!isOptimizing());
  progress_->setVisible(isOptimizing());
  cancel_->setVisible(isOptimizing());
  setWindowTitle(tr("Collage Studio - %1").arg(QFileInfo(modelPath_).fileName()));
  status_->setText(tr("%1: %2 nodes%3%4")
                       .arg(QFileInfo(modelPath_).fileName())
                       .arg(graph_->numNodes())
                       .arg(rewriteSites_.empty()
                                ? QString()
                                : tr(", rewritten by %n substitution(s) (%1 nodes marked)", "",
                                     int(rewriteSites_.size()))
                                      .arg(rewritten.size()))
                       .arg(layout.fromCache ? tr(" (layout from cache)") : QString()));
  emit modelLoaded();
  // What the graph was laid out for, if it is that graph: a plan only once
  // checked against it (the rewrite's check), never on another model.
  const bool forThis = pendingFor_ && model.imported() == pendingFor_;
  pendingFor_.reset();
  if (auto result = std::exchange(pendingResult_, nullptr)) {
    if (forThis) onOptimizationDone(result);
  } else if (pendingPlan_) {
    Plan plan = std::move(*pendingPlan_);
    pendingPlan_.reset();
    if (forThis && model.checked)
      showOpenedPlan(std::move(plan), pendingPlanName_, model.warnings);
    else
      status_->setText(tr("Plan %1 was not shown: it was made for another model").arg(pendingPlanName_));
  }
}

void MainWindow::showRewritten(const std::vector<SubstitutionSite>& sites,
                               std::shared_ptr<const Graph> rewritten, ModelLoader::RewriteCheck check) {
  LoadedModel model;
  model.path = modelPath_;
  model.inputShapes = inputShapes_;
  model.graph = modelGraph_;
  loader_->startRewritten(model, sites, std::move(rewritten), std::move(check));
  status_->setText(sites.empty() ? tr("Laying out the model as imported...")
                                 : tr("Replaying %n graph substitution(s) and laying out the rewritten graph...",
                                      "", int(sites.size())));
  progress_->setRange(0, 0);
  progress_->setVisible(true);
}

void MainWindow::onRewriteFailed(const QString& message) {
  pendingPlan_.reset();
  pendingResult_.reset();
  pendingFor_.reset();
  progress_->setVisible(isOptimizing());
  status_->setText(tr("Cannot show the rewritten graph: %1").arg(message));
  if (dialogsAllowed()) QMessageBox::warning(this, tr("Cannot use this plan"), message);
  emit planFailed(message);
}

void MainWindow::showGraphStart() {
  // A whole deep network fitted into the view is a thin unreadable line:
  // fit when that stays readable, else show the inputs at a readable scale,
  // as one reads a graph from the top.
  view_->fitAll();
  constexpr double kReadable = 0.55;
  if (view_->transform().m11() >= kReadable || !graph_ || graph_->numNodes() == 0) return;
  view_->resetTransform();
  view_->scale(kReadable + 0.25, kReadable + 0.25);
  const QRectF first = scene_->nodeRect(0);
  const QRectF visible = view_->mapToScene(view_->viewport()->rect()).boundingRect();
  view_->centerOn(first.center().x(), first.top() - 20 + visible.height() / 2);
}

void MainWindow::onLayoutStopped(const QString& fileName, const QString& why) {
  progress_->setVisible(isOptimizing());
  cancel_->setVisible(isOptimizing());
  if (fileName.isEmpty()) return;  // an expand that was superseded
  if (why.isEmpty()) {
    status_->setText(tr("Opening %1 cancelled").arg(fileName));
    emit loadFailed(tr("cancelled"));
  } else {
    status_->setText(tr("Cannot lay out %1: %2").arg(fileName, why));
    emit loadFailed(why);
  }
}

void MainWindow::cancelCurrentWork() {
  if (loader_->isLayingOut())
    loader_->cancelLayout();
  else
    cancelOptimization();
}

void MainWindow::reloadPatternEditorSpecs() {
  std::vector<std::string> errors;
  std::vector<BackendSpec> specs = loadAllSpecs(&errors, patternEditor_->userPatternPath().toStdString());
  QStringList codeRules;
  for (const std::string& name : builtinBackendNames())
    if (auto backend = createBackend(name); backend && backend->codeRule())
      codeRules << QString::fromStdString(name);
  patternEditor_->setBackendSpecs(std::move(specs), codeRules);
  if (!errors.empty()) status_->setText(QString::fromStdString(errors.front()));
}

QStringList MainWindow::recentFiles() const { return ModelLoader::recentFiles(); }

void MainWindow::rebuildRecentMenu() {
  recentMenu_->clear();
  const QStringList files = recentFiles();
  for (const QString& file : files) {
    QAction* action = recentMenu_->addAction(QFileInfo(file).fileName(), this, [this, file] { openModel(file); });
    action->setToolTip(file);
    action->setEnabled(QFileInfo::exists(file));
  }
  if (files.isEmpty()) recentMenu_->addAction(tr("(none)"))->setEnabled(false);
}

// ---- Optimising: OptimisationController builds the job and runs it in its
// BackgroundWork; the window shows progress, the plan and its measurement.

bool MainWindow::isOptimizing() const { return optimiser_ && optimiser_->isOptimizing(); }

void MainWindow::setBackends(const QStringList& names) { optimiser_->setBackends(names); }

void MainWindow::setOptimizeSettings(const OptimizeSettings& settings) {
  optimiser_->setSettings(settings);
}

void MainWindow::optimizeWithOptions() {
  if (!graph_ || isOptimizing()) return;
  if (dialogsAllowed()) {
    QStringList available, defaults;
    for (const std::string& name : builtinBackendNames()) available << QString::fromStdString(name);
    for (const std::string& name : defaultBackendNames()) defaults << QString::fromStdString(name);
    // The precisions the user may allow ("bf16": onednn_bf16), as --allow-precision.
    QMap<QString, QStringList> precisions;
    for (const std::string& name : builtinBackendNames())
      if (const std::optional<ReducedPrecision> r = reducedPrecisionOf(name))
        precisions[QString::fromStdString(r->precision)] << QString::fromStdString(name);
    OptimizeOptionsDialog dialog(optimiser_->settings(), available, this, defaults, precisions);
    if (dialog.exec() != QDialog::Accepted) return;
    setOptimizeSettings(dialog.settings());
  }
  startOptimization();
}

OptimizationJobOptions MainWindow::jobOptions() {
  return optimiser_->jobOptions(modelPath_, inputShapes_, overrides_->constraints());
}

void MainWindow::startOptimization() {
  if (!graph_) return;
  OptimizationJobOptions options;
  try {
    options = jobOptions();
  } catch (const std::exception& e) {
    onOptimizationError(QString::fromStdString(e.what()));
    return;
  }
  chart_->clear();
  planDiff_->clear();
  // Starts once whatever runs (a plan run, an override's measurement, an
  // earlier optimisation) has been aborted and its thread has ended.
  // The model as imported: a plan's substitutions name its nodes.
  optimiser_->start(modelGraph_, std::move(options));
  setBusy(true);
  status_->setText(tr("Optimizing..."));
}

void MainWindow::cancelOptimization() {
  if (!isOptimizing()) return;
  optimiser_->cancel();
  cancel_->setEnabled(false);
  status_->setText(tr("Cancelling..."));
}

void MainWindow::setBusy(bool busy) {
  progress_->setVisible(busy);
  progress_->setRange(0, 0);
  cancel_->setVisible(busy);
  cancel_->setEnabled(busy);
  optimizeAction_->setEnabled(!busy && graph_);
  measureAction_->setEnabled(!busy && plan_);
}

void MainWindow::onMeasureProgress(const MeasureProgressEvent& e) {
  progress_->setRange(0, std::max(1, e.total));
  progress_->setValue(e.done);
  status_->setText(OptimisationController::progressText(e));
}

void MainWindow::onSearchStep(const SearchStepEvent& e) {
  status_->setText(OptimisationController::searchStepText(e));
}

void MainWindow::onOptimizationDone(std::shared_ptr<const OptimizationResult> result) {
  // The plan places the model rewritten by its substitutions (or, after a
  // rewritten plan was shown, the model as imported): that graph is laid
  // out first, in the background, and the result shown on it.
  const std::shared_ptr<const Graph> placed = result->graph ? result->graph : modelGraph_;
  if (result->hasPlan && placed != graph_) {
    setBusy(false);
    pendingResult_ = result;
    pendingFor_ = modelGraph_;
    showRewritten(result->substitutions.applied, result->graph);
    return;
  }
  lastResult_ = result;
  setBusy(false);
  if (result->hasPlan) {
    plan_ = result->plan;
    try {
      OptimizationJobOptions options = jobOptions();
      // Measured in the background; an abort kills its worker.
      options.abort = work_->overrideKillSwitch();
      overrides_->setMeasureFn(jobMeasureFn(graph_, options));
    } catch (const std::exception&) {
      overrides_->setMeasureFn({});  // overrides that need a new measurement are refused, with the reason
    }
    overrides_->setResult(graph_, result);
    showPlan();
    planDiff_->showResult(*graph_, *result, rewrittenNodes_);
    // The end-to-end check behind the choice, on hover over "predicted / measured".
    planSummary_->setToolTip(QString::fromStdString(result->endToEnd));
  }
  status_->setText(OptimisationController::resultText(*result, planDiff_->summary()));
  emit optimizationFinished(result->hasPlan);
  if (result->hasPlan) measurePlan();
}

void MainWindow::onOptimizationError(const QString& message) {
  setBusy(false);
  status_->setText(tr("Optimisation failed: %1").arg(message));
  emit optimizationFailed(message);
}

void MainWindow::measurePlan() {
  // Not beside an optimisation: the request would abort it.
  if (!graph_ || !plan_ || isOptimizing()) return;
  try {
    optimiser_->backendSet();
  } catch (const std::exception& e) {
    emit planMeasureFailed(QString::fromStdString(e.what()));
    return;
  }
  runPredictedNs_ = plan_->predictedNs;
  planSummary_->setText(tr("predicted %1 ms, measuring...").arg(runPredictedNs_ / 1e6, 0, 'f', 3));
  optimiser_->runPlan(graph_, *plan_);
}

void MainWindow::measureDecode(const QVector<qint64>& contextLengths) {
  if (!decoder_ || contextLengths.isEmpty()) return;
  // Not beside an optimisation: the request would abort it.
  if (isOptimizing()) {
    decodePanel_->setError(tr("an optimisation is running"));
    return;
  }
  std::shared_ptr<BackendSet> set;
  try {
    set = optimiser_->backendSet();
  } catch (const std::exception& e) {
    decodePanel_->setError(QString::fromStdString(e.what()));
    return;
  }
  // The plan is used at the context it was made for (measureDecodeStep).
  std::shared_ptr<const Plan> plan = plan_ ? std::make_shared<const Plan>(*plan_) : nullptr;
  const quint64 run = ++decodeRun_;
  decodePanel_->clear();
  decodePanel_->setMeasuring(true);
  auto relay = std::make_shared<DecodePointRelay>();
  connect(relay.get(), &DecodePointRelay::point, decodePanel_, [this, run](const DecodePoint& p) {
    if (run == decodeRun_) decodePanel_->addPoint(p);
  });
  auto error = std::make_shared<QString>();
  std::shared_ptr<const CancellationToken> kill = work_->overrideKillSwitch();
  const std::string path = modelPath_.toStdString();
  const DecoderSignature signature = *decoder_;
  work_->measureOverride(
      [=] {
        const BackendLookup lookup = [set](const std::string& n) { return set->find(n); };
        try {
          for (qint64 context : contextLengths) {
            if (kill->cancelled()) return;  // a new model, a closing window
            emit relay->point(measureDecodeStep(path, signature, context, plan.get(), lookup));
          }
        } catch (const std::exception& e) {
          *error = QString::fromStdString(e.what());
        }
      },
      [this, run, relay, error] {
        if (run != decodeRun_) return;
        decodePanel_->setMeasuring(false);
        if (!error->isEmpty()) decodePanel_->setError(*error);
        emit decodeMeasured(decodePanel_->points().size(), *error);
      });
}

// ---- The plan on screen, and the selection kept in step between the graph,
// the kernel table and the inspector.

void MainWindow::showPlan() {
  if (!plan_ || !graph_) return;
  paintPlan(*plan_);
  planSummary_->setText(tr("predicted %1 ms").arg(plan_->predictedNs / 1e6, 0, 'f', 3));
  measureAction_->setEnabled(!isOptimizing());
  refreshKernelTable();
  onSceneSelection();
}

void MainWindow::paintPlan(const Plan& plan) {
  QVector<QColor> colors(graph_->numNodes());
  QMap<QString, QColor> legend;
  QVector<GraphScene::GroupFrame> frames;  // in the backend's colour, darker
  for (const PlanGroup& g : plan.groups) {
    QColor color(QString::fromStdString(backendColor(g.backend)));
    legend[QString::fromStdString(g.backend)] = color;
    GraphScene::GroupFrame frame;
    frame.color = color.darker(140);
    frame.region = g.origin == PlanOrigin::GraphLevel;
    if (frame.region)
      frame.label =
          tr("%1 region, %2 nodes").arg(QString::fromStdString(g.backend)).arg(g.nodes.size());
    for (const auto& name : g.nodes)
      if (auto n = graph_->findNode(name)) {
        colors[*n] = color;
        frame.nodes << *n;
      }
    frames << frame;
  }
  // Stage colouring on: the plan's frames, the stages' colours.
  if (!(colourByStage_ && pipeline_)) scene_->setNodeColors(colors, legend);
  scene_->setFrames(frames);
}

void MainWindow::showBestPlanSoFar(std::shared_ptr<const Plan> plan, double ms) {
  // The worker queues every best before its finished(), so none arrives
  // after the final plan is shown.
  if (!graph_ || !plan) return;
  paintPlan(*plan);
  // The starting plan is the first best, before any plan ran to scale it.
  planSummary_->setText(
      ms > 0 ? tr("graph-level best so far %1 ms (measured whole)").arg(ms, 0, 'f', 3)
             : tr("graph-level search from the op-level plan"));
}

void MainWindow::refreshKernelTable() {
  if (!graph_) return;
  struct ResizeAfter {  // columns fit their contents once the rows are in, Ops capped
    QTableView* table;
    ~ResizeAfter() {
      table->resizeColumnsToContents();
      if (table->columnWidth(KernelTableModel::Ops) > kMaxOpsColumnWidth)
        table->setColumnWidth(KernelTableModel::Ops, kMaxOpsColumnWidth);
    }
  } resizeAfter{table_};
  const OptimizationResult* result = overrides_->result();
  try {
    // Both modes show plan_, the plan on screen; each of its groups says
    // which candidate of `result` it runs as, if any.
    if (allCandidates_->isChecked() && result) {
      kernels_->setCandidates(*graph_, *result, plan_ ? &*plan_ : nullptr);
    } else if (plan_) {
      kernels_->setPlan(*graph_, *plan_, result);
    } else {
      kernels_->clear();
    }
  } catch (const std::exception& e) {
    status_->setText(tr("The plan does not match the model: %1").arg(e.what()));
  }
}

QString MainWindow::planSummary() const { return planSummary_->text(); }

void MainWindow::onPlanChanged(const Plan& plan) {
  const bool same = plan_ && planToJson(*plan_) == planToJson(plan);
  plan_ = plan;
  if (!same) {
    showPlan();
    status_->setText(tr("Plan: predicted %1 ms, %2 kernels")
                         .arg(plan_->predictedNs / 1e6, 0, 'f', 3)
                         .arg(plan_->groups.size()));
  }
}

void MainWindow::onSceneSelection() {
  if (!graph_) return;
  inspector_->showSelection(graph_.get(), scene_->selectedNodes(), plan(), overrides_->result());
}

void MainWindow::onTableSelection() {
  if (syncingSelection_) return;
  QVector<NodeId> nodes;
  for (const QModelIndex& index : table_->selectionModel()->selectedRows())
    nodes += kernels_->row(proxy_->mapToSource(index).row()).nodes;
  syncingSelection_ = true;
  scene_->selectNodes(nodes);
  syncingSelection_ = false;
  if (!nodes.isEmpty()) {
    QRectF area;
    for (QGraphicsItem* item : scene_->selectedItems()) area |= item->sceneBoundingRect();
    view_->ensureVisible(area);
  }
}

void MainWindow::showGraphContextMenu(const QPoint& pos) {
  if (!graph_) return;
  // Right-clicking an unselected node selects it alone first, as file managers do.
  if (QGraphicsItem* item = view_->itemAt(pos)) {
    QVariant id = item->data(GraphScene::kNodeIdRole);
    for (QGraphicsItem* p = item; !id.isValid() && p->parentItem(); p = p->parentItem())
      id = p->parentItem()->data(GraphScene::kNodeIdRole);
    if (id.isValid() && !scene_->selectedNodes().contains(id.value<NodeId>()))
      scene_->selectNodes({id.value<NodeId>()});
  }
  const QVector<NodeId> nodes = scene_->selectedNodes();
  if (nodes.isEmpty()) return;
  QMenu menu(this);
  QMenu* runOn = menu.addMenu(tr("Run on"));
  if (overrides_->hasResult() && !isOptimizing()) {
    populateRunOnMenu(runOn, overrides_, nodes);
  } else if (isOptimizing()) {
    runOn->addAction(tr("Wait for the optimisation: an override would stop it"))->setEnabled(false);
  } else {
    runOn->addAction(tr("Optimise first: overrides re-plan from the measurements"))->setEnabled(false);
  }
  if (pipeline_ && nodes.size() == 1) addPinActions(&menu, nodes.front());  // main_window_pipeline.cc
  if (plan_ && nodes.size() == 1) {
    menu.addAction(tr("Select its group"), this, [this, n = nodes.front()] {
      for (size_t g = 0; g < plan_->groups.size(); ++g) {
        NodeSet set = groupNodes(*plan_, g, *graph_);
        if (!set.contains(n)) continue;
        QVector<NodeId> members;
        set.forEach([&](NodeId m) { members << m; });
        scene_->selectNodes(members);
        return;
      }
    });
  }
  menu.exec(view_->viewport()->mapToGlobal(pos));
}

// ---- The window itself.

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  for (const QUrl& url : event->mimeData()->urls())
    if (url.isLocalFile()) {
      openModel(url.toLocalFile());
      break;
    }
}

void MainWindow::closeEvent(QCloseEvent* event) {
  // Stops at once whatever runs (the measurement worker is killed), so the
  // destructor's bounded wait is short.
  work_->abortAll();
  QSettings settings;
  settings.setValue("window/geometry", saveGeometry());
  settings.setValue("window/state", saveState());
  QMainWindow::closeEvent(event);
}

}  // namespace collage
