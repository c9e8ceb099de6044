// Asks for the sizes of a model's dynamic input dimensions (batch, sequence)
// before it is imported: one line per input with a dynamic dimension,
// prefilled with the last sizes used for that model (or 1 per dynamic dim).
#pragma once

#include <QDialog>
#include <QStringList>
#include <vector>

#include "core/onnx/onnx_import.h"

class QLabel;
class QLineEdit;

namespace collage {

class InputShapeDialog : public QDialog {
  Q_OBJECT
 public:
  // `previous`: "name=1x128" bindings used last time (may be empty).
  InputShapeDialog(const QString& modelName, std::vector<DeclaredInput> inputs,
                   const QStringList& previous, QWidget* parent = nullptr);

  // "name=dims" for each input with a dynamic dimension, as the command
  // line's --input-shape takes them. Valid once the dialog is accepted.
  QStringList bindings() const;

  // Checks `text` ("1x128") against `input`'s declared dims: same rank,
  // positive sizes, static dims unchanged. Empty = fine, else the reason.
  static QString validate(const DeclaredInput& input, const QString& text);
  // The dims with each dynamic one as 1 ("1x3x224x224").
  static QString defaultText(const DeclaredInput& input);
  // Which dims are dynamic, by symbol, and what the import binds them to
  // without an answer: "dynamic dims [N, T]; default binding 1x1" (the same
  // facts as the command line's import note).
  static QString dynamicText(const DeclaredInput& input);

  void accept() override;

 private:
  std::vector<DeclaredInput> inputs_;  // the dynamic ones
  std::vector<QLineEdit*> edits_;
  QLabel* error_ = nullptr;
};

}  // namespace collage
