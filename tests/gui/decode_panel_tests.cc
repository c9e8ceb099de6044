// The Decode panel (#42) on the offscreen platform: shown for a decoder with
// a KV cache and only for one, and its measurement at a few context lengths
// run on the window's background work, one point per length, each split
// into the attention kernels and the rest.
#include <QAction>
#include <QChartView>
#include <QDockWidget>
#include <QLineSeries>
#include <QPushButton>
#include <QScatterSeries>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>

#include "core/decode/decode_runs.h"
#include "core/decode/decoder.h"
#include "core/ir/hashing.h"
#include "core/pipeline/link_measurement.h"
#include "core/plan/plan.h"
#include "views/background_work.h"
#include "views/decode_panel.h"
#include "views/decode_parallel_chart.h"

#include "tests/gui/gui_test_support.h"

using namespace collage;
using gui_test::model;

namespace {

const QString kDecoder = QStringLiteral(COLLAGE_SOURCE_DIR "/tests/models/decoder/tiny_decoder.onnx");

// The step graph's bindings for a small cache: the model's dynamic dims bound
// as the decode loop binds them.
QStringList decoderBindings(int64_t capacity = 8) {
  QStringList out;
  for (const std::string& b : importDecodeModel(kDecoder.toStdString(), capacity).bindings)
    out << QString::fromStdString(b);
  return out;
}

bool openAndWait(MainWindow& window, const QString& path, const QStringList& shapes) {
  QSignalSpy loaded(&window, &MainWindow::modelLoaded);
  window.openModel(path, shapes);
  return loaded.wait(120000);
}

}  // namespace

