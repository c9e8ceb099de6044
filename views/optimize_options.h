// What the user chooses before an optimisation: backends, measurement
// database, time budget, per-kernel timeout, and whether the graph-level
// search follows the op-level one (with its own budget). OptimizeSettings is the plain
// value the window hands to the worker; the dialog edits it and remembers it
// in QSettings (group "optimize").
//
//   OptimizeSettings s = OptimizeSettings::load();
//   OptimizeOptionsDialog dialog(s, builtinNames, this);
//   if (dialog.exec() == QDialog::Accepted) { s = dialog.settings(); s.save(); }
//   s.applyTo(jobOptions);  worker->setTimeBudget(s.timeBudgetSeconds);
#pragma once

#include <QDialog>
#include <QMap>
#include <QString>
#include <QStringList>

class QCheckBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSettings;

namespace collage {

struct OptimizationJobOptions;

struct OptimizeSettings {
  QStringList backends;          // empty = every available backend
  // Empty = MeasurementDb::defaultPath(); or postgresql://..., never with a
  // password: libpq reads that from ~/.pgpass, PGPASSFILE or PGPASSWORD.
  QString dbPath;
  bool noDb = false;             // measure everything, store nothing
  double timeBudgetSeconds = 0;  // 0 = no budget
  double kernelTimeoutSeconds = 60;
  // The graph-level search (core/search/graph_level_search.h) after the
  // op-level plan (on by default, as in `collage optimize`), searching until
  // it saturates or for this long. The time budget above, when set, still
  // ends the whole optimisation, this search included.
  bool graphLevel = true;
  double graphLevelBudgetSeconds = 60;
  // The substitution search (docs/substitutions.md) before placement: off by
  // default, as in `collage optimize` (--substitutions).
  bool substitutions = false;

  // From / to QSettings (the application's default store when none given).
  // Neither keeps a database password: one a settings file holds (written
  // by an older version) is removed from the file as it is read.
  static OptimizeSettings load();
  static OptimizeSettings load(QSettings& settings);
  void save() const;
  void save(QSettings& settings) const;
  // Copies the database, timeout and graph-level choices into a job's
  // options (backends and the time budget are the window's and the worker's
  // to apply).
  void applyTo(OptimizationJobOptions& options) const;

  bool operator==(const OptimizeSettings&) const = default;

  // `db` without the password, when libpq reads it as a connection string
  // that holds one (ConnectionString::withoutPassword); else as it is.
  static QString withoutPassword(const QString& db);
  // What the user is told about `db`: that its password is not kept and
  // where libpq reads it from, or that libpq cannot read it as written;
  // empty when there is nothing to say.
  static QString databaseNote(const QString& db, bool* usable = nullptr);
};

class OptimizeOptionsDialog : public QDialog {
  Q_OBJECT
 public:
  // `available`: the backend names to offer (builtinBackendNames());
  // `defaults`: those an empty selection means (defaultBackendNames(); empty:
  // all of `available`). A backend offered but not a default (a
  // reduced-precision one) starts unchecked and is used only when checked.
  // `precisions`: each reduced precision the user may allow ("bf16") and
  // the offered backends that compute in it ("onednn_bf16"): one "Allow
  // bf16" box each, checking or unchecking those backends' boxes (as
  // `collage optimize --allow-precision bf16` adds them), and checked while
  // they all are.
  OptimizeOptionsDialog(const OptimizeSettings& initial, const QStringList& available,
                        QWidget* parent = nullptr, const QStringList& defaults = {},
                        const QMap<QString, QStringList>& precisions = {});

  // What the widgets say now (backends: the checked ones; all checked = empty;
  // the database without a password).
  OptimizeSettings settings() const;
  void setSettings(const OptimizeSettings& settings);

  // For tests and scripting: the widgets.
  QCheckBox* backendBox(const QString& name) const { return backendBoxes_.value(name); }
  QLineEdit* dbPathEdit() const { return dbPath_; }
  QCheckBox* noDbBox() const { return noDb_; }
  QLabel* dbNote() const { return dbNote_; }  // databaseNote() of the text typed
  QDoubleSpinBox* timeBudgetBox() const { return budget_; }
  QDoubleSpinBox* kernelTimeoutBox() const { return timeout_; }
  QCheckBox* graphLevelBox() const { return graphLevel_; }
  QDoubleSpinBox* graphLevelBudgetBox() const { return graphLevelBudget_; }
  QCheckBox* substitutionsBox() const { return substitutions_; }
  QCheckBox* precisionBox(const QString& precision) const { return precisionBoxes_.value(precision); }

  // accept() also saves the settings to QSettings.
  void accept() override;

 private:
  void browseDb();
  void updateEnabled();
  // Each precision box checked while all of its backends are.
  void syncPrecisionBoxes();

  QStringList available_;
  QStringList defaults_;
  QMap<QString, QCheckBox*> backendBoxes_;
  QLineEdit* dbPath_ = nullptr;
  QPushButton* browse_ = nullptr;
  QLabel* dbNote_ = nullptr;
  QCheckBox* noDb_ = nullptr;
  QDoubleSpinBox* budget_ = nullptr;
  QDoubleSpinBox* timeout_ = nullptr;
  QCheckBox* graphLevel_ = nullptr;
  QDoubleSpinBox* graphLevelBudget_ = nullptr;
  QCheckBox* substitutions_ = nullptr;
  QMap<QString, QStringList> precisions_;
  QMap<QString, QCheckBox*> precisionBoxes_;
  QPushButton* ok_ = nullptr;
};

}  // namespace collage
