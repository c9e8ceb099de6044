// collage-studio: the desktop app. `collage-studio [model.onnx]`.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>
#include <cstdio>

#include "app/main_window.h"

namespace {

// --screenshot: open the model, optionally optimise it, save the window as
// a PNG and quit. For documentation and for looking at the app on a machine
// without a display (QT_QPA_PLATFORM=offscreen).
void takeScreenshotWhenReady(collage::MainWindow& window, const QString& path, bool optimize) {
  auto save = [&window, path] {
    QTimer::singleShot(300, &window, [&window, path] {  // let the last repaint land
      const bool ok = window.grab().save(path);
      std::fprintf(ok ? stdout : stderr, "%s %s\n", ok ? "screenshot written to" : "cannot write",
                   qPrintable(path));
      QCoreApplication::exit(ok ? 0 : 1);
    });
  };
  QObject::connect(&window, &collage::MainWindow::modelLoaded, &window, [&window, optimize, save] {
    if (optimize)
      window.startOptimization();
    else
      save();
  });
  QObject::connect(&window, &collage::MainWindow::planMeasured, &window, save);
  QObject::connect(&window, &collage::MainWindow::planMeasureFailed, &window, save);
  QObject::connect(&window, &collage::MainWindow::optimizationFailed, &window, save);
  QObject::connect(&window, &collage::MainWindow::loadFailed, &window, [](const QString& why) {
    std::fprintf(stderr, "cannot open the model: %s\n", qPrintable(why));
    QCoreApplication::exit(1);
  });
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("Collage");
  QApplication::setApplicationName("collage-studio");
  QCommandLineParser parser;
  parser.setApplicationDescription("Place an ONNX model's kernels on the fastest backends.");
  parser.addHelpOption();
  parser.addPositionalArgument("model", "ONNX model to open");
  QCommandLineOption db("db", "measurement database (SQLite)", "path");
  parser.addOption(db);
  QCommandLineOption shape("input-shape", "bind a dynamic input's dims, e.g. input_ids=1x128 (repeatable)",
                           "name=dims");
  parser.addOption(shape);
  QCommandLineOption screenshot("screenshot", "open the model, save the window as a PNG and quit", "png");
  parser.addOption(screenshot);
  QCommandLineOption optimize("optimize", "with --screenshot: optimise (and run the plan) first");
  parser.addOption(optimize);
  parser.process(app);
  collage::MainWindow window;
  if (parser.isSet(db)) window.setDatabasePath(parser.value(db));
  if (parser.isSet(screenshot)) {
    if (parser.positionalArguments().isEmpty()) parser.showHelp(2);
    takeScreenshotWhenReady(window, parser.value(screenshot), parser.isSet(optimize));
  }
  window.resize(1400, 900);
  window.show();
  if (!parser.positionalArguments().isEmpty())
    window.openModel(parser.positionalArguments().front(), parser.values(shape));
  return app.exec();
}
