// GUI tests on the offscreen platform: the real main window loads a model,
// optimises it on the worker thread, and the models pass Qt's model tester.
#include <cmath>

#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTemporaryDir>
#include <QtTest>

#include "app/main_window.h"
#include "core/onnx_import.h"
#include "core/plan.h"
#include "core/plan_export.h"
#include "views/graph_layout.h"
#include "views/graph_scene.h"
#include "views/kernel_table_model.h"

using namespace collage;

namespace {

QString model(const char* name) {
  return QStringLiteral(COLLAGE_SOURCE_DIR "/resources/models/") + name + ".onnx";
}

}  // namespace

class GuiTests : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName("CollageTests");
    QCoreApplication::setApplicationName("gui_tests");
    qputenv("COLLAGE_CLI", COLLAGE_CLI_PATH);
  }

  void loadBertDrawsEveryNode() {
    MainWindow window;
    QSignalSpy loaded(&window, &MainWindow::modelLoaded);
    window.openModel(model("bert_small"));
    QVERIFY(loaded.wait(120000));
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

  void optimizeColorsNodesAndFillsKernelTable() {
    QTemporaryDir dir;
    MainWindow window;
    window.setDatabasePath(dir.filePath("measurements.sqlite"));
    QSignalSpy loaded(&window, &MainWindow::modelLoaded);
    window.openModel(model("dcgan_small"));
    QVERIFY(loaded.wait(120000));
    QAbstractItemModelTester tester(window.kernelModel(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy done(&window, &MainWindow::optimizationFinished);
    QSignalSpy failed(&window, &MainWindow::optimizationFailed);
    window.startOptimization();
    QVERIFY(window.isOptimizing());
    QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty() || !failed.isEmpty(), 300000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
    QCOMPARE(done.front().front().toBool(), true);
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

    // A second run reads everything from the database: every row is cached.
    done.clear();
    window.startOptimization();
    QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty() || !failed.isEmpty(), 300000);
    QVERIFY(failed.isEmpty());
    for (int r = 0; r < window.kernelModel()->rowCount(); ++r)
      QCOMPARE(window.kernelModel()->row(r).cached, true);
  }

  void cancelStopsTheWorker() {
    QTemporaryDir dir;
    MainWindow window;
    window.setDatabasePath(dir.filePath("measurements.sqlite"));
    QSignalSpy loaded(&window, &MainWindow::modelLoaded);
    window.openModel(model("dcgan_small"));
    QVERIFY(loaded.wait(120000));
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
