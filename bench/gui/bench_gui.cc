// bench_gui: the desktop app's figures, measured on the real MainWindow
// through its public API only:
//  - time to open and show BERT-base and ResNet-50 from the zoo (openModel()
//    to modelLoaded(), then to the first complete paint of the graph view);
//  - the process's memory with BERT-base open (VmRSS / VmHWM);
//  - the largest stall of the UI thread (a 10 ms QTimer on it, see
//    views/ui_stall_monitor.h) while the window optimises resnet50_small into
//    a fresh temporary database, and while each model opens.
// Targets (issue 6): open in under 3 s, no UI stall over 100 ms.
//
//   QT_QPA_PLATFORM=offscreen build/bench/gui/bench_gui [--zoo DIR] [--backends a,b]
//        [--no-optimize] [--optimize-model PATH] [--timeout S] [--graph-level SECONDS]
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QTimer>

#include <cstdio>
#include <thread>

#include "app/main_window.h"
#include "core/ir/graph.h"
#include "core/onnx/onnx_import.h"
#include "views/graph_layout.h"
#include "views/ui_stall_monitor.h"

using namespace collage;

namespace {

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM"); -1 if absent.
long procStatusKb(const char* field) {
  QFile f(QStringLiteral("/proc/self/status"));
  if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) return -1;
  const QByteArray prefix = QByteArray(field) + ':';
  for (const QByteArray& line : f.readAll().split('\n'))
    if (line.startsWith(prefix)) return line.mid(prefix.size()).trimmed().split(' ').front().toLong();
  return -1;
}

QString zooDir() {
  QString cache = qEnvironmentVariable("XDG_CACHE_HOME");
  if (cache.isEmpty()) cache = QDir::homePath() + QStringLiteral("/.cache");
  return cache + QStringLiteral("/collage-studio/zoo");
}

// Runs the event loop until one of the signals fires or `timeoutMs` passes;
// returns which fired (0 = the first, 1 = the second, -1 = timeout).
template <typename Sender, typename S1, typename S2>
int waitFor(Sender* sender, S1 first, S2 second, int timeoutMs) {
  QEventLoop loop;
  int which = -1;
  QObject::connect(sender, first, &loop, [&] { which = 0; loop.quit(); });
  QObject::connect(sender, second, &loop, [&] { which = 1; loop.quit(); });
  QTimer::singleShot(timeoutMs, &loop, &QEventLoop::quit);
  loop.exec();
  return which;
}

struct OpenFigures {
  bool ok = false;
  int nodes = 0;
  double loadedMs = 0;  // openModel() -> modelLoaded()
  double shownMs = 0;   // openModel() -> the graph view painted
  double maxStallMs = 0;
  double maxStallCpuMs = 0;
};