class DecodePanelTests : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName("CollageTests");
    QCoreApplication::setApplicationName("decode_panel_tests");
    qputenv("COLLAGE_CLI", COLLAGE_CLI_PATH);
    QSettings().clear();  // no saved layout (it could show or hide docks)
  }

  void contextLengthsDoubleUpToTheMax() {
    QCOMPARE(DecodePanel::contextLengths(64), (QVector<qint64>{16, 32, 64}));
    QCOMPARE(DecodePanel::contextLengths(100), (QVector<qint64>{16, 32, 64, 100}));
    QCOMPARE(DecodePanel::contextLengths(8), (QVector<qint64>{8}));
  }

  void shownForADecoderOnly() {
    MainWindow window;
    window.show();
    QVERIFY(openAndWait(window, kDecoder, decoderBindings()));
    QVERIFY(window.isDecoder());
    QVERIFY(window.decodeDock()->isVisible());
    QVERIFY(window.decodeDock()->toggleViewAction()->isEnabled());
    // Another model that is no decoder: the panel goes, and cannot be asked for.
    QVERIFY(gui_test::openAndWait(window, model("dcgan_small")));
    QVERIFY(!window.isDecoder());
    QVERIFY(!window.decodeDock()->isVisible());
    QVERIFY(!window.decodeDock()->toggleViewAction()->isEnabled());
    // And back.
    QVERIFY(openAndWait(window, kDecoder, decoderBindings()));
    QVERIFY(window.decodeDock()->isVisible());
  }

  void measuresAPointPerContextLength() {
    MainWindow window;
    window.show();
    QVERIFY(openAndWait(window, kDecoder, decoderBindings()));
    DecodePanel* panel = window.decodePanel();
    QSignalSpy measured(&window, &MainWindow::decodeMeasured);
    // Three short lengths, as the button would ask for them up to 32.
    panel->maxContext()->setValue(32);
    const QVector<qint64> lengths = DecodePanel::contextLengths(8) + DecodePanel::contextLengths(32);
    QCOMPARE(lengths, (QVector<qint64>{8, 16, 32}));
    window.measureDecode(lengths);
    QVERIFY(!panel->measureButton()->isEnabled());  // measuring, off the UI thread
    QVERIFY(measured.wait(300000));
    QCOMPARE(measured.at(0).at(1).toString(), QString());  // no error
    QCOMPARE(measured.at(0).at(0).toInt(), 3);
    QCOMPARE(panel->attentionSeries()->count(), 3);
    QCOMPARE(panel->stepSeries()->count(), 3);
    for (int i = 0; i < 3; ++i) {
      const DecodePoint& p = panel->points()[i];
      QCOMPARE(p.context, lengths[i]);
      QCOMPARE(panel->attentionSeries()->at(i).x(), double(lengths[i]));
      QVERIFY2(p.attentionGroups > 0, qPrintable(panel->statusText()));
      QVERIFY2(p.attentionMs > 0, qPrintable(panel->statusText()));
      QVERIFY(p.stepMs >= p.attentionMs);
      QVERIFY(!p.withPlan);  // no plan loaded: the native default
      // The timed step attends over a filled cache of that many rows, not
      // over one row and the mask.
      QCOMPARE(p.rowsAttended, lengths[i]);
    }
    QTRY_VERIFY(panel->measureButton()->isEnabled());
    // The button asks for the lengths up to the max.
    QSignalSpy asked(panel, &DecodePanel::measureRequested);
    QObject::disconnect(panel, &DecodePanel::measureRequested, &window, nullptr);
    panel->measureButton()->click();
    QCOMPARE(asked.count(), 1);
    QCOMPARE(asked.at(0).at(0).value<QVector<qint64>>(), (QVector<qint64>{16, 32}));
  }

  // The DP / TP / CP comparison beside the curve: once a measurement ends,
  // the simulator runs off the UI thread on the measured points and the
  // chart shows its three strategies from the shortest measured context to
  // 128k rows, the fit, and the measured steps at their contexts; and a run
  // stored on 2 ranks (as `mpirun -n 2 collage generate --cache-parallel`
  // stores it) beside its own simulation, on the 2-device chart only.
  void chartsDataTensorAndCacheParallelism() {
    QTemporaryDir cache;
    const QByteArray savedCache = qgetenv("XDG_CACHE_HOME");
    qputenv("XDG_CACHE_HOME", cache.path().toUtf8());
    struct Restore {
      QByteArray value;
      ~Restore() {
        if (value.isEmpty()) qunsetenv("XDG_CACHE_HOME");
        else qputenv("XDG_CACHE_HOME", value);
      }
    } restore{savedCache};
    {
      DecodeRunRecord run;
      run.modelKey = decodeModelKey(kDecoder.toStdString());
      run.strategy = "CP";
      run.ranks = 2;
      run.threadsPerRank = 1;
      run.context = 32;
      run.capacity = 40;
      run.steps = 8;
      run.stepMs = 0.5;
      run.attentionMs = 0.2;
      run.tokensPerSecond = 2000;
      MeasurementDb(MeasurementDb::defaultPath()).storeDecodeRun(linkFingerprint(), run);
    }
    MainWindow window;
    window.show();
    QVERIFY(openAndWait(window, kDecoder, decoderBindings()));
    DecodePanel* panel = window.decodePanel();
    DecodeParallelChart* chart = panel->parallelChart();
    QVERIFY(chart->isVisible());
    QSignalSpy measured(&window, &MainWindow::decodeMeasured);
    QSignalSpy simulated(chart, &DecodeParallelChart::simulated);
    const QVector<qint64> lengths{16, 32, 64};
    window.measureDecode(lengths);
    QVERIFY(measured.wait(300000));
    QCOMPARE(measured.at(0).at(1).toString(), QString());
    QVERIFY(simulated.count() > 0 || simulated.wait(60000));
    QCOMPARE(simulated.at(0).at(0).toString(), QString());
    QCOMPARE(chart->strategySeries().size(), 3);
    const QStringList names{"DP", "TP", "CP"};
    for (int s = 0; s < 3; ++s) {
      QtCharts::QLineSeries* series = chart->strategySeries()[s];
      QCOMPARE(series->name(), names[s]);
      QCOMPARE(series->count(), 14);  // 16, 32, ..., 131072
      QCOMPARE(series->at(0).x(), 16.0);
      QCOMPARE(series->at(13).x(), 131072.0);
      for (int i = 0; i < series->count(); ++i) QVERIFY(series->at(i).y() > 0);
    }
    QCOMPARE(chart->fitSeries()->count(), 14);
    QCOMPARE(chart->measuredSeries()->count(), 3);
    for (int i = 0; i < 3; ++i) {
      QCOMPARE(chart->measuredSeries()->at(i).x(), double(lengths[i]));
      QCOMPARE(chart->measuredSeries()->at(i).y(), 1000.0 / panel->points()[i].stepMs);
    }
    QVERIFY2(chart->statusText().contains("2 device(s)"), qPrintable(chart->statusText()));
    // The stored run at its context and tokens per second, and its simulation.
    QCOMPARE(chart->runSeries()->count(), 1);
    QCOMPARE(chart->runSeries()->at(0), QPointF(32, 2000));
    QCOMPARE(chart->runSimulatedSeries()->count(), 1);
    QCOMPARE(chart->runSimulatedSeries()->at(0).x(), 32.0);
    QVERIFY(chart->runSimulatedSeries()->at(0).y() > 0);
    QVERIFY2(chart->statusText().contains(
                 "measured CP, 2 rank(s) x 1 thread(s), 1 request(s) at 32 rows, 8 step(s)"),
             qPrintable(chart->statusText()));
    // One device: nothing to split, the three strategies are one line.
    simulated.clear();
    chart->devices()->setValue(1);
    QVERIFY(simulated.wait(60000));
    QCOMPARE(simulated.at(0).at(0).toString(), QString());
    for (int i = 0; i < 14; ++i) {
      const double dp = chart->strategySeries()[0]->at(i).y();
      for (int s = 1; s < 3; ++s)
        QVERIFY2(std::abs(chart->strategySeries()[s]->at(i).y() - dp) <= 1e-9 * dp,
                 qPrintable(names[s] + " at point " + QString::number(i)));
    }
    QCOMPARE(chart->runSeries()->count(), 0);  // a run on 2 ranks is no 1-device point
    QVERIFY2(chart->statusText().contains("No run on 1 device(s) is stored"),
             qPrintable(chart->statusText()));
    // A new model forgets them.
    QVERIFY(gui_test::openAndWait(window, model("dcgan_small")));
    QCOMPARE(chart->strategySeries()[0]->count(), 0);
    QCOMPARE(chart->measuredSeries()->count(), 0);
  }

  // The open plan runs at the context it was made for (its mask's length),
  // the native default at the others.
  void runsThePlanAtItsContext() {
    MainWindow window;
    QVERIFY(openAndWait(window, kDecoder, decoderBindings(16)));
    QTemporaryDir dir;
    const QString planPath = dir.filePath("step16.json");
    Plan plan = singleNodePlan(*window.graph(), "native");
    plan.modelPath = kDecoder.toStdString();
    plan.modelSha256 = sha256File(plan.modelPath);
    savePlan(plan, planPath.toStdString());
    QString error;
    QVERIFY2(window.openPlan(planPath, &error), qPrintable(error));
    QSignalSpy measured(&window, &MainWindow::decodeMeasured);
    window.measureDecode({8, 16});
    QVERIFY(measured.wait(300000));
    QCOMPARE(measured.at(0).at(1).toString(), QString());
    QCOMPARE(window.decodePanel()->points().size(), 2);
    const DecodePoint& other = window.decodePanel()->points()[0];
    const DecodePoint& planned = window.decodePanel()->points()[1];
    QVERIFY(!other.withPlan);
    QVERIFY(planned.withPlan);
    // One node a group: the attention's MatMuls and Softmax each a group.
    QVERIFY2(planned.attentionGroups >= 3, qPrintable(window.decodePanel()->statusText()));
    QVERIFY(planned.attentionMs > 0);
  }
};

QTEST_MAIN(DecodePanelTests)
#include "decode_panel_tests.moc"
