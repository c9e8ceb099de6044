#include "app/main_window.h"

#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
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
#include <QTableView>
#include <QTextBrowser>
#include <QToolBar>
#include <QtConcurrent/QtConcurrent>

#include <cmath>
#include <set>
#include <algorithm>

#include "backends/backend_list.h"
#include "core/error.h"
#include "core/onnx_import.h"
#include "core/plan_export.h"
#include "views/graph_scene.h"
#include "views/graph_view.h"
#include "views/kernel_table_model.h"
#include "views/node_inspector.h"
#include "views/optimize_worker.h"

namespace collage {
namespace {

LoadedModel loadAndLayout(const QString& path) {
  LoadedModel out;
  out.path = path;
  try {
    auto graph = std::make_shared<Graph>(importOnnx(path.toStdString()));
    out.layout = computeLayout(*graph);
    out.graph = std::move(graph);
  } catch (const std::exception& e) {
    out.error = QString::fromStdString(e.what());
  }
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
  setAcceptDrops(true);
  connect(&layoutWatcher_, &QFutureWatcher<LoadedModel>::finished, this, &MainWindow::onLayoutDone);
  QSettings settings;
  restoreGeometry(settings.value("window/geometry").toByteArray());
  restoreState(settings.value("window/state").toByteArray());
}

MainWindow::~MainWindow() {
  if (worker_) worker_->cancel();
  worker_.reset();  // waits for the job to stop at its next check
  layoutWatcher_.waitForFinished();
}

void MainWindow::buildUi() {
  setWindowTitle(tr("Collage Studio"));
  scene_ = new GraphScene(this);
  view_ = new GraphView(this);
  view_->setScene(scene_);
  setCentralWidget(view_);
  connect(scene_, &QGraphicsScene::selectionChanged, this, &MainWindow::onSceneSelection);

  inspector_ = new QTextBrowser(this);
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
  table_ = new QTableView(this);
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->horizontalHeader()->setStretchLastSection(true);
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &MainWindow::onTableSelection);
  auto* kernelDock = new QDockWidget(tr("Kernels"), this);
  kernelDock->setObjectName("kernels");
  kernelDock->setWidget(table_);
  addDockWidget(Qt::BottomDockWidgetArea, kernelDock);

  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open model..."), this, &MainWindow::openModelDialog, QKeySequence::Open);
  file->addAction(tr("&Save plan..."), this, &MainWindow::savePlanDialog, QKeySequence::Save);
  file->addAction(tr("&Export graph image..."), this, &MainWindow::exportImageDialog);
  file->addSeparator();
  file->addAction(tr("&Quit"), this, &QWidget::close, QKeySequence::Quit);
  QMenu* viewMenu = menuBar()->addMenu(tr("&View"));
  viewMenu->addAction(tr("Zoom &in"), view_, &GraphView::zoomIn, QKeySequence::ZoomIn);
  viewMenu->addAction(tr("Zoom &out"), view_, &GraphView::zoomOut, QKeySequence::ZoomOut);
  viewMenu->addAction(tr("&Fit"), view_, &GraphView::fitAll, QKeySequence(QStringLiteral("Ctrl+0")));
  viewMenu->addAction(inspectorDock->toggleViewAction());
  viewMenu->addAction(kernelDock->toggleViewAction());

  QToolBar* tools = addToolBar(tr("Main"));
  tools->setObjectName("main-toolbar");
  tools->addAction(tr("Open"), this, &MainWindow::openModelDialog);
  optimizeAction_ = tools->addAction(tr("Optimize"), this, &MainWindow::startOptimization);
  optimizeAction_->setEnabled(false);
  tools->addAction(tr("Fit"), view_, &GraphView::fitAll);

