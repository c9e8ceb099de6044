// The app's background work through the real main window, on the offscreen
// platform: an optimisation started and started over, the plan run that
// follows it, an override that must measure, a new model loaded while a plan
// runs, and a window closed during a graph-level search. Through all of it no
// two threads may run kernels at once (core/runtime/kernel_activity.h: the
// plan runner and the end-to-end check run kernels in this process; a thread
// waiting on the measurement worker counts too), and no result of older
// work may reach the window.
//
// Before views/background_work, each of these overlapped: the plan run went on
// beside the next optimisation's end-to-end runs, and the override measured
// on the UI thread while the plan ran. The checks are on counts and states,
// never on how long anything took.
#include <QEventLoop>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include "app/main_window.h"
#include "core/runtime/kernel_activity.h"
#include "core/search/plan_override.h"
#include "views/background_work.h"
#include "views/optimize_options.h"
#include "views/override_commands.h"

#include "tests/gui/gui_test_support.h"

using namespace collage;
using gui_test::model;
using gui_test::openAndWait;

namespace {

// Runs the event loop until the window reports the end of the optimisation,
// and returns at once then (not at the next poll), so that the caller acts
// while the plan run the window asks for next has just begun. True when it
// ended with a plan.
bool waitForOptimization(MainWindow& window) {
  QEventLoop loop;
  bool hasPlan = false;
  QObject::connect(&window, &MainWindow::optimizationFinished, &loop, [&](bool plan) {
    hasPlan = plan;
    loop.quit();
  });
  QObject::connect(&window, &MainWindow::optimizationFailed, &loop, [&](const QString& message) {
    qWarning("optimisation failed: %s", qPrintable(message));
    loop.quit();
  });
  QTimer::singleShot(300000, &loop, &QEventLoop::quit);  // a hang fails below, not forever
  loop.exec();
  return hasPlan;
}

// A node of the window's plan that another backend can run alone, measured,
// and the backend; -1 when there is none.
std::pair<NodeId, QString> overridableNode(MainWindow& window) {
  for (NodeId n = 0; n < window.graph()->numNodes(); ++n)
    for (const RunOnChoice& c : window.overrides()->choices({n}))
      if (c.runnable && c.measured && !c.current) return {n, QString::fromStdString(c.backend)};
  return {-1, QString()};
}

}  // namespace

class BackgroundWorkTests : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName("CollageTests");
    QCoreApplication::setApplicationName("background_work_tests");
    qputenv("COLLAGE_CLI", COLLAGE_CLI_PATH);
    QSettings().clear();  // default optimisation settings, no saved layout
  }

  void kernelsNeverRunOnTwoThreadsAtOnce() {
    QTemporaryDir dir;
    const QString warm = dir.filePath("warm.sqlite");
    QCOMPARE(KernelActivity::running(), 0);
    KernelActivity::resetHighWaterMark();
    {
      MainWindow window;
      window.setDatabasePath(warm);
      // The op-level job until the end, where a graph-level search is the
      // point: each search would add its budget to this one test function.
      OptimizeSettings opLevel = window.optimizeSettings();
      opLevel.graphLevel = false;
      window.setOptimizeSettings(opLevel);
      QVERIFY(openAndWait(window, model("dcgan_small")));
      QSignalSpy finished(&window, &MainWindow::optimizationFinished);
      QSignalSpy measured(&window, &MainWindow::planMeasured);

      // Started, then started over while it measures: the first job's worker
      // is killed and its result dropped; only the second one reports.
      window.startOptimization();
      window.startOptimization();
      QVERIFY(waitForOptimization(window));
      QCOMPARE(finished.size(), 1);

      // The plan run after it has just been asked for. Started over now, with
      // a warm database the job soon runs plans end to end in this process.
      window.startOptimization();
      QVERIFY(waitForOptimization(window));
      QTRY_VERIFY_WITH_TIMEOUT(window.backgroundWork()->isIdle(), 120000);
      QVERIFY(!measured.isEmpty());  // the last plan run delivered

      // An override that must measure: pin a node elsewhere (already
      // measured: re-planned at once), optimise with the pin (the candidates
      // it excludes are not measured), and let the optimizer choose again,
      // measuring into a fresh database, just after the plan run began.
      const auto [node, backend] = overridableNode(window);
      QVERIFY2(node >= 0, "no node had a second backend to override to");
      QVERIFY(window.overrides()->applyOverride({node}, backend));
      QVERIFY(!window.overrides()->isMeasuring());
      window.startOptimization();
      window.setDatabasePath(dir.filePath("fresh.sqlite"));  // for the override's measurements
      QVERIFY(waitForOptimization(window));
      QSignalSpy planChanged(window.overrides(), &OverrideController::planChanged);
      QSignalSpy refused(window.overrides(), &OverrideController::refused);
      QVERIFY(window.overrides()->clearOverride({node}));
      QVERIFY(window.overrides()->isMeasuring());
      QTRY_VERIFY_WITH_TIMEOUT(!planChanged.isEmpty() || !refused.isEmpty(), 120000);
      QVERIFY2(refused.isEmpty(), refused.isEmpty() ? "" : qPrintable(refused.front().front().toString()));
      QVERIFY(window.overrides()->constraints().pins.empty());

      // A new model while the plan runs: nothing of the old plan arrives after it.
      window.setDatabasePath(warm);
      window.measurePlan();
      int measuredAtLoad = -1;
      connect(&window, &MainWindow::modelLoaded, this, [&] { measuredAtLoad = measured.size(); });
      QVERIFY(openAndWait(window, model("dcgan_small")));
      QTRY_VERIFY_WITH_TIMEOUT(window.backgroundWork()->isIdle(), 120000);
      QCOMPARE(measured.size(), measuredAtLoad);
      QVERIFY(window.plan() == nullptr);

      // Closed during a graph-level search, which compares whole plans in
      // the measurement worker: closing kills it instead of waiting.
      OptimizeSettings settings = window.optimizeSettings();
      settings.graphLevel = true;
      settings.graphLevelBudgetSeconds = 600;
      window.setOptimizeSettings(settings);
      window.startOptimization();
      QTRY_VERIFY_WITH_TIMEOUT(window.planSummary().contains("graph-level"), 300000);
      window.close();
      QVERIFY(!window.isOptimizing());
    }
    QVERIFY(KernelActivity::highWaterMark() >= 1);  // kernels did run here
    QCOMPARE(KernelActivity::highWaterMark(), 1);
  }
};

QTEST_MAIN(BackgroundWorkTests)
#include "background_work_tests.moc"
