#include "views/optimize_options.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QVBoxLayout>

#include "core/measure/connection_string.h"
#include "core/search/optimization_job.h"

namespace collage {

OptimizeSettings OptimizeSettings::load() {
  QSettings settings;
  return load(settings);
}

OptimizeSettings OptimizeSettings::load(QSettings& settings) {
  OptimizeSettings s;
  settings.beginGroup(QStringLiteral("optimize"));
  s.backends = settings.value(QStringLiteral("backends")).toStringList();
  s.dbPath = withoutPassword(settings.value(QStringLiteral("dbPath")).toString());
  if (s.dbPath != settings.value(QStringLiteral("dbPath")).toString())
    settings.setValue(QStringLiteral("dbPath"), s.dbPath);  // an older version kept the password
  s.noDb = settings.value(QStringLiteral("noDb"), false).toBool();
  s.timeBudgetSeconds = std::max(0.0, settings.value(QStringLiteral("timeBudgetSeconds"), 0.0).toDouble());
  s.kernelTimeoutSeconds = settings.value(QStringLiteral("kernelTimeoutSeconds"), 60.0).toDouble();
  if (!(s.kernelTimeoutSeconds > 0)) s.kernelTimeoutSeconds = 60;
  s.graphLevel = settings.value(QStringLiteral("graphLevel"), true).toBool();
  s.graphLevelBudgetSeconds =
      settings.value(QStringLiteral("graphLevelBudgetSeconds"), 60.0).toDouble();
  if (!(s.graphLevelBudgetSeconds > 0)) s.graphLevelBudgetSeconds = 60;
  s.substitutions = settings.value(QStringLiteral("substitutions"), false).toBool();
  settings.endGroup();
  return s;
}

void OptimizeSettings::save() const {
  QSettings settings;
  save(settings);
}

void OptimizeSettings::save(QSettings& settings) const {
  settings.beginGroup(QStringLiteral("optimize"));
  settings.setValue(QStringLiteral("backends"), backends);
  settings.setValue(QStringLiteral("dbPath"), withoutPassword(dbPath));
  settings.setValue(QStringLiteral("noDb"), noDb);
  settings.setValue(QStringLiteral("timeBudgetSeconds"), timeBudgetSeconds);
  settings.setValue(QStringLiteral("kernelTimeoutSeconds"), kernelTimeoutSeconds);
  settings.setValue(QStringLiteral("graphLevel"), graphLevel);
  settings.setValue(QStringLiteral("graphLevelBudgetSeconds"), graphLevelBudgetSeconds);
  settings.setValue(QStringLiteral("substitutions"), substitutions);
  settings.endGroup();
}

QString OptimizeSettings::withoutPassword(const QString& db) {
  const ConnectionString c(db.toStdString());
  // A file name with '=' in it is no business of libpq's.
  if (!c.hasPassword() || !(c.isUri() || c.parses())) return db;
  return QString::fromStdString(c.withoutPassword());
}

QString OptimizeSettings::databaseNote(const QString& db, bool* usable) {
  if (usable) *usable = true;
  const ConnectionString c(db.trimmed().toStdString());
  if (!(c.isUri() || (c.parses() && c.hasPassword()))) return {};
  if (!c.parses() || c.ambiguous()) {
    if (usable) *usable = false;
    return QObject::tr("libpq cannot read this URL as written: an '@' or '/' in the user name or "
                       "password must be percent-encoded (%40, %2F); better, leave the password out "
                       "of it: %1.")
        .arg(QString::fromUtf8(ConnectionString::passwordAdvice()));
  }
  if (!c.hasPassword()) return {};
  return QObject::tr("The password is not saved, nor used: %1.")
      .arg(QString::fromUtf8(ConnectionString::passwordAdvice()));
}

void OptimizeSettings::applyTo(OptimizationJobOptions& options) const {
  options.dbPath = dbPath.toStdString();
  options.noDb = noDb;
  options.timeoutSeconds = kernelTimeoutSeconds;
  options.graphLevel = graphLevel;
  options.graphLevelOptions.evolution.budgetSeconds = graphLevelBudgetSeconds;
  options.substitutions = substitutions;
}

OptimizeOptionsDialog::OptimizeOptionsDialog(const OptimizeSettings& initial,
                                             const QStringList& available, QWidget* parent,
                                             const QStringList& defaults,
                                             const QMap<QString, QStringList>& precisions)
    : QDialog(parent), available_(available), defaults_(defaults.isEmpty() ? available : defaults) {
  setWindowTitle(tr("Optimize"));
  auto* backends = new QGroupBox(tr("Backends"), this);
  auto* backendLayout = new QHBoxLayout(backends);
  for (const QString& name : available_) {
    auto* box = new QCheckBox(name, backends);
    connect(box, &QCheckBox::toggled, this, &OptimizeOptionsDialog::updateEnabled);
    connect(box, &QCheckBox::toggled, this, &OptimizeOptionsDialog::syncPrecisionBoxes);
    backendLayout->addWidget(box);
    backendBoxes_.insert(name, box);
  }
  backendLayout->addStretch();

  // Reduced precision is the user's trade, never the search's: allowing it
  // adds the backends that compute in it, and the measurement then chooses
  // group by group (docs/precision.md).
  auto* precisionRow = new QHBoxLayout;
  for (auto it = precisions.begin(); it != precisions.end(); ++it) {
    QStringList offered;
    for (const QString& name : it.value())
      if (backendBoxes_.contains(name)) offered << name;
    if (offered.isEmpty()) continue;
    precisions_.insert(it.key(), offered);
    auto* box = new QCheckBox(tr("Allow %1").arg(it.key()), this);
    box->setToolTip(tr("Let the plan run groups in %1 where that measures faster (%2); the plan "
                       "is then verified within the tolerance those backends declare")
                        .arg(it.key(), offered.join(QStringLiteral(", "))));
    const QString precision = it.key();
    connect(box, &QCheckBox::clicked, this, [this, precision](bool on) {
      for (const QString& name : precisions_.value(precision)) backendBoxes_.value(name)->setChecked(on);
    });
    precisionRow->addWidget(box);
    precisionBoxes_.insert(precision, box);
  }
  precisionRow->addStretch();

  dbPath_ = new QLineEdit(this);
  dbPath_->setPlaceholderText(tr("default database"));
  dbPath_->setToolTip(
      tr("A SQLite file, or a team's shared store: postgresql://user@host/db "
         "(the default file is then its cache; docs/shared-measurements.md)"));
  browse_ = new QPushButton(tr("Browse..."), this);
  connect(browse_, &QPushButton::clicked, this, &OptimizeOptionsDialog::browseDb);
  auto* dbRow = new QHBoxLayout;
  dbRow->addWidget(dbPath_, 1);
  dbRow->addWidget(browse_);
  // Said as the URL is typed: a password in it is dropped (settings files
  // are plain text), and where libpq reads the password instead.
  dbNote_ = new QLabel(this);
  dbNote_->setWordWrap(true);
  dbNote_->setVisible(false);
  connect(dbPath_, &QLineEdit::textChanged, this, &OptimizeOptionsDialog::updateEnabled);
  noDb_ = new QCheckBox(tr("No database (measure everything, store nothing)"), this);
  connect(noDb_, &QCheckBox::toggled, this, &OptimizeOptionsDialog::updateEnabled);

  budget_ = new QDoubleSpinBox(this);
  budget_->setRange(0, 7 * 24 * 3600);
  budget_->setDecimals(0);
  budget_->setSuffix(tr(" s"));
  budget_->setSpecialValueText(tr("none"));  // shown for 0
  budget_->setToolTip(tr("Stop the optimisation after this long and keep the best plan so far"));
  timeout_ = new QDoubleSpinBox(this);
  timeout_->setRange(1, 3600);
  timeout_->setDecimals(0);
  timeout_->setSuffix(tr(" s"));
  timeout_->setToolTip(tr("A kernel that takes longer to measure counts as timed out"));

  graphLevel_ = new QCheckBox(tr("Graph-level search"), this);
  graphLevel_->setToolTip(tr("After the op-level plan, search for regions to hand whole to a "
                             "graph library, measuring each candidate plan end to end; regions "
                             "honour your overrides"));
  connect(graphLevel_, &QCheckBox::toggled, this, &OptimizeOptionsDialog::updateEnabled);
  graphLevelBudget_ = new QDoubleSpinBox(this);
  graphLevelBudget_->setRange(5, 24 * 3600);
  graphLevelBudget_->setDecimals(0);
  graphLevelBudget_->setSuffix(tr(" s"));
  graphLevelBudget_->setToolTip(tr("How long the graph-level search may run; Cancel stops it "
                                   "sooner and keeps its best plan"));
  auto* graphLevelRow = new QHBoxLayout;
  graphLevelRow->addWidget(graphLevel_);
  graphLevelRow->addWidget(new QLabel(tr("for"), this));
  graphLevelRow->addWidget(graphLevelBudget_);
  graphLevelRow->addStretch();

  substitutions_ = new QCheckBox(tr("Search graph substitutions first"), this);
  substitutions_->setToolTip(tr("Rewrite the graph (merge sibling MatMul/Gemm/Conv, collapse and move "
                                "layout ops, ...) where the placement it allows is cheaper; each "
                                "rewrite is checked equivalent on the reference executor, and the "
                                "rewritten nodes are outlined in violet"));

  auto* form = new QFormLayout;
  form->addRow(tr("Measurement database:"), dbRow);
  form->addRow(QString(), dbNote_);
  form->addRow(QString(), noDb_);
  form->addRow(tr("Time budget:"), budget_);
  form->addRow(tr("Per-kernel timeout:"), timeout_);
  form->addRow(QString(), graphLevelRow);
  form->addRow(QString(), substitutions_);
  if (!precisionBoxes_.isEmpty())
    form->addRow(tr("Reduced precision:"), precisionRow);
  else
    delete precisionRow;

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  ok_ = buttons->button(QDialogButtonBox::Ok);
  ok_->setText(tr("Optimize"));
  connect(buttons, &QDialogButtonBox::accepted, this, &OptimizeOptionsDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &OptimizeOptionsDialog::reject);

  auto* layout = new QVBoxLayout(this);
  layout->addWidget(backends);
  layout->addLayout(form);
  layout->addWidget(buttons);
  setSettings(initial);
}

void OptimizeOptionsDialog::setSettings(const OptimizeSettings& s) {
  for (auto it = backendBoxes_.begin(); it != backendBoxes_.end(); ++it)
    (*it)->setChecked(s.backends.isEmpty() ? defaults_.contains(it.key())
                                           : s.backends.contains(it.key()));
  dbPath_->setText(s.dbPath);
  noDb_->setChecked(s.noDb);
  budget_->setValue(s.timeBudgetSeconds);
  timeout_->setValue(s.kernelTimeoutSeconds);
  graphLevel_->setChecked(s.graphLevel);
  graphLevelBudget_->setValue(s.graphLevelBudgetSeconds);
  substitutions_->setChecked(s.substitutions);
  updateEnabled();
}

OptimizeSettings OptimizeOptionsDialog::settings() const {
  OptimizeSettings s;
  QStringList checked;
  for (const QString& name : available_)  // in the offered (priority) order
    if (backendBoxes_.value(name)->isChecked()) checked << name;
  // The default set checked means "the default backends", which stays right
  // when one is added.
  if (checked != defaults_) s.backends = checked;
  s.dbPath = OptimizeSettings::withoutPassword(dbPath_->text().trimmed());
  s.noDb = noDb_->isChecked();
  s.timeBudgetSeconds = budget_->value();
  s.kernelTimeoutSeconds = timeout_->value();
  s.graphLevel = graphLevel_->isChecked();
  s.graphLevelBudgetSeconds = graphLevelBudget_->value();
  s.substitutions = substitutions_->isChecked();
  return s;
}

void OptimizeOptionsDialog::accept() {
  settings().save();
  QDialog::accept();
}

void OptimizeOptionsDialog::browseDb() {
  QString path = QFileDialog::getSaveFileName(this, tr("Measurement database"), dbPath_->text(),
                                              tr("SQLite databases (*.sqlite *.db);;All files (*)"),
                                              nullptr, QFileDialog::DontConfirmOverwrite);
  if (!path.isEmpty()) dbPath_->setText(path);
}

void OptimizeOptionsDialog::updateEnabled() {
  dbPath_->setEnabled(!noDb_->isChecked());
  browse_->setEnabled(!noDb_->isChecked());
  graphLevelBudget_->setEnabled(graphLevel_->isChecked());
  bool any = false;
  for (QCheckBox* box : backendBoxes_) any = any || box->isChecked();
  bool usable = true;
  const QString note = noDb_->isChecked() ? QString() : OptimizeSettings::databaseNote(dbPath_->text(), &usable);
  dbNote_->setText(note);
  dbNote_->setVisible(!note.isEmpty());
  ok_->setEnabled(any && usable);  // no backend, no plan; no URL libpq misreads
}

void OptimizeOptionsDialog::syncPrecisionBoxes() {
  for (auto it = precisionBoxes_.begin(); it != precisionBoxes_.end(); ++it) {
    bool all = true;
    for (const QString& name : precisions_.value(it.key()))
      all = all && backendBoxes_.value(name)->isChecked();
    (*it)->setChecked(all);
  }
}

}  // namespace collage
