// The graph view: layouts in the `collage layout-worker` child process, the
// layout cache, cancelling, the group-level layout of big graphs, and the
// paint-only updates of the scene (frames, highlight), find.
//
// COLLAGE_LAYOUT_BENCH=1 also times the synthetic 5,000-node graph, group-level
// and with cheap settings, and prints the figures; COLLAGE_LAYOUT_BENCH=all
// adds default dot (about half a minute on an idle machine).
#include <signal.h>

#include <cerrno>
#include <cmath>
#include <optional>
#include <sstream>

#include <QElapsedTimer>
#include <QGraphicsPathItem>
#include <QGraphicsSimpleTextItem>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "views/find_bar.h"
#include "views/graph_layout.h"
#include "views/graph_scene.h"
#include "views/graph_view.h"
#include "views/layout_job.h"

#include "tests/gui/gui_test_support.h"

using namespace collage;
using gui_test::model;

namespace {

std::shared_ptr<const Graph> loadModel(const char* name) {
  return std::make_shared<const Graph>(importOnnx(model(name).toStdString()));
}

// A chain of `n` nodes in blocks of 25 with a skip connection into every
// third node: "/stage3/block12/op1234", the naming of exported PyTorch models.
std::shared_ptr<const Graph> syntheticGraph(int n) {
  auto graph = std::make_shared<Graph>();
  TensorType type{ElementType::Float32, {1, 64, 28, 28}};
  std::vector<ValueId> out;
  ValueId input = graph->addInput("input", type);
  static const char* ops[] = {"Conv", "Relu", "Add"};
  for (int i = 0; i < n; ++i) {
    Node node;
    node.name = "/stage" + std::to_string(i / 500) + "/block" + std::to_string(i / 25) + "/op" +
                std::to_string(i);
    node.op = ops[i % 3];
    node.inputs.push_back(i == 0 ? input : out.back());
    if (i % 3 == 2 && i >= 5) node.inputs.push_back(out[static_cast<size_t>(i - 5)]);
    ValueId v = graph->addValue("t" + std::to_string(i), type);
    node.outputs.push_back(v);
    out.push_back(v);
    graph->addNode(std::move(node));
  }
  graph->markOutput(out.back());
  graph->finalize();
  return graph;
}

bool overlaps(const NodeBox& a, const NodeBox& b) {
  return std::abs(a.cx - b.cx) < (a.width + b.width) / 2 - 1 &&
         std::abs(a.cy - b.cy) < (a.height + b.height) / 2 - 1;
}

// Runs `job` on `graph` and returns its layout (fails the test on error).
std::optional<GraphLayout> runLayout(LayoutJob& job, std::shared_ptr<const Graph> graph,
                                     const LayoutOptions& options = {}, int timeoutMs = 120000) {
  QSignalSpy done(&job, &LayoutJob::finished);
  QSignalSpy failed(&job, &LayoutJob::failed);
  job.start(std::move(graph), options);
  if (!QTest::qWaitFor([&] { return !done.isEmpty() || !failed.isEmpty(); }, timeoutMs)) {
    qWarning() << "layout timed out";
    return std::nullopt;
  }
  if (!failed.isEmpty()) {
    qWarning() << "layout failed:" << failed.front().front().toString();
    return std::nullopt;
  }
  return done.front().front().value<GraphLayout>();
}

}  // namespace

