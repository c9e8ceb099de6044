// MainWindow's pipeline pieces (issue #41): a pipeline file opened on the
// model, the graph coloured by its stages, and the timeline of micro-batches
// over the stages, the simulator's beside a real run's.
//
//   openPipeline ─▶ parse (UI thread: a small JSON file)
//                ─▶ BackgroundWork: check the model's SHA-256, import at the
//                   micro-batch, stages, simulate ─▶ colours, timeline "sim"
//   runPipeline  ─▶ BackgroundWork: PipelineRuntime::run ─▶ timeline "run"
//   pinNodeToStage ─▶ BackgroundWork: replanPipeline (pins), then as
//                   openPipeline ─▶ colours, stage graph, timeline
//
// Both run on BackgroundWork's thread (its generic measure/done piece), one
// at a time with everything else that runs kernels, never on the UI thread;
// a newer request or another model drops what they would still report.
#include <QAction>
#include <QDockWidget>
#include <QFileDialog>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <algorithm>
#include <exception>
#include <set>

#include "app/main_window.h"
#include "app/pipeline_replan.h"
#include "backends/backend_list.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/pipeline/pipe_graph.h"
#include "core/pipeline/pipeline_file.h"
#include "core/pipeline/pipeline_runtime.h"
#include "core/pipeline/pipeline_simulator.h"
#include "views/background_work.h"
#include "views/graph_scene.h"
#include "views/pipeline_timeline.h"
#include "views/stage_graph_view.h"

