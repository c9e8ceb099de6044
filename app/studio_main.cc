// collage-studio: the desktop app. `collage-studio [model.onnx]`.
#include <QApplication>
#include <QCommandLineParser>

#include "app/main_window.h"

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
  parser.process(app);
  collage::MainWindow window;
  if (parser.isSet(db)) window.setDatabasePath(parser.value(db));
  window.resize(1400, 900);
  window.show();
  if (!parser.positionalArguments().isEmpty()) window.openModel(parser.positionalArguments().front(), parser.values(shape));
  return app.exec();
}
