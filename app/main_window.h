// collage-studio's main window: the graph in the centre, the inspector and
// the kernel table in docks, the optimizer in the background with progress
// and Cancel in the status bar, the search chart and the plan diff in docks.
// Wiring only: layout, optimization and plans are the core's and views/' work.
// Two controllers hold the window's background work, and the window shows
// what their signals carry:
//   ModelLoader (model_loader.h)                 import, then layout
//   OptimisationController (optimisation_controller.h)
//                                                the job's options and backend
//                                                set; everything that runs
//                                                kernels, through one
//                                                BackgroundWork
// so the UI thread never waits for either. The files of the window:
//   main_window.cc          loading and optimising, as the window shows them
//   main_window_ui.cc       buildUi(), one piece a dock, menu or bar
//   main_window_exports.cc  plans saved and opened, exports (image, ONNX,
//                           node data, trace, CSV) and their dialogs
//   main_window_pipeline.cc a pipeline file (docs/pipeline.md) on the model:
//                           the graph coloured by stage, the stage graph,
//                           the timeline of the simulated and the real run,
//                           pins and the re-plan around them
#pragma once

#include <QMainWindow>
#include <QString>
#include <QVector>
#include <map>
#include <memory>
#include <optional>

#include "core/decode/decoder_signature.h"
#include "core/ir/graph.h"
#include "core/search/optimization_job.h"
#include "core/plan/plan.h"
#include "app/model_loader.h"
#include "app/optimisation_controller.h"
#include "views/graph_layout.h"
#include "views/optimize_options.h"

class QAction;
class QCheckBox;
class QDockWidget;
class QLabel;
class QLineEdit;
class QMenu;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace collage {

class GraphScene;
class GraphView;
class FindBar;
class InspectorPanel;
class SearchChart;
class BackgroundWork;
class PatternEditor;
class OverrideController;
class KernelTableModel;
class PlanDiffPanel;
class DecodePanel;
class PipelineTimeline;
class StageGraphView;
struct OpenPipeline;
struct MeasureProgressEvent;
struct SearchStepEvent;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Imports and lays out `path` on a worker thread; modelLoaded() or
  // loadFailed() follows. `inputShapes` ("name=1x128") bind dynamic
  // dimensions; when empty and the model has some, the window asks (the last
  // sizes used for that model are offered; without dialogs they are used, or 1).
  void openModel(const QString& path, const QStringList& inputShapes = {});
  // Loads a plan saved earlier and shows it, after checking it against the
  // open model (false and the reason otherwise; false too while a model is
  // loading, which would replace the one it was checked against). A plan made with graph
  // substitutions (or one without, while a rewritten graph is shown) needs
  // the other graph: its substitutions are replayed and the graph laid out
  // in the background, then modelLoaded() and the plan follow, or
  // planFailed() with the reason.
  bool openPlan(const QString& path, QString* error = nullptr);
  // The model as imported (graph() may be it rewritten by the plan's
  // substitutions), and the substitution sites that made graph() from it.
  const Graph* modelGraph() const { return modelGraph_.get(); }
  const std::vector<SubstitutionSite>& rewriteSites() const { return rewriteSites_; }
  QStringList inputShapes() const { return inputShapes_; }
  QStringList recentFiles() const;
  // Measurement database for the next optimisation ("" = the default one).
  void setDatabasePath(const QString& path) { optimiser_->setDatabasePath(path); }
  // Backends for the next optimisation (empty = all).
  void setBackends(const QStringList& names);
  // Everything the options dialog sets (backends, database, time budget,
  // per-kernel timeout); persisted by the dialog.
  const OptimizeSettings& optimizeSettings() const { return optimiser_->settings(); }
  void setOptimizeSettings(const OptimizeSettings& settings);
  SearchChart* searchChart() const { return chart_; }
  PlanDiffPanel* planDiff() const { return planDiff_; }
  // "predicted X ms, measured Y ms" once the plan has run in a Session.
  QString planSummary() const;
  // Runs the current plan in a Session (10 timed runs) in the background;
  // planMeasured() follows. Also done after every optimisation; not while
  // one runs.
  void measurePlan();
  bool exportTrace(const QString& path, QString* error = nullptr);  // needs measurePlan() first
  // The Decode panel (views/decode_panel.h): shown only while the model is a
  // decoder with a KV cache (decoderSignature of the model as imported).
  QDockWidget* decodeDock() const { return decodeDock_; }
  DecodePanel* decodePanel() const { return decodePanel_; }
  bool isDecoder() const { return decoder_.has_value(); }

