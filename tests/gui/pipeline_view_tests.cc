// The app's pipeline views (issue #41): a pipeline file opened on the model
// colours the graph by stage (a toggle beside the backend colouring), the
// timeline draws the simulator's schedule and, after a run in this process,
// the real run's micro-batch spans; the stage graph draws a real plan's
// stages, hand-overs and memory per device, and pinning a node to a stage
// re-plans around it; a file made for another model is refused with the
// core's message.
//
// The pipeline files are written here from a fixed two-stage split (the
// first half of the nodes, in topological order, on cpu0; the rest on cpu1),
// so the test does not depend on what the partitioner measures.
#include <QFile>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "core/onnx/onnx_import.h"
#include "core/pipeline/pipeline_file.h"
#include "core/pipeline/stage_partitioner.h"
#include "core/pipeline/topology.h"
#include "views/graph_scene.h"
#include "views/pipeline_timeline.h"
#include "views/stage_graph_view.h"

#include "tests/gui/gui_test_support.h"

using namespace collage;

namespace {

QString pipelineModel(const char* name) {
  return QStringLiteral(COLLAGE_SOURCE_DIR "/tests/models/pipeline/") + name + ".onnx";
}

constexpr int kMicroBatch = 2;
constexpr int kBatch = 8;  // 4 micro-batches

// Writes a two-stage pipeline file of `modelPath` to `out`.
void writeTwoStagePipeline(const QString& modelPath, const QString& out) {
  ImportOptions options;
  options.defaultDim = kMicroBatch;  // the models' only dynamic dimension is the batch
  const Graph graph = importOnnx(modelPath.toStdString(), options);
  const LinkCost link{1e12, 0};
  const Topology topology({{"cpu0", DeviceKind::Cpu, 1}, {"cpu1", DeviceKind::Cpu, 1}}, {}, &link,
                          "the test's topology");
  StageGraph stages;
  stages.microBatch = kMicroBatch;
  const int half = graph.numNodes() / 2;
  for (int s = 0; s < 2; ++s) {
    PipelineStage stage;
    for (int n = s == 0 ? 0 : half; n < (s == 0 ? half : graph.numNodes()); ++n) stage.nodes.push_back(n);
    stage.devices = {s == 0 ? "cpu0" : "cpu1"};
    stage.estimate.microBatch = kMicroBatch;
    stage.estimate.computeSeconds = s == 0 ? 0.001 : 0.002;
    stages.stages.push_back(stage);
  }
  stages.edges = {{0, 1}};
  stages.bottleneckTimePerSample = 0.002 / kMicroBatch;
  savePipelineFile(pipelineFileOf(stages, nullptr, graph, topology, modelPath.toStdString(), kBatch),
                   out.toStdString());
}

}  // namespace

