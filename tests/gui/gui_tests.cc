// GUI tests on the offscreen platform: the real main window loads a model,
// optimises it on the worker thread, recolours the graph on each best plan of
// a graph-level search, and the models (kernels, plan diff) pass Qt's model
// tester.
#include <algorithm>
#include <cmath>

#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QSettings>
#include <QTableView>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTemporaryDir>
#include <QtTest>

#include "app/input_shape_dialog.h"
#include "app/main_window.h"
#include "core/onnx/onnx_import.h"
#include "core/plan/plan.h"
#include "core/plan/plan_export.h"
#include "core/ir/hashing.h"
#include "core/rewrite/equivalence_check.h"
#include "core/rewrite/substitution.h"
#include "core/search/plan_override.h"
#include "views/override_commands.h"
#include "views/pattern_editor.h"
#include "views/search_chart.h"
#include "views/graph_layout.h"
#include "views/graph_scene.h"
#include "views/kernel_table_model.h"
#include "views/plan_diff_model.h"
#include "views/plan_diff_panel.h"
#include "views/node_inspector.h"
#include <QTextBrowser>

#include "tests/gui/gui_test_support.h"

using namespace collage;
using gui_test::model;
using gui_test::openAndWait;

namespace {

// `plan` with its groups first..last (consecutive, in plan order) merged into
// one region on `backend`, as the graph-level search makes them.
Plan withRegion(const Plan& plan, size_t first, size_t last, const std::string& backend) {
  Plan out = plan;
  PlanGroup region;
  region.backend = backend;
  region.pattern = "region";
  region.origin = PlanOrigin::GraphLevel;
  region.costNs = 5e5;
  for (size_t g = first; g <= last; ++g)
    region.nodes.insert(region.nodes.end(), plan.groups[g].nodes.begin(), plan.groups[g].nodes.end());
  out.groups.erase(out.groups.begin() + static_cast<std::ptrdiff_t>(first),
                   out.groups.begin() + static_cast<std::ptrdiff_t>(last) + 1);
  out.groups.insert(out.groups.begin() + static_cast<std::ptrdiff_t>(first), region);
  return out;
}

QColor colorOf(const std::string& backend) {
  return QColor(QString::fromStdString(backendColor(backend)));
}

}  // namespace