OpenFigures openAndShow(MainWindow& window, const QString& path, UiStallMonitor& monitor) {
  OpenFigures f;
  monitor.start();
  QElapsedTimer clock;
  clock.start();
  window.openModel(path);
  const int which = waitFor(&window, &MainWindow::modelLoaded, &MainWindow::loadFailed, 600000);
  f.loadedMs = clock.nsecsElapsed() / 1e6;
  if (which != 0) {
    std::printf("  %s: %s\n", qPrintable(QFileInfo(path).fileName()),
                which < 0 ? "timed out" : "failed to load");
    monitor.stop();
    return f;
  }
  // Shown: what is pending runs, then the view paints synchronously (on the
  // offscreen platform into its backing store, as a screen would).
  QCoreApplication::processEvents();
  window.centralWidget()->repaint();
  f.shownMs = clock.nsecsElapsed() / 1e6;
  // Let a few ticks come after the paint, so a stall in it is counted.
  QEventLoop settle;
  QTimer::singleShot(100, &settle, &QEventLoop::quit);
  settle.exec();
  monitor.stop();
  f.maxStallMs = monitor.maxStallMs();
  f.maxStallCpuMs = monitor.maxStallCpuMs();
  f.nodes = window.graph() ? window.graph()->numNodes() : 0;
  f.ok = true;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  // Keep the user's window geometry and settings out of it.
  QCoreApplication::setOrganizationName(QStringLiteral("CollageBench"));
  QCoreApplication::setApplicationName(QStringLiteral("bench_gui"));
  qputenv("COLLAGE_STUDIO_NO_DIALOGS", "1");
  if (qEnvironmentVariableIsEmpty("COLLAGE_CLI")) qputenv("COLLAGE_CLI", COLLAGE_CLI_PATH);

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Collage Studio GUI benchmark"));
  parser.addHelpOption();
  QCommandLineOption zooOpt(QStringLiteral("zoo"), QStringLiteral("zoo folder"), QStringLiteral("DIR"),
                            zooDir());
  QCommandLineOption backendsOpt(QStringLiteral("backends"),
                                 QStringLiteral("backends to optimise with (default: all)"),
                                 QStringLiteral("a,b"));
  QCommandLineOption noOptOpt(QStringLiteral("no-optimize"), QStringLiteral("skip the optimisation"));
  QCommandLineOption optModelOpt(
      QStringLiteral("optimize-model"), QStringLiteral("model to optimise"), QStringLiteral("PATH"),
      QStringLiteral(COLLAGE_SOURCE_DIR "/resources/models/resnet50_small.onnx"));
  QCommandLineOption timeoutOpt(QStringLiteral("timeout"),
                                QStringLiteral("seconds to wait for the optimisation"),
                                QStringLiteral("S"), QStringLiteral("900"));
  QCommandLineOption graphLevelOpt(QStringLiteral("graph-level"),
                                   QStringLiteral("then run the graph-level search with this budget"),
                                   QStringLiteral("SECONDS"));
  parser.addOptions({zooOpt, backendsOpt, noOptOpt, optModelOpt, timeoutOpt, graphLevelOpt});
  parser.process(app);

  MainWindow window;
  window.resize(1400, 900);
  window.show();
  QCoreApplication::processEvents();
  UiStallMonitor monitor(10);

  std::printf("bench_gui: platform %s, %u hardware threads, load average %s\n",
              qPrintable(QGuiApplication::platformName()), std::thread::hardware_concurrency(),
              [] {
                QFile f(QStringLiteral("/proc/loadavg"));
                return f.open(QIODevice::ReadOnly) ? f.readAll().left(14).toStdString()
                                                   : std::string("?");
              }()
                  .c_str());
  std::printf("RSS at start (window shown, no model): %.1f MiB\n", procStatusKb("VmRSS") / 1024.0);

  // The floor: how late a 10 ms timer fires when the UI thread does nothing.
  // On a loaded machine the scheduler alone produces stalls; compare with it.
  monitor.start();
  {
    QEventLoop idle;
    QTimer::singleShot(3000, &idle, &QEventLoop::quit);
    idle.exec();
  }
  monitor.stop();
  std::printf("Idle baseline (3 s, nothing to do): largest UI stall %.1f ms, %d over 100 ms\n",
              monitor.maxStallMs(), monitor.stallsOver());
  std::printf("The UI thread's CPU time inside a stall tells its own work (close to the stall)\n"
              "from waiting to be scheduled on a loaded machine (close to 0).\n");

  bool allOk = true;
  std::printf("\nOpen and show (target: under 3000 ms)\n");
  for (const char* name : {"bert_base", "resnet50"}) {
    const QString path = parser.value(zooOpt) + '/' + name + ".onnx";
    if (!QFileInfo::exists(path)) {
      std::printf("  %s: skipped, %s missing (bench/models/export_zoo.py makes it)\n", name,
                  qPrintable(path));
      continue;
    }
    OpenFigures f = openAndShow(window, path, monitor);
    if (!f.ok) {
      allOk = false;
      continue;
    }
    std::printf("  %-10s %5d nodes: loaded %8.1f ms, shown %8.1f ms %s; largest UI stall while opening %.1f ms"
                " (UI thread busy %.1f ms of it)\n",
                name, f.nodes, f.loadedMs, f.shownMs, f.shownMs < 3000 ? "(ok)" : "(OVER TARGET)",
                f.maxStallMs, f.maxStallCpuMs);
    if (QLatin1String(name) == QLatin1String("bert_base"))
      std::printf("  memory with bert_base open: VmRSS %.1f MiB, VmHWM (peak so far) %.1f MiB\n",
                  procStatusKb("VmRSS") / 1024.0, procStatusKb("VmHWM") / 1024.0);
    // Where the time goes, off the window: the two steps its loader runs on a
    // worker thread.
    QElapsedTimer clock;
    clock.start();
    Graph graph = importOnnx(path.toStdString());
    const double importMs = clock.nsecsElapsed() / 1e6;
    clock.restart();
    GraphLayout layout = computeLayout(graph);
    std::printf("  %-10s breakdown: import %.1f ms, layout %.1f ms (%zu boxes)\n", name, importMs,
                clock.nsecsElapsed() / 1e6, layout.nodes.size());
  }

  if (!parser.isSet(noOptOpt)) {
    const QString model = parser.value(optModelOpt);
    std::printf("\nOptimise %s into a fresh database (target: no UI stall over 100 ms)\n",
                qPrintable(QFileInfo(model).fileName()));
    QTemporaryDir dir;
    OpenFigures f = openAndShow(window, model, monitor);
    if (!f.ok) return 1;
    window.setDatabasePath(dir.filePath(QStringLiteral("measurements.sqlite")));
    if (parser.isSet(backendsOpt)) window.setBackends(parser.value(backendsOpt).split(','));
    OptimizeSettings settings = window.optimizeSettings();
    settings.graphLevel = parser.isSet(graphLevelOpt);  // the live search: recolouring, chart, diff
    if (settings.graphLevel) settings.graphLevelBudgetSeconds = parser.value(graphLevelOpt).toDouble();
    window.setOptimizeSettings(settings);
    monitor.start();
    QElapsedTimer clock;
    clock.start();
    window.startOptimization();
    const int which = waitFor(&window, &MainWindow::optimizationFinished,
                              &MainWindow::optimizationFailed,
                              static_cast<int>(parser.value(timeoutOpt).toDouble() * 1000));
    const double seconds = clock.nsecsElapsed() / 1e9;
    // A few ticks after the result was shown, so its handling is counted.
    QEventLoop settle;
    QTimer::singleShot(100, &settle, &QEventLoop::quit);
    settle.exec();
    monitor.stop();
    if (which < 0) {
      std::printf("  timed out after %.0f s; cancelling\n", seconds);
      window.cancelOptimization();
      waitFor(&window, &MainWindow::optimizationFinished, &MainWindow::optimizationFailed, 120000);
      allOk = false;
    } else if (which == 1) {
      std::printf("  the optimisation failed (see the window's status line)\n");
      allOk = false;
    }
    std::printf("  %s in %.1f s: largest UI stall %.1f ms %s, %d stall(s) over 100 ms, %lld ticks of 10 ms\n",
                which == 0 ? "optimised" : "stopped", seconds, monitor.maxStallMs(),
                monitor.maxStallMs() <= 100 ? "(ok)" : "(OVER TARGET)", monitor.stallsOver(),
                static_cast<long long>(monitor.ticks()));
    std::printf("  the largest stall ended %.2f s after the start; the UI thread's CPU time in it: %.1f ms;\n"
                "  in it the UI thread was preempted %ld time(s) and waited for the disk %ld time(s);\n"
                "  at most %.1f ms of UI-thread work between two ticks\n",
                monitor.maxStallAtMs() / 1000, monitor.maxStallCpuMs(),
                monitor.maxStallPreemptions(), monitor.maxStallMajorFaults(), monitor.maxBusyMs());
    if (which == 0 && window.plan())
      std::printf("  plan: %zu kernels, predicted %.3f ms\n", window.plan()->groups.size(),
                  window.plan()->predictedNs / 1e6);
  }
  std::printf("\nPeak RSS of the process (VmHWM): %.1f MiB (includes the breakdown's second import of each model)\n",
              procStatusKb("VmHWM") / 1024.0);
  window.close();
  return allOk ? 0 : 1;
}
