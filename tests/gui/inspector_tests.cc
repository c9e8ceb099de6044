// The inspector and manual overrides on the offscreen platform, over a small
// hand-built plan with deterministic costs: the inspector's HTML names the
// backend, where the choice came from and every backend's cost; the cost
// chart marks the chosen backend; "Run on" greys out what cannot run; an
// override is undone and redone exactly, and an impossible one is refused.
#include <QAction>
#include <QMenu>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QUndoStack>
#include <QtTest>

#include "backends/backend_list.h"
#include "core/onnx/onnx_import.h"
#include "core/search/plan_override.h"
#include "views/cost_bar_chart.h"
#include "views/node_inspector.h"
#include "views/override_commands.h"

using namespace collage;

namespace {

Measurement ok(double ns) {
  Measurement m;
  m.status = MeasurementStatus::Ok;
  m.medianNs = ns;
  m.spread = 0.1;
  m.samples = 10;
  return m;
}

// x -> n0 -> n1 -> n2 -> n3 (Relu chain).
std::shared_ptr<const Graph> chain() {
  auto g = std::make_shared<Graph>();
  ValueId v = g->addInput("x", {ElementType::Float32, {1, 8}});
  for (int i = 0; i < 4; ++i) {
    ValueId out = g->addValue("v" + std::to_string(i), {ElementType::Float32, {1, 8}});
    g->addNode(Node{"n" + std::to_string(i), "Relu", {}, {v}, {out}});
    v = out;
  }
  g->markOutput(v);
  g->finalize();
  return g;
}

// native runs every node alone (10 us); fast fuses pairs (8 us) and runs n0
// and n1 alone (7 us); slow refuses n1. Planned: fast{n0,n1}, fast{n2,n3}.
std::shared_ptr<const OptimizationResult> chainResult(const Graph& graph) {
  auto r = std::make_shared<OptimizationResult>();
  const int32_t n = graph.numNodes();
  r->candidates = CandidateSet(n);
  auto add = [&](std::vector<NodeId> nodes, const char* backend, const char* origin, Measurement m) {
    r->candidates.add(Candidate{NodeSet::of(n, nodes), backend, origin, {}});
    r->measurements.push_back(m);
  };
  for (NodeId i = 0; i < n; ++i) add({i}, "native", "rule:op", ok(10000));
  add({0, 1}, "fast", "pattern:pair", ok(8000));
  add({2, 3}, "fast", "pattern:pair", ok(8000));
  add({0}, "fast", "rule:op", ok(7000));
  add({1}, "fast", "rule:op", ok(7000));
  Measurement refused;
  refused.status = MeasurementStatus::Invalid;
  refused.message = "no kernel for this Relu";
  add({1}, "slow", "rule:op", refused);
  r->versions = {{"native", "1"}, {"fast", "2"}, {"slow", "3"}};
  r->plan = replanWithPins(graph, *r, {}).plan;
  r->hasPlan = true;
  return r;
}

const PlanGroup* groupOf(const Plan& plan, const std::string& node) {
  for (const auto& g : plan.groups)
    for (const auto& m : g.nodes)
      if (m == node) return &g;
  return nullptr;
}

}  // namespace

class InspectorTests : public QObject {
  Q_OBJECT
 private slots:
  void htmlNamesBackendOriginAndEveryCost() {
    auto graph = chain();
    auto result = chainResult(*graph);
    const NodeId n1 = *graph->findNode("n1");
    QString html = describeNodeHtml(*graph, n1, &result->plan, result.get());
    QVERIFY2(html.contains("Relu"), qPrintable(html));
    QVERIFY2(html.contains("<b>Backend</b> fast"), qPrintable(html));
    QVERIFY2(html.contains("op-level"), qPrintable(html));
    QVERIFY2(html.contains("op-level optimizer"), qPrintable(html));
    // Every backend's cost for exactly this node, or why it cannot.
    QVERIFY2(html.contains("native"), qPrintable(html));
    QVERIFY2(html.contains("10.0 us"), qPrintable(html));
    QVERIFY2(html.contains("7.0 us"), qPrintable(html));
    QVERIFY2(html.contains("slow"), qPrintable(html));
    QVERIFY2(html.contains("no kernel for this Relu"), qPrintable(html));
    // Why: n1 runs inside a bigger fused group; its cost and the alternative.
    QVERIFY2(html.contains("bigger fused group"), qPrintable(html));
    QVERIFY2(html.contains("8.0 us"), qPrintable(html));

    // A selection of the whole group: fast is the only backend that fuses it.
    QString pair = describeSelectionHtml(*graph, {0, 1}, &result->plan, result.get());
    QVERIFY2(pair.contains("2 nodes"), qPrintable(pair));
    QVERIFY2(pair.contains("only backend"), qPrintable(pair));
    QVERIFY2(pair.contains("<b>fast</b> (chosen)"), qPrintable(pair));
    // Without a plan: the node's own details only.
    QString bare = describeNodeHtml(*graph, n1, nullptr);
    QVERIFY(bare.contains("n1"));
    QVERIFY(!bare.contains("Placement"));
  }

