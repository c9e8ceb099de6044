// What the GUI tests share: the bundled models by name, and a window that
// opens one and waits until it is shown.
#pragma once

#include <QSignalSpy>
#include <QString>

#include "app/main_window.h"

namespace collage::gui_test {

// resources/models/<name>.onnx of the source tree.
inline QString model(const char* name) {
  return QStringLiteral(COLLAGE_SOURCE_DIR "/resources/models/") + name + ".onnx";
}

// Opens `path` in the window and waits until it is shown (import and layout).
inline bool openAndWait(MainWindow& window, const QString& path) {
  QSignalSpy loaded(&window, &MainWindow::modelLoaded);
  window.openModel(path);
  return loaded.wait(120000);
}

}  // namespace collage::gui_test