  status_ = new QLabel(tr("Open an ONNX model (File > Open, or drop it here)"), this);
  progress_ = new QProgressBar(this);
  progress_->setMaximumWidth(260);
  progress_->setVisible(false);
  cancel_ = new QPushButton(tr("Cancel"), this);
  cancel_->setVisible(false);
  connect(cancel_, &QPushButton::clicked, this, &MainWindow::cancelOptimization);
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(progress_);
  statusBar()->addPermanentWidget(cancel_);
}

void MainWindow::openModelDialog() {
  QString path = QFileDialog::getOpenFileName(this, tr("Open ONNX model"), QString(),
                                              tr("ONNX models (*.onnx);;All files (*)"));
  if (!path.isEmpty()) openModel(path);
}

void MainWindow::openModel(const QString& path) {
  if (layoutWatcher_.isRunning()) {
    status_->setText(tr("Still laying out the previous model"));
    return;
  }
  if (isOptimizing()) {
    status_->setText(tr("Cancel the optimisation before opening another model"));
    return;
  }
  status_->setText(tr("Loading %1...").arg(QFileInfo(path).fileName()));
  layoutWatcher_.setFuture(QtConcurrent::run(loadAndLayout, path));
}

void MainWindow::onLayoutDone() {
  LoadedModel loaded = layoutWatcher_.result();
  if (!loaded.error.isEmpty()) {
    status_->setText(tr("Cannot open %1").arg(loaded.path));
    if (!qEnvironmentVariableIsSet("COLLAGE_STUDIO_NO_DIALOGS") &&
        QGuiApplication::platformName() != QLatin1String("offscreen"))
      QMessageBox::warning(this, tr("Cannot open model"), loaded.error);
    emit loadFailed(loaded.error);
    return;
  }
  modelPath_ = loaded.path;
  graph_ = loaded.graph;
  plan_.reset();
  kernels_->clear();
  scene_->setGraph(graph_, loaded.layout);
  view_->fitAll();
  inspector_->clear();
  optimizeAction_->setEnabled(true);
  setWindowTitle(tr("Collage Studio - %1").arg(QFileInfo(modelPath_).fileName()));
  status_->setText(tr("%1: %2 nodes").arg(QFileInfo(modelPath_).fileName()).arg(graph_->numNodes()));
  emit modelLoaded();
}

bool MainWindow::isOptimizing() const { return worker_ && worker_->isRunning(); }

void MainWindow::startOptimization() {
  if (!graph_ || isOptimizing()) return;
  try {
    std::vector<std::string> names;
    for (const QString& n : backendNames_) names.push_back(n.toStdString());
    if (!backendSet_) backendSet_ = std::make_shared<BackendSet>(loadBackendSet(names));
    OptimizationJobOptions options;
    options.modelPath = modelPath_.toStdString();
    options.capabilities = backendSet_->capabilities();
    for (size_t i = 0; i < backendSet_->specs.size(); ++i)
      options.versions.emplace_back(backendSet_->specs[i].name, backendSet_->backends[i]->version());
    options.dbPath = dbPath_.toStdString();
    options.workerExecutable = findCollageCli(QCoreApplication::applicationDirPath()).toStdString();
    if (options.workerExecutable.empty())
      throw Error("cannot find the 'collage' executable that measures kernels (set COLLAGE_CLI)");
    worker_ = std::make_unique<OptimizeWorker>(graph_, std::move(options));
  } catch (const std::exception& e) {
    onOptimizationError(QString::fromStdString(e.what()));
    return;
  }
  connect(worker_.get(), &OptimizeWorker::measureProgress, this, &MainWindow::onMeasureProgress);
  connect(worker_.get(), &OptimizeWorker::searchStep, this, &MainWindow::onSearchStep);
  connect(worker_.get(), &OptimizeWorker::finished, this, &MainWindow::onOptimizationDone);
  connect(worker_.get(), &OptimizeWorker::failed, this, &MainWindow::onOptimizationError);
  setBusy(true);
  status_->setText(tr("Optimizing..."));
  worker_->start();
}

void MainWindow::cancelOptimization() {
  if (!isOptimizing()) return;
  worker_->cancel();
  cancel_->setEnabled(false);
  status_->setText(tr("Cancelling..."));
}

void MainWindow::setBusy(bool busy) {
  progress_->setVisible(busy);
  progress_->setRange(0, 0);
  cancel_->setVisible(busy);
  cancel_->setEnabled(busy);
  optimizeAction_->setEnabled(!busy && graph_);
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
  if (worker_) worker_->wait(5000);
  setBusy(false);
  if (result->hasPlan) {
    plan_ = result->plan;
    QVector<bool> fromCache;
    for (int32_t c : result->chosen)
      fromCache.push_back(result->measurements.at(static_cast<size_t>(c)).fromCache);
    showPlan(fromCache);
    status_->setText(tr("%1: predicted %2 ms, %3 kernels (%4 measured, %5 cached)")
                         .arg(result->cancelled ? tr("Cancelled, best plan so far") : tr("Done"))
                         .arg(plan_->predictedNs / 1e6, 0, 'f', 3)
                         .arg(plan_->groups.size())
                         .arg(result->report.measured)
                         .arg(result->report.cached));
  } else {
    status_->setText(tr("Cancelled before every kernel was measured; no plan"));
  }
  emit optimizationFinished(result->hasPlan);
}

void MainWindow::onOptimizationError(const QString& message) {
  if (worker_) worker_->wait(5000);
  setBusy(false);
  status_->setText(tr("Optimisation failed: %1").arg(message));
  emit optimizationFailed(message);
}

void MainWindow::showPlan(const QVector<bool>& fromCache) {
  if (!plan_ || !graph_) return;
  QVector<QColor> colors(graph_->numNodes());
  QMap<QString, QColor> legend;
  for (const PlanGroup& g : plan_->groups) {
    QColor color(QString::fromStdString(backendColor(g.backend)));
    legend[QString::fromStdString(g.backend)] = color;
    for (const auto& name : g.nodes)
      if (auto n = graph_->findNode(name)) colors[*n] = color;
  }
  scene_->setNodeColors(colors, legend);
  try {
    kernels_->setPlan(*graph_, *plan_, fromCache);
  } catch (const std::exception& e) {
    status_->setText(tr("The plan does not match the model: %1").arg(e.what()));
  }
  onSceneSelection();
}

void MainWindow::onSceneSelection() {
  if (!graph_) return;
  QVector<NodeId> selected = scene_->selectedNodes();
  if (selected.size() == 1)
    inspector_->setHtml(describeNodeHtml(*graph_, selected.front(), plan()));
  else if (selected.isEmpty())
    inspector_->setHtml(tr("<p>Select a node to inspect it.</p>"));
  else
    inspector_->setHtml(tr("<p>%1 nodes selected.</p>").arg(selected.size()));
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
  QSettings settings;
  settings.setValue("window/geometry", saveGeometry());
  settings.setValue("window/state", saveState());
  QMainWindow::closeEvent(event);
}

}  // namespace collage