class GraphViewTests : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir cacheDir_;

  void useWorker(LayoutJob& job, const QString& cacheSubdir) {
    job.setWorkerPath(QStringLiteral(COLLAGE_CLI_PATH));
    job.setCacheDirectory(cacheDir_.filePath(cacheSubdir));
  }

 private slots:
  void initTestCase() {
    QVERIFY(cacheDir_.isValid());
    QVERIFY(QFileInfo(QStringLiteral(COLLAGE_CLI_PATH)).isExecutable());
  }

  void workerLayoutGivesEveryNodeABoxWithoutOverlap() {
    auto graph = loadModel("resnet50_small");
    LayoutJob job;
    useWorker(job, "resnet");
    auto layout = runLayout(job, graph);
    QVERIFY(layout);
    QVERIFY(!layout->fromCache);
    QCOMPARE(static_cast<int>(layout->nodes.size()), graph->numNodes());
    QVERIFY(layout->groups.empty());
    for (size_t i = 0; i < layout->nodes.size(); ++i) {
      QVERIFY(layout->nodes[i].width > 0 && layout->nodes[i].height > 0);
      QVERIFY(!layout->nodes[i].collapsed);
      for (size_t j = i + 1; j < layout->nodes.size(); ++j)
        QVERIFY2(!overlaps(layout->nodes[i], layout->nodes[j]),
                 qPrintable(QString("nodes %1 and %2 overlap").arg(i).arg(j)));
    }
    // Top to bottom: every edge goes down.
    for (const EdgePath& e : layout->edges)
      QVERIFY(layout->nodes[static_cast<size_t>(e.from)].cy < layout->nodes[static_cast<size_t>(e.to)].cy);
    GraphScene scene;
    scene.setGraph(graph, *layout);
    QCOMPARE(scene.nodeItemCount(), graph->numNodes());
    QCOMPARE(scene.edgeItemCount(), static_cast<int>(layout->edges.size()));

    // The same structure again: read from the cache, identical boxes.
    auto again = runLayout(job, graph);
    QVERIFY(again);
    QVERIFY(again->fromCache);
    QCOMPARE(again->nodes.size(), layout->nodes.size());
    for (size_t i = 0; i < again->nodes.size(); ++i) {
      QCOMPARE(again->nodes[i].cx, layout->nodes[i].cx);
      QCOMPARE(again->nodes[i].cy, layout->nodes[i].cy);
    }
    // The key is the structure, not the file: a fresh import hits too.
    auto again2 = runLayout(job, loadModel("resnet50_small"));
    QVERIFY(again2 && again2->fromCache);
    // Other settings are another key.
    LayoutOptions cheap;
    cheap.mode = LayoutOptions::Mode::Cheap;
    auto cheapLayout = runLayout(job, graph, cheap);
    QVERIFY(cheapLayout && !cheapLayout->fromCache);
  }

  void inProcessFallbackLaysOut() {
    auto graph = loadModel("dcgan_small");
    LayoutJob job;
    job.setWorkerPath({});
    job.setCacheEnabled(false);
    auto layout = runLayout(job, graph);
    QVERIFY(layout);
    QCOMPARE(static_cast<int>(layout->nodes.size()), graph->numNodes());
    QVERIFY(!layout->fromCache);
  }

  void missingWorkerFails() {
    LayoutJob job;
    job.setWorkerPath(QStringLiteral("/nonexistent/collage"));
    job.setCacheEnabled(false);
    QSignalSpy failed(&job, &LayoutJob::failed);
    job.start(loadModel("dcgan_small"));
    QVERIFY(failed.wait(30000));
    QVERIFY(failed.front().front().toString().contains("/nonexistent/collage"));
    QVERIFY(!job.isRunning());
  }

  void cheapSettingsStillPlaceWithoutOverlap() {
    auto graph = syntheticGraph(kCheapLayoutNodes + 100);
    LayoutPlan plan = planLayout(*graph, {});
    QVERIFY(plan.input.settings.cheap);
    QVERIFY(!plan.grouped);
    GraphLayout layout = assembleLayout(plan, layoutItems(plan.input));
    QCOMPARE(static_cast<int>(layout.nodes.size()), graph->numNodes());
    for (size_t i = 0; i < layout.nodes.size(); ++i)
      for (size_t j = i + 1; j < layout.nodes.size(); ++j)
        QVERIFY2(!overlaps(layout.nodes[i], layout.nodes[j]),
                 qPrintable(QString("nodes %1 and %2 overlap").arg(i).arg(j)));
    for (const EdgePath& e : layout.edges) QVERIFY(e.points.size() >= 2);
  }

  void wireFormatRoundTrips() {
    auto graph = syntheticGraph(40);
    LayoutPlan plan = planLayout(*graph, {});
    std::stringstream text;
    writeLayoutInput(plan.input, text);
    LayoutInput back = readLayoutInput(text);
    QCOMPARE(layoutKey(back), layoutKey(plan.input));
    GraphLayout items = layoutItems(plan.input);
    std::stringstream layoutText;
    writeItemLayout(items, layoutText);
    GraphLayout read = readItemLayout(layoutText);
    QCOMPARE(read.nodes.size(), items.nodes.size());
    QCOMPARE(read.edges.size(), items.edges.size());
    // A truncated stream (a killed worker) is an error, never a layout.
    std::string cut = layoutText.str();
    std::istringstream truncated(cut.substr(0, cut.size() / 2));
    QVERIFY_EXCEPTION_THROWN(readItemLayout(truncated), Error);
  }

  void cancelKillsALongLayoutAndLeavesTheSceneAlone() {
    auto small = loadModel("dcgan_small");
    GraphScene scene;
    scene.setGraph(small, computeLayout(*small));
    const int itemsBefore = scene.items().size();

    auto big = syntheticGraph(5000);
    LayoutJob job;
    useWorker(job, "cancel");
    connect(&job, &LayoutJob::finished, &scene,
            [&](const GraphLayout& layout) { scene.setGraph(job.graph(), layout); });
    QSignalSpy cancelled(&job, &LayoutJob::cancelled);
    QSignalSpy done(&job, &LayoutJob::finished);
    LayoutOptions full;
    full.mode = LayoutOptions::Mode::Full;  // default dot: tens of seconds
    job.start(big, full);
    QVERIFY(job.isRunning());
    QTest::qWait(1500);  // the worker is inside Graphviz by now
    QVERIFY(job.isRunning());
    const qint64 pid = job.workerPid();
    QVERIFY(pid > 0);
    QElapsedTimer clock;
    clock.start();
    job.cancel();
    const qint64 ms = clock.elapsed();
    qInfo("cancel() returned after %lld ms", static_cast<long long>(ms));
    QVERIFY2(ms < 1000, qPrintable(QString("cancel took %1 ms").arg(ms)));
    QCOMPARE(cancelled.size(), 1);
    QVERIFY(!job.isRunning());
    // The child is gone (killed and reaped), not left to finish.
    QCOMPARE(::kill(static_cast<pid_t>(pid), 0), -1);
    QCOMPARE(errno, ESRCH);
    QTest::qWait(300);
    QVERIFY(done.isEmpty());
    QCOMPARE(scene.graph(), small.get());
    QCOMPARE(scene.items().size(), itemsBefore);
    // Nothing was cached for the cancelled layout.
    QVERIFY(QDir(cacheDir_.filePath("cancel")).entryList(QDir::Files).isEmpty());
  }

  void secondStartCancelsTheFirst() {
    auto big = syntheticGraph(5000);
    auto small = loadModel("dcgan_small");
    LayoutJob job;
    useWorker(job, "restart");
    QSignalSpy cancelled(&job, &LayoutJob::cancelled);
    LayoutOptions full;
    full.mode = LayoutOptions::Mode::Full;
    job.start(big, full);
    auto layout = runLayout(job, small);
    QVERIFY(layout);
    QCOMPARE(cancelled.size(), 1);
    QCOMPARE(static_cast<int>(layout->nodes.size()), small->numNodes());
    QCOMPARE(job.graph(), small);
  }

  void bigGraphGetsAGroupLayoutThatExpands() {
    auto big = syntheticGraph(5000);
    LayoutJob job;
    useWorker(job, "groups");
    QElapsedTimer clock;
    clock.start();
    auto layout = runLayout(job, big);
    QVERIFY(layout);
    GraphScene scene;
    scene.setGraph(big, *layout);
    qInfo("5000-node graph, group-level layout in the worker: scene shown after %lld ms",
          static_cast<long long>(clock.elapsed()));
    QVERIFY(!layout->groups.empty());
    QCOMPARE(scene.groupBoxCount(), static_cast<int>(layout->groups.size()));
    QVERIFY(scene.nodeItemCount() < big->numNodes());
    // Every node is in a drawn box: its own or its group's.
    int inGroups = 0;
    for (const GroupBox& g : layout->groups) {
      inGroups += static_cast<int>(g.nodes.size());
      for (NodeId n : g.nodes) QVERIFY(scene.isCollapsed(n));
    }
    QCOMPARE(scene.nodeItemCount() + inGroups, big->numNodes());
    for (size_t i = 0; i < layout->groups.size(); ++i)
      for (size_t j = i + 1; j < layout->groups.size(); ++j)
        QVERIFY(!overlaps(layout->groups[i].box, layout->groups[j].box));

    // Colors survive the expansion (a relayout of the same graph).
    QVector<QColor> colors(big->numNodes(), QColor(Qt::blue));
    scene.setNodeColors(colors, {{"native", QColor(Qt::blue)}});
    const GroupBox opened = layout->groups[layout->groups.size() / 2];
    const int nodesBefore = scene.nodeItemCount();
    connect(&job, &LayoutJob::finished, &scene,
            [&](const GraphLayout& l) { scene.setGraph(job.graph(), l); });
    QSignalSpy done(&job, &LayoutJob::finished);
    connect(&scene, &GraphScene::groupExpandRequested, &job, &LayoutJob::expandGroup);
    emit scene.groupExpandRequested(opened.id);  // what a double-click on its box sends
    QVERIFY(done.wait(120000));
    GraphLayout expanded = done.front().front().value<GraphLayout>();
    QCOMPARE(static_cast<int>(expanded.groups.size()), static_cast<int>(layout->groups.size()) - 1);
    for (NodeId n : opened.nodes) {
      QVERIFY(!expanded.nodes[static_cast<size_t>(n)].collapsed);
      QVERIFY(!scene.isCollapsed(n));
      QCOMPARE(scene.nodeColor(n), QColor(Qt::blue));
    }
    QCOMPARE(scene.nodeItemCount(), nodesBefore + static_cast<int>(opened.nodes.size()));
  }

  void doubleClickOnAGroupAsksToExpandIt() {
    auto big = syntheticGraph(1600);
    LayoutPlan plan = planLayout(*big, {});
    QVERIFY(plan.grouped);
    GraphLayout layout = assembleLayout(plan, layoutItems(plan.input));
    GraphScene scene;
    scene.setGraph(big, layout);
    GraphView view;
    view.setScene(&scene);
    view.resize(800, 600);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    const GroupBox& g = layout.groups.front();
    view.centerOn(g.box.cx, g.box.cy);
    QSignalSpy expand(&scene, &GraphScene::groupExpandRequested);
    QPoint at = view.mapFromScene(QPointF(g.box.cx, g.box.cy));
    QTest::mouseDClick(view.viewport(), Qt::LeftButton, Qt::NoModifier, at);
    QCOMPARE(expand.size(), 1);
    QCOMPARE(expand.front().front().toInt(), g.id);
  }

  void setGroupsDrawsFramesWithoutRelayout() {
    auto graph = loadModel("dcgan_small");
    GraphScene scene;
    scene.setGraph(graph, computeLayout(*graph));
    QVERIFY(graph->numNodes() >= 6);
    auto frames = [&] {
      int count = 0;
      for (QGraphicsItem* item : scene.items())
        if (item->data(GraphScene::kFrameRole).toBool()) ++count;
      return count;
    };
    const QRectF node0 = scene.nodeRect(0);
    scene.setGroups({{0, 1, 2}, {3}, {4, 5}}, {QColor(Qt::red), QColor(Qt::green), QColor(Qt::blue)});
    QCOMPARE(scene.frameItemCount(), 2);  // a single node gets no frame
    QCOMPARE(frames(), 2);
    for (QGraphicsItem* item : scene.items())
      if (item->data(GraphScene::kFrameRole).toBool()) {
        QVERIFY(item->zValue() < scene.itemForNode(0)->zValue());  // behind the nodes
        QVERIFY(item->sceneBoundingRect().contains(node0) ||
                item->sceneBoundingRect().contains(scene.nodeRect(4)));
      }
    // Recoloring keeps the frames and moves nothing.
    scene.setNodeColors(QVector<QColor>(graph->numNodes(), QColor(Qt::yellow)), {{"onednn", Qt::yellow}});
    QCOMPARE(frames(), 2);
    QCOMPARE(scene.nodeRect(0), node0);
    scene.setGroups({{0, 1}}, {QColor(Qt::red)});
    QCOMPARE(frames(), 1);
    scene.setGroups({}, {});
    QCOMPARE(frames(), 0);
  }

  void regionsGetTheirOwnFrames() {
    auto graph = loadModel("dcgan_small");
    GraphScene scene;
    scene.setGraph(graph, computeLayout(*graph));
    QVERIFY(graph->numNodes() >= 8);
    // The region starts at the model's input, at the top of the drawing, so
    // its label lies above the margin the scene keeps around the nodes.
    GraphScene::GroupFrame region{{0, 1, 2, 3, 4}, QColor(Qt::blue), true, "onednn region, 5 nodes"};
    GraphScene::GroupFrame fused{{5, 6}, QColor(Qt::red), false, QString()};
    scene.setFrames({fused, region});
    QCOMPARE(scene.frameItemCount(), 2);
    QCOMPARE(scene.regionFrameCount(), 1);
    QGraphicsItem* regionItem = nullptr;
    for (QGraphicsItem* item : scene.items())
      if (item->data(GraphScene::kRegionRole).toBool()) regionItem = item;
    QVERIFY(regionItem);
    QVERIFY(regionItem->data(GraphScene::kFrameRole).toBool());
    auto* path = dynamic_cast<QGraphicsPathItem*>(regionItem);
    QVERIFY(path);
    QCOMPARE(path->pen().style(), Qt::DashLine);  // told apart from a fused group's solid frame
    QCOMPARE(path->brush().style(), Qt::NoBrush);
    for (NodeId n : region.nodes) QVERIFY(regionItem->sceneBoundingRect().contains(scene.nodeRect(n)));
    QVERIFY(regionItem->zValue() < scene.itemForNode(0)->zValue());
    bool labelled = false;
    for (QGraphicsItem* child : regionItem->childItems())
      if (auto* text = dynamic_cast<QGraphicsSimpleTextItem*>(child)) {
        labelled = labelled || text->text() == "onednn region, 5 nodes";
        // Above the frame, and still inside what the view can scroll to.
        QVERIFY(scene.sceneRect().contains(text->sceneBoundingRect()));
      }
    QVERIFY(labelled);
    // A relayout of the same graph keeps them; new frames replace them.
    scene.setGraph(graph, computeLayout(*graph));
    QCOMPARE(scene.regionFrameCount(), 1);
    scene.setGroups({{0, 1}}, {QColor(Qt::red)});
    QCOMPARE(scene.regionFrameCount(), 0);
    QCOMPARE(scene.frameItemCount(), 1);
  }

  void highlightSetsAndClears() {
    auto graph = loadModel("dcgan_small");
    GraphScene scene;
    scene.setGraph(graph, computeLayout(*graph));
    auto penWidth = [&](NodeId n) {
      return static_cast<QAbstractGraphicsShapeItem*>(scene.itemForNode(n))->pen().widthF();
    };
    const double normal = penWidth(1);
    scene.setHighlightedNodes({1, 3});
    QVERIFY(scene.isHighlighted(1) && scene.isHighlighted(3) && !scene.isHighlighted(2));
    QVERIFY(penWidth(1) > normal);
    QVERIFY(penWidth(3) > normal);
    QCOMPARE(penWidth(2), normal);
    scene.setHighlightedNodes({});
    QVERIFY(scene.highlightedNodes().isEmpty());
    QCOMPARE(penWidth(1), normal);
    QCOMPARE(penWidth(3), normal);
  }

  void findOpConvVisitsEveryConv() {
    auto graph = loadModel("resnet50_small");
    GraphScene scene;
    scene.setGraph(graph, computeLayout(*graph));
    GraphView view;
    view.setScene(&scene);
    view.resize(600, 400);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    view.fitAll();
    view.scale(3, 3);  // closer than fit: most nodes are off screen
    FindBar find(&scene, &view);
    QVector<NodeId> convs;
    for (NodeId n = 0; n < graph->numNodes(); ++n)
      if (graph->node(n).op == "Conv") convs.push_back(n);
    QVERIFY(convs.size() > 5);
    find.setQuery(QStringLiteral("op:Conv"));
    QCOMPARE(find.matches(), convs);
    QCOMPARE(find.statusText(), QString("1 of %1").arg(convs.size()));
    QVector<NodeId> visited;
    for (int i = 0; i < convs.size(); ++i) {
      visited.push_back(find.currentNode());
      QCOMPARE(scene.selectedNodes(), QVector<NodeId>{find.currentNode()});
      // Scrolled to: the node is inside the visible part of the scene.
      QRectF visible = view.mapToScene(view.viewport()->rect()).boundingRect();
      QVERIFY(visible.contains(scene.nodeRect(find.currentNode())));
      find.findNext();
    }
    QCOMPARE(visited, convs);
    QCOMPARE(find.currentNode(), convs.front());  // wrapped around
    find.findPrevious();
    QCOMPARE(find.currentNode(), convs.back());
    // An exact op type also works without "op:", and names match by substring.
    find.setQuery(QStringLiteral("Conv"));
    QVERIFY(find.matches().size() >= convs.size());
    QString name = QString::fromStdString(graph->node(convs[2]).name);
    find.setQuery(name.right(name.size() / 2 + 1).toUpper());
    QVERIFY(find.matches().contains(convs[2]));
    find.setQuery(QStringLiteral("no-such-node-anywhere"));
    QVERIFY(find.matches().isEmpty());
    QCOMPARE(find.statusText(), QString("no match"));
    QCOMPARE(find.currentNode(), kNoNode);
  }

  void edgeTooltipAndNodeLabel() {
    auto graph = loadModel("resnet50_small");
    GraphLayout layout = computeLayout(*graph);
    GraphScene scene;
    scene.setGraph(graph, layout);
    // Node label: op and the short name.
    NodeId conv = 0;
    while (graph->node(conv).op != "Conv") ++conv;
    QStringList texts;
    for (QGraphicsItem* child : scene.itemForNode(conv)->childItems())
      if (auto* t = dynamic_cast<QGraphicsSimpleTextItem*>(child)) texts << t->text();
    QCOMPARE(texts.size(), 2);
    QCOMPARE(texts[0], QString("Conv"));
    QString name = QString::fromStdString(graph->node(conv).name);
    // "/conv1/Conv" shows "conv1": the part that is not the op again.
    QVERIFY2(name.contains(texts[1]) || texts[1].contains(QChar(0x2026)), qPrintable(texts[1]));
    QVERIFY2(texts[1] != "Conv" || name == "Conv", qPrintable(name));
    // Edge hover: the item under the edge's middle carries name and type.
    const EdgePath& e = layout.edges.front();
    const LayoutPoint& mid = e.points[e.points.size() / 2];
    QGraphicsItem* edge = nullptr;
    for (QGraphicsItem* item : scene.items(QPointF(mid.x, mid.y)))
      if (dynamic_cast<QGraphicsPathItem*>(item) && !item->data(GraphScene::kFrameRole).toBool()) edge = item;
    QVERIFY(edge);
    const Value& v = graph->value(e.value);
    QVERIFY2(edge->toolTip().contains(QString::fromStdString(v.name)), qPrintable(edge->toolTip()));
    QVERIFY2(edge->toolTip().contains(QString::fromStdString(v.type.toString())), qPrintable(edge->toolTip()));
  }

  void benchmarkBigGraph() {
    if (!qEnvironmentVariableIsSet("COLLAGE_LAYOUT_BENCH")) QSKIP("set COLLAGE_LAYOUT_BENCH=1");
    auto big = syntheticGraph(5000);
    struct Case {
      const char* name;
      LayoutOptions::Mode mode;
    };
    for (Case c : {Case{"auto (group-level)", LayoutOptions::Mode::Auto},
                   Case{"cheap settings, every node", LayoutOptions::Mode::Cheap},
                   Case{"default dot, every node", LayoutOptions::Mode::Full}}) {
      if (c.mode == LayoutOptions::Mode::Full && qgetenv("COLLAGE_LAYOUT_BENCH") != "all") continue;
      LayoutJob job;
      useWorker(job, QString("bench-%1").arg(static_cast<int>(c.mode)));
      LayoutOptions options;
      options.mode = c.mode;
      for (int round = 0; round < 2; ++round) {
        QElapsedTimer clock;
        clock.start();
        auto layout = runLayout(job, big, options, 600000);
        QVERIFY(layout);
        GraphScene scene;
        scene.setGraph(big, *layout);
        qInfo("%s, %s: scene shown after %lld ms (%d node boxes, %d group boxes)", c.name,
              round == 0 ? "cold" : "cached", static_cast<long long>(clock.elapsed()),
              scene.nodeItemCount(), scene.groupBoxCount());
      }
    }
  }
};

QTEST_MAIN(GraphViewTests)
#include "graph_view_tests.moc"
