#include "app/main_window.h"

#include "app/input_shape_dialog.h"

#include <QApplication>
#include <QCloseEvent>
#include <QCheckBox>
#include <QComboBox>
#include <QDockWidget>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QElapsedTimer>
#include <QVBoxLayout>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QGraphicsItem>
#include <QHeaderView>
#include <QImage>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QSvgGenerator>
#include <QTextStream>
#include <QTableView>
#include <QToolBar>
#include <QtConcurrent/QtConcurrent>

#include <cmath>
#include <set>
#include <algorithm>

#include "backends/backend_list.h"
#include "core/measure/machine_timing_lock.h"
#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/plan/plan_export.h"
#include "views/background_work.h"
#include "views/find_bar.h"
#include "views/graph_scene.h"
#include "views/layout_job.h"
#include "views/pattern_editor.h"
#include "views/search_chart.h"
#include "views/session_runner.h"
#include "views/graph_view.h"
#include "views/kernel_table_model.h"
#include "views/node_inspector.h"
#include "views/override_commands.h"
#include "views/optimize_worker.h"
#include "views/plan_diff_panel.h"

namespace collage {
namespace {

constexpr int kMaxRecentFiles = 10;
// The Ops column's widest fit: a fused group's ops ("Conv+Add+Relu+...") can
// be wider than the screen and push Backend and Median out of sight. Longer
// text is elided in the middle; the tooltip has all of it.
constexpr int kMaxOpsColumnWidth = 360;

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

QString formatSeconds(double s) {
  if (s < 0) return QStringLiteral("?");
  if (s < 60) return QString::number(s, 'f', 0) + " s";
  return QString::number(s / 60, 'f', 1) + " min";
}

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  OptimizeWorker::registerMetaTypes();
  buildUi();
  reloadPatternEditorSpecs();
  setAcceptDrops(true);
  connect(&importWatcher_, &QFutureWatcher<LoadedModel>::finished, this, &MainWindow::onImportDone);
  QSettings settings;
  restoreGeometry(settings.value("window/geometry").toByteArray());
  restoreState(settings.value("window/state").toByteArray());
}

MainWindow::~MainWindow() {
  // Aborts and waits at most about a second (BackgroundWork's destructor),
  // before the views its signals would reach are gone.
  delete work_;
  work_ = nullptr;
  importWatcher_.waitForFinished();
  if (layoutJob_) layoutJob_->cancel();
}

void MainWindow::buildUi() {
  setWindowTitle(tr("Collage Studio"));
  scene_ = new GraphScene(this);
  view_ = new GraphView(this);
  view_->setScene(scene_);
  findBar_ = new FindBar(scene_, view_, this);
  findBar_->hide();
  auto* central = new QWidget(this);
  auto* centralLayout = new QVBoxLayout(central);
  centralLayout->setContentsMargins(0, 0, 0, 0);
  centralLayout->setSpacing(0);
  centralLayout->addWidget(findBar_);
  centralLayout->addWidget(view_, 1);
  setCentralWidget(central);
  layoutJob_ = new LayoutJob(this);
  connect(layoutJob_, &LayoutJob::finished, this, &MainWindow::onLayoutFinished);
  connect(layoutJob_, &LayoutJob::failed, this, &MainWindow::onLayoutStopped);
  connect(layoutJob_, &LayoutJob::cancelled, this, [this] { onLayoutStopped(QString()); });
  connect(scene_, &GraphScene::groupExpandRequested, layoutJob_, &LayoutJob::expandGroup);
  connect(scene_, &QGraphicsScene::selectionChanged, this, &MainWindow::onSceneSelection);

  inspector_ = new InspectorPanel(this);
  work_ = new BackgroundWork(this);
  overrides_ = new OverrideController(this);
  overrides_->setBackgroundWork(work_);
  connect(overrides_, &OverrideController::measuring, this, [this](const QString& what) {
    status_->setText(what);
  });
  connect(overrides_, &OverrideController::planChanged, this, &MainWindow::onPlanChanged);
  connect(overrides_, &OverrideController::refused, this, [this](const QString& why) {
    status_->setText(why);
    if (dialogsAllowed()) QMessageBox::information(this, tr("Override refused"), why);
  });
  view_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(view_, &QWidget::customContextMenuRequested, this, &MainWindow::showGraphContextMenu);
  auto* inspectorDock = new QDockWidget(tr("Inspector"), this);
  inspectorDock->setObjectName("inspector");
  inspectorDock->setWidget(inspector_);
  addDockWidget(Qt::RightDockWidgetArea, inspectorDock);

  kernels_ = new KernelTableModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(kernels_);
  proxy_->setSortRole(KernelTableModel::kSortRole);
  proxy_->setFilterKeyColumn(-1);
  proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  settings_ = OptimizeSettings::load();
  table_ = new QTableView(this);
  table_->setObjectName("kernelTable");
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->horizontalHeader()->setStretchLastSection(true);
  // One line per kernel, elided in the middle (both ends of an op list say most).
  table_->setWordWrap(false);
  table_->setTextElideMode(Qt::ElideMiddle);
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &MainWindow::onTableSelection);
  // Above the table: a filter over every column, the choice between the
  // plan's kernels and every measured candidate, and predicted vs measured.
  tableFilter_ = new QLineEdit(this);
  tableFilter_->setPlaceholderText(tr("Filter (ops, backend, ...)"));
  tableFilter_->setClearButtonEnabled(true);
  connect(tableFilter_, &QLineEdit::textChanged, proxy_, &QSortFilterProxyModel::setFilterFixedString);
  tableFilter_->setObjectName("kernelFilter");
  allCandidates_ = new QCheckBox(tr("Every candidate"), this);
  allCandidates_->setObjectName("allCandidates");
  allCandidates_->setToolTip(tr("List every measured candidate, not only the plan's kernels"));
  connect(allCandidates_, &QCheckBox::toggled, this, &MainWindow::refreshKernelTable);
  planSummary_ = new QLabel(this);
  planSummary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* kernelPanel = new QWidget(this);
  auto* kernelLayout = new QVBoxLayout(kernelPanel);
  kernelLayout->setContentsMargins(2, 2, 2, 2);
  auto* kernelBar = new QHBoxLayout;
  kernelBar->addWidget(tableFilter_, 1);
  kernelBar->addWidget(allCandidates_);
  kernelBar->addWidget(planSummary_);
  kernelLayout->addLayout(kernelBar);
  kernelLayout->addWidget(table_, 1);
  auto* kernelDock = new QDockWidget(tr("Kernels"), this);
  kernelDock->setObjectName("kernels");
  kernelDock->setWidget(kernelPanel);
  addDockWidget(Qt::BottomDockWidgetArea, kernelDock);

