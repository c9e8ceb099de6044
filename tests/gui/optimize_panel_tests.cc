// The optimize panel's parts on the offscreen platform: the search chart, the
// options dialog, the worker's time budget and graph-level search, the
// Session runner, the kernel table's all-candidates mode and the UI stall
// monitor.
#include <cmath>
#include <set>

#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QPushButton>
#include <QLineEdit>
#include <QLineSeries>
#include <QValueAxis>
#include <QSettings>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include "backends/backend_list.h"
#include "core/patterns/candidate.h"
#include "core/onnx/onnx_import.h"
#include "core/search/op_level_optimizer.h"
#include "core/search/optimization_job.h"
#include "core/plan/plan.h"
#include "core/search/plan_from_cover.h"
#include "views/kernel_table_model.h"
#include "views/optimize_options.h"
#include "views/optimize_worker.h"
#include "views/search_chart.h"
#include "views/session_runner.h"
#include "views/ui_stall_monitor.h"

#include "tests/gui/gui_test_support.h"

using namespace collage;
using gui_test::model;

namespace {

SearchStepEvent step(const char* search, int s, double bestMs, double meanMs) {
  return SearchStepEvent{search, s, s * 10, bestMs * 1e6, meanMs * 1e6, s * 0.1};
}

// A generation of the graph-level search as core/search/graph_level_search.cc
// reports it (a 60 s budget).
SearchStepEvent generation(int g, int evaluations, int cacheHits, double bestMs, double meanMs,
                           double seconds, bool bestChanged) {
  SearchStepEvent e;
  e.search = "graph-level";
  e.step = g;
  e.evaluations = evaluations;
  e.cacheHits = cacheHits;
  e.bestCostNs = bestMs * 1e6;
  e.meanCostNs = meanMs * 1e6;
  e.elapsedSeconds = seconds;
  e.timeLeftSeconds = 60 - seconds;
  e.bestChanged = bestChanged;
  return e;
}

QVector<double> xs(const QtCharts::QLineSeries* series) {
  QVector<double> out;
  for (const QPointF& p : series->points()) out << p.x();
  return out;
}

// Collects the optimizer's step events.
class StepRecorder : public SearchObserver {
 public:
  void onSearchStep(const SearchStepEvent& e) override { steps.push_back(e); }
  QVector<SearchStepEvent> steps;
};

// A deterministic stand-in for measurements: a per-node price per backend,
// with fused groups cheaper than their parts.
std::vector<Measurement> fakeMeasurements(const CandidateSet& candidates) {
  std::vector<Measurement> out;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    Measurement m;
    m.status = MeasurementStatus::Ok;
    const double perNode = c.backend == "onednn" ? 900 : c.backend == "openblas" ? 1100 : 1500;
    m.medianNs = perNode * std::pow(c.nodes.count(), 0.8) + 37 * static_cast<double>(i % 7);
    m.spread = 0.02;
    m.samples = 9;
    m.fromCache = i % 2 == 0;
    out.push_back(m);
  }
  return out;
}

// A job on every backend of `backends` (which must outlive the job: the
// capabilities point into its specs) for a small model, measuring into `dir`.
OptimizationJobOptions jobOptions(const char* name, const QTemporaryDir& dir, const BackendSet& backends) {
  OptimizationJobOptions options;
  options.modelPath = model(name).toStdString();
  options.capabilities = backends.capabilities();
  options.versions = backends.versions();
  options.dbPath = dir.filePath("measurements.sqlite").toStdString();
  options.workerExecutable = COLLAGE_CLI_PATH;
  return options;
}

}  // namespace