  void panelChartsTheCostsWithTheChosenBackendMarked() {
    auto graph = chain();
    auto result = chainResult(*graph);
    InspectorPanel panel;
    panel.resize(400, 500);
    panel.showSelection(graph.get(), {0, 1}, &result->plan, result.get());
    const QVector<BackendCost>& costs = panel.chart()->costs();
    QCOMPARE(costs.size(), 3);
    int chosen = 0;
    for (const auto& c : costs) {
      if (c.chosen) {
        ++chosen;
        QCOMPARE(c.backend, QStringLiteral("fast"));
        QCOMPARE(c.medianNs, 8000.0);
      }
      if (c.backend == "native") {
        QVERIFY(!c.runnable);
        QVERIFY(c.note.contains("no pattern or fusion rule of native"));
      }
    }
    QCOMPARE(chosen, 1);
    QVERIFY(!panel.chart()->isHidden());
    QImage image = panel.chart()->grab().toImage();  // paints without crashing
    QVERIFY(!image.isNull());
    QVERIFY(panel.chart()->rowAt(QPoint(10, 4 + 20 + 5)) == 1);
    panel.showSelection(graph.get(), {}, &result->plan, result.get());
    QVERIFY(panel.chart()->isHidden());
  }

  void undoRedoRestoresThePlanExactly() {
    auto graph = chain();
    auto result = chainResult(*graph);
    OverrideController controller;
    QSignalSpy planChanged(&controller, &OverrideController::planChanged);
    QSignalSpy refused(&controller, &OverrideController::refused);
    controller.setResult(graph, result);
    QCOMPARE(planChanged.count(), 1);
    const Plan before = *controller.plan();
    QVERIFY(before == result->plan);

    const NodeId n1 = *graph->findNode("n1");
    QVERIFY(controller.applyOverride({n1}, "native"));
    QCOMPARE(refused.count(), 0);
    QCOMPARE(controller.undoStack()->count(), 1);
    const Plan after = *controller.plan();
    QVERIFY(!(after == before));
    QCOMPARE(QString::fromStdString(groupOf(after, "n1")->backend), QStringLiteral("native"));
    QVERIFY(groupOf(after, "n1")->origin == PlanOrigin::User);
    QCOMPARE(static_cast<int>(groupOf(after, "n1")->nodes.size()), 1);
    QCOMPARE(static_cast<int>(controller.constraints().pins.size()), 1);
    QVERIFY(after.predictedNs > before.predictedNs);  // the optimum was unpinned
    // The last signal carries the new plan.
    QVERIFY(planChanged.last().front().value<Plan>() == after);
    // The inspector now says it was pinned.
    QString html = describeNodeHtml(*graph, n1, controller.plan(), controller.result());
    QVERIFY2(html.contains("pinned by the user"), qPrintable(html));

    controller.undoStack()->undo();
    QVERIFY(*controller.plan() == before);
    QVERIFY(controller.constraints().pins.empty());
    controller.undoStack()->redo();
    QVERIFY(*controller.plan() == after);
    QCOMPARE(static_cast<int>(controller.constraints().pins.size()), 1);

    // Letting the optimizer choose again is undoable too.
    QVERIFY(controller.isOverridden({n1}));
    QVERIFY(controller.clearOverride({n1}));
    QVERIFY(controller.constraints().pins.empty());
    QCOMPARE(controller.plan()->groups.size(), before.groups.size());
    controller.undoStack()->undo();
    QVERIFY(*controller.plan() == after);
  }

  void aCyclicOverrideIsRefused() {
    auto graph = chain();
    auto result = chainResult(*graph);
    OverrideController controller;
    controller.setResult(graph, result);
    QSignalSpy refused(&controller, &OverrideController::refused);
    const Plan before = *controller.plan();
    QVERIFY(!controller.applyOverride({0, 2}, "fast"));  // n1 lies between
    QCOMPARE(refused.count(), 1);
    const QString why = refused.front().front().toString();
    QVERIFY2(why.contains("n1") && why.contains("not convex"), qPrintable(why));
    QCOMPARE(controller.undoStack()->count(), 0);
    QVERIFY(*controller.plan() == before);
    QVERIFY(!controller.applyOverride({1}, "slow"));
    QVERIFY(refused.last().front().toString().contains("no kernel for this Relu"));
  }