  chart_ = new SearchChart(this);
  auto* xAxisChoice = new QComboBox(this);
  xAxisChoice->setObjectName("searchXAxis");
  using XAxisQuantity = SearchChart::XAxisQuantity;
  for (auto quantity : {XAxisQuantity::Seconds, XAxisQuantity::Evaluations, XAxisQuantity::Step})
    xAxisChoice->addItem(SearchChart::xAxisQuantityName(quantity), static_cast<int>(quantity));
  xAxisChoice->setCurrentIndex(xAxisChoice->findData(static_cast<int>(chart_->xAxisQuantity())));
  connect(xAxisChoice, QOverload<int>::of(&QComboBox::currentIndexChanged), this,
          [this, xAxisChoice] {
            const int quantity = xAxisChoice->currentData().toInt();
            chart_->setXAxisQuantity(static_cast<XAxisQuantity>(quantity));
          });
  auto* chartPanel = new QWidget(this);
  auto* chartLayout = new QVBoxLayout(chartPanel);
  chartLayout->setContentsMargins(2, 2, 2, 2);
  auto* chartBar = new QHBoxLayout;
  chartBar->addWidget(new QLabel(tr("Against:"), this));
  chartBar->addWidget(xAxisChoice);
  chartBar->addStretch();
  chartLayout->addLayout(chartBar);
  chartLayout->addWidget(chart_, 1);
  auto* chartDock = new QDockWidget(tr("Search"), this);
  chartDock->setObjectName("search");
  chartDock->setWidget(chartPanel);
  addDockWidget(Qt::BottomDockWidgetArea, chartDock);