  GraphScene* graphScene() const { return scene_; }
  PatternEditor* patternEditor() const { return patternEditor_; }
  FindBar* findBar() const { return findBar_; }
  bool isLoading() const;
  KernelTableModel* kernelModel() const { return kernels_; }
  const Graph* graph() const { return graph_.get(); }
  const Plan* plan() const { return plan_ ? &*plan_ : nullptr; }
  OverrideController* overrides() const { return overrides_; }
  InspectorPanel* inspector() const { return inspector_; }
  bool isOptimizing() const;
  BackgroundWork* backgroundWork() const { return optimiser_->work(); }

  // main_window_pipeline.cc. Reads a pipeline file (`collage pipeline`'s
  // output) for the open model: false and the reason for a file that does
  // not parse (or no model). Otherwise checks it against the model, imports
  // the model at the file's micro-batch and simulates the schedule in the
  // background; pipelineOpened() or pipelineFailed() (a file made for
  // another model says so) follows.
  bool openPipeline(const QString& path, QString* error = nullptr);
  // Streams the pipeline's batch through its stages in this process
  // (core/pipeline/pipeline_runtime.h) in the background;
  // pipelineRunFinished() or pipelineFailed() follows. False without an
  // open pipeline.
  bool runPipeline();
  // Reads the trace `collage run --pipeline P --trace T` wrote into the
  // timeline's run lane: false and the reason without a pipeline, for a file
  // that is not such a trace, or one with more stages than the pipeline.
  bool openPipelineTrace(const QString& path, QString* error = nullptr);
  bool hasPipeline() const { return pipeline_ != nullptr; }
  // The graph coloured by pipeline stage (true) or by the plan's backends.
  void setColourByStage(bool on);
  bool colourByStage() const { return colourByStage_; }
  // The stage of node n of graph(), or -1 (no pipeline, a node it lacks).
  int stageOfNode(NodeId n) const;
  PipelineTimeline* pipelineTimeline() const { return timeline_; }
  StageGraphView* stageGraphView() const { return stageGraph_; }
  // Pins node n of graph() to stage `stage` (with the open pipeline's other
  // pins) and re-plans around it in the background (app/pipeline_replan.h):
  // the colouring, the stage graph and the timeline show the new plan, and
  // pipelineOpened() or pipelineFailed() follows. False and the reason
  // without a pipeline, for a node it lacks or a stage its devices cannot give.
  bool pinNodeToStage(NodeId n, int stage, QString* error = nullptr);
  // The stage node n is pinned to in the open pipeline, or -1.
  int pinnedStage(NodeId n) const;

  bool savePlanTo(const QString& path, QString* error = nullptr);
  bool exportImage(const QString& path, QString* error = nullptr);  // .svg or .png
  bool exportAnnotatedModel(const QString& path, QString* error = nullptr);
  bool exportNodeData(const QString& path, QString* error = nullptr);  // Model Explorer, by backend
  bool exportMeasurementsCsv(const QString& path, QString* error = nullptr);  // the table as filtered

