#include "app/input_shape_dialog.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QVBoxLayout>

namespace collage {
namespace {

QString declaredText(const DeclaredInput& input) {
  QStringList parts;
  for (size_t i = 0; i < input.dims.size(); ++i)
    parts << (input.dims[i] >= 0 ? QString::number(input.dims[i])
                                 : (input.symbols[i].empty() ? QStringLiteral("?")
                                                             : QString::fromStdString(input.symbols[i])));
  return parts.join(QLatin1Char('x'));
}

}  // namespace

QString InputShapeDialog::defaultText(const DeclaredInput& input) {
  QStringList parts;
  for (int64_t d : input.dims) parts << QString::number(d >= 0 ? d : 1);
  return parts.join(QLatin1Char('x'));
}

QString InputShapeDialog::dynamicText(const DeclaredInput& input) {
  const std::optional<DynamicInputBinding> b = dynamicInputBinding(input, ImportOptions{});
  if (!b) return tr("no declared shape: give every dimension");
  QStringList symbols, sizes;
  for (const std::string& s : b->symbols) symbols << QString::fromStdString(s);
  for (int64_t d : b->sizes) sizes << QString::number(d);
  return tr("dynamic dims [%1]; default binding %2")
      .arg(symbols.join(QStringLiteral(", ")), sizes.join(QLatin1Char('x')));
}

QString InputShapeDialog::validate(const DeclaredInput& input, const QString& text) {
  const QStringList parts = text.trimmed().split(QLatin1Char('x'));
  if (input.rankKnown && static_cast<size_t>(parts.size()) != input.dims.size())
    return tr("%1 has %2 dimensions (%3), not %4")
        .arg(QString::fromStdString(input.name))
        .arg(input.dims.size())
        .arg(declaredText(input))
        .arg(parts.size());
  for (int i = 0; i < parts.size(); ++i) {
    bool ok = false;
    const qlonglong v = parts[i].trimmed().toLongLong(&ok);
    if (!ok || v <= 0)
      return tr("%1: '%2' is not a positive size").arg(QString::fromStdString(input.name), parts[i]);
    if (input.rankKnown && input.dims[static_cast<size_t>(i)] >= 0 && input.dims[static_cast<size_t>(i)] != v)
      return tr("%1: dimension %2 is fixed at %3 by the model")
          .arg(QString::fromStdString(input.name))
          .arg(i)
          .arg(input.dims[static_cast<size_t>(i)]);
  }
  return {};
}

InputShapeDialog::InputShapeDialog(const QString& modelName, std::vector<DeclaredInput> inputs,
                                   const QStringList& previous, QWidget* parent)
    : QDialog(parent) {
  setWindowTitle(tr("Input shapes of %1").arg(modelName));
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(new QLabel(
      tr("The model has dynamic dimensions. Sizes to optimise for (the plan is made for these):"), this));
  auto* form = new QFormLayout;
  for (DeclaredInput& input : inputs) {
    if (!input.isDynamic()) continue;
    QString text = defaultText(input);
    const QString prefix = QString::fromStdString(input.name) + QLatin1Char('=');
    for (const QString& p : previous)
      if (p.startsWith(prefix) && validate(input, p.mid(prefix.size())).isEmpty()) text = p.mid(prefix.size());
    auto* edit = new QLineEdit(text, this);
    edit->setObjectName(QString::fromStdString(input.name));
    edit->setToolTip(tr("Declared: %1").arg(declaredText(input)));
    form->addRow(tr("%1 (%2)").arg(QString::fromStdString(input.name), declaredText(input)), edit);
    auto* dynamic = new QLabel(dynamicText(input), this);
    dynamic->setObjectName(QString::fromStdString(input.name) + QStringLiteral("_dynamic"));
    form->addRow(QString(), dynamic);
    edits_.push_back(edit);
    inputs_.push_back(std::move(input));
  }
  layout->addLayout(form);
  error_ = new QLabel(this);
  error_->setStyleSheet(QStringLiteral("color: #b00020"));
  layout->addWidget(error_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  connect(buttons, &QDialogButtonBox::accepted, this, &InputShapeDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  layout->addWidget(buttons);
}

QStringList InputShapeDialog::bindings() const {
  QStringList out;
  for (size_t i = 0; i < inputs_.size(); ++i)
    out << QString::fromStdString(inputs_[i].name) + QLatin1Char('=') + edits_[i]->text().trimmed();
  return out;
}

void InputShapeDialog::accept() {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    QString reason = validate(inputs_[i], edits_[i]->text());
    if (!reason.isEmpty()) {
      error_->setText(reason);
      edits_[i]->setFocus();
      return;
    }
  }
  QDialog::accept();
}

}  // namespace collage
