// collage-studio's main window: the graph in the centre, the inspector and
// the kernel table in docks, the optimizer on a worker thread with progress
// and Cancel in the status bar. Wiring only: layout, optimization and plans
// are the core's and views/' work.
#pragma once

#include <QFutureWatcher>
#include <QMainWindow>
#include <QString>
#include <QVector>
#include <memory>
#include <optional>

#include "core/graph.h"
#include "core/optimization_job.h"
#include "core/plan.h"
#include "views/graph_layout.h"

class QAction;
class QLabel;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;
class QTextBrowser;

namespace collage {

struct BackendSet;
class GraphScene;
class GraphView;
class KernelTableModel;
class OptimizeWorker;
struct MeasureProgressEvent;
struct SearchStepEvent;

// A model imported and laid out off the UI thread.
struct LoadedModel {
  QString path;
  std::shared_ptr<const Graph> graph;
  GraphLayout layout;
  QString error;
};

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Imports and lays out `path` on a worker thread; modelLoaded() or
  // loadFailed() follows.
  void openModel(const QString& path);
  // Measurement database for the next optimisation ("" = the default one).
  void setDatabasePath(const QString& path) { dbPath_ = path; }
  // Backends for the next optimisation (empty = all).
  void setBackends(const QStringList& names) { backendNames_ = names; }

  GraphScene* graphScene() const { return scene_; }
  KernelTableModel* kernelModel() const { return kernels_; }
  const Graph* graph() const { return graph_.get(); }
  const Plan* plan() const { return plan_ ? &*plan_ : nullptr; }
  bool isOptimizing() const;

  bool savePlanTo(const QString& path, QString* error = nullptr);
  bool exportImage(const QString& path, QString* error = nullptr);  // .svg or .png

 public slots:
  void startOptimization();
  void cancelOptimization();
  void openModelDialog();

 signals:
  void modelLoaded();
  void loadFailed(QString message);
  void optimizationFinished(bool hasPlan);
  void optimizationFailed(QString message);

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;
  void closeEvent(QCloseEvent* event) override;

 private:
  void buildUi();
  void onLayoutDone();
  void onMeasureProgress(const MeasureProgressEvent& e);
  void onSearchStep(const SearchStepEvent& e);
  void onOptimizationDone(std::shared_ptr<const OptimizationResult> result);
  void onOptimizationError(const QString& message);
  void showPlan(const QVector<bool>& fromCache);
  void onSceneSelection();
  void onTableSelection();
  void savePlanDialog();
  void exportImageDialog();
  void setBusy(bool busy);

  GraphScene* scene_ = nullptr;
  GraphView* view_ = nullptr;
  QTextBrowser* inspector_ = nullptr;
  KernelTableModel* kernels_ = nullptr;
  QSortFilterProxyModel* proxy_ = nullptr;
  QTableView* table_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QLabel* status_ = nullptr;
  QAction* optimizeAction_ = nullptr;
  QFutureWatcher<LoadedModel> layoutWatcher_;
  bool syncingSelection_ = false;

  QString modelPath_;
  std::shared_ptr<const Graph> graph_;
  std::optional<Plan> plan_;
  QString dbPath_;
  QStringList backendNames_;
  std::shared_ptr<BackendSet> backendSet_;  // outlives the worker: candidates point into its specs
  std::unique_ptr<OptimizeWorker> worker_;
};

}  // namespace collage