class PipelineViewTests : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName("CollageTests");
    QCoreApplication::setApplicationName("pipeline_view_tests");
    qputenv("COLLAGE_CLI", COLLAGE_CLI_PATH);
    QSettings().clear();
  }

  void stageColouringAndTimeline() {
    QTemporaryDir dir;
    const QString model = pipelineModel("uno_small");
    const QString file = dir.filePath("uno.pipeline.json");
    writeTwoStagePipeline(model, file);

    MainWindow window;
    QVERIFY(gui_test::openAndWait(window, model));
    QVERIFY(!window.hasPipeline());
    QSignalSpy opened(&window, &MainWindow::pipelineOpened);
    QSignalSpy failed(&window, &MainWindow::pipelineFailed);
    QString error;
    QVERIFY2(window.openPipeline(file, &error), qPrintable(error));
    QTRY_VERIFY_WITH_TIMEOUT(!opened.isEmpty() || !failed.isEmpty(), 60000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().first().toString()));
    QVERIFY(window.hasPipeline());

    // Opening it colours by stage: every node of a stage in its stage's
    // colour, and the two stages' colours differ.
    const Graph& graph = *window.graph();
    const GraphScene& scene = *window.graphScene();
    QVERIFY(window.colourByStage());
    QColor stageColor[2];
    for (NodeId n = 0; n < graph.numNodes(); ++n) {
      const int s = window.stageOfNode(n);
      QCOMPARE(s, n < graph.numNodes() / 2 ? 0 : 1);
      if (!stageColor[s].isValid()) stageColor[s] = scene.nodeColor(n);
      QCOMPARE(scene.nodeColor(n), stageColor[s]);
    }
    QVERIFY(stageColor[0] != stageColor[1]);

    // The toggle: off shows the backend colouring (no plan here: the default
    // fill), on the stages again.
    window.setColourByStage(false);
    QVERIFY(!window.colourByStage());
    const QColor plain = scene.nodeColor(0);
    QVERIFY(plain != stageColor[0]);
    QCOMPARE(scene.nodeColor(graph.numNodes() - 1), plain);
    window.setColourByStage(true);
    QCOMPARE(scene.nodeColor(0), stageColor[0]);
    QCOMPARE(scene.nodeColor(graph.numNodes() - 1), stageColor[1]);

    // The timeline: a row per stage, a simulated bar per micro-batch, and the
    // second stage's m-th micro-batch after the first's (it reads its output).
    const PipelineTimeline& timeline = *window.pipelineTimeline();
    const int microBatches = kBatch / kMicroBatch;
    QCOMPARE(timeline.stageRows(), 2);
    for (int s = 0; s < 2; ++s) {
      QCOMPARE(timeline.barCount(s, PipelineTimeline::Lane::Simulated), microBatches);
      QCOMPARE(timeline.barCount(s, PipelineTimeline::Lane::Measured), 0);
    }
    QVERIFY(timeline.summary(PipelineTimeline::Lane::Simulated).contains("memory: cpu0"));

    // A real run in this process: its spans fill the other lane.
    QSignalSpy ran(&window, &MainWindow::pipelineRunFinished);
    QVERIFY(window.runPipeline());
    QTRY_VERIFY_WITH_TIMEOUT(!ran.isEmpty() || !failed.isEmpty(), 120000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().first().toString()));
    for (int s = 0; s < 2; ++s)
      QCOMPARE(timeline.barCount(s, PipelineTimeline::Lane::Measured), microBatches);
    QVERIFY(timeline.summary(PipelineTimeline::Lane::Measured).startsWith("run: 4 micro-batch"));
    for (auto lane : {PipelineTimeline::Lane::Simulated, PipelineTimeline::Lane::Measured}) {
      const auto first = timeline.spans(0, lane), second = timeline.spans(1, lane);
      for (int m = 0; m < microBatches; ++m) {
        QVERIFY(first.starts[m] <= first.finishes[m]);
        QVERIFY2(second.starts[m] >= first.finishes[m], qPrintable(QString("micro-batch %1").arg(m)));
        if (m > 0) QVERIFY(first.starts[m] >= first.finishes[m - 1]);  // one at a time
      }
    }
    QVERIFY(!window.pipelineTimeline()->grab().isNull());  // paints with both lanes
    // The stage graph takes the run's time per micro-batch and memory per device.
    const StageGraphView& stageGraph = *window.stageGraphView();
    QCOMPARE(stageGraph.stageCount(), 2);
    for (int s = 0; s < 2; ++s)
      QVERIFY2(stageGraph.boxText(s).last().startsWith("run "), qPrintable(stageGraph.boxText(s).join("; ")));
    for (const QString& row : stageGraph.memoryText()) QVERIFY2(row.contains(" run"), qPrintable(row));
  }

  // A real `collage pipeline` plan of a multi-branch model (profiled in
  // process, over a near-free link so that it may split): the stage graph
  // shows its stages as boxes in layers along the hand-overs, and the memory
  // of each device. Pinning a node to another stage re-plans around the pin
  // in the background: the node's stage, its colour, the stage graph and the
  // timeline all follow; a stage the devices cannot give is refused.
  void stageGraphAndPinOnARealPlan() {
    QTemporaryDir dir;
    const QString model = pipelineModel("two_tower_small");
    const QString topology = dir.filePath("fast.json");
    const QString file = dir.filePath("plan.json");
    QFile t(topology);
    QVERIFY(t.open(QIODevice::WriteOnly));
    t.write(R"({"devices": [{"id": "cpu0", "kind": "cpu", "cores": 1}, {"id": "cpu1", "kind": "cpu", "cores": 1}],
                "default_link": {"bandwidth_bytes_per_s": 1e12, "latency_s": 0}})");
    t.close();
    QProcess cli;
    cli.setProcessChannelMode(QProcess::MergedChannels);
    cli.start(COLLAGE_CLI_PATH, {"pipeline", model, "--topology", topology, "--batch", "4", "--micro-batch",
                                 "2", "--measure", "in-process", "--runs", "1", "-o", file});
    QVERIFY(cli.waitForFinished(300000));
    const QString output = QString::fromLocal8Bit(cli.readAll());
    QVERIFY2(cli.exitCode() == 0, qPrintable(output));
    const PipelineFile planned = loadPipelineFile(file.toStdString());

    MainWindow window;
    QVERIFY(gui_test::openAndWait(window, model));
    QSignalSpy opened(&window, &MainWindow::pipelineOpened);
    QSignalSpy failed(&window, &MainWindow::pipelineFailed);
    QVERIFY(window.openPipeline(file));
    QTRY_VERIFY_WITH_TIMEOUT(!opened.isEmpty() || !failed.isEmpty(), 60000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().first().toString()));

    StageGraphView& stages = *window.stageGraphView();
    const Graph& graph = *window.graph();
    // What the view shows is the open plan's: its stages, its edges going
    // down the layers, each carrying bytes, every node counted once.
    auto checkDrawn = [&] {
      const int count = window.pipelineTimeline()->stageRows();
      QCOMPARE(stages.stageCount(), count);
      int nodes = 0;
      for (int s = 0; s < count; ++s) {
        const QStringList text = stages.boxText(s);
        QVERIFY2(text.first().startsWith(QString("stage %1 [cpu").arg(s)), qPrintable(text.first()));
        nodes += text.at(1).section(' ', 0, 0).toInt();
        QVERIFY2(text.at(2).startsWith("sim "), qPrintable(text.at(2)));
      }
      QCOMPARE(nodes, graph.numNodes());
      for (int e = 0; e < stages.edgeCount(); ++e) {
        const auto& h = stages.edge(e);
        QVERIFY(h.bytesPerMicroBatch > 0);
        QVERIFY(stages.layerOf(h.to) > stages.layerOf(h.from));
        QVERIFY(stages.boxOf(h.to).top() > stages.boxOf(h.from).bottom());
      }
      if (count > 1) QVERIFY(stages.edgeCount() >= 1);  // the towers meet at the head
      const QStringList memory = stages.memoryText();
      QCOMPARE(memory.size(), 2);
      QVERIFY2(memory[0].startsWith("cpu0: ") && memory[1].startsWith("cpu1: "), qPrintable(memory.join("; ")));
      QVERIFY2(!memory[0].startsWith("cpu0: 0 B"), qPrintable(memory[0]));  // stage 0 is on cpu0
      QVERIFY(!stages.grab().isNull());
    };
    QCOMPARE(stages.stageCount(), static_cast<int>(planned.stages.size()));
    QCOMPARE(stages.edgeCount(), static_cast<int>(planned.edges.size()));
    checkDrawn();

    // The pin: a node of the last stage to stage 0 when the plan has two,
    // else the last node to stage 1 (it then splits).
    NodeId node;
    int target;
    if (stages.stageCount() > 1) {
      node = *graph.findNode(planned.stages.back().nodes.front());
      target = 0;
    } else {
      node = graph.numNodes() - 1;
      target = 1;
    }
    const int before = window.stageOfNode(node);
    QVERIFY(before != target);
    const QColor colourBefore = window.graphScene()->nodeColor(node);
    QCOMPARE(window.pinnedStage(node), -1);
    QString error;
    QVERIFY2(window.pinNodeToStage(node, target, &error), qPrintable(error));
    QTRY_VERIFY_WITH_TIMEOUT(opened.size() == 2 || !failed.isEmpty(), 180000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().first().toString()));
    QCOMPARE(window.stageOfNode(node), target);
    QCOMPARE(window.pinnedStage(node), target);
    QVERIFY(window.graphScene()->nodeColor(node) != colourBefore);
    checkDrawn();
    QCOMPARE(window.pipelineTimeline()->barCount(target, PipelineTimeline::Lane::Simulated), 2);

    // Pinned back to the stage it had: the second re-plan reuses the first's
    // node profile, so the two plans differ only by the pin (a re-plan that
    // ignored pins would give the same stage both times).
    QVERIFY2(window.pinNodeToStage(node, before, &error), qPrintable(error));
    QTRY_VERIFY_WITH_TIMEOUT(opened.size() == 3 || !failed.isEmpty(), 180000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().first().toString()));
    QCOMPARE(window.stageOfNode(node), before);
    QCOMPARE(window.pinnedStage(node), before);
    QCOMPARE(window.graphScene()->nodeColor(node), colourBefore);
    checkDrawn();

    // Two devices give stages 0 and 1: a pin on stage 2 is refused, naming it.
    QVERIFY(!window.pinNodeToStage(node, 2, &error));
    QVERIFY2(error.contains("stage 2") && error.contains("2 device(s)"), qPrintable(error));
    QCOMPARE(window.stageOfNode(node), before);
  }

  // `collage run --pipeline P --trace T` writes the run's spans; the app
  // draws them in the run lane. A trace with a stage the pipeline lacks is
  // refused.
  void runTraceFromTheCli() {
    QTemporaryDir dir;
    const QString model = pipelineModel("uno_small");
    const QString file = dir.filePath("uno.pipeline.json");
    const QString trace = dir.filePath("run.trace.json");
    writeTwoStagePipeline(model, file);
    QProcess cli;
    cli.setProcessChannelMode(QProcess::MergedChannels);
    cli.start(COLLAGE_CLI_PATH, {"run", model, "--pipeline", file, "--batch", "8", "--trace", trace});
    QVERIFY(cli.waitForFinished(120000));
    const QString output = QString::fromLocal8Bit(cli.readAll());
    QVERIFY2(cli.exitCode() == 0, qPrintable(output));
    QVERIFY2(output.contains("trace written to"), qPrintable(output));

    MainWindow window;
    QVERIFY(gui_test::openAndWait(window, model));
    QString error;
    QVERIFY(!window.openPipelineTrace(trace, &error));  // no pipeline yet
    QSignalSpy opened(&window, &MainWindow::pipelineOpened);
    QVERIFY(window.openPipeline(file));
    QTRY_VERIFY_WITH_TIMEOUT(!opened.isEmpty(), 60000);
    QVERIFY2(window.openPipelineTrace(trace, &error), qPrintable(error));
    const PipelineTimeline& timeline = *window.pipelineTimeline();
    for (int s = 0; s < 2; ++s)
      QCOMPARE(timeline.barCount(s, PipelineTimeline::Lane::Measured), 4);
    const auto first = timeline.spans(0, PipelineTimeline::Lane::Measured);
    const auto second = timeline.spans(1, PipelineTimeline::Lane::Measured);
    for (int m = 0; m < 4; ++m) QVERIFY(second.starts[m] >= first.finishes[m]);

    const QString other = dir.filePath("three_stages.json");
    QFile f(other);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"traceEvents": [{"cat": "pipeline", "ph": "X", "ts": 0, "dur": 5,
                                 "args": {"stage": 2, "micro_batch": 0}}]})");
    f.close();
    QVERIFY(!window.openPipelineTrace(other, &error));
    QVERIFY2(error.contains("stage 2") && error.contains("has 2 stage(s)"), qPrintable(error));
  }

  void pipelineOfAnotherModelIsRefused() {
    QTemporaryDir dir;
    const QString file = dir.filePath("dlrm.pipeline.json");
    writeTwoStagePipeline(pipelineModel("dlrm_small"), file);

    MainWindow window;
    QVERIFY(gui_test::openAndWait(window, pipelineModel("uno_small")));
    QSignalSpy opened(&window, &MainWindow::pipelineOpened);
    QSignalSpy failed(&window, &MainWindow::pipelineFailed);
    QVERIFY(window.openPipeline(file));
    QTRY_VERIFY_WITH_TIMEOUT(!opened.isEmpty() || !failed.isEmpty(), 60000);
    QVERIFY(opened.isEmpty());
    const QString message = failed.first().first().toString();
    QVERIFY2(message.contains("dlrm.pipeline.json was made for a model with sha256"), qPrintable(message));
    QVERIFY2(message.contains("uno_small.onnx has"), qPrintable(message));
    QVERIFY(!window.hasPipeline());
    QCOMPARE(window.pipelineTimeline()->stageRows(), 0);
  }

  void malformedPipelineFileIsRefused() {
    QTemporaryDir dir;
    const QString file = dir.filePath("junk.json");
    QFile f(file);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"format\": \"something else\"}");
    f.close();
    MainWindow window;
    QString error;
    QVERIFY(!window.openPipeline(file, &error));  // no model yet
    QVERIFY(error.contains("model"));
    QVERIFY(gui_test::openAndWait(window, pipelineModel("uno_small")));
    QVERIFY(!window.openPipeline(file, &error));
    QVERIFY2(error.contains("junk.json"), qPrintable(error));
  }
};

QTEST_MAIN(PipelineViewTests)
#include "pipeline_view_tests.moc"
