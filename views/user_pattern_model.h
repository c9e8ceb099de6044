// The user's own patterns (UserPatternStore) as a table: backend, name,
// pattern text, and an "enabled" checkbox. The model is a snapshot of a store:
// toggling the checkbox updates the row at once and emits enabledToggled(), and
// whoever owns the store (the pattern editor) persists the change and calls
// setStore() again. The model itself never touches the file, so tests and the
// editor decide when I/O happens and what to do when it fails.
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <QVector>

namespace collage {

class UserPatternStore;

struct UserPatternRow {
  QString backend;
  QString name;
  QString text;
  bool enabled = true;
};

class UserPatternModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Backend, Name, Text, Enabled, ColumnCount };

  explicit UserPatternModel(QObject* parent = nullptr);

  // Rows for every user pattern of `store`, by backend then in file order.
  void setStore(const UserPatternStore& store);
  void clear();
  const UserPatternRow& row(int r) const { return rows_.at(r); }
  // The row of `backend`'s pattern `name`, or -1.
  int findRow(const QString& backend, const QString& name) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 signals:
  // The user ticked or cleared a row's checkbox; the row already shows it.
  void enabledToggled(QString backend, QString name, bool enabled);

 private:
  bool isRow(const QModelIndex& index) const;

  QVector<UserPatternRow> rows_;
};

}  // namespace collage