 public slots:
  // Optimises the open model in the background. While an optimisation runs,
  // starts over: the running one is aborted and its result dropped.
  void startOptimization();
  // Asks for the options (backends, database, budget), then optimises.
  void optimizeWithOptions();
  void cancelOptimization();
  void openModelDialog();
  // While an optimisation runs: the graph-level search's new best plan
  // (OptimizeWorker::bestPlanChanged) recolours the graph and its regions.
  // Paint only, so the search's updates cost the UI thread milliseconds;
  // the tables and plan() follow the final plan.
  void showBestPlanSoFar(std::shared_ptr<const collage::Plan> plan, double ms);
  // Times a decode step at each context length on the BackgroundWork (it
  // supersedes what runs there), each point drawn in the Decode panel as it
  // arrives; decodeMeasured() follows. Nothing for a model that is no decoder.
  void measureDecode(const QVector<qint64>& contextLengths);

 signals:
  void modelLoaded();
  void loadFailed(QString message);
  void optimizationFinished(bool hasPlan);
  void optimizationFailed(QString message);
  void planMeasured(double medianMs);
  void planMeasureFailed(QString message);
  void planFailed(QString message);  // a plan's substitutions did not replay on the model
  void decodeMeasured(int points, QString error);  // error empty: every length measured
  void pipelineOpened();
  void pipelineRunFinished();
  void pipelineFailed(QString message);

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;
  void closeEvent(QCloseEvent* event) override;

 private:
  // main_window_ui.cc: buildUi() and its pieces, in the order they are built.
  void buildUi();
  void buildGraphView();
  void buildControllers();
  QDockWidget* buildInspectorDock();
  QDockWidget* buildKernelDock();
  QDockWidget* buildSearchDock();
  QDockWidget* buildPlanDiffDock();
  QDockWidget* buildPatternDock();
  QDockWidget* buildDecodeDock();
  QDockWidget* buildPipelineDock();
  void buildMenus(const QList<QDockWidget*>& docks);
  void buildExportMenu(QMenu* file);
  void buildToolBarAndStatus();
  void connectBackgroundWork();

  // main_window.cc: loading, as the window shows it.
  void startLoad(const QString& path, const QStringList& inputShapes);
  // The input-shape bindings for a model with dynamic dims: asked for, or
  // the last ones used. Nullopt if the user cancelled.
  std::optional<QStringList> askInputShapes(const QString& path);
  void onImported(const QString& fileName, int nodes);
  void onImportFailed(const QString& path, const QString& message);
  void onModelLoaded(const LoadedModel& model, const GraphLayout& layout);
  void onLayoutStopped(const QString& fileName, const QString& why);
  void onRewriteFailed(const QString& message);
  // Lays out the model rewritten by `sites` (none: the model as imported)
  // and shows pendingPlan_ or pendingResult_ on it once it arrives.
  void showRewritten(const std::vector<SubstitutionSite>& sites,
                     std::shared_ptr<const Graph> rewritten = nullptr,
                     ModelLoader::RewriteCheck check = {});
  void showOpenedPlan(Plan plan, const QString& fileName, const std::vector<std::string>& warnings);
  void showGraphStart();
  void cancelCurrentWork();
  void reloadPatternEditorSpecs();
  void rebuildRecentMenu();
  bool dialogsAllowed() const;

  // main_window.cc: optimising, as the window shows it.
  void onMeasureProgress(const MeasureProgressEvent& e);
  void onSearchStep(const SearchStepEvent& e);
  void onOptimizationDone(std::shared_ptr<const OptimizationResult> result);
  void onOptimizationError(const QString& message);
  void setBusy(bool busy);
  // The job's options for the open model, the chosen backends and the user's
  // pins (Error if the measurement worker cannot be found).
  OptimizationJobOptions jobOptions();

  // main_window.cc: the plan on screen and the selection.
  void showPlan();
  // Node colours by backend, a frame per fused group and per region.
  void paintPlan(const Plan& plan);
  void refreshKernelTable();
  void onPlanChanged(const Plan& plan);
  void onSceneSelection();
  void onTableSelection();
  void showGraphContextMenu(const QPoint& pos);