namespace collage {

// A pipeline file checked against the open model, with what running it needs.
struct OpenPipeline {
  PipelineFile file;
  std::shared_ptr<const Graph> graph;  // the model at the file's micro-batch
  StageGraph stages;                   // of `graph`'s node ids
  SimulationReport simulated;
  std::map<std::string, int> stageOfNode;  // node name -> stage
  QStringList stageNames;                  // "stage 0 [cpu0]"
  std::vector<double> handOverBytes;       // by file.edges: bytes per micro-batch
  // The node profile of the last re-plan (pinNodeToStage), kept for the next.
  std::shared_ptr<const ProfiledStageCost> costs;
};

namespace {

// A colour per stage, far apart in hue, lighter than the backends' so the
// two colourings are not mistaken for each other.
QColor stageColor(int stage) { return QColor::fromHsv((stage * 97 + 20) % 360, 140, 240); }

QString devicesOf(const std::vector<std::string>& devices) {
  QStringList out;
  for (const auto& d : devices) out << QString::fromStdString(d);
  return out.join(QStringLiteral(", "));
}

QString megabytes(double bytes) { return QString::number(bytes / 1e6, 'f', 2) + QStringLiteral(" MB"); }

QVector<PipelineTimeline::StageSpans> spansOf(const std::vector<std::vector<double>>& starts,
                                               const std::vector<std::vector<double>>& finishes) {
  QVector<PipelineTimeline::StageSpans> out;
  for (size_t s = 0; s < starts.size(); ++s) {
    PipelineTimeline::StageSpans spans;
    for (double t : starts[s]) spans.starts << t;
    for (double t : finishes[s]) spans.finishes << t;
    out << spans;
  }
  return out;
}

// What a stage holds on each of its devices, for the simulator's memory per
// device (a pipeline file records times, not bytes): the constants its nodes
// read, each once, and the values they make at the micro-batch, split over
// its devices as the profiled costs split them (profiled_stage_cost.h).
void estimateMemory(const Graph& graph, PipelineStage& stage) {
  std::set<ValueId> seen;
  double weights = 0, activations = 0;
  for (int n : stage.nodes) {
    for (ValueId v : graph.node(n).inputs)
      if (v != kNoValue && graph.value(v).isConstant() && seen.insert(v).second)
        weights += static_cast<double>(graph.value(v).type.byteSize());
    for (ValueId v : graph.node(n).outputs)
      if (v != kNoValue) activations += static_cast<double>(graph.value(v).type.byteSize());
  }
  stage.estimate.weightBytes = weights;
  stage.estimate.activationBytes = activations / std::max<size_t>(1, stage.devices.size());
}

// The bytes per micro-batch stage `from` hands to stage `to`: each value made
// in `from` that a node of `to` reads, once.
double handOverBytes(const Graph& graph, const StageGraph& stages, int from, int to) {
  std::set<int> consumers(stages.stages[to].nodes.begin(), stages.stages[to].nodes.end());
  double bytes = 0;
  for (int n : stages.stages[from].nodes)
    for (ValueId v : graph.node(n).outputs) {
      if (v == kNoValue) continue;
      for (NodeId c : graph.value(v).consumers)
        if (consumers.count(c)) {
          bytes += static_cast<double>(graph.value(v).type.byteSize());
          break;
        }
    }
  return bytes;
}

// Checks `file` against the model at `modelPath` and prepares it: off the UI
// thread (hashing and importing a large model take seconds).
std::shared_ptr<OpenPipeline> preparePipeline(PipelineFile file, const std::string& modelPath) {
  checkPipelineModel(file, modelPath);
  auto open = std::make_shared<OpenPipeline>();
  ImportOptions options;
  options.inputShapes = file.inputShapes;
  auto graph = std::make_shared<Graph>(importOnnx(modelPath, options));
  open->stages = stageGraphOf(file, *graph);
  for (PipelineStage& st : open->stages.stages) estimateMemory(*graph, st);
  for (const auto& [from, to] : file.edges)
    open->handOverBytes.push_back(handOverBytes(*graph, open->stages, from, to));
  SimulationOptions so;
  so.microBatches = std::max(1, file.batch / std::max(1, file.microBatch));
  for (const auto& s : file.stages) so.inFlight.push_back(s.inFlight);
  open->simulated =
      simulatePipeline(open->stages, pipeGraphOf(*graph, file.microBatch), file.topology, so);
  for (size_t s = 0; s < file.stages.size(); ++s) {
    for (const auto& name : file.stages[s].nodes) open->stageOfNode[name] = static_cast<int>(s);
    open->stageNames << QObject::tr("stage %1 [%2]").arg(s).arg(devicesOf(file.stages[s].devices));
  }
  open->graph = std::move(graph);
  open->file = std::move(file);
  return open;
}

QString simulatedSummary(const OpenPipeline& p) {
  const SimulationReport& r = p.simulated;
  QStringList memory;
  for (const SimulatedDevice& d : r.devices)
    memory << QStringLiteral("%1 %2").arg(QString::fromStdString(d.id), megabytes(d.memoryBytes));
  return QObject::tr("simulated: %1 micro-batch(es) of %2 in %3 ms, %4 samples/s; memory: %5")
      .arg(r.microBatches)
      .arg(r.microBatch)
      .arg(r.makespanSeconds * 1e3, 0, 'f', 2)
      .arg(r.samplesPerSecond, 0, 'f', 1)
      .arg(memory.join(QStringLiteral(", ")));
}

}  // namespace

QDockWidget* MainWindow::buildPipelineDock() {
  timeline_ = new PipelineTimeline(this);
  auto* d = new QDockWidget(tr("Pipeline timeline"), this);
  d->setObjectName("pipeline-timeline");
  d->setWidget(timeline_);
  addDockWidget(Qt::BottomDockWidgetArea, d);
  stageGraph_ = new StageGraphView(this);
  stageGraphDock_ = new QDockWidget(tr("Stage graph"), this);
  stageGraphDock_->setObjectName("stage-graph");
  stageGraphDock_->setWidget(stageGraph_);
  addDockWidget(Qt::BottomDockWidgetArea, stageGraphDock_);
  return d;
}

bool MainWindow::openPipeline(const QString& path, QString* error) {
  auto fail = [&](const QString& why) {
    if (error) *error = why;
    reportPipelineError(why);
    return false;
  };
  if (!graph_ || modelPath_.isEmpty()) return fail(tr("Open a model before its pipeline file"));
  if (isLoading()) return fail(tr("A model is loading; open the pipeline once it is shown"));
  PipelineFile file;
  try {
    file = loadPipelineFile(path.toStdString());
  } catch (const std::exception& e) {
    return fail(QString::fromLocal8Bit(e.what()));
  }
  status_->setText(tr("Checking %1 against the model and simulating it...").arg(QFileInfo(path).fileName()));
  auto result = std::make_shared<std::shared_ptr<OpenPipeline>>();
  auto failure = std::make_shared<QString>();
  const std::string modelPath = modelPath_.toStdString();
  work_->measureOverride(
      [result, failure, file = std::move(file), modelPath]() mutable {
        try {
          *result = preparePipeline(std::move(file), modelPath);
        } catch (const std::exception& e) {
          *failure = QString::fromLocal8Bit(e.what());
        } catch (...) {
          *failure = QStringLiteral("the pipeline could not be prepared");
        }
      },
      [this, result, failure, path] {
        if (!*result) {
          reportPipelineError(*failure);
          return;
        }
        showPipeline(*result, QFileInfo(path).fileName());
      });
  return true;
}

void MainWindow::showPipeline(std::shared_ptr<const OpenPipeline> open, const QString& name) {
  pipeline_ = std::move(open);
  timeline_->setStages(pipeline_->stageNames);
  QVector<PipelineTimeline::StageSpans> sim;
  for (const SimulatedStage& s : pipeline_->simulated.stages)
    sim << spansOf({s.starts}, {s.finishes}).front();
  timeline_->setLane(PipelineTimeline::Lane::Simulated, sim, simulatedSummary(*pipeline_));
  QVector<StageGraphView::Stage> stages;
  const PipelineFile& file = pipeline_->file;
  for (size_t s = 0; s < file.stages.size(); ++s) {
    StageGraphView::Stage st;
    st.devices = devicesOf(file.stages[s].devices);
    st.color = stageColor(static_cast<int>(s));
    st.nodes = static_cast<int>(file.stages[s].nodes.size());
    const SimulatedStage& sim = pipeline_->simulated.stages.at(s);
    st.simulatedSeconds = sim.finishes.empty() ? 0 : sim.busySeconds / sim.finishes.size();
    st.memoryBytes = pipeline_->stages.stages[s].estimate.memoryBytes(file.stages[s].inFlight);
    stages << st;
  }
  QVector<StageGraphView::HandOver> edges;
  for (size_t e = 0; e < file.edges.size(); ++e)
    edges << StageGraphView::HandOver{file.edges[e].first, file.edges[e].second, pipeline_->handOverBytes[e]};
  QVector<StageGraphView::DeviceMemory> devices;
  for (const SimulatedDevice& d : pipeline_->simulated.devices)
    devices << StageGraphView::DeviceMemory{QString::fromStdString(d.id), d.memoryBytes, -1, d.memoryLimitBytes};
  stageGraph_->setPipeline(stages, edges, devices);
  runPipelineAction_->setEnabled(true);
  openTraceAction_->setEnabled(true);
  colourByStageAction_->setEnabled(true);
  QString pins;
  for (const auto& [node, stage] : file.pins)
    pins += tr(", %1 pinned to stage %2").arg(QString::fromStdString(node)).arg(stage);
  status_->setText(tr("%1: %2 stage(s), micro-batch %3, batch %4%5")
                       .arg(name)
                       .arg(file.stages.size())
                       .arg(file.microBatch)
                       .arg(file.batch)
                       .arg(pins));
  setColourByStage(true);
  emit pipelineOpened();
}

bool MainWindow::pinNodeToStage(NodeId n, int stage, QString* error) {
  auto fail = [&](const QString& why) {
    if (error) *error = why;
    reportPipelineError(why);
    return false;
  };
  if (!pipeline_ || !graph_) return fail(tr("Open a pipeline before pinning a node to a stage"));
  if (n < 0 || n >= pipeline_->graph->numNodes() || n >= graph_->numNodes())
    return fail(tr("Pin: node %1 is not in the pipeline's model").arg(n));
  const std::string name = graph_->node(n).name;
  if (!pipeline_->graph->findNode(name))
    return fail(tr("Pin: the pipeline's model has no node %1").arg(QString::fromStdString(name)));
  const int devices = static_cast<int>(pipeline_->file.topology.devices().size());
  if (stage < 0 || stage >= devices)
    return fail(tr("Pin %1 to stage %2: %3 device(s) give stages 0 to %4")
                    .arg(QString::fromStdString(name))
                    .arg(stage)
                    .arg(devices)
                    .arg(devices - 1));
  std::map<std::string, int> pins = pipeline_->file.pins;
  pins[name] = stage;
  std::shared_ptr<const OpenPipeline> open = pipeline_;
  const std::string modelPath = modelPath_.toStdString();
  auto result = std::make_shared<std::shared_ptr<OpenPipeline>>();
  auto failure = std::make_shared<QString>();
  status_->setText(tr("Re-planning the pipeline with %1 in stage %2...").arg(QString::fromStdString(name)).arg(stage));
  work_->measureOverride(
      [open, pins, modelPath, result, failure] {
        try {
          std::shared_ptr<const ProfiledStageCost> costs = open->costs;
          PipelineFile file = replanPipeline(open->file, *open->graph, modelPath, pins, &costs);
          *result = preparePipeline(std::move(file), modelPath);
          (*result)->costs = costs;
        } catch (const std::exception& e) {
          *failure = QString::fromLocal8Bit(e.what());
        } catch (...) {
          *failure = QStringLiteral("the pipeline could not be re-planned");
        }
      },
      [this, open, result, failure] {
        if (open != pipeline_) return;  // another pipeline or model since
        if (!*result) {
          reportPipelineError(*failure);
          return;
        }
        showPipeline(*result, tr("re-planned"));
      });
  return true;
}

int MainWindow::pinnedStage(NodeId n) const {
  if (!pipeline_ || !graph_ || n < 0 || n >= graph_->numNodes()) return -1;
  auto it = pipeline_->file.pins.find(graph_->node(n).name);
  return it == pipeline_->file.pins.end() ? -1 : it->second;
}

void MainWindow::addPinActions(QMenu* menu, NodeId n) {
  QMenu* pin = menu->addMenu(tr("Pin to stage"));
  const int current = stageOfNode(n), pinned = pinnedStage(n);
  const int devices = static_cast<int>(pipeline_->file.topology.devices().size());
  for (int s = 0; s < devices; ++s) {
    QString label = tr("Pin to stage %1").arg(s);
    if (s < pipeline_->stageNames.size())
      label += QStringLiteral(" [%1]").arg(devicesOf(pipeline_->file.stages[s].devices));
    QAction* a = pin->addAction(label, this, [this, n, s] { pinNodeToStage(n, s); });
    a->setEnabled(s != pinned && !isLoading());
    a->setToolTip(s == current ? tr("Its stage now; pinning keeps it there in every re-plan") : QString());
  }
}

bool MainWindow::runPipeline() {
  if (!pipeline_) return false;
  std::shared_ptr<const OpenPipeline> open = pipeline_;
  auto report = std::make_shared<PipelineRunReport>();
  auto failure = std::make_shared<QString>();
  status_->setText(tr("Running the pipeline (%1 micro-batch(es) over %2 stage(s))...")
                       .arg(open->simulated.microBatches)
                       .arg(open->file.stages.size()));
  work_->measureOverride(
      [open, report, failure] {
        try {
          const Graph& graph = *open->graph;
          std::vector<std::vector<Tensor>> batches;
          for (int m = 0; m < open->simulated.microBatches; ++m)
            batches.push_back(randomInputs(graph, static_cast<uint64_t>(m)));
          PipelineRuntimeOptions options;
          options.backend = "native";  // `collage run --pipeline`'s default
          for (const auto& s : open->file.stages) options.inFlight.push_back(s.inFlight);
          StageBackendsFactory backends = [] {
            auto set = std::make_shared<BackendSet>(loadBackendSet({"native"}));
            return BackendLookup([set](const std::string& name) { return set->find(name); });
          };
          PipelineRuntime runtime(graph, open->stages, open->file.topology, backends, options);
          runtime.run(batches, report.get());
        } catch (const std::exception& e) {
          *failure = QString::fromLocal8Bit(e.what());
        } catch (...) {
          *failure = QStringLiteral("the pipeline run failed");
        }
      },
      [this, open, report, failure] {
        if (!failure->isEmpty()) {
          reportPipelineError(*failure);
          return;
        }
        if (open != pipeline_) return;  // another pipeline since
        std::vector<std::vector<double>> starts, finishes;
        QStringList busy;
        for (size_t s = 0; s < report->stages.size(); ++s) {
          starts.push_back(report->stages[s].starts);
          finishes.push_back(report->stages[s].finishes);
          busy << tr("stage %1 %2%").arg(s).arg(report->stages[s].busyShare * 100, 0, 'f', 0);
        }
        const QString summary =
            tr("run: %1 micro-batch(es) in %2 ms, %3 samples/s; busy %4")
                .arg(report->microBatches)
                .arg(report->wallSeconds * 1e3, 0, 'f', 2)
                .arg(report->samplesPerSecond, 0, 'f', 1)
                .arg(busy.join(QStringLiteral(", ")));
        timeline_->setLane(PipelineTimeline::Lane::Measured, spansOf(starts, finishes), summary);
        // The stage graph: seconds per micro-batch and what each device held.
        QVector<double> seconds, deviceBytes;
        std::map<std::string, double> held;
        for (const StageRunReport& s : report->stages) {
          seconds << (s.microBatches > 0 ? s.busySeconds / static_cast<double>(s.microBatches) : 0);
          for (const std::string& d : s.devices) held[d] += s.weightBytes + s.activationBytes;
        }
        for (const SimulatedDevice& d : open->simulated.devices) deviceBytes << held[d.id];
        stageGraph_->setMeasured(seconds, deviceBytes);
        status_->setText(summary);
        emit pipelineRunFinished();
      });
  return true;
}

bool MainWindow::openPipelineTrace(const QString& path, QString* error) {
  auto fail = [&](const QString& why) {
    if (error) *error = why;
    reportPipelineError(why);
    return false;
  };
  if (!pipeline_) return fail(tr("Open the pipeline file before a trace of its run"));
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return fail(tr("%1: cannot read it").arg(path));
  // A trace is small (a few events per micro-batch): read on the UI thread.
  QJsonParseError parse;
  const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &parse);
  if (doc.isNull())
    return fail(tr("%1: not JSON (%2 at byte %3)").arg(path, parse.errorString()).arg(parse.offset));
  const int stageCount = pipeline_->stageNames.size();
  QVector<PipelineTimeline::StageSpans> spans(stageCount);
  int events = 0;
  for (const QJsonValue& v : doc.object().value(QStringLiteral("traceEvents")).toArray()) {
    const QJsonObject e = v.toObject();
    if (e.value(QStringLiteral("cat")).toString() != QLatin1String("pipeline") ||
        e.value(QStringLiteral("ph")).toString() != QLatin1String("X"))
      continue;
    const QJsonObject args = e.value(QStringLiteral("args")).toObject();
    const int stage = args.value(QStringLiteral("stage")).toInt(-1);
    const int m = args.value(QStringLiteral("micro_batch")).toInt(-1);
    if (stage < 0 || m < 0)
      return fail(tr("%1: event %2 names no stage or micro-batch").arg(path).arg(events));
    if (stage >= stageCount)
      return fail(tr("%1: a run of stage %2, but %3 has %4 stage(s): a trace of another pipeline")
                      .arg(path)
                      .arg(stage)
                      .arg(QString::fromStdString(pipeline_->file.displayName()))
                      .arg(stageCount));
    PipelineTimeline::StageSpans& s = spans[stage];
    if (s.starts.size() <= m) {
      s.starts.resize(m + 1);
      s.finishes.resize(m + 1);
    }
    const double start = e.value(QStringLiteral("ts")).toDouble() * 1e-6;
    s.starts[m] = start;
    s.finishes[m] = start + e.value(QStringLiteral("dur")).toDouble() * 1e-6;
    ++events;
  }
  if (events == 0)
    return fail(tr("%1: no pipeline events (write one with collage run --pipeline P --trace T)").arg(path));
  timeline_->setLane(PipelineTimeline::Lane::Measured, spans,
                     tr("run (%1): %2 stage span(s)").arg(QFileInfo(path).fileName()).arg(events));
  status_->setText(tr("%1: the run's timeline").arg(QFileInfo(path).fileName()));
  return true;
}

