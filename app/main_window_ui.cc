// MainWindow::buildUi(): the window's widgets, one piece a dock, menu or bar.
// Each piece creates its widgets and connects what is internal to it; what
// crosses pieces (the background work to the status bar) is connected last,
// in connectBackgroundWork(), when every widget it reaches exists.
#include <QCheckBox>
#include <QComboBox>
#include <QDockWidget>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QTableView>
#include <QToolBar>
#include <QUndoStack>
#include <QVBoxLayout>

#include "app/main_window.h"
#include "core/measure/machine_timing_lock.h"
#include "views/background_work.h"
#include "views/decode_panel.h"
#include "views/find_bar.h"
#include "views/graph_scene.h"
#include "views/graph_view.h"
#include "views/kernel_table_model.h"
#include "views/layout_job.h"
#include "views/node_inspector.h"
#include "views/override_commands.h"
#include "views/pattern_editor.h"
#include "views/plan_diff_panel.h"
#include "views/search_chart.h"
#include "views/session_runner.h"

namespace collage {
namespace {

// A dock around `widget`, named for the saved window state.
QDockWidget* dock(QMainWindow* window, const QString& title, const char* objectName,
                  QWidget* widget, Qt::DockWidgetArea area) {
  auto* d = new QDockWidget(title, window);
  d->setObjectName(objectName);
  d->setWidget(widget);
  window->addDockWidget(area, d);
  return d;
}

// A panel with a bar of controls above a main widget that takes the rest.
QWidget* panelWithBar(QWidget* parent, QLayout* bar, QWidget* main) {
  auto* panel = new QWidget(parent);
  auto* layout = new QVBoxLayout(panel);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addLayout(bar);
  layout->addWidget(main, 1);
  return panel;
}

}  // namespace

void MainWindow::buildUi() {
  setWindowTitle(tr("Collage Studio"));
  buildGraphView();
  buildControllers();
  QDockWidget* inspectorDock = buildInspectorDock();
  QDockWidget* kernelDock = buildKernelDock();
  QDockWidget* chartDock = buildSearchDock();
  QDockWidget* diffDock = buildPlanDiffDock();
  QDockWidget* patternDock = buildPatternDock();
  QDockWidget* pipelineDock = buildPipelineDock();  // main_window_pipeline.cc
  tabifyDockWidget(kernelDock, patternDock);
  tabifyDockWidget(kernelDock, pipelineDock);
  tabifyDockWidget(kernelDock, stageGraphDock_);  // built with the timeline
  tabifyDockWidget(kernelDock, chartDock);
  tabifyDockWidget(kernelDock, diffDock);
  QDockWidget* decodeDock = buildDecodeDock();
  tabifyDockWidget(kernelDock, decodeDock);
  // First start (no saved layout): the graph gets most of the window.
  resizeDocks({inspectorDock}, {380}, Qt::Horizontal);
  resizeDocks({kernelDock}, {230}, Qt::Vertical);
  kernelDock->raise();
  buildMenus({inspectorDock, kernelDock, patternDock, chartDock, diffDock, decodeDock, pipelineDock,
              stageGraphDock_});
  buildToolBarAndStatus();
  connectBackgroundWork();
}

void MainWindow::buildGraphView() {
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
  connect(scene_, &QGraphicsScene::selectionChanged, this, &MainWindow::onSceneSelection);
  view_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(view_, &QWidget::customContextMenuRequested, this, &MainWindow::showGraphContextMenu);
}

void MainWindow::buildControllers() {
  loader_ = new ModelLoader(this);
  connect(loader_, &ModelLoader::imported, this, &MainWindow::onImported);
  connect(loader_, &ModelLoader::importFailed, this, &MainWindow::onImportFailed);
  connect(loader_, &ModelLoader::loaded, this, &MainWindow::onModelLoaded);
  // A group expanded or collapsed: colours are kept.
  connect(loader_, &ModelLoader::relaidOut, this,
          [this](const GraphLayout& layout) { scene_->setGraph(graph_, layout); });
  connect(loader_, &ModelLoader::layoutStopped, this, &MainWindow::onLayoutStopped);
  connect(loader_, &ModelLoader::rewriteFailed, this, &MainWindow::onRewriteFailed);
  connect(scene_, &GraphScene::groupExpandRequested, loader_->layoutJob(), &LayoutJob::expandGroup);

  optimiser_ = new OptimisationController(this);
  work_ = optimiser_->work();
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
}

QDockWidget* MainWindow::buildInspectorDock() {
  inspector_ = new InspectorPanel(this);
  return dock(this, tr("Inspector"), "inspector", inspector_, Qt::RightDockWidgetArea);
}

QDockWidget* MainWindow::buildKernelDock() {
  kernels_ = new KernelTableModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(kernels_);
  proxy_->setSortRole(KernelTableModel::kSortRole);
  proxy_->setFilterKeyColumn(-1);
  proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
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
  auto* kernelBar = new QHBoxLayout;
  kernelBar->addWidget(tableFilter_, 1);
  kernelBar->addWidget(allCandidates_);
  kernelBar->addWidget(planSummary_);
  return dock(this, tr("Kernels"), "kernels", panelWithBar(this, kernelBar, table_),
              Qt::BottomDockWidgetArea);
}

QDockWidget* MainWindow::buildSearchDock() {
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
  auto* chartBar = new QHBoxLayout;
  chartBar->addWidget(new QLabel(tr("Against:"), this));
  chartBar->addWidget(xAxisChoice);
  chartBar->addStretch();
  return dock(this, tr("Search"), "search", panelWithBar(this, chartBar, chart_),
              Qt::BottomDockWidgetArea);
}

QDockWidget* MainWindow::buildPlanDiffDock() {
  planDiff_ = new PlanDiffPanel(this);
  connect(planDiff_, &PlanDiffPanel::nodesActivated, this, [this](const QVector<NodeId>& nodes) {
    scene_->selectNodes(nodes);
    view_->centerOnNodes(nodes);
  });
  return dock(this, tr("Plan diff"), "planDiff", planDiff_, Qt::BottomDockWidgetArea);
}

QDockWidget* MainWindow::buildDecodeDock() {
  decodePanel_ = new DecodePanel(this);
  connect(decodePanel_, &DecodePanel::measureRequested, this, &MainWindow::measureDecode);
  decodeDock_ = dock(this, tr("Decode"), "decode", decodePanel_, Qt::BottomDockWidgetArea);
  // Only for a decoder (onModelLoaded shows it).
  decodeDock_->hide();
  decodeDock_->toggleViewAction()->setEnabled(false);
  return decodeDock_;
}

QDockWidget* MainWindow::buildPatternDock() {
  patternEditor_ = new PatternEditor(this);
  optimiser_->setUserPatternPath([this] { return patternEditor_->userPatternPath(); });
  // A registered, disabled or removed pattern takes effect at the next
  // optimisation: the backend set is rebuilt then (not during a run: the
  // running job's candidates point into its specs).
  connect(patternEditor_, &PatternEditor::patternsChanged, this, [this] {
    optimiser_->patternsChanged();
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
  return dock(this, tr("Patterns"), "patterns", patternEditor_, Qt::BottomDockWidgetArea);
}

void MainWindow::buildMenus(const QList<QDockWidget*>& docks) {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open model..."), this, &MainWindow::openModelDialog, QKeySequence::Open);
  recentMenu_ = file->addMenu(tr("Open &recent"));
  connect(recentMenu_, &QMenu::aboutToShow, this, &MainWindow::rebuildRecentMenu);
  file->addAction(tr("Open p&lan..."), this, &MainWindow::openPlanDialog);
  file->addAction(tr("&Save plan..."), this, &MainWindow::savePlanDialog, QKeySequence::Save);
  file->addAction(tr("Open pi&peline..."), this, &MainWindow::openPipelineDialog);
  buildExportMenu(file);
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
  viewMenu->addAction(tr("&Collapse opened groups"), loader_->layoutJob(), &LayoutJob::collapseAll);
  viewMenu->addSeparator();
  // Beside the backend colouring (the default): the pipeline's stages.
  colourByStageAction_ = viewMenu->addAction(tr("Colour by &stage"));
  colourByStageAction_->setCheckable(true);
  colourByStageAction_->setEnabled(false);
  colourByStageAction_->setToolTip(tr("Colour the graph by pipeline stage instead of by backend"));
  connect(colourByStageAction_, &QAction::toggled, this, &MainWindow::setColourByStage);
  QMenu* pipelineMenu = menuBar()->addMenu(tr("&Pipeline"));
  pipelineMenu->addAction(tr("&Open pipeline..."), this, &MainWindow::openPipelineDialog);
  runPipelineAction_ = pipelineMenu->addAction(tr("&Run pipeline"), this, [this] { runPipeline(); });
  runPipelineAction_->setToolTip(tr("Stream the pipeline's batch through its stages here, and draw it"));
  runPipelineAction_->setEnabled(false);
  openTraceAction_ = pipelineMenu->addAction(tr("Open run &trace..."), this, &MainWindow::openPipelineTraceDialog);
  openTraceAction_->setToolTip(tr("Draw a run of `collage run --pipeline P --trace T` beside the simulated one"));
  openTraceAction_->setEnabled(false);
  pipelineMenu->addAction(colourByStageAction_);
  for (QDockWidget* d : docks) viewMenu->addAction(d->toggleViewAction());
}

void MainWindow::buildExportMenu(QMenu* file) {
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
}

void MainWindow::buildToolBarAndStatus() {
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
  tools->addAction(colourByStageAction_);

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
}

void MainWindow::connectBackgroundWork() {
  // Only results of the latest request arrive here (BackgroundWork drops the rest).
  connect(work_, &BackgroundWork::measureProgress, this, &MainWindow::onMeasureProgress);
  // A decode measurement superseded (an optimisation, a plan run): its end
  // is never delivered, so the panel's button comes back once all is idle.
  connect(work_, &BackgroundWork::idle, decodePanel_, [this] { decodePanel_->setMeasuring(false); });
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

}  // namespace collage