  // main_window_pipeline.cc
  void openPipelineDialog();
  void openPipelineTraceDialog();
  // Node colours by stage, a legend of stages and their devices.
  void paintStages();
  // Back to the plan's colours (or none) when stage colouring is off.
  void repaintNodes();
  void closePipeline();
  void reportPipelineError(const QString& message);
  // A pipeline prepared on the worker, shown: colours, stage graph, timeline.
  void showPipeline(std::shared_ptr<const OpenPipeline> open, const QString& name);
  // "Pin to stage N" entries for node n in the graph's context menu.
  void addPinActions(QMenu* menu, NodeId n);

  // main_window_exports.cc
  void savePlanDialog();
  void openPlanDialog();
  void exportImageDialog();
  // Asks for a file name, then calls `exporter`; reports a failure.
  void exportDialog(const QString& title, const QString& defaultName, const QString& filter,
                    bool (MainWindow::*exporter)(const QString&, QString*));

  GraphScene* scene_ = nullptr;
  GraphView* view_ = nullptr;
  InspectorPanel* inspector_ = nullptr;
  OverrideController* overrides_ = nullptr;
  KernelTableModel* kernels_ = nullptr;
  QSortFilterProxyModel* proxy_ = nullptr;
  QTableView* table_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QLabel* status_ = nullptr;
  QAction* optimizeAction_ = nullptr;
  QAction* measureAction_ = nullptr;
  QMenu* recentMenu_ = nullptr;
  ModelLoader* loader_ = nullptr;
  OptimisationController* optimiser_ = nullptr;
  FindBar* findBar_ = nullptr;
  PatternEditor* patternEditor_ = nullptr;
  bool syncingSelection_ = false;

  QString modelPath_;
  QStringList inputShapes_;  // of the open model
  // What the views show and the plan places: the model as imported, or it
  // rewritten by the plan's graph substitutions (docs/substitutions.md).
  std::shared_ptr<const Graph> graph_;
  std::shared_ptr<const Graph> modelGraph_;  // the model as imported (graph_ when not rewritten)
  std::vector<SubstitutionSite> rewriteSites_;  // what made graph_ from modelGraph_
  std::map<std::string, size_t> rewrittenNodes_;  // graph_'s nodes they made -> the site's index
  std::optional<Plan> plan_;
  // What a rewritten graph being laid out is for: shown once it arrives, if
  // it is that graph (made from pendingFor_, the model as imported that the
  // plan was checked against or the result made for), else dropped.
  std::optional<Plan> pendingPlan_;
  QString pendingPlanName_;
  std::shared_ptr<const OptimizationResult> pendingResult_;
  std::shared_ptr<const Graph> pendingFor_;
  SearchChart* chart_ = nullptr;
  PlanDiffPanel* planDiff_ = nullptr;
  QLabel* planSummary_ = nullptr;
  QLineEdit* tableFilter_ = nullptr;
  QCheckBox* allCandidates_ = nullptr;
  BackgroundWork* work_ = nullptr;  // optimiser_'s: the optimisation, the plan runs, the override measurements
  QDockWidget* decodeDock_ = nullptr;
  DecodePanel* decodePanel_ = nullptr;
  std::optional<DecoderSignature> decoder_;  // of the open model, when it is a decoder
  quint64 decodeRun_ = 0;  // bumps per measurement and model: late points are dropped
  double runPredictedNs_ = 0;     // the predicted time of the plan being run
  std::shared_ptr<const OptimizationResult> lastResult_;
  // The pipeline file on the model, once checked and simulated.
  std::shared_ptr<const OpenPipeline> pipeline_;
  bool colourByStage_ = false;
  QAction* colourByStageAction_ = nullptr;
  QAction* runPipelineAction_ = nullptr;
  QAction* openTraceAction_ = nullptr;
  PipelineTimeline* timeline_ = nullptr;
  StageGraphView* stageGraph_ = nullptr;
  QDockWidget* stageGraphDock_ = nullptr;
};

}  // namespace collage