class GuiTests : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName("CollageTests");
    QCoreApplication::setApplicationName("gui_tests");
    qputenv("COLLAGE_CLI", COLLAGE_CLI_PATH);
    QSettings().clear();  // no recent files or input shapes from an earlier run
  }

  void loadBertDrawsEveryNode() {
    MainWindow window;
    QVERIFY(openAndWait(window, model("bert_small")));
    Graph graph = importOnnx(model("bert_small").toStdString());
    QVERIFY(window.graph() != nullptr);
    QCOMPARE(window.graph()->numNodes(), graph.numNodes());
    QCOMPARE(window.graphScene()->nodeItemCount(), graph.numNodes());
    QVERIFY(window.graphScene()->edgeItemCount() > 0);
  }

  void badModelReportsError() {
    QTemporaryDir dir;
    QString path = dir.filePath("junk.onnx");
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("not a model");
    f.close();
    MainWindow window;
    QSignalSpy failed(&window, &MainWindow::loadFailed);
    window.openModel(path);
    QVERIFY(failed.wait(60000));
    QVERIFY(!failed.front().front().toString().isEmpty());
    QVERIFY(window.graph() == nullptr);
  }

  void layoutPlacesNodesWithoutOverlap() {
    Graph graph = importOnnx(model("dcgan_small").toStdString());
    GraphLayout layout = computeLayout(graph);
    QCOMPARE(static_cast<int>(layout.nodes.size()), graph.numNodes());
    for (size_t i = 0; i < layout.nodes.size(); ++i)
      for (size_t j = i + 1; j < layout.nodes.size(); ++j) {
        const NodeBox& a = layout.nodes[i];
        const NodeBox& b = layout.nodes[j];
        bool overlap = std::abs(a.cx - b.cx) < (a.width + b.width) / 2 - 1 &&
                       std::abs(a.cy - b.cy) < (a.height + b.height) / 2 - 1;
        QVERIFY2(!overlap, qPrintable(QString("nodes %1 and %2 overlap").arg(i).arg(j)));
      }
  }

  void kernelTableModelPassesModelTester() {
    Graph graph = importOnnx(model("dcgan_small").toStdString());
    KernelTableModel kernels;
    QAbstractItemModelTester tester(&kernels, QAbstractItemModelTester::FailureReportingMode::QtTest);
    Plan plan = singleNodePlan(graph, "native");
    plan.groups[0].costNs = 1500;
    plan.groups[0].samples = 9;
    kernels.setPlan(graph, plan, {});
    QCOMPARE(kernels.rowCount(), graph.numNodes());
    QCOMPARE(kernels.columnCount(), static_cast<int>(KernelTableModel::ColumnCount));
    QCOMPARE(kernels.data(kernels.index(0, KernelTableModel::Backend)).toString(), QString("native"));
    QCOMPARE(kernels.data(kernels.index(0, KernelTableModel::Median)).toString(), QString("1.50 us"));
    QCOMPARE(kernels.data(kernels.index(1, KernelTableModel::Median)).toString(), QString("unknown"));
    QCOMPARE(kernels.row(0).nodes, QVector<NodeId>{0});
    QSortFilterProxyModel proxy;
    QAbstractItemModelTester proxyTester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.setSourceModel(&kernels);
    proxy.setSortRole(KernelTableModel::kSortRole);
    proxy.sort(KernelTableModel::Median, Qt::DescendingOrder);
    QCOMPARE(proxy.mapToSource(proxy.index(0, 0)).row(), 0);
    kernels.clear();
    QCOMPARE(kernels.rowCount(), 0);
  }

  void graphRecoloursOnEachBestPlan() {
    // What OptimizeWorker::bestPlanChanged delivers while a graph-level
    // search runs: every node on native, then a best with a oneDNN region.
    MainWindow window;
    QVERIFY(openAndWait(window, model("dcgan_small")));
    const Graph& graph = *window.graph();
    QVERIFY(graph.numNodes() >= 6);
    GraphScene* scene = window.graphScene();
    const Plan start = singleNodePlan(graph, "native");
    window.showBestPlanSoFar(std::make_shared<const Plan>(start), 0);
    for (NodeId n = 0; n < graph.numNodes(); ++n) QCOMPARE(scene->nodeColor(n), colorOf("native"));
    QCOMPARE(scene->regionFrameCount(), 0);

    window.showBestPlanSoFar(std::make_shared<const Plan>(withRegion(start, 1, 4, "onednn")), 21.5);
    for (NodeId n = 0; n < graph.numNodes(); ++n)
      QCOMPARE(scene->nodeColor(n), colorOf(n >= 1 && n <= 4 ? "onednn" : "native"));
    QCOMPARE(scene->regionFrameCount(), 1);
    for (QGraphicsItem* item : scene->items())
      if (item->data(GraphScene::kRegionRole).toBool())
        for (NodeId n = 1; n <= 4; ++n) QVERIFY(item->sceneBoundingRect().contains(scene->nodeRect(n)));
    QVERIFY2(window.planSummary().contains("21.500"), qPrintable(window.planSummary()));
    // Paint only: the plan (and the tables) are the final result's.
    QVERIFY(window.plan() == nullptr);
    QCOMPARE(window.kernelModel()->rowCount(), 0);
  }

  void planDiffListsWhatChanged() {
    Graph graph = importOnnx(model("dcgan_small").toStdString());
    QVERIFY(graph.numNodes() >= 8);
    Plan base = singleNodePlan(graph, "native");
    for (size_t g = 0; g < base.groups.size(); ++g)
      base.groups[g].costNs = 1e5 * static_cast<double>(g + 1);
    // Nodes 6 and 7 run as one group in the base plan.
    base.groups[6].nodes.push_back(base.groups[7].nodes.front());
    base.groups.erase(base.groups.begin() + 7);
    Plan plan = withRegion(base, 1, 3, "onednn");  // groups 1..3 merged: groups 0, region, 4, ...
    plan.groups[2].backend = "openblas";           // node 4 moved
    PlanGroup piece = plan.groups[4];              // nodes 6 and 7 split apart
    plan.groups[4].nodes.pop_back();
    piece.nodes.erase(piece.nodes.begin());
    piece.backend = "onednn";
    plan.groups.insert(plan.groups.begin() + 5, piece);

    PlanDiffModel diff;
    QAbstractItemModelTester tester(&diff, QAbstractItemModelTester::FailureReportingMode::QtTest);
    diff.setPlans(graph, base, plan);
    QCOMPARE(diff.rowCount(), 3);  // the unchanged groups are not listed
    const PlanDiffRow& merged = diff.row(0);
    QVERIFY(merged.kind == PlanDiffRow::Kind::Merged && merged.region);
    QCOMPARE(merged.baseGroups, 3);
    QCOMPARE(merged.nodeIds, (QVector<NodeId>{1, 2, 3}));
    QCOMPARE(merged.before, QString("native 3"));
    QCOMPARE(merged.after, QString("onednn region"));
    // Before: the three groups the region replaced; after: the region's own
    // time, once, against all three (never against one of them alone).
    QCOMPARE(merged.beforeNs, 2e5 + 3e5 + 4e5);
    QCOMPARE(merged.afterNs, 5e5);
    QCOMPARE(diff.data(diff.index(0, PlanDiffModel::Change)).toString(),
             QString("merged 3 groups (region)"));
    QCOMPARE(diff.data(diff.index(0, PlanDiffModel::BeforeMs)).toString(), QString("0.900"));
    QCOMPARE(diff.data(diff.index(0, PlanDiffModel::AfterMs)).toString(), QString("0.500"));
    QVERIFY(diff.row(1).kind == PlanDiffRow::Kind::BackendChanged);
    QCOMPARE(diff.row(1).after, QString("openblas"));
    QCOMPARE(diff.row(1).beforeNs, 5e5);
    // Nodes 6 and 7: one group before, two after: one row whose figures
    // cover both nodes on each side (a piece of a group has no time of its own).
    const PlanDiffRow& split = diff.row(2);
    QVERIFY(split.kind == PlanDiffRow::Kind::Split);
    QCOMPARE(split.nodeIds, (QVector<NodeId>{6, 7}));
    QCOMPARE(split.after, QString("native 1, onednn 1"));
    QCOMPARE(diff.data(diff.index(2, PlanDiffModel::Change)).toString(), QString("split 1 group into 2"));
    QCOMPARE(split.beforeNs, 7e5);
    QCOMPARE(split.afterNs, plan.groups[4].costNs + plan.groups[5].costNs);
    // The figures add up: every row's before plus the unchanged groups is the
    // starting plan's sum of group costs, every row's after plus them the plan's.
    double rowsBefore = 0, rowsAfter = 0;
    for (int r = 0; r < diff.rowCount(); ++r) {
      rowsBefore += diff.row(r).beforeNs;
      rowsAfter += diff.row(r).afterNs;
    }
    const PlanDiffTotals& totals = diff.totals();
    QCOMPARE(totals.beforeNs, rowsBefore);
    QCOMPARE(totals.afterNs, rowsAfter);
    QCOMPARE(totals.unchangedGroups, static_cast<int>(base.groups.size()) - 5);
    QCOMPARE(totals.unchangedNs + totals.beforeNs, base.sumOfGroupCosts());
    QCOMPARE(totals.unchangedNs + totals.afterNs, plan.sumOfGroupCosts());
    QVERIFY2(diff.describeTotals().contains("2.100 ms before, 2.400 ms after"),
             qPrintable(diff.describeTotals()));
    // The headers say what each number is.
    QCOMPARE(diff.headerData(PlanDiffModel::AfterMs, Qt::Horizontal).toString(),
             QString("After (ms, sum of kernels alone)"));
    QVERIFY(diff.headerData(PlanDiffModel::AfterMs, Qt::Horizontal, Qt::ToolTipRole)
                .toString()
                .contains("region is measured as one kernel"));
    QSortFilterProxyModel proxy;
    QAbstractItemModelTester proxyTester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.setSourceModel(&diff);
    proxy.setSortRole(PlanDiffModel::kSortRole);
    proxy.sort(PlanDiffModel::Nodes, Qt::DescendingOrder);
    QCOMPARE(proxy.mapToSource(proxy.index(0, 0)).row(), 0);

    // The panel: the gain measured whole above the table, rows select nodes.
    OptimizationResult result;
    result.hasPlan = true;
    result.graphLevelRan = true;
    result.startPlan = base;
    result.plan = plan;
    result.graphLevel.improved = true;
    result.graphLevel.baseMs = 23.1;
    result.graphLevel.bestMs = 20.6;
    result.graphLevel.gain = 1.12;
    PlanDiffPanel panel;
    panel.showResult(graph, result);
    QCOMPARE(panel.model()->rowCount(), 3);
    QVERIFY2(panel.summary().contains("23.100 -> 20.600 ms") && panel.summary().contains("1.12x") &&
                 panel.summary().contains("each kernel measured alone: 2.100 ms before, 2.400 ms after"),
             qPrintable(panel.summary()));
    QSignalSpy activated(&panel, &PlanDiffPanel::nodesActivated);
    panel.table()->selectRow(0);
    QCOMPARE(activated.size(), 1);
    QCOMPARE(activated.front().front().value<QVector<NodeId>>(), (QVector<NodeId>{1, 2, 3}));
    // A cancelled search keeps its best without the final timing, and says so.
    result.graphLevel.baseMs = result.graphLevel.bestMs = 0;
    result.graphLevel.verdict = "cancelled: keeping the best plan found";
    panel.showResult(graph, result);
    QVERIFY2(panel.summary().contains("not timed again"), qPrintable(panel.summary()));
    // The starting plan kept; then no graph-level search at all.
    result.graphLevel.improved = false;
    result.graphLevel.verdict = "no plan ran faster than the starting plan";
    result.plan = base;
    panel.showResult(graph, result);
    QCOMPARE(panel.model()->rowCount(), 0);
    QVERIFY(panel.summary().contains("op-level plan was kept"));
    result.graphLevelRan = false;
    panel.showResult(graph, result);
    QVERIFY(panel.summary().contains("No graph-level search yet"));
  }

  void optimizeColorsNodesAndFillsKernelTable() {
    QTemporaryDir dir;
    MainWindow window;
    window.setDatabasePath(dir.filePath("measurements.sqlite"));
    QVERIFY(openAndWait(window, model("dcgan_small")));
    QAbstractItemModelTester tester(window.kernelModel(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy done(&window, &MainWindow::optimizationFinished);
    QSignalSpy failed(&window, &MainWindow::optimizationFailed);
    QSignalSpy measured(&window, &MainWindow::planMeasured);
    window.startOptimization();
    QVERIFY(window.isOptimizing());
    QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty() || !failed.isEmpty(), 300000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
    QCOMPARE(done.front().front().toBool(), true);
    // The search drew its steps, and the plan then ran end to end in a Session.
    QVERIFY(window.searchChart()->chart()->series().size() >= 2);
    QTRY_VERIFY_WITH_TIMEOUT(!measured.isEmpty(), 120000);
    QVERIFY(measured.front().front().toDouble() > 0);
    QVERIFY2(window.planSummary().contains("measured"), qPrintable(window.planSummary()));
    QTemporaryDir traceDir;
    QString traceError;
    QVERIFY2(window.exportTrace(traceDir.filePath("trace.json"), &traceError), qPrintable(traceError));
    QVERIFY(QFileInfo(traceDir.filePath("trace.json")).size() > 0);
    // Every candidate behind the plan, then a filter over the table.
    window.findChild<QCheckBox*>("allCandidates")->setChecked(true);
    QVERIFY(window.kernelModel()->rowCount() > static_cast<int>(window.plan()->groups.size()));
    // A fused candidate's op list is long ("ConvTranspose+BatchNormalization+
    // Relu+..."): elided in the middle, it leaves Backend and Median in view
    // in a 1600 px window.
    auto* table = window.findChild<QTableView*>("kernelTable");
    int longestOps = 0;
    for (int r = 0; r < window.kernelModel()->rowCount(); ++r)
      longestOps = std::max(longestOps, table->fontMetrics().horizontalAdvance(
                                            window.kernelModel()->index(r, KernelTableModel::Ops).data().toString()));
    QVERIFY2(longestOps > 1000, "the test needs a long op list to mean something");
    int upToMedian = 0;
    for (int c = 0; c <= KernelTableModel::Median; ++c) upToMedian += table->columnWidth(c);
    QVERIFY2(upToMedian <= 1200, qPrintable(QString("columns up to Median take %1 px").arg(upToMedian)));
    QCOMPARE(table->textElideMode(), Qt::ElideMiddle);
    auto* filter = window.findChild<QLineEdit*>("kernelFilter");
    auto* proxy = window.findChild<QTableView*>("kernelTable")->model();
    filter->setText("native");
    QVERIFY(proxy->rowCount() > 0 && proxy->rowCount() < window.kernelModel()->rowCount());
    filter->clear();
    window.findChild<QCheckBox*>("allCandidates")->setChecked(false);
    QCOMPARE(window.kernelModel()->rowCount(), static_cast<int>(window.plan()->groups.size()));
    QVERIFY(window.plan() != nullptr);
    const Plan& plan = *window.plan();
    QCOMPARE(window.kernelModel()->rowCount(), static_cast<int>(plan.groups.size()));
    for (NodeId n = 0; n < window.graph()->numNodes(); ++n) {
      QColor c = window.graphScene()->nodeColor(n);
      bool isBackendColor = false;
      for (const auto& g : plan.groups)
        isBackendColor = isBackendColor || c == QColor(QString::fromStdString(backendColor(g.backend)));
      QVERIFY2(isBackendColor, qPrintable(QString("node %1 has no backend colour").arg(n)));
    }
    QString planPath = dir.filePath("plan.json");
    QVERIFY(window.savePlanTo(planPath));
    QCOMPARE(loadPlan(planPath.toStdString()).groups.size(), plan.groups.size());
    QVERIFY(window.exportImage(dir.filePath("graph.svg")));
    QVERIFY(window.exportImage(dir.filePath("graph.png")));
    QVERIFY(QFileInfo(dir.filePath("graph.png")).size() > 0);
    QString error;
    QVERIFY2(window.exportAnnotatedModel(dir.filePath("annotated.onnx"), &error), qPrintable(error));
    QCOMPARE(importOnnx(dir.filePath("annotated.onnx").toStdString()).numNodes(), window.graph()->numNodes());
    QVERIFY2(window.exportNodeData(dir.filePath("nodes.json"), &error), qPrintable(error));
    QVERIFY(QFileInfo(dir.filePath("nodes.json")).size() > 0);
    QVERIFY2(window.exportMeasurementsCsv(dir.filePath("m.csv"), &error), qPrintable(error));
    QFile csv(dir.filePath("m.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    QCOMPARE(QString(csv.readAll()).trimmed().split('\n').size(), window.kernelModel()->rowCount() + 1);

    // Re-import the saved plan: same groups, same colours.
    QVector<QColor> before;
    for (NodeId n = 0; n < window.graph()->numNodes(); ++n) before << window.graphScene()->nodeColor(n);
    QVERIFY2(window.openPlan(planPath, &error), qPrintable(error));
    QCOMPARE(window.plan()->groups.size(), plan.groups.size());
    for (NodeId n = 0; n < window.graph()->numNodes(); ++n) QCOMPARE(window.graphScene()->nodeColor(n), before[n]);

    // Override one node: "Run on" another backend re-plans at once, undo restores the plan.
    const std::string planBefore = planToJson(*window.plan());
    bool overridden = false;
    for (NodeId n = 0; n < window.graph()->numNodes() && !overridden; ++n)
      for (const RunOnChoice& c : window.overrides()->choices({n})) {
        if (!c.runnable || !c.measured || c.current) continue;
        QVERIFY(window.overrides()->applyOverride({n}, QString::fromStdString(c.backend)));
        const Plan& changed = *window.plan();
        bool found = false;
        for (const PlanGroup& g : changed.groups)
          if (g.nodes == std::vector<std::string>{window.graph()->node(n).name}) {
            QCOMPARE(g.backend, c.backend);
            QCOMPARE(g.origin, PlanOrigin::User);
            found = true;
          }
        QVERIFY(found);
        QCOMPARE(window.graphScene()->nodeColor(n), QColor(QString::fromStdString(backendColor(c.backend))));
        window.overrides()->undoStack()->undo();
        QCOMPARE(planToJson(*window.plan()), planBefore);
        window.overrides()->undoStack()->redo();
        QVERIFY(planToJson(*window.plan()) != planBefore);
        overridden = true;
        break;
      }
    QVERIFY2(overridden, "no node had a second backend to override to");

    // A second run reads everything from the database: every row is cached,
    // and the override is a pin the optimizer honours.
    done.clear();
    window.startOptimization();
    QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty() || !failed.isEmpty(), 300000);
    QVERIFY(failed.isEmpty());
    // (A region the graph-level search handed to a graph library is measured
    // whole, as part of a plan, and has a row of its own.)
    int cached = 0;
    for (int r = 0; r < window.kernelModel()->rowCount(); ++r) {
      const auto provenance = window.kernelModel()->row(r).provenance;
      QVERIFY(provenance == KernelRow::Provenance::Cached || provenance == KernelRow::Provenance::Region);
      cached += provenance == KernelRow::Provenance::Cached;
    }
    QVERIFY(cached > 0);
    const bool keepsPin = std::any_of(window.plan()->groups.begin(), window.plan()->groups.end(),
                                      [](const PlanGroup& g) { return g.origin == PlanOrigin::User; });
    QVERIFY(keepsPin);
  }

  void planForAnotherModelIsRefused() {
    QTemporaryDir dir;
    MainWindow window;
    QVERIFY(openAndWait(window, model("dcgan_small")));
    Graph other = importOnnx(model("mobilenet_v2_small").toStdString());
    savePlan(singleNodePlan(other, "native"), dir.filePath("other.json").toStdString());
    QString error;
    QVERIFY(!window.openPlan(dir.filePath("other.json"), &error));
    QVERIFY2(error.contains("other.json"), qPrintable(error));
    QVERIFY(window.plan() == nullptr);
  }

  // A plan made with graph substitutions: opening it shows the model
  // rewritten (replayed in the background, each site checked again), the
  // rewritten nodes outlined and explained, the plan diff lists the rewrite;
  // a plan without substitutions brings the model as imported back; a plan
  // whose substitution does not hold is refused with the reason.
  void planWithSubstitutionsShowsTheRewrittenGraph() {
    QTemporaryDir dir;
    MainWindow window;
    const QString path = model("bert_small");
    QVERIFY(openAndWait(window, path));
    const Graph imported = *window.graph();
    const Substitution* merge = findSubstitution("merge-siblings");
    QVERIFY(merge);
    const std::vector<SubstitutionSite> sites = merge->find(imported);
    QVERIFY2(!sites.empty(), "the test needs sibling projections to merge");
    std::vector<RewriteEffect> effects;
    const Graph rewritten = replaySubstitutions(imported, {sites[0]}, &effects);
    Plan plan = singleNodePlan(rewritten, "native");
    plan.modelSha256 = sha256File(path.toStdString());
    plan.substitutions.push_back({sites[0], 25000});
    savePlan(plan, dir.filePath("rewritten.json").toStdString());

    QSignalSpy loaded(&window, &MainWindow::modelLoaded);
    QString error;
    QVERIFY2(window.openPlan(dir.filePath("rewritten.json"), &error), qPrintable(error));
    QVERIFY(loaded.wait(120000));
    QCOMPARE(window.graph()->numNodes(), rewritten.numNodes());
    QCOMPARE(window.modelGraph()->numNodes(), imported.numNodes());
    QVERIFY(window.rewriteSites() == std::vector<SubstitutionSite>{sites[0]});
    QVERIFY(window.plan() && window.plan()->substitutions.size() == 1);
    // The nodes the merge made (the merged MatMul, the Split) are outlined,
    // the others are not; the inspector names the substitution.
    const std::map<std::string, size_t> made = rewrittenNodeSites(rewritten, effects);
    QVERIFY(!made.empty());
    int outlined = 0;
    for (NodeId n = 0; n < window.graph()->numNodes(); ++n) {
      const bool shouldBe = made.count(window.graph()->node(n).name) > 0;
      QCOMPARE(window.graphScene()->isRewritten(n), shouldBe);
      outlined += shouldBe;
    }
    QCOMPARE(outlined, static_cast<int>(made.size()));
    const NodeId first = *window.graph()->findNode(made.begin()->first);
    window.graphScene()->selectNodes({first});
    QVERIFY2(window.inspector()->browser()->toPlainText().contains("made by the graph substitution merge-siblings"),
             qPrintable(window.inspector()->browser()->toPlainText()));

    // The plan diff's rewrite row: the site, the nodes it made, what it bought.
    PlanDiffModel diff;
    QAbstractItemModelTester tester(&diff, QAbstractItemModelTester::FailureReportingMode::QtTest);
    diff.setPlans(*window.graph(), plan, plan);
    QCOMPARE(diff.rowCount(), 0);
    diff.addRewrites(*window.graph(), plan.substitutions, made);
    QCOMPARE(diff.rowCount(), 1);
    QVERIFY(diff.row(0).kind == PlanDiffRow::Kind::Rewritten);
    QCOMPARE(diff.data(diff.index(0, PlanDiffModel::Change)).toString(), QString("rewritten: merge-siblings"));
    QCOMPARE(diff.row(0).nodeIds.size(), static_cast<int>(made.size()));
    QVERIFY(diff.row(0).before.contains(QString::fromStdString(sites[0].nodes[0])));
    QCOMPARE(diff.data(diff.index(0, PlanDiffModel::AfterMs)).toString(), QString("0.025 ms saved (op-level DP)"));
    QCOMPARE(diff.describeTotals(), QString("No group changed."));

    // A plan on the model as imported: that graph again, nothing outlined.
    savePlan(singleNodePlan(imported, "native"), dir.filePath("plain.json").toStdString());
    Plan plain = loadPlan(dir.filePath("plain.json").toStdString());
    plain.modelSha256 = plan.modelSha256;
    savePlan(plain, dir.filePath("plain.json").toStdString());
    QVERIFY2(window.openPlan(dir.filePath("plain.json"), &error), qPrintable(error));
    QVERIFY(loaded.wait(120000));
    QCOMPARE(window.graph()->numNodes(), imported.numNodes());
    QVERIFY(window.rewriteSites().empty());
    for (NodeId n = 0; n < window.graph()->numNodes(); ++n) QVERIFY(!window.graphScene()->isRewritten(n));
    QVERIFY(window.plan() && window.plan()->substitutions.empty());

    // A substitution that does not hold on this model: refused, the reason given.
    Plan broken = plan;
    broken.substitutions[0].site.nodes[0] = "no_such_node";
    savePlan(broken, dir.filePath("broken.json").toStdString());
    QSignalSpy failed(&window, &MainWindow::planFailed);
    QVERIFY2(window.openPlan(dir.filePath("broken.json"), &error), qPrintable(error));
    QVERIFY(failed.wait(120000));
    QVERIFY2(failed.front().front().toString().contains("no_such_node"),
             qPrintable(failed.front().front().toString()));
    QCOMPARE(window.graph()->numNodes(), imported.numNodes());  // still the model as imported
  }

  // A plan opened while another model imports: checked against the model on
  // screen, it must not arrive on the one importing. Refused, with the
  // reason; never shown on the other model; once that is shown, a plan of
  // its own opens.
  void aPlanOpenedWhileAnotherModelImportsIsRefused() {
    QTemporaryDir dir;
    MainWindow window;
    const QString path = model("bert_small");
    QVERIFY(openAndWait(window, path));
    const Graph imported = *window.graph();
    // A plan with a graph substitution: its graph is replayed in the background.
    const std::vector<SubstitutionSite> sites = findSubstitution("merge-siblings")->find(imported);
    QVERIFY2(!sites.empty(), "the test needs sibling projections to merge");
    Plan plan = singleNodePlan(replaySubstitutions(imported, {sites[0]}), "native");
    plan.modelSha256 = sha256File(path.toStdString());
    plan.substitutions.push_back({sites[0], 25000});
    savePlan(plan, dir.filePath("bert.json").toStdString());

    QSignalSpy loaded(&window, &MainWindow::modelLoaded);
    const QString otherPath = model("dcgan_small");
    window.openModel(otherPath);  // the import starts
    QString error;
    const bool opened = window.openPlan(dir.filePath("bert.json"), &error);
    // Whatever arrives, then settles: the plan is on its own model or on none.
    QVERIFY(loaded.wait(120000));
    QTRY_VERIFY_WITH_TIMEOUT(!window.isLoading(), 120000);
    QTest::qWait(200);
    if (window.plan())
      for (const PlanGroup& g : window.plan()->groups)
        for (const std::string& node : g.nodes)
          QVERIFY2(window.graph()->findNode(node),
                   qPrintable(QString("the plan is shown on a model without its node %1").arg(node.c_str())));
    QVERIFY2(!opened, "the plan was taken while another model imported");
    QVERIFY2(error.contains("still loading"), qPrintable(error));
    const Graph other = importOnnx(otherPath.toStdString());
    QCOMPARE(window.graph()->numNodes(), other.numNodes());
    QVERIFY(window.plan() == nullptr);

    // Once it is shown, a plan of its own opens.
    Plan own = singleNodePlan(other, "native");
    own.modelSha256 = sha256File(otherPath.toStdString());
    savePlan(own, dir.filePath("own.json").toStdString());
    QVERIFY2(window.openPlan(dir.filePath("own.json"), &error), qPrintable(error));
    QVERIFY(window.plan() != nullptr);
  }

  void inputShapesBindDynamicDimsAndFilesAreRemembered() {
    MainWindow window;
    QSignalSpy loaded(&window, &MainWindow::modelLoaded);
    window.openModel(model("resnet50_small"), {"input=2x3x64x64"});
    QVERIFY(loaded.wait(120000));
    const Graph& g = *window.graph();
    QCOMPARE(g.value(g.inputs()[0]).type.shape, (Shape{2, 3, 64, 64}));
    QCOMPARE(window.inputShapes(), QStringList{"input=2x3x64x64"});
    QCOMPARE(window.recentFiles().front(), QFileInfo(model("resnet50_small")).absoluteFilePath());
    // Without shapes and without dialogs, the last sizes used for the model are used again.
    loaded.clear();
    window.openModel(model("resnet50_small"));
    QVERIFY(loaded.wait(120000));
    QCOMPARE(window.graph()->value(window.graph()->inputs()[0]).type.shape, (Shape{2, 3, 64, 64}));
  }

  void patternMatchesAreHighlightedInTheGraph() {
    MainWindow window;
    QVERIFY(openAndWait(window, model("resnet50_small")));
    // Count Conv -> Relu pairs from the graph itself.
    const Graph& g = *window.graph();
    QSet<NodeId> expected;
    for (NodeId n = 0; n < g.numNodes(); ++n) {
      if (g.node(n).op != "Relu") continue;
      NodeId producer = g.value(g.node(n).inputs[0]).producer;
      if (producer != kNoNode && g.node(producer).op == "Conv") expected << n << producer;
    }
    QVERIFY(!expected.isEmpty());
    window.patternEditor()->setPatternText("Relu(Conv(*, const, ?const))");
    window.patternEditor()->reparseNow();
    QTRY_COMPARE_WITH_TIMEOUT(window.patternEditor()->matchCount(), expected.size() / 2, 10000);
    QTRY_COMPARE_WITH_TIMEOUT(window.graphScene()->highlightedNodes().size(), expected.size(), 10000);
    for (NodeId n : window.graphScene()->highlightedNodes()) QVERIFY(expected.contains(n));
  }

  void inputShapeDialogValidates() {
    std::vector<DeclaredInput> inputs = readDeclaredInputs(model("bert_small").toStdString());
    QCOMPARE(inputs.size(), size_t{1});
    QCOMPARE(InputShapeDialog::defaultText(inputs[0]), QString("1x16"));
    QVERIFY(InputShapeDialog::validate(inputs[0], "4x16").isEmpty());
    QVERIFY(InputShapeDialog::validate(inputs[0], "4x17").contains("fixed at 16"));
    QVERIFY(InputShapeDialog::validate(inputs[0], "4").contains("2 dimensions"));
    QVERIFY(InputShapeDialog::validate(inputs[0], "0x16").contains("positive"));
    // Which dim is dynamic, its symbol, and the import's default binding.
    QCOMPARE(InputShapeDialog::dynamicText(inputs[0]),
             QString("dynamic dims [batch]; default binding 1"));
    InputShapeDialog dialog("bert_small.onnx", inputs, {"input_ids=8x16"});
    QCOMPARE(dialog.bindings(), QStringList{"input_ids=8x16"});
    auto* dynamic = dialog.findChild<QLabel*>("input_ids_dynamic");
    QVERIFY(dynamic != nullptr);
    QCOMPARE(dynamic->text(), InputShapeDialog::dynamicText(inputs[0]));
  }

  void cancelStopsTheWorker() {
    QTemporaryDir dir;
    MainWindow window;
    window.setDatabasePath(dir.filePath("measurements.sqlite"));
    QVERIFY(openAndWait(window, model("dcgan_small")));
    QSignalSpy done(&window, &MainWindow::optimizationFinished);
    QSignalSpy failed(&window, &MainWindow::optimizationFailed);
    window.startOptimization();
    window.cancelOptimization();
    QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty() || !failed.isEmpty(), 300000);
    QVERIFY(!window.isOptimizing());
  }
};

QTEST_MAIN(GuiTests)
#include "gui_tests.moc"