  planDiff_ = new PlanDiffPanel(this);
  connect(planDiff_, &PlanDiffPanel::nodesActivated, this, [this](const QVector<NodeId>& nodes) {
    scene_->selectNodes(nodes);
    view_->centerOnNodes(nodes);
  });
  auto* diffDock = new QDockWidget(tr("Plan diff"), this);
  diffDock->setObjectName("planDiff");
  diffDock->setWidget(planDiff_);
  addDockWidget(Qt::BottomDockWidgetArea, diffDock);

  patternEditor_ = new PatternEditor(this);
  auto* patternDock = new QDockWidget(tr("Patterns"), this);
  patternDock->setObjectName("patterns");
  patternDock->setWidget(patternEditor_);
  addDockWidget(Qt::BottomDockWidgetArea, patternDock);
  tabifyDockWidget(kernelDock, patternDock);
  tabifyDockWidget(kernelDock, chartDock);
  tabifyDockWidget(kernelDock, diffDock);
  // First start (no saved layout): the graph gets most of the window.
  resizeDocks({inspectorDock}, {380}, Qt::Horizontal);
  resizeDocks({kernelDock}, {230}, Qt::Vertical);
  kernelDock->raise();
  // A registered, disabled or removed pattern takes effect at the next
  // optimisation: the backend set is rebuilt then (not during a run: the
  // running job's candidates point into its specs).
  connect(patternEditor_, &PatternEditor::patternsChanged, this, [this] {
    if (!isOptimizing()) backendSet_.reset();
    status_->setText(tr("Patterns changed: the next optimisation uses them"));
  });
  connect(patternEditor_, &PatternEditor::matchesChanged, this,
          [this](const QVector<QVector<NodeId>>& matches) {
            QVector<NodeId> all;
            for (const auto& m : matches) all += m;
            scene_->setHighlightedNodes(all);
          });
  connect(patternEditor_, &PatternEditor::matchActivated, this, [this](const QVector<NodeId>& nodes) {
    scene_->selectNodes(nodes);
    view_->centerOnNodes(nodes);
  });

  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open model..."), this, &MainWindow::openModelDialog, QKeySequence::Open);
  recentMenu_ = file->addMenu(tr("Open &recent"));
  connect(recentMenu_, &QMenu::aboutToShow, this, &MainWindow::rebuildRecentMenu);
  file->addAction(tr("Open p&lan..."), this, &MainWindow::openPlanDialog);
  file->addAction(tr("&Save plan..."), this, &MainWindow::savePlanDialog, QKeySequence::Save);
  QMenu* exportMenu = file->addMenu(tr("&Export"));
  exportMenu->addAction(tr("Graph as SVG or PNG..."), this, &MainWindow::exportImageDialog);
  exportMenu->addAction(tr("Annotated ONNX model (Netron)..."), this, [this] {
    exportDialog(tr("Export annotated model"), QFileInfo(modelPath_).completeBaseName() + ".collage.onnx",
                 tr("ONNX models (*.onnx)"), &MainWindow::exportAnnotatedModel);
  });
  exportMenu->addAction(tr("Node data (Model Explorer)..."), this, [this] {
    exportDialog(tr("Export node data"), "node_data.json", tr("JSON (*.json)"), &MainWindow::exportNodeData);
  });
  exportMenu->addAction(tr("Kernel timeline (Chrome trace, Perfetto)..."), this, [this] {
    exportDialog(tr("Export trace"), "trace.json", tr("JSON (*.json)"), &MainWindow::exportTrace);
  });
  exportMenu->addAction(tr("Measurements as CSV..."), this, [this] {
    exportDialog(tr("Export measurements"), "measurements.csv", tr("CSV (*.csv)"),
                 &MainWindow::exportMeasurementsCsv);
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), this, &QWidget::close, QKeySequence::Quit);
  QMenu* edit = menuBar()->addMenu(tr("&Edit"));
  QAction* undo = overrides_->undoStack()->createUndoAction(this, tr("&Undo override"));
  undo->setShortcut(QKeySequence::Undo);
  edit->addAction(undo);
  QAction* redo = overrides_->undoStack()->createRedoAction(this, tr("&Redo override"));
  redo->setShortcut(QKeySequence::Redo);
  edit->addAction(redo);
  QMenu* viewMenu = menuBar()->addMenu(tr("&View"));
  viewMenu->addAction(tr("Zoom &in"), view_, &GraphView::zoomIn, QKeySequence::ZoomIn);
  viewMenu->addAction(tr("Zoom &out"), view_, &GraphView::zoomOut, QKeySequence::ZoomOut);
  viewMenu->addAction(tr("&Fit"), view_, &GraphView::fitAll, QKeySequence(QStringLiteral("Ctrl+0")));
  viewMenu->addAction(tr("&Find node..."), findBar_, &FindBar::activate, QKeySequence::Find);
  // Big graphs open as groups (double-click one to open it): this closes them again.
  viewMenu->addAction(tr("&Collapse opened groups"), layoutJob_, &LayoutJob::collapseAll);
  viewMenu->addSeparator();
  viewMenu->addAction(inspectorDock->toggleViewAction());
  viewMenu->addAction(kernelDock->toggleViewAction());
  viewMenu->addAction(patternDock->toggleViewAction());
  viewMenu->addAction(chartDock->toggleViewAction());
  viewMenu->addAction(diffDock->toggleViewAction());