void MainWindow::openPipelineTraceDialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a pipeline run's trace"),
                                                    QFileInfo(modelPath_).path(),
                                                    tr("Chrome traces (*.json);;All files (*)"));
  if (!path.isEmpty()) openPipelineTrace(path);
}

int MainWindow::stageOfNode(NodeId n) const {
  if (!pipeline_ || !graph_ || n < 0 || n >= graph_->numNodes()) return -1;
  auto it = pipeline_->stageOfNode.find(graph_->node(n).name);
  return it == pipeline_->stageOfNode.end() ? -1 : it->second;
}

void MainWindow::setColourByStage(bool on) {
  colourByStage_ = on && pipeline_;
  if (colourByStageAction_ && colourByStageAction_->isChecked() != colourByStage_) {
    const QSignalBlocker block(colourByStageAction_);
    colourByStageAction_->setChecked(colourByStage_);
  }
  repaintNodes();
}

void MainWindow::paintStages() {
  QVector<QColor> colors(graph_->numNodes());
  QMap<QString, QColor> legend;
  for (NodeId n = 0; n < graph_->numNodes(); ++n) {
    const int s = stageOfNode(n);
    if (s >= 0) colors[n] = stageColor(s);
  }
  for (int s = 0; s < pipeline_->stageNames.size(); ++s) legend[pipeline_->stageNames[s]] = stageColor(s);
  scene_->setNodeColors(colors, legend);
}

void MainWindow::repaintNodes() {
  if (!graph_) return;
  if (colourByStage_ && pipeline_) paintStages();
  else if (plan_) paintPlan(*plan_);
  else scene_->clearNodeColors();
}

void MainWindow::closePipeline() {
  pipeline_.reset();
  colourByStage_ = false;
  if (colourByStageAction_) {
    const QSignalBlocker block(colourByStageAction_);
    colourByStageAction_->setChecked(false);
    colourByStageAction_->setEnabled(false);
  }
  if (runPipelineAction_) runPipelineAction_->setEnabled(false);
  if (openTraceAction_) openTraceAction_->setEnabled(false);
  if (timeline_) timeline_->clear();
  if (stageGraph_) stageGraph_->clear();
}

void MainWindow::reportPipelineError(const QString& message) {
  status_->setText(message);
  if (dialogsAllowed()) QMessageBox::warning(this, tr("Pipeline"), message);
  emit pipelineFailed(message);
}

void MainWindow::openPipelineDialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open pipeline"), QFileInfo(modelPath_).path(),
                                                    tr("Pipeline files (*.json);;All files (*)"));
  if (!path.isEmpty()) openPipeline(path);
}

}  // namespace collage
