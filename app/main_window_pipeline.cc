// MainWindow's pipeline pieces (issue #41): a pipeline file opened on the
// model, the graph coloured by its stages, and the timeline of micro-batches
// over the stages, the simulator's beside a real run's.
//
//   openPipeline ─▶ parse (UI thread: a small JSON file)
//                ─▶ BackgroundWork: check the model's SHA-256, import at the
//                   micro-batch, stages, simulate ─▶ colours, timeline "sim"
//   runPipeline  ─▶ BackgroundWork: PipelineRuntime::run ─▶ timeline "run"
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
#include <QMessageBox>
#include <algorithm>
#include <exception>

#include "app/main_window.h"
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

namespace collage {

// A pipeline file checked against the open model, with what running it needs.
struct OpenPipeline {
  PipelineFile file;
  std::shared_ptr<const Graph> graph;  // the model at the file's micro-batch
  StageGraph stages;                   // of `graph`'s node ids
  SimulationReport simulated;
  std::map<std::string, int> stageOfNode;  // node name -> stage
  QStringList stageNames;                  // "stage 0 [cpu0]"
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

// Checks `file` against the model at `modelPath` and prepares it: off the UI
// thread (hashing and importing a large model take seconds).
std::shared_ptr<OpenPipeline> preparePipeline(PipelineFile file, const std::string& modelPath) {
  checkPipelineModel(file, modelPath);
  auto open = std::make_shared<OpenPipeline>();
  ImportOptions options;
  options.inputShapes = file.inputShapes;
  auto graph = std::make_shared<Graph>(importOnnx(modelPath, options));
  open->stages = stageGraphOf(file, *graph);
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
        pipeline_ = *result;
        timeline_->setStages(pipeline_->stageNames);
        QVector<PipelineTimeline::StageSpans> sim;
        for (const SimulatedStage& s : pipeline_->simulated.stages)
          sim << spansOf({s.starts}, {s.finishes}).front();
        timeline_->setLane(PipelineTimeline::Lane::Simulated, sim, simulatedSummary(*pipeline_));
        runPipelineAction_->setEnabled(true);
        openTraceAction_->setEnabled(true);
        colourByStageAction_->setEnabled(true);
        status_->setText(tr("%1: %2 stage(s), micro-batch %3, batch %4")
                             .arg(QFileInfo(path).fileName())
                             .arg(pipeline_->file.stages.size())
                             .arg(pipeline_->file.microBatch)
                             .arg(pipeline_->file.batch));
        setColourByStage(true);
        emit pipelineOpened();
      });
  return true;
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