  QToolBar* tools = addToolBar(tr("Main"));
  tools->setObjectName("main-toolbar");
  tools->addAction(tr("Open"), this, &MainWindow::openModelDialog);
  optimizeAction_ = tools->addAction(tr("Optimize..."), this, &MainWindow::optimizeWithOptions);
  optimizeAction_->setToolTip(tr("Choose backends, database and time budget, then optimise"));
  optimizeAction_->setEnabled(false);
  measureAction_ = tools->addAction(tr("Measure plan"), this, &MainWindow::measurePlan);
  measureAction_->setToolTip(tr("Run the plan end to end (10 runs) and show it next to the prediction"));
  measureAction_->setEnabled(false);
  tools->addAction(tr("Fit"), view_, &GraphView::fitAll);

  status_ = new QLabel(tr("Open an ONNX model (File > Open, or drop it here)"), this);
  progress_ = new QProgressBar(this);
  progress_->setMaximumWidth(260);
  progress_->setVisible(false);
  cancel_ = new QPushButton(tr("Cancel"), this);
  cancel_->setVisible(false);
  connect(cancel_, &QPushButton::clicked, this, &MainWindow::cancelCurrentWork);
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(progress_);
  statusBar()->addPermanentWidget(cancel_);

  // Only results of the latest request arrive here (BackgroundWork drops the rest).
  connect(work_, &BackgroundWork::measureProgress, this, &MainWindow::onMeasureProgress);
  connect(work_, &BackgroundWork::searchStep, this, &MainWindow::onSearchStep);
  connect(work_, &BackgroundWork::searchSteps, chart_, &SearchChart::addSteps);
  connect(work_, &BackgroundWork::bestPlanChanged, this, &MainWindow::showBestPlanSoFar);
  connect(work_, &BackgroundWork::timeBudgetExpired, this, [this] {
    status_->setText(tr("Time budget used up: keeping the best plan so far"));
  });
  // Another process timing kernels on this machine: the job waits its turn
  // (core/measure/machine_timing_lock.h) and the status bar says for whom.
  connect(work_, &BackgroundWork::logLine, this, [this](const QString& line) {
    if (line.startsWith(QLatin1String(kWaitingForTimingLock))) status_->setText(line);
  });
  connect(work_, &BackgroundWork::optimizationFinished, this, &MainWindow::onOptimizationDone);
  connect(work_, &BackgroundWork::optimizationFailed, this, &MainWindow::onOptimizationError);
  connect(work_, &BackgroundWork::planRunFinished, this,
          [this](double ms, double spread, qint64 peakBytes) {
            planSummary_->setText(formatPredictedVsMeasured(runPredictedNs_, ms, spread) +
                                  tr(", peak %1 MiB").arg(peakBytes / 1048576.0, 0, 'f', 1));
            emit planMeasured(ms);
          });
  connect(work_, &BackgroundWork::planRunFailed, this, [this](const QString& message) {
    planSummary_->setText(tr("the plan failed to run"));
    status_->setText(tr("Running the plan failed: %1").arg(message));
    emit planMeasureFailed(message);
  });
}

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
  if (importWatcher_.isRunning()) {
    status_->setText(tr("Still importing the previous model"));
    return;
  }
  if (isOptimizing()) {
    status_->setText(tr("Cancel the optimisation before opening another model"));
    return;
  }
  QStringList shapes = inputShapes;
  if (shapes.isEmpty()) {
    // The declared inputs are read without the weights (milliseconds even
    // for BERT-base), so asking before the import costs nothing.
    std::vector<DeclaredInput> declared;
    try {
      declared = readDeclaredInputs(path.toStdString());
    } catch (const std::exception&) {
      // The import below reports the same problem with the full message.
    }
    const QString key = QStringLiteral("inputShapes/") + QFileInfo(path).absoluteFilePath();
    const QStringList previous = QSettings().value(key).toStringList();
    const bool dynamic = std::any_of(declared.begin(), declared.end(),
                                     [](const DeclaredInput& d) { return d.isDynamic(); });
    if (dynamic && dialogsAllowed()) {
      InputShapeDialog dialog(QFileInfo(path).fileName(), declared, previous, this);
      if (dialog.exec() != QDialog::Accepted) {
        status_->setText(tr("Opening %1 cancelled").arg(QFileInfo(path).fileName()));
        return;
      }
      shapes = dialog.bindings();
    } else if (dynamic) {
      shapes = previous;
    }
  }
  startLoad(path, shapes);
}