class OptimizePanelTests : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName("CollageTests");
    QCoreApplication::setApplicationName("optimize_panel_tests");
    qputenv("COLLAGE_CLI", COLLAGE_CLI_PATH);
    OptimizeWorker::registerMetaTypes();
  }

  void chartKeepsTwoLinesPerSearch() {
    SearchChart chart;
    chart.resize(400, 300);
    chart.show();
    QVector<SearchStepEvent> opLevel;
    for (int s = 1; s <= 5; ++s) opLevel.push_back(step("op-level", s, 10.0 - s, 12.0 - s));
    chart.addSteps(opLevel);
    chart.addStep(step("graph-level", 1, 4.5, 6));
    chart.addSteps({step("graph-level", 2, 4.0, 5), step("graph-level", 3, 3.5, 4.8)});
    QCOMPARE(chart.chart()->series().size(), 4);
    QCOMPARE(chart.searchCount(), 2);
    QCOMPARE(chart.bestSeries("op-level")->count(), 5);
    QCOMPARE(chart.meanSeries("op-level")->count(), 5);
    QCOMPARE(chart.bestSeries("graph-level")->count(), 3);
    QCOMPARE(chart.meanSeries("graph-level")->count(), 3);
    QCOMPARE(chart.bestSeries("op-level")->at(4).y(), 5.0);  // milliseconds
    // The second search continues to the right of the first.
    QVERIFY(chart.bestSeries("graph-level")->at(0).x() > chart.bestSeries("op-level")->at(4).x());
    QCOMPARE(chart.evaluations("graph-level"), 30);
    QVERIFY(chart.chart()->title().contains("graph-level"));
    // Every point is inside the auto-ranged axes.
    auto* y = qobject_cast<QtCharts::QValueAxis*>(chart.chart()->axes(Qt::Vertical).front());
    auto* x = qobject_cast<QtCharts::QValueAxis*>(chart.chart()->axes(Qt::Horizontal).front());
    QVERIFY(y && x);
    for (auto* series : chart.chart()->series())
      for (const QPointF& p : static_cast<QtCharts::QLineSeries*>(series)->points()) {
        QVERIFY(p.y() >= y->min() && p.y() <= y->max());
        QVERIFY(p.x() >= x->min() && p.x() <= x->max());
      }
    // An unknown or invalid cost is not drawn.
    chart.addStep(SearchStepEvent{"op-level", 6, 60, NAN, INFINITY, 1});
    QCOMPARE(chart.bestSeries("op-level")->count(), 5);
    chart.clear();
    QCOMPARE(chart.chart()->series().size(), 0);
    QVERIFY(chart.bestSeries("op-level") == nullptr);
  }

  void chartDrawsGenerationsAgainstTimeEvaluationsOrStep() {
    SearchChart chart;
    chart.resize(400, 300);
    chart.show();
    QVERIFY(chart.xAxisQuantity() == SearchChart::XAxisQuantity::Seconds);
    // The op-level DP first: milliseconds. The x axis shrinks to them rather
    // than leaving them in the corner of a 10 s axis.
    QVector<SearchStepEvent> opLevel;
    for (int s = 1; s <= 4; ++s)
      opLevel.push_back(
          SearchStepEvent{"op-level", s, s * 100, (30.0 - s) * 1e6, (33.0 - s) * 1e6, s * 0.001});
    chart.addSteps(opLevel);
    auto* x = qobject_cast<QtCharts::QValueAxis*>(chart.chart()->axes(Qt::Horizontal).front());
    QVERIFY(x);
    QVERIFY2(x->max() < 0.1, qPrintable(QString::number(x->max())));
    // Generation 0 is reported before any plan ran, with no scale yet (0 ms): not drawn.
    chart.addSteps({generation(0, 10, 0, 0, 0, 2.0, false),
                    generation(1, 20, 3, 24.0, 26.5, 7.5, true),
                    generation(2, 30, 8, 22.5, 25.0, 13.0, true)});
    chart.addStep(generation(3, 38, 15, 22.5, 23.9, 21.0, false));
    QtCharts::QLineSeries* best = chart.bestSeries("graph-level");
    QtCharts::QLineSeries* mean = chart.meanSeries("graph-level");
    QVERIFY(best && mean);
    QCOMPARE(best->count(), 3);
    QCOMPARE(mean->count(), 3);
    QCOMPARE(best->at(1).y(), 22.5);
    QCOMPARE(mean->at(2).y(), 23.9);
    // Against time: each generation at its elapsed seconds, after the op-level search.
    const double start = chart.bestSeries("op-level")->points().back().x();
    QCOMPARE(xs(best), (QVector<double>{start + 7.5, start + 13.0, start + 21.0}));
    QVERIFY(x->max() >= start + 21.0);
    QVERIFY(chart.chart()->title().contains("38 evaluations (15 cached)"));
    QVERIFY2(chart.chart()->title().contains("39 s left"), qPrintable(chart.chart()->title()));

    // Against evaluations, then the step: the same steps redrawn.
    chart.setXAxisQuantity(SearchChart::XAxisQuantity::Evaluations);
    best = chart.bestSeries("graph-level");
    QCOMPARE(xs(chart.bestSeries("op-level")), (QVector<double>{100, 200, 300, 400}));
    QCOMPARE(xs(best), (QVector<double>{420, 430, 438}));
    QCOMPARE(best->at(2).y(), 22.5);
    QCOMPARE(chart.meanSeries("graph-level")->count(), 3);
    QVERIFY(x->max() >= 438);
    chart.setXAxisQuantity(SearchChart::XAxisQuantity::Step);
    QCOMPARE(xs(chart.bestSeries("graph-level")), (QVector<double>{5, 6, 7}));
    QCOMPARE(chart.searchCount(), 2);

    // Hovering a line names the step under the cursor.
    const QString tip = chart.stepToolTip("graph-level", 5.8);
    QVERIFY2(tip.contains("step 2") && tip.contains("best 22.500 ms") &&
                 tip.contains("30 evaluations (8 cached)") && tip.contains("new best"),
             qPrintable(tip));
    QVERIFY(chart.stepToolTip("no-such-search", 1).isEmpty());
  }

  void opLevelSearchDrawsASeriesForARealModel() {
    // The DP on resnet50_small's real candidates (costs made up): it must
    // report enough steps for a chart, the best line falls to the optimum.
    Graph graph = importOnnx(model("resnet50_small").toStdString());
    BackendSet backends = loadBackendSet();
    CandidateSet candidates = enumerateCandidates(graph, backends.capabilities());
    std::vector<Measurement> measurements = fakeMeasurements(candidates);
    std::vector<Cost> costs;
    for (const auto& m : measurements) costs.push_back(m.cost());
    OpLevelProblem problem{&graph, &candidates, costs, nullptr, {}};
    StepRecorder recorder;
    OpLevelResult r = optimizeOpLevel(problem, &recorder);
    OpLevelResult silent = optimizeOpLevel(problem);
    QVERIFY(r.chosen == silent.chosen);  // reporting does not change the result
    QVERIFY2(recorder.steps.size() >= 10, qPrintable(QString::number(recorder.steps.size())));
    for (int i = 1; i < recorder.steps.size(); ++i) {
      QVERIFY(recorder.steps[i].bestCostNs <= recorder.steps[i - 1].bestCostNs + 1e-6);
      QVERIFY(recorder.steps[i].step > recorder.steps[i - 1].step);
    }
    QCOMPARE(recorder.steps.back().bestCostNs, r.total);
    SearchChart chart;
    chart.addSteps(recorder.steps);
    QCOMPARE(chart.bestSeries("op-level")->count(), recorder.steps.size());
  }

  void optionsRoundTripThroughSettings() {
    QSettings().remove("optimize");
    OptimizeSettings defaults = OptimizeSettings::load();
    QVERIFY(defaults.backends.isEmpty());
    QCOMPARE(defaults.timeBudgetSeconds, 0.0);

    OptimizeSettings s;
    s.backends = QStringList{"onednn", "native"};
    s.dbPath = "/tmp/some/measurements.sqlite";
    s.noDb = true;
    s.timeBudgetSeconds = 30;
    s.kernelTimeoutSeconds = 12;
    const QStringList available = {"onednn", "openblas", "native"};
    OptimizeOptionsDialog dialog(s, available);
    QVERIFY(dialog.backendBox("onednn")->isChecked());
    QVERIFY(!dialog.backendBox("openblas")->isChecked());
    QCOMPARE(dialog.dbPathEdit()->text(), s.dbPath);
    QVERIFY(!dialog.dbPathEdit()->isEnabled());  // "no database" disables the path
    QCOMPARE(dialog.settings(), s);
    dialog.accept();
    QCOMPARE(OptimizeSettings::load(), s);

    // Edit through the widgets: all backends checked means "all" (empty).
    dialog.backendBox("openblas")->setChecked(true);
    dialog.noDbBox()->setChecked(false);
    dialog.timeBudgetBox()->setValue(0);
    dialog.accept();
    OptimizeSettings loaded = OptimizeSettings::load();
    QVERIFY(loaded.backends.isEmpty());
    QCOMPARE(loaded.noDb, false);
    QCOMPARE(loaded.timeBudgetSeconds, 0.0);
    QCOMPARE(loaded.kernelTimeoutSeconds, 12.0);
    OptimizeOptionsDialog again(loaded, available);
    QCOMPARE(again.settings(), loaded);

    OptimizationJobOptions options;
    loaded.applyTo(options);
    QCOMPARE(QString::fromStdString(options.dbPath), s.dbPath);
    QCOMPARE(options.timeoutSeconds, 12.0);
    QSettings().remove("optimize");
  }

  // A shared store's URL typed with its password (holding '@', '/' and '?'):
  // the dialog says the password is not saved and where libpq reads it
  // from, and the settings file never holds it, in any spelling; one an
  // older version wrote is removed as the settings are read.
  void aDatabasePasswordIsNeverSaved() {
    QSettings().remove("optimize");
    const QStringList available = {"onednn", "native"};
    const auto fileText = [] {
      QSettings().sync();
      QFile file(QSettings().fileName());
      return file.open(QIODevice::ReadOnly) ? QString::fromUtf8(file.readAll()) : QString();
    };
    const auto expectNoPassword = [](const QString& text) {
      for (const char* form : {"p@ss/w?rd", "p%40ss%2Fw%3Frd", "ss/w", "ss%2Fw"})
        QVERIFY2(!text.contains(QLatin1String(form)), qPrintable(text));
    };
    const QStringList typed = {
        "postgresql://bob:p%40ss%2Fw%3Frd@db.example:5432/team?sslmode=require",
        "postgresql://bob@db.example:5432/team?password=p@ss/w?rd&sslmode=require",
    };
    for (const QString& url : typed) {
      OptimizeOptionsDialog dialog(OptimizeSettings{}, available);
      QVERIFY(dialog.dbNote()->isHidden());
      dialog.dbPathEdit()->setText(url);
      QVERIFY(!dialog.dbNote()->isHidden());
      QVERIFY2(dialog.dbNote()->text().contains("not saved") && dialog.dbNote()->text().contains("~/.pgpass") &&
                   dialog.dbNote()->text().contains("PGPASSWORD"),
               qPrintable(dialog.dbNote()->text()));
      QCOMPARE(dialog.settings().dbPath, QString("postgresql://bob@db.example:5432/team?sslmode=require"));
      dialog.accept();
      expectNoPassword(fileText());
      QCOMPARE(OptimizeSettings::load().dbPath, QString("postgresql://bob@db.example:5432/team?sslmode=require"));
    }
    // The key=value form libpq also reads, saved through the settings value itself.
    OptimizeSettings s;
    s.dbPath = "host=db.example user=bob password='p@ss/w?rd' dbname=team";
    s.save();
    expectNoPassword(fileText());
    QCOMPARE(OptimizeSettings::load().dbPath, QString("host=db.example user=bob dbname=team"));
    // A URL libpq would misread (the '@' and '/' not encoded): refused as typed.
    {
      OptimizeOptionsDialog dialog(OptimizeSettings{}, available);
      dialog.dbPathEdit()->setText("postgresql://bob:p@ss/w?rd@db.example/team");
      QVERIFY2(dialog.dbNote()->text().contains("percent-encoded"), qPrintable(dialog.dbNote()->text()));
      QVERIFY(!dialog.findChild<QDialogButtonBox*>()->button(QDialogButtonBox::Ok)->isEnabled());
      expectNoPassword(dialog.settings().dbPath);
    }
    // A file an older version wrote, the password in it: gone once read.
    QSettings().setValue("optimize/dbPath", "postgresql://bob:p%40ss%2Fw%3Frd@db.example/team");
    QVERIFY(fileText().contains("p%40ss"));
    QCOMPARE(OptimizeSettings::load().dbPath, QString("postgresql://bob@db.example/team"));
    expectNoPassword(fileText());
    // A SQLite file is not a connection string, '=' in its name or not.
    s.dbPath = "/tmp/runs/a=b/measurements.sqlite";
    s.save();
    QCOMPARE(OptimizeSettings::load().dbPath, s.dbPath);
    QSettings().remove("optimize");
  }

  // A reduced-precision backend is offered but not in the default set: it
  // starts unchecked, the default set checked still means "the default", and
  // checking it as well names every backend explicitly.
  void aBackendOutsideTheDefaultSetIsUsedOnlyWhenChecked() {
    const QStringList available = {"cublas", "cublas_tf32", "native"};
    const QStringList defaults = {"cublas", "native"};
    OptimizeOptionsDialog dialog(OptimizeSettings{}, available, nullptr, defaults);
    QVERIFY(dialog.backendBox("cublas")->isChecked());
    QVERIFY(!dialog.backendBox("cublas_tf32")->isChecked());
    QVERIFY(dialog.settings().backends.isEmpty());
    dialog.backendBox("cublas_tf32")->setChecked(true);
    QCOMPARE(dialog.settings().backends, available);
    dialog.backendBox("native")->setChecked(false);
    QCOMPARE(dialog.settings().backends, (QStringList{"cublas", "cublas_tf32"}));
  }

  // "Allow bf16" is --allow-precision bf16 in the dialog: it checks the
  // backends that compute in bf16 (and unchecks them), and shows whether
  // they all are checked.
  void allowingAPrecisionChecksItsBackends() {
    const QStringList available = {"onednn", "onednn_bf16", "native"};
    const QStringList defaults = {"onednn", "native"};
    QMap<QString, QStringList> precisions;
    precisions["bf16"] = QStringList{"onednn_bf16"};
    OptimizeOptionsDialog dialog(OptimizeSettings{}, available, nullptr, defaults, precisions);
    QCheckBox* bf16 = dialog.precisionBox("bf16");
    QVERIFY(bf16);
    QVERIFY(!bf16->isChecked());
    QVERIFY(dialog.settings().backends.isEmpty());  // float32 only by default
    bf16->click();
    QVERIFY(dialog.backendBox("onednn_bf16")->isChecked());
    QCOMPARE(dialog.settings().backends, available);
    bf16->click();
    QVERIFY(!dialog.backendBox("onednn_bf16")->isChecked());
    QVERIFY(dialog.settings().backends.isEmpty());
    // Checking the backend itself is allowing bf16 too.
    dialog.backendBox("onednn_bf16")->setChecked(true);
    QVERIFY(bf16->isChecked());
    // Saved settings that name it open with the box checked.
    OptimizeOptionsDialog reopened(dialog.settings(), available, nullptr, defaults, precisions);
    QVERIFY(reopened.precisionBox("bf16")->isChecked());
    // No precision offered: no box.
    OptimizeOptionsDialog none(OptimizeSettings{}, {"onednn", "native"});
    QVERIFY(!none.precisionBox("bf16"));
  }

  void graphLevelOptionsReachTheJob() {
    QSettings().remove("optimize");
    QCOMPARE(OptimizeSettings::load().graphLevel, true);  // on by default, as on the command line
    OptimizeSettings s;
    s.graphLevelBudgetSeconds = 120;
    OptimizeOptionsDialog dialog(s, {"onednn", "native"});
    QVERIFY(dialog.graphLevelBox()->isChecked());
    QCOMPARE(dialog.graphLevelBudgetBox()->value(), 120.0);
    QVERIFY(dialog.graphLevelBudgetBox()->isEnabled());
    dialog.accept();
    QCOMPARE(OptimizeSettings::load(), s);
    OptimizationJobOptions options;
    OptimizeSettings::load().applyTo(options);
    QVERIFY(options.graphLevel);
    QCOMPARE(options.graphLevelOptions.evolution.budgetSeconds, 120.0);

    dialog.graphLevelBox()->setChecked(false);
    QVERIFY(!dialog.graphLevelBudgetBox()->isEnabled());  // no search, no budget to set
    QCOMPARE(dialog.settings().graphLevel, false);
    dialog.settings().applyTo(options);
    QVERIFY(!options.graphLevel);
    QSettings().remove("optimize");
  }

  void workerSendsGraphLevelGenerationsAndBestPlans() {
    // A whole optimisation of a small model with a short graph-level search:
    // its generations reach the chart and each best plan reaches the UI
    // thread as a copy, the first being the plan the search started from.
    QTemporaryDir dir;
    auto graph = std::make_shared<const Graph>(importOnnx(model("dcgan_small").toStdString()));
    auto backends = std::make_shared<BackendSet>(loadBackendSet());  // the options point into its specs
    OptimizationJobOptions options = jobOptions("dcgan_small", dir, *backends);
    options.backends = [backends](const std::string& n) { return backends->find(n); };
    OptimizeSettings settings;
    settings.graphLevel = true;
    settings.graphLevelBudgetSeconds = 3;
    settings.dbPath = QString::fromStdString(options.dbPath);
    settings.applyTo(options);
    OptimizeWorker worker(graph, options);
    SearchChart chart;
    connect(&worker, &OptimizeWorker::searchSteps, &chart, &SearchChart::addSteps);
    QVector<std::shared_ptr<const Plan>> bests;
    bool everyBestOnTheUiThread = true;
    connect(&worker, &OptimizeWorker::bestPlanChanged, this,
            [&](std::shared_ptr<const Plan> plan, double) {
              everyBestOnTheUiThread = everyBestOnTheUiThread && QThread::currentThread() == thread();
              bests << plan;
            });
    QSignalSpy finished(&worker, &OptimizeWorker::finished);
    QSignalSpy failed(&worker, &OptimizeWorker::failed);
    worker.start();
    QTRY_VERIFY_WITH_TIMEOUT(!finished.isEmpty() || !failed.isEmpty(), 600000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
    auto result = finished.front().front().value<std::shared_ptr<const OptimizationResult>>();
    QVERIFY(result->hasPlan);
    QVERIFY(result->graphLevelRan);
    QTRY_VERIFY(chart.bestSeries("graph-level") != nullptr);  // queued after the op-level steps
    QVERIFY(chart.evaluations("graph-level") > 0);
    QVERIFY(!bests.isEmpty());
    QVERIFY(everyBestOnTheUiThread);
    auto placement = [](const Plan& plan) {
      std::vector<std::pair<std::vector<std::string>, std::string>> out;
      for (const PlanGroup& g : plan.groups) out.push_back({g.nodes, g.backend});
      return out;
    };
    QVERIFY(placement(*bests.front()) == placement(result->startPlan));
    for (const auto& best : bests) {
      std::set<std::string> covered;
      for (const PlanGroup& g : best->groups) covered.insert(g.nodes.begin(), g.nodes.end());
      QCOMPARE(static_cast<int>(covered.size()), graph->numNodes());
    }
    // The plan kept is the last best, or the starting plan when the final check refused it.
    QVERIFY(placement(result->plan) ==
            placement(result->graphLevel.improved ? *bests.back() : result->startPlan));
  }

  void workerStopsWhenTheTimeBudgetRunsOut() {
    QTemporaryDir dir;
    auto graph = std::make_shared<const Graph>(importOnnx(model("resnet50_small").toStdString()));
    auto backends = std::make_shared<BackendSet>(loadBackendSet());  // the options point into its specs
    OptimizationJobOptions options = jobOptions("resnet50_small", dir, *backends);
    OptimizeWorker worker(graph, options);
    worker.setTimeBudget(1);
    QSignalSpy finished(&worker, &OptimizeWorker::finished);
    QSignalSpy failed(&worker, &OptimizeWorker::failed);
    QSignalSpy expired(&worker, &OptimizeWorker::timeBudgetExpired);
    QSignalSpy progress(&worker, &OptimizeWorker::measureProgress);
    UiStallMonitor monitor(10);
    monitor.start();
    worker.start();
    QVERIFY(worker.isRunning());  // start() returned while the job runs
    QTRY_VERIFY_WITH_TIMEOUT(!finished.isEmpty() || !failed.isEmpty(), 300000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
    // A cold resnet50_small on every backend takes far more than a second.
    QVERIFY(worker.budgetExpired());
    QCOMPARE(expired.size(), 1);
    auto result = finished.front().front().value<std::shared_ptr<const OptimizationResult>>();
    QVERIFY(result != nullptr);
    QVERIFY(result->cancelled);
    if (result->hasPlan) QVERIFY(!result->plan.groups.empty());
    QVERIFY(!progress.isEmpty());
    // The UI thread kept turning while the job ran.
    QVERIFY(monitor.ticks() > 0);
    QVERIFY(worker.wait(60000));
  }

  void workerDeliversEveryStepToTheChart() {
    // A whole (cold) optimisation of a small model: the DP's steps arrive in
    // batches and the chart's best line ends at the DP's predicted total (the
    // end-to-end check may then keep a baseline that ran faster).
    QTemporaryDir dir;
    auto graph = std::make_shared<const Graph>(importOnnx(model("dcgan_small").toStdString()));
    auto backends = std::make_shared<BackendSet>(loadBackendSet());  // the options point into its specs
    OptimizationJobOptions options = jobOptions("dcgan_small", dir, *backends);
    OptimizeWorker worker(graph, options);
    SearchChart chart;
    connect(&worker, &OptimizeWorker::searchSteps, &chart, &SearchChart::addSteps);
    QSignalSpy finished(&worker, &OptimizeWorker::finished);
    QSignalSpy failed(&worker, &OptimizeWorker::failed);
    QSignalSpy steps(&worker, &OptimizeWorker::searchSteps);
    worker.start();
    QTRY_VERIFY_WITH_TIMEOUT(!finished.isEmpty() || !failed.isEmpty(), 600000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
    auto result = finished.front().front().value<std::shared_ptr<const OptimizationResult>>();
    QVERIFY(result->hasPlan && !result->cancelled);
    QVERIFY(!worker.budgetExpired());
    int delivered = 0;
    for (const auto& args : steps) delivered += args.front().value<QVector<SearchStepEvent>>().size();
    // The spies record in the worker's thread; the chart gets the same
    // batches queued to this one, so let the event loop hand them over.
    QTRY_VERIFY(chart.bestSeries("op-level") != nullptr);
    QTRY_COMPARE(chart.bestSeries("op-level")->count(), delivered);
    QVERIFY(delivered >= 2);
    QCOMPARE(chart.bestSeries("op-level")->points().back().y(), result->opLevel.total / 1e6);
  }

  void sessionRunnerMeasuresAPlan() {
    auto graph = std::make_shared<const Graph>(importOnnx(model("dcgan_small").toStdString()));
    auto backends = std::make_shared<BackendSet>(loadBackendSet({"native"}));
    Plan plan = singleNodePlan(*graph, "native");
    SessionRunner runner(graph, plan, [backends](const std::string& n) { return backends->find(n); }, 4);
    QSignalSpy finished(&runner, &SessionRunner::finished);
    QSignalSpy failed(&runner, &SessionRunner::failed);
    QSignalSpy progress(&runner, &SessionRunner::progress);
    runner.start();
    QTRY_VERIFY_WITH_TIMEOUT(!finished.isEmpty() || !failed.isEmpty(), 120000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
    QVERIFY(finished.front().at(0).toDouble() > 0);
    QVERIFY(finished.front().at(1).toDouble() >= 0);
    QVERIFY(finished.front().at(2).toLongLong() > 0);
    QCOMPARE(progress.size(), 4);
    QVERIFY(formatPredictedVsMeasured(2.5e6, 3.0, 0.1).contains("predicted 2.500 ms"));
  }

  void sessionRunnerCancelsBetweenRuns() {
    auto graph = std::make_shared<const Graph>(importOnnx(model("dcgan_small").toStdString()));
    auto backends = std::make_shared<BackendSet>(loadBackendSet({"native"}));
    SessionRunner runner(graph, singleNodePlan(*graph, "native"),
                         [backends](const std::string& n) { return backends->find(n); }, 100000);
    QSignalSpy cancelled(&runner, &SessionRunner::cancelled);
    QSignalSpy finished(&runner, &SessionRunner::finished);
    QSignalSpy progress(&runner, &SessionRunner::progress);
    runner.start();
    QTRY_VERIFY_WITH_TIMEOUT(!progress.isEmpty(), 120000);
    runner.cancel();
    QTRY_VERIFY_WITH_TIMEOUT(!cancelled.isEmpty(), 120000);
    QVERIFY(finished.isEmpty());
  }

  void sessionRunnerReportsABadPlan() {
    auto graph = std::make_shared<const Graph>(importOnnx(model("dcgan_small").toStdString()));
    Plan plan = singleNodePlan(*graph, "nosuchbackend");
    SessionRunner runner(graph, plan, [](const std::string&) { return nullptr; });
    QSignalSpy failed(&runner, &SessionRunner::failed);
    runner.start();
    QTRY_VERIFY_WITH_TIMEOUT(!failed.isEmpty(), 60000);
    QVERIFY(!failed.front().front().toString().isEmpty());
  }

  void kernelTableListsEveryCandidate() {
    Graph graph = importOnnx(model("resnet50_small").toStdString());
    BackendSet backends = loadBackendSet();
    OptimizationResult result;
    result.candidates = enumerateCandidates(graph, backends.capabilities());
    result.measurements = fakeMeasurements(result.candidates);
    result.measurements[1].status = MeasurementStatus::Invalid;
    result.measurements[1].message = "refused";
    result.measured.assign(result.candidates.size(), true);
    std::vector<Cost> costs;
    for (const auto& m : result.measurements) costs.push_back(m.cost());
    OpLevelResult r = optimizeOpLevel(OpLevelProblem{&graph, &result.candidates, costs, nullptr, {}});
    result.plan = makePlan(graph, "", result.candidates, r.chosen, result.measurements,
                           PlanOrigin::OpLevel, backends.fingerprint(graph), {});
    result.hasPlan = true;

    KernelTableModel kernels;
    QAbstractItemModelTester tester(&kernels, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSortFilterProxyModel proxy;
    QAbstractItemModelTester proxyTester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.setSourceModel(&kernels);
    proxy.setSortRole(KernelTableModel::kSortRole);
    kernels.setCandidates(graph, result, &result.plan);
    QVERIFY(kernels.mode() == KernelTableModel::Mode::AllCandidates);
    QCOMPARE(kernels.rowCount(), static_cast<int>(result.candidates.size()));
    int chosen = 0;
    for (int row = 0; row < kernels.rowCount(); ++row) {
      const KernelRow& k = kernels.row(row);
      if (k.chosen) {
        ++chosen;
        QCOMPARE(kernels.data(kernels.index(row, KernelTableModel::Chosen)).toString(), QString("chosen"));
        QCOMPARE(r.chosen.at(static_cast<size_t>(k.group)), k.candidate);
      } else {
        QCOMPARE(kernels.data(kernels.index(row, KernelTableModel::Group)).toString(), QString());
      }
      QCOMPARE(static_cast<int>(k.nodes.size()),
               static_cast<int>(result.candidates[static_cast<size_t>(row)].nodes.count()));
    }
    QCOMPARE(chosen, static_cast<int>(r.chosen.size()));
    QCOMPARE(kernels.data(kernels.index(1, KernelTableModel::Median)).toString(), QString("invalid"));
    // A reference kernel the optimizer did not measure (faster candidates
    // cover its nodes) says "skipped", names no source, and gives the reason.
    result.measurements[1].status = MeasurementStatus::Skipped;
    result.measurements[1].message = "reference kernel estimated at 61.0 s per run";
    kernels.setCandidates(graph, result, &result.plan);
    QCOMPARE(kernels.data(kernels.index(1, KernelTableModel::Median)).toString(), QString("skipped"));
    QCOMPARE(kernels.data(kernels.index(1, KernelTableModel::Source)).toString(), QString());
    QVERIFY(kernels.data(kernels.index(1, KernelTableModel::Ops), Qt::ToolTipRole)
                .toString()
                .contains("estimated at 61.0 s per run"));
    result.measurements[1].status = MeasurementStatus::Invalid;
    result.measurements[1].message = "refused";
    kernels.setCandidates(graph, result, &result.plan);
    QCOMPARE(kernels.data(kernels.index(0, KernelTableModel::Source)).toString(), QString("cached"));
    QCOMPARE(kernels.data(kernels.index(3, KernelTableModel::Source)).toString(), QString("fresh"));
    // A median read from a team's shared store says so, with its machines.
    result.measurements[0].fromShared = true;
    result.measurements[0].machines = 3;
    kernels.setCandidates(graph, result, &result.plan);
    QCOMPARE(kernels.data(kernels.index(0, KernelTableModel::Source)).toString(),
             QString("shared store, 3 machine(s)"));
    result.measurements[0].machines = 0;  // the local file's copy of a shared row
    kernels.setCandidates(graph, result, &result.plan);
    QCOMPARE(kernels.data(kernels.index(0, KernelTableModel::Source)).toString(),
             QString("shared store (copy in the local file)"));
    result.measurements[0].fromShared = false;
    kernels.setCandidates(graph, result, &result.plan);

    // Filter to one backend, then sort by median: the invalid one sorts last.
    proxy.setFilterKeyColumn(KernelTableModel::Backend);
    proxy.setFilterFixedString(QString::fromStdString(result.candidates[1].backend));
    QVERIFY(proxy.rowCount() > 0 && proxy.rowCount() < kernels.rowCount());
    for (int row = 0; row < proxy.rowCount(); ++row)
      QCOMPARE(proxy.index(row, KernelTableModel::Backend).data().toString(),
               QString::fromStdString(result.candidates[1].backend));
    proxy.sort(KernelTableModel::Median, Qt::AscendingOrder);
    QCOMPARE(proxy.mapToSource(proxy.index(proxy.rowCount() - 1, 0)).row(), 1);
    proxy.sort(KernelTableModel::Chosen, Qt::DescendingOrder);
    QCOMPARE(proxy.index(0, KernelTableModel::Chosen).data().toString(), QString("chosen"));
    proxy.setFilterFixedString(QString());

    // A graph-level plan: its first two groups became one region. The table
    // marks exactly the shown plan's groups: the region as a row of its own,
    // never the op-level candidates it replaced (the old parallel array
    // still named them after the search).
    Plan graphLevel = result.plan;
    PlanGroup region;
    region.nodes = graphLevel.groups[0].nodes;
    for (const std::string& n : graphLevel.groups[1].nodes) region.nodes.push_back(n);
    region.backend = "onednn";
    region.pattern = "region";
    region.origin = PlanOrigin::GraphLevel;
    region.costNs = 12345;
    graphLevel.groups.erase(graphLevel.groups.begin(), graphLevel.groups.begin() + 2);
    graphLevel.groups.insert(graphLevel.groups.begin(), region);
    kernels.setCandidates(graph, result, &graphLevel);
    QCOMPARE(kernels.rowCount(), static_cast<int>(result.candidates.size()) + 1);
    chosen = 0;
    for (int row = 0; row < kernels.rowCount(); ++row) {
      const KernelRow& k = kernels.row(row);
      if (!k.chosen) continue;
      ++chosen;
      QVERIFY2(k.candidate != r.chosen[0] && k.candidate != r.chosen[1],
               "a candidate the region replaced is marked chosen");
      const PlanGroup& g = graphLevel.groups.at(static_cast<size_t>(k.group));
      QCOMPARE(k.backend, QString::fromStdString(g.backend));
      QCOMPARE(k.nodes.size(), static_cast<int>(g.nodes.size()));
    }
    QCOMPARE(chosen, static_cast<int>(graphLevel.groups.size()));
    const int regionRow = kernels.rowCount() - 1;
    QCOMPARE(kernels.row(regionRow).group, 0);
    QCOMPARE(kernels.row(regionRow).candidate, -1);
    QCOMPARE(kernels.data(kernels.index(regionRow, KernelTableModel::Median)).toString(), QString("12.35 us"));
    QCOMPARE(kernels.data(kernels.index(regionRow, KernelTableModel::Source)).toString(),
             QString("region, measured alone"));

    // A result cancelled while measuring: nothing chosen, unreached rows say so.
    OptimizationResult partial = result;
    partial.hasPlan = false;
    partial.measured[3] = false;
    partial.measurements[3] = Measurement{};
    kernels.setCandidates(graph, partial, nullptr);
    QCOMPARE(kernels.data(kernels.index(3, KernelTableModel::Median)).toString(), QString("not measured"));
    for (int row = 0; row < kernels.rowCount(); ++row) QVERIFY(!kernels.row(row).chosen);

    // Back to the plan's groups: where each median comes from is the
    // candidate's measurement; a region's is the region's.
    kernels.setPlan(graph, result.plan, &result);
    QVERIFY(kernels.mode() == KernelTableModel::Mode::PlanGroups);
    QCOMPARE(kernels.rowCount(), static_cast<int>(result.plan.groups.size()));
    QCOMPARE(kernels.data(kernels.index(0, KernelTableModel::Chosen)).toString(), QString("chosen"));
    for (int row = 0; row < kernels.rowCount(); ++row) {
      const bool cached = result.measurements[static_cast<size_t>(r.chosen[static_cast<size_t>(row)])].fromCache;
      QVERIFY(kernels.row(row).provenance ==
              (cached ? KernelRow::Provenance::Cached : KernelRow::Provenance::Fresh));
    }
    kernels.setPlan(graph, graphLevel, &result);
    QVERIFY(kernels.row(0).provenance == KernelRow::Provenance::Region);
    // A plan read from a file has no candidates: not claimed as cached.
    kernels.setPlan(graph, planFromJson(planToJson(result.plan), "plan.json"), &result);
    QCOMPARE(kernels.data(kernels.index(0, KernelTableModel::Source)).toString(), QString());
  }

  void stallMonitorSeesABlockedUiThread() {
    UiStallMonitor monitor(10);
    monitor.start();
    QTRY_VERIFY_WITH_TIMEOUT(monitor.ticks() > 0, 5000);
    QSignalSpy stalled(&monitor, &UiStallMonitor::stalled);
    QTimer::singleShot(0, [] { QThread::msleep(200); });
    QTest::qWait(100);
    QTRY_VERIFY_WITH_TIMEOUT(monitor.maxStallMs() >= 150, 5000);
    QVERIFY(monitor.stallsOver() >= 1);
    QVERIFY(!stalled.isEmpty());
    monitor.reset();
    QCOMPARE(monitor.maxStallMs(), 0.0);
    monitor.stop();
    QVERIFY(!monitor.isRunning());
  }
};

QTEST_MAIN(OptimizePanelTests)
#include "optimize_panel_tests.moc"