  void runOnMenuGreysOutWhatCannotRun() {
    auto graph = chain();
    auto result = chainResult(*graph);
    OverrideController controller;
    controller.setResult(graph, result);
    QMenu menu;
    const NodeId n1 = *graph->findNode("n1");
    populateRunOnMenu(&menu, &controller, {n1});
    QAction* native = nullptr;
    QAction* slow = nullptr;
    for (QAction* a : menu.actions()) {
      if (a->data().toString() == "native") native = a;
      if (a->data().toString() == "slow") slow = a;
    }
    QVERIFY(native && slow);
    QVERIFY(native->isEnabled());
    QVERIFY(!slow->isEnabled());
    QVERIFY(slow->toolTip().contains("no kernel for this Relu"));
    native->trigger();
    QCOMPARE(controller.undoStack()->count(), 1);
    QCOMPARE(QString::fromStdString(groupOf(*controller.plan(), "n1")->backend),
             QStringLiteral("native"));
    // Now the menu offers to hand the node back to the optimizer.
    QMenu again;
    populateRunOnMenu(&again, &controller, {n1});
    bool automatic = false;
    for (QAction* a : again.actions()) {
      automatic = automatic || a->text().contains("optimizer choose");
      if (a->data().toString() == "native") QVERIFY(a->isChecked());
    }
    QVERIFY(automatic);
  }

  // The real job with a pin (as the app passes its overrides): the pin beats
  // the search, its group is "user", and re-planning from the result alone
  // reproduces the job's placement without measuring anything.
  void jobHonoursPinsAndKeepsWhatReplanningNeeds() {
    const std::string path = COLLAGE_SOURCE_DIR "/resources/models/dcgan_small.onnx";
    auto graph = std::make_shared<const Graph>(importOnnx(path));
    BackendSet set = loadBackendSet();
    QTemporaryDir dir;
    OptimizationJobOptions options;
    options.modelPath = path;
    options.capabilities = set.capabilities();
    options.versions = set.versions();
    options.dbPath = dir.filePath("measurements.sqlite").toStdString();
    options.workerExecutable = COLLAGE_CLI_PATH;
    const std::string bn = "/main/main.4/BatchNormalization";
    const std::string conv = "/main/main.3/ConvTranspose";
    const NodeSet pinned = NodeSet::of(graph->numNodes(), {*graph->findNode(bn)});
    options.constraints = withOverride(*graph, {}, pinned, "native");

    OptimizationResult result = runOptimizationJob(*graph, options, nullptr, nullptr);
    QVERIFY(result.hasPlan);
    const PlanGroup* g = groupOf(result.plan, bn);
    QVERIFY(g);
    QCOMPARE(g->nodes, std::vector<std::string>{bn});
    QCOMPARE(QString::fromStdString(g->backend), QStringLiteral("native"));
    QVERIFY(g->origin == PlanOrigin::User);
    QVERIFY(groupOf(result.plan, conv)->origin == PlanOrigin::OpLevel);
    QCOMPARE(result.allowed.size(), result.candidates.size());
    QCOMPARE(result.measured.size(), result.candidates.size());
    QVERIFY(!result.switchCosts.pairNs.empty());
    QCOMPARE(result.versions.size(), options.versions.size());
    QCOMPARE(static_cast<int>(result.constraints.pins.size()), 1);

    // The fused ConvTranspose+BatchNormalization the pin excluded: runnable,
    // not measured yet.
    const NodeSet pair =
        NodeSet::of(graph->numNodes(), {*graph->findNode(conv), *graph->findNode(bn)});
    bool sawUnmeasured = false;
    for (const auto& c : runOnChoices(*graph, result, pair))
      sawUnmeasured = sawUnmeasured || (c.runnable && !c.measured);
    QVERIFY(sawUnmeasured);

    // Same pins, same placement, nothing measured.
    OptimizationResult copy = result;
    ReplanResult same = replanWithPins(*graph, copy, result.constraints);
    QCOMPARE(same.measuredNow, 0);
    QVERIFY(same.plan.groups == result.plan.groups);
    QCOMPARE(same.plan.predictedNs, result.plan.predictedNs);
    // Without the pin, what it excluded is measured, through the job's
    // worker, into the job's database.
    MeasureFn measure = jobMeasureFn(graph, options);
    int calls = 0;
    ReplanResult unpinned = replanWithPins(*graph, copy, {}, [&](const Candidate& c) {
      ++calls;
      Measurement m = measure(c);
      if (c.backend == "onednn" && c.nodes == pair)
        QTest::qVerify(m.status == MeasurementStatus::Ok, "the fused pair measures", "", __FILE__,
                       __LINE__);
      return m;
    });
    QVERIFY(calls > 0);
    QCOMPARE(unpinned.measuredNow, calls);
    QVERIFY(unpinned.plan.predictedNs <= same.plan.predictedNs);
    for (const auto& group : unpinned.plan.groups) QVERIFY(group.origin == PlanOrigin::OpLevel);
    // Stored: a fresh re-plan finds every one of them in the database.
    OptimizationResult again = result;
    MeasureFn fromDb = jobMeasureFn(graph, options);
    int cached = 0;
    replanWithPins(*graph, again, {}, [&](const Candidate& c) {
      Measurement m = fromDb(c);
      cached += m.fromCache ? 1 : 0;
      return m;
    });
    QCOMPARE(cached, calls);
  }
};

QTEST_MAIN(InspectorTests)
#include "inspector_tests.moc"