void MainWindow::startLoad(const QString& path, const QStringList& inputShapes) {
  layoutJob_->cancel();  // a model still being laid out is dropped
  status_->setText(tr("Loading %1...").arg(QFileInfo(path).fileName()));
  progress_->setRange(0, 0);
  progress_->setVisible(true);
  importWatcher_.setFuture(QtConcurrent::run(importModel, path, inputShapes));
}

bool MainWindow::isLoading() const { return importWatcher_.isRunning() || layoutJob_->isRunning(); }

void MainWindow::onImportDone() {
  LoadedModel loaded = importWatcher_.result();
  if (!loaded.error.isEmpty()) {
    progress_->setVisible(isOptimizing());
    status_->setText(tr("Cannot open %1").arg(loaded.path));
    if (dialogsAllowed()) QMessageBox::warning(this, tr("Cannot open model"), loaded.error);
    emit loadFailed(loaded.error);
    return;
  }
  pending_ = std::move(loaded);
  status_->setText(tr("Laying out %1 (%2 nodes)...")
                       .arg(QFileInfo(pending_.path).fileName())
                       .arg(pending_.graph->numNodes()));
  cancel_->setVisible(true);
  cancel_->setEnabled(true);
  layoutJob_->start(pending_.graph);
}

void MainWindow::onLayoutFinished(const GraphLayout& layout) {
  if (graph_ && layoutJob_->graph() == graph_) {
    scene_->setGraph(graph_, layout);  // a group expanded or collapsed: colours are kept
    return;
  }
  if (!pending_.graph || layoutJob_->graph() != pending_.graph) return;
  modelPath_ = pending_.path;
  inputShapes_ = pending_.inputShapes;
  if (!inputShapes_.isEmpty())
    QSettings().setValue(QStringLiteral("inputShapes/") + QFileInfo(modelPath_).absoluteFilePath(),
                         inputShapes_);
  addRecentFile(modelPath_);
  graph_ = pending_.graph;
  pending_ = LoadedModel{};
  plan_.reset();
  lastResult_.reset();
  // A plan run or an override measurement of the previous model: stopped, and
  // whatever it would still report is dropped.
  work_->abortAll();
  planSummary_->clear();
  chart_->clear();
  planDiff_->clear();
  measureAction_->setEnabled(false);
  kernels_->clear();
  scene_->setGraph(graph_, layout);
  showGraphStart();
  inspector_->clear();
  overrides_->clear();
  patternEditor_->setGraph(graph_);
  optimizeAction_->setEnabled(!isOptimizing());
  progress_->setVisible(isOptimizing());
  cancel_->setVisible(isOptimizing());
  setWindowTitle(tr("Collage Studio - %1").arg(QFileInfo(modelPath_).fileName()));
  status_->setText(tr("%1: %2 nodes%3")
                       .arg(QFileInfo(modelPath_).fileName())
                       .arg(graph_->numNodes())
                       .arg(layout.fromCache ? tr(" (layout from cache)") : QString()));
  emit modelLoaded();
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

void MainWindow::onLayoutStopped(const QString& why) {
  progress_->setVisible(isOptimizing());
  cancel_->setVisible(isOptimizing());
  if (!pending_.graph) return;  // an expand that was superseded
  const QString name = QFileInfo(pending_.path).fileName();
  pending_ = LoadedModel{};
  if (why.isEmpty()) {
    status_->setText(tr("Opening %1 cancelled").arg(name));
    emit loadFailed(tr("cancelled"));
  } else {
    status_->setText(tr("Cannot lay out %1: %2").arg(name, why));
    emit loadFailed(why);
  }
}

void MainWindow::cancelCurrentWork() {
  if (layoutJob_->isRunning())
    layoutJob_->cancel();
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

bool MainWindow::isOptimizing() const { return work_->isOptimizing(); }

void MainWindow::setBackends(const QStringList& names) {
  if (names == settings_.backends) return;
  settings_.backends = names;
  if (!isOptimizing()) backendSet_.reset();
}

void MainWindow::setOptimizeSettings(const OptimizeSettings& settings) {
  setBackends(settings.backends);
  settings_ = settings;
}

void MainWindow::optimizeWithOptions() {
  if (!graph_ || isOptimizing()) return;
  if (dialogsAllowed()) {
    QStringList available;
    for (const std::string& name : builtinBackendNames()) available << QString::fromStdString(name);
    OptimizeOptionsDialog dialog(settings_, available, this);
    if (dialog.exec() != QDialog::Accepted) return;
    setOptimizeSettings(dialog.settings());
  }
  startOptimization();
}

OptimizationJobOptions MainWindow::jobOptions() {
  std::vector<std::string> names;
  for (const QString& n : settings_.backends) names.push_back(n.toStdString());
  if (!backendSet_)
    backendSet_ = std::make_shared<BackendSet>(
        loadBackendSet(names, patternEditor_->userPatternPath().toStdString()));
  OptimizationJobOptions options;
  options.modelPath = modelPath_.toStdString();
  for (const QString& binding : inputShapes_) options.inputShapes.push_back(binding.toStdString());
  options.capabilities = backendSet_->capabilities();
  options.versions = backendSet_->versions();
  settings_.applyTo(options);
  options.workerExecutable = findCollageCli(QCoreApplication::applicationDirPath()).toStdString();
  if (options.workerExecutable.empty())
    throw Error("cannot find the 'collage' executable that measures kernels (set COLLAGE_CLI)");
  // The user's overrides are pins the optimizer honours.
  options.constraints = overrides_->constraints();
  // The plan is run end to end against the baselines before it is kept.
  options.backends = [set = backendSet_](const std::string& n) { return set->find(n); };
  return options;
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
  work_->optimize(graph_, std::move(options), settings_.timeBudgetSeconds);
  setBusy(true);
  status_->setText(tr("Optimizing..."));
}

void MainWindow::cancelOptimization() {
  if (!isOptimizing()) return;
  work_->cancelOptimization();
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
  status_->setText(tr("Measuring %1/%2 (%3 cached, %4 failed), ETA %5  %6")
                       .arg(e.done)
                       .arg(e.total)
                       .arg(e.cached)
                       .arg(e.failed)
                       .arg(formatSeconds(e.etaSeconds))
                       .arg(QString::fromStdString(e.current)));
}

void MainWindow::onSearchStep(const SearchStepEvent& e) {
  status_->setText(tr("%1 search: step %2, %3 evaluated, best %4 ms")
                       .arg(QString::fromStdString(e.search))
                       .arg(e.step)
                       .arg(e.evaluations)
                       .arg(e.bestCostNs / 1e6, 0, 'f', 3));
}

void MainWindow::onOptimizationDone(std::shared_ptr<const OptimizationResult> result) {
  lastResult_ = result;
  setBusy(false);
  // A graph-level search stopped by Cancel (or the time budget) returns the
  // best plan it found; the job itself finished, so only the search says so.
  const bool cancelled =
      result->cancelled || (result->graphLevelRan &&
                            result->graphLevel.evolution.stop == EvolutionResult::Stop::Cancelled);
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
    planDiff_->showResult(*graph_, *result);
    // The end-to-end check behind the choice, on hover over "predicted / measured".
    planSummary_->setToolTip(QString::fromStdString(result->endToEnd));
    status_->setText(tr("%1: predicted %2 ms, %3 kernels (%4 measured, %5 cached)")
                         .arg(cancelled ? tr("Cancelled, best plan so far") : tr("Done"))
                         .arg(plan_->predictedNs / 1e6, 0, 'f', 3)
                         .arg(plan_->groups.size())
                         .arg(result->report.measured)
                         .arg(result->report.cached) +
                     (result->graphLevelRan ? QStringLiteral("; ") + planDiff_->summary()
                                            : QString()) +
                     (result->warnings.empty() ? QString()
                                               : QStringLiteral("; warning: ") +
                                                     QString::fromStdString(result->warnings.front())));
  } else {
    status_->setText(tr("Cancelled before every kernel was measured; no plan"));
  }
  emit optimizationFinished(result->hasPlan);
  if (result->hasPlan) measurePlan();
}

void MainWindow::onOptimizationError(const QString& message) {
  setBusy(false);
  status_->setText(tr("Optimisation failed: %1").arg(message));
  emit optimizationFailed(message);
}

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
  scene_->setNodeColors(colors, legend);
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

void MainWindow::measurePlan() {
  // Not beside an optimisation: the request would abort it.
  if (!graph_ || !plan_ || isOptimizing()) return;
  try {
    if (!backendSet_)
      backendSet_ = std::make_shared<BackendSet>(
          loadBackendSet({}, patternEditor_->userPatternPath().toStdString()));
  } catch (const std::exception& e) {
    emit planMeasureFailed(QString::fromStdString(e.what()));
    return;
  }
  runPredictedNs_ = plan_->predictedNs;
  planSummary_->setText(tr("predicted %1 ms, measuring...").arg(runPredictedNs_ / 1e6, 0, 'f', 3));
  work_->runPlan(graph_, *plan_, [set = backendSet_](const std::string& n) { return set->find(n); }, 10);
}

bool MainWindow::exportTrace(const QString& path, QString* error) {
  const SessionRunner* run = work_->lastPlanRun();
  if (!run || run->timings().empty()) {
    if (error) *error = tr("no kernel timings yet: Measure plan first");
    return false;
  }
  try {
    exportChromeTrace(run->plan(), run->timings(), path.toStdString());
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void MainWindow::onSceneSelection() {
  if (!graph_) return;
  inspector_->showSelection(graph_.get(), scene_->selectedNodes(), plan(), overrides_->result());
}

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

bool MainWindow::savePlanTo(const QString& path, QString* error) {
  if (!plan_) {
    if (error) *error = tr("no plan yet: optimise first");
    return false;
  }
  try {
    savePlan(*plan_, path.toStdString());
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool MainWindow::exportImage(const QString& path, QString* error) {
  QRectF source = scene_->sceneRect();
  if (path.endsWith(QLatin1String(".svg"), Qt::CaseInsensitive)) {
    QSvgGenerator svg;
    svg.setFileName(path);
    svg.setSize(source.size().toSize());
    svg.setViewBox(QRectF(QPointF(0, 0), source.size()));
    svg.setTitle(windowTitle());
    QPainter painter;
    if (!painter.begin(&svg)) {
      if (error) *error = tr("cannot write %1").arg(path);
      return false;
    }
    scene_->render(&painter, QRectF(QPointF(0, 0), source.size()), source);
    painter.end();
    return true;
  }
  // PNG: cap the size so a huge graph does not need gigabytes.
  double scale = std::min(2.0, 16000.0 / std::max(1.0, std::max(source.width(), source.height())));
  QImage image((source.size() * scale).toSize(), QImage::Format_ARGB32);
  image.fill(Qt::white);
  QPainter painter(&image);
  painter.setRenderHint(QPainter::Antialiasing);
  scene_->render(&painter, QRectF(QPointF(0, 0), QSizeF(image.size())), source);
  painter.end();
  if (!image.save(path)) {
    if (error) *error = tr("cannot write %1").arg(path);
    return false;
  }
  return true;
}

void MainWindow::savePlanDialog() {
  QString path = QFileDialog::getSaveFileName(this, tr("Save plan"), "plan.json", tr("Plans (*.json)"));
  if (path.isEmpty()) return;
  QString error;
  if (!savePlanTo(path, &error)) QMessageBox::warning(this, tr("Cannot save plan"), error);
}

void MainWindow::exportDialog(const QString& title, const QString& defaultName, const QString& filter,
                              bool (MainWindow::*exporter)(const QString&, QString*)) {
  QString path = QFileDialog::getSaveFileName(this, title, defaultName, filter);
  if (path.isEmpty()) return;
  QString error;
  if ((this->*exporter)(path, &error))
    status_->setText(tr("Wrote %1").arg(path));
  else
    QMessageBox::warning(this, title, error);
}

bool MainWindow::exportAnnotatedModel(const QString& path, QString* error) {
  if (!plan_) {
    if (error) *error = tr("no plan yet: optimise first");
    return false;
  }
  try {
    exportAnnotatedOnnx(modelPath_.toStdString(), *plan_, path.toStdString());
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool MainWindow::exportNodeData(const QString& path, QString* error) {
  if (!plan_) {
    if (error) *error = tr("no plan yet: optimise first");
    return false;
  }
  try {
    exportModelExplorerNodeData(*plan_, path.toStdString(), NodeDataKind::Backend);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool MainWindow::exportMeasurementsCsv(const QString& path, QString* error) {
  QFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
    if (error) *error = tr("cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  // RFC 4180: quote every field, double the quotes inside.
  auto quoted = [](QString text) { return '"' + text.replace('"', QLatin1String("\"\"")) + '"'; };
  QTextStream out(&file);
  QStringList header;
  for (int c = 0; c < proxy_->columnCount(); ++c)
    header << quoted(proxy_->headerData(c, Qt::Horizontal).toString());
  out << header.join(',') << '\n';
  for (int r = 0; r < proxy_->rowCount(); ++r) {
    QStringList row;
    for (int c = 0; c < proxy_->columnCount(); ++c) row << quoted(proxy_->index(r, c).data().toString());
    out << row.join(',') << '\n';
  }
  out.flush();
  if (file.error() != QFileDevice::NoError) {
    if (error) *error = tr("cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  return true;
}

void MainWindow::openPlanDialog() {
  QString path = QFileDialog::getOpenFileName(this, tr("Open plan"), QString(), tr("Plans (*.json)"));
  if (path.isEmpty()) return;
  QString error;
  if (!openPlan(path, &error)) QMessageBox::warning(this, tr("Cannot use this plan"), error);
}

bool MainWindow::openPlan(const QString& path, QString* error) {
  if (!graph_) {
    if (error) *error = tr("open the plan's model first");
    return false;
  }
  try {
    Plan plan = loadPlan(path.toStdString());
    // The views show the model as imported; a rewritten one is for later.
    if (!plan.substitutions.empty())
      throw Error(plan.displayName() + " was made with " + std::to_string(plan.substitutions.size()) +
                  " graph substitution(s); the app does not show rewritten graphs yet: use `collage run` "
                  "or `collage explain` with it");
    if (!backendSet_)
      backendSet_ = std::make_shared<BackendSet>(
          loadBackendSet({}, patternEditor_->userPatternPath().toStdString()));
    std::vector<std::string> warnings =
        checkPlanAgainst(plan, *graph_, modelPath_.toStdString(), backendSet_->versions());
    plan_ = std::move(plan);
    showPlan();
    QString text = tr("Plan %1: predicted %2 ms, %3 kernels")
                       .arg(QFileInfo(path).fileName())
                       .arg(plan_->predictedNs / 1e6, 0, 'f', 3)
                       .arg(plan_->groups.size());
    for (const std::string& w : warnings) text += QStringLiteral("; ") + QString::fromStdString(w);
    status_->setText(text);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    status_->setText(tr("Cannot use plan %1").arg(QFileInfo(path).fileName()));
    return false;
  }
}

QStringList MainWindow::recentFiles() const {
  return QSettings().value(QStringLiteral("recentFiles")).toStringList();
}

void MainWindow::addRecentFile(const QString& path) {
  QStringList files = recentFiles();
  const QString absolute = QFileInfo(path).absoluteFilePath();
  files.removeAll(absolute);
  files.prepend(absolute);
  while (files.size() > kMaxRecentFiles) files.removeLast();
  QSettings().setValue(QStringLiteral("recentFiles"), files);
}

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

void MainWindow::exportImageDialog() {
  QString path = QFileDialog::getSaveFileName(this, tr("Export graph"), "graph.svg",
                                              tr("SVG (*.svg);;PNG (*.png)"));
  if (path.isEmpty()) return;
  QString error;
  if (!exportImage(path, &error)) QMessageBox::warning(this, tr("Cannot export"), error);
}

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
