#include "views/user_pattern_model.h"

#include <QFont>

#include "core/patterns/backend_spec.h"

namespace collage {

UserPatternModel::UserPatternModel(QObject* parent) : QAbstractTableModel(parent) {}

void UserPatternModel::setStore(const UserPatternStore& store) {
  beginResetModel();
  rows_.clear();
  for (const std::string& backend : store.backends())
    for (const UserPatternStore::Entry& e : store.patterns(backend))
      rows_.push_back(UserPatternRow{QString::fromStdString(backend), QString::fromStdString(e.name),
                                     QString::fromStdString(e.text),
                                     !store.isDisabled(backend, e.name)});
  endResetModel();
}

void UserPatternModel::clear() {
  beginResetModel();
  rows_.clear();
  endResetModel();
}

int UserPatternModel::findRow(const QString& backend, const QString& name) const {
  for (int r = 0; r < rows_.size(); ++r)
    if (rows_[r].backend == backend && rows_[r].name == name) return r;
  return -1;
}

bool UserPatternModel::isRow(const QModelIndex& index) const {
  return index.isValid() && index.model() == this && !index.parent().isValid() &&
         index.row() < rows_.size() && index.column() < ColumnCount;
}

int UserPatternModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : rows_.size();
}

int UserPatternModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant UserPatternModel::data(const QModelIndex& index, int role) const {
  if (!isRow(index)) return {};
  const UserPatternRow& row = rows_[index.row()];
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case Backend: return row.backend;
      case Name: return row.name;
      case Text: return row.text;
      case Enabled: return row.enabled ? tr("enabled") : tr("disabled");
    }
  } else if (role == Qt::CheckStateRole && index.column() == Enabled) {
    return row.enabled ? Qt::Checked : Qt::Unchecked;
  } else if (role == Qt::ToolTipRole) {
    return tr("%1 pattern '%2': %3").arg(row.backend, row.name, row.text);
  } else if (role == Qt::FontRole && index.column() == Text) {
    QFont font(QStringLiteral("monospace"));
    font.setStyleHint(QFont::TypeWriter);
    return font;
  }
  return {};
}

bool UserPatternModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!isRow(index) || role != Qt::CheckStateRole || index.column() != Enabled)
    return false;
  UserPatternRow& row = rows_[index.row()];
  bool enabled = value.toInt() == Qt::Checked;
  if (enabled == row.enabled) return true;
  row.enabled = enabled;
  emit dataChanged(index, index, {Qt::CheckStateRole, Qt::DisplayRole});
  // Copies: the receiver may reset the model.
  UserPatternRow copy = row;
  emit enabledToggled(copy.backend, copy.name, copy.enabled);
  return true;
}

Qt::ItemFlags UserPatternModel::flags(const QModelIndex& index) const {
  if (!isRow(index)) return Qt::NoItemFlags;
  Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemNeverHasChildren;
  if (index.column() == Enabled) f |= Qt::ItemIsUserCheckable;
  return f;
}

QVariant UserPatternModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Backend: return tr("Backend");
    case Name: return tr("Name");
    case Text: return tr("Pattern");
    case Enabled: return tr("Enabled");
  }
  return {};
}

}  // namespace collage
