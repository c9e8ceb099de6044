#include "views/pattern_editor.h"

#include <QComboBox>
#include <QElapsedTimer>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTabWidget>
#include <QTableView>
#include <QTextBlock>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>

#include "core/ir/op_kind.h"
#include "core/patterns/pattern_matcher.h"
#include "core/patterns/pattern_parser.h"
#include "core/patterns/pattern_rule.h"
#include "views/user_pattern_model.h"

namespace collage {
namespace {

constexpr int kParseDelayMs = 150;
// More rows than anyone reads; the count and the highlights still cover all.
constexpr int kMaxListedMatches = 2000;

QString qs(const std::string& s) { return QString::fromStdString(s); }

// PatternError's line and column (1-based; the column counts bytes of the
// UTF-8 text) as an index into the QString the user typed.
int positionOf(const QTextDocument* doc, int line, int column) {
  QTextBlock block = doc->findBlockByNumber(std::max(0, line - 1));
  if (!block.isValid()) return std::max(0, doc->characterCount() - 1);
  QByteArray utf8 = block.text().toUtf8();
  int chars = QString::fromUtf8(utf8.left(std::max(0, column - 1))).size();
  return block.position() + std::min(chars, block.text().size());
}

QString join(const std::vector<std::string>& items) {
  QStringList out;
  for (const auto& i : items) out << qs(i);
  return out.join(QStringLiteral(", "));
}

PatternMatchResult runMatcher(quint64 generation, std::shared_ptr<const Graph> graph,
                              std::shared_ptr<const PatternMatcher> matcher, Pattern pattern) {
  PatternMatchResult r;
  r.generation = generation;
  QElapsedTimer timer;
  timer.start();
  try {
    std::vector<PatternMatch> found = matcher->findMatches(pattern);
    r.matches.reserve(static_cast<int>(found.size()));
    for (const PatternMatch& m : found) {
      QVector<NodeId> nodes;
      QStringList ops;
      m.nodes.forEach([&](NodeId n) {
        nodes.push_back(n);
        ops << qs(graph->node(n).op);
      });
      r.matches.push_back(nodes);
      if (r.labels.size() < kMaxListedMatches)
        r.labels << QStringLiteral("%1 at '%2' (#%3)")
                        .arg(ops.join(QLatin1Char('+')), qs(graph->node(m.exit).name))
                        .arg(m.exit);
    }
  } catch (const std::exception& e) {
    r.error = qs(e.what());
  }
  r.milliseconds = static_cast<double>(timer.nsecsElapsed()) / 1e6;
  return r;
}

}  // namespace

PatternEditor::PatternEditor(QWidget* parent)
    : QWidget(parent), store_(UserPatternStore::defaultPath()) {
  qRegisterMetaType<QVector<NodeId>>("QVector<collage::NodeId>");
  qRegisterMetaType<QVector<QVector<NodeId>>>("QVector<QVector<collage::NodeId>>");
  buildUi();
  parseTimer_.setSingleShot(true);
  parseTimer_.setInterval(kParseDelayMs);
  connect(&parseTimer_, &QTimer::timeout, this, &PatternEditor::parseText);
  connect(&matchWatcher_, &QFutureWatcher<PatternMatchResult>::finished, this,
          &PatternEditor::onMatchesReady);
  reloadUserPatterns();
  parseText();
}

PatternEditor::~PatternEditor() {
  // A run still in flight owns its graph and matcher (shared), so waiting is
  // not needed for safety; it only keeps the pool from outliving the app.
  matchWatcher_.waitForFinished();
}

void PatternEditor::buildUi() {
  backendBox_ = new QComboBox(this);
  backendBox_->setObjectName(QStringLiteral("backend"));
  backendBox_->setToolTip(tr("The backend that can run this pattern as one kernel"));
  nameEdit_ = new QLineEdit(this);
  nameEdit_->setObjectName(QStringLiteral("name"));
  nameEdit_->setPlaceholderText(tr("pattern name, e.g. conv_sigmoid"));
  registerButton_ = new QPushButton(tr("Register"), this);
  registerButton_->setObjectName(QStringLiteral("register"));
  registerButton_->setToolTip(tr("Save the pattern in %1 for the chosen backend")
                                  .arg(userPatternPath()));
  auto* top = new QHBoxLayout;
  top->addWidget(backendBox_);
  top->addWidget(nameEdit_, 1);
  top->addWidget(registerButton_);

  textEdit_ = new QPlainTextEdit(this);
  textEdit_->setObjectName(QStringLiteral("pattern"));
  textEdit_->setPlaceholderText(tr("Relu(Conv(*, const, ?const))"));
  QFont mono(QStringLiteral("monospace"));
  mono.setStyleHint(QFont::TypeWriter);
  textEdit_->setFont(mono);
  textEdit_->setTabChangesFocus(true);
  textEdit_->setMaximumHeight(textEdit_->fontMetrics().lineSpacing() * 6);

  statusLabel_ = new QLabel(this);
  statusLabel_->setObjectName(QStringLiteral("status"));
  statusLabel_->setWordWrap(true);
  statusLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  matchList_ = new QListWidget(this);
  matchList_->setObjectName(QStringLiteral("matches"));

  userModel_ = new UserPatternModel(this);
  userTable_ = new QTableView(this);
  userTable_->setObjectName(QStringLiteral("userPatterns"));
  userTable_->setModel(userModel_);
  userTable_->setSelectionBehavior(QAbstractItemView::SelectRows);
  userTable_->setSelectionMode(QAbstractItemView::SingleSelection);
  userTable_->horizontalHeader()->setSectionResizeMode(UserPatternModel::Text, QHeaderView::Stretch);
  userTable_->verticalHeader()->hide();
  toggleButton_ = new QPushButton(tr("Disable"), this);
  toggleButton_->setObjectName(QStringLiteral("toggle"));
  removeButton_ = new QPushButton(tr("Remove"), this);
  removeButton_->setObjectName(QStringLiteral("remove"));
  auto* userButtons = new QHBoxLayout;
  userButtons->addStretch(1);
  userButtons->addWidget(toggleButton_);
  userButtons->addWidget(removeButton_);
  auto* userPage = new QWidget(this);
  auto* userLayout = new QVBoxLayout(userPage);
  userLayout->setContentsMargins(0, 0, 0, 0);
  userLayout->addWidget(userTable_);
  userLayout->addLayout(userButtons);

  builtinTree_ = new QTreeWidget(this);
  builtinTree_->setObjectName(QStringLiteral("builtin"));
  builtinTree_->setColumnCount(2);
  builtinTree_->setHeaderLabels({tr("Item"), tr("Definition")});
  builtinTree_->setRootIsDecorated(true);

  tabs_ = new QTabWidget(this);
  tabs_->addTab(matchList_, tr("Matches"));
  tabs_->addTab(userPage, tr("My patterns"));
  tabs_->addTab(builtinTree_, tr("Built-in"));

  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addWidget(textEdit_);
  layout->addWidget(statusLabel_);
  layout->addWidget(tabs_, 1);

  connect(textEdit_, &QPlainTextEdit::textChanged, this, [this] {
    ++generation_;  // whatever is being matched now is for an older text
    parseTimer_.start();
  });
  connect(registerButton_, &QPushButton::clicked, this, &PatternEditor::registerPattern);
  connect(nameEdit_, &QLineEdit::returnPressed, this, &PatternEditor::registerPattern);
  connect(backendBox_, QOverload<int>::of(&QComboBox::currentIndexChanged), this,
          &PatternEditor::refreshBuiltinView);
  connect(matchList_, &QListWidget::itemClicked, this, &PatternEditor::onMatchItemActivated);
  connect(matchList_, &QListWidget::currentItemChanged, this,
          [this](QListWidgetItem* item) { onMatchItemActivated(item); });
  connect(userTable_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &PatternEditor::onUserSelectionChanged);
  connect(userModel_, &QAbstractItemModel::modelReset, this,
          &PatternEditor::onUserSelectionChanged);
  connect(userModel_, &UserPatternModel::enabledToggled, this,
          [this](const QString& backend, const QString& name, bool enabled) {
            if (!setPatternEnabled(backend, name, enabled))
              // Put the checkbox back as the file has it, once the view is done with it.
              QTimer::singleShot(0, this, &PatternEditor::refreshUserPatterns);
          });
  connect(toggleButton_, &QPushButton::clicked, this, &PatternEditor::onToggleClicked);
  connect(removeButton_, &QPushButton::clicked, this, &PatternEditor::onRemoveClicked);
  connect(builtinTree_, &QTreeWidget::itemChanged, this, [this](QTreeWidgetItem* item, int column) {
    // Only pattern rows are checkable: their check box disables the pattern.
    if (column != 0 || !(item->flags() & Qt::ItemIsUserCheckable)) return;
    QString name = item->data(0, Qt::UserRole).toString();
    bool enabled = item->checkState(0) == Qt::Checked;
    // The item is still inside its own setData: rebuild the tree afterwards.
    editingBuiltinTree_ = true;
    setPatternEnabled(currentBackend(), name, enabled);
    editingBuiltinTree_ = false;
    QTimer::singleShot(0, this, &PatternEditor::refreshBuiltinView);
  });
  onUserSelectionChanged();
}

// ---------------------------------------------------------------------------
// Inputs.

void PatternEditor::setGraph(std::shared_ptr<const Graph> graph) {
  ++generation_;
  graph_ = std::move(graph);
  matcher_ = graph_ ? std::make_shared<const PatternMatcher>(*graph_) : nullptr;
  clearMatches();
  if (pattern_) startMatching();
  else parseText();
}

void PatternEditor::setBackendSpecs(std::vector<BackendSpec> specs,
                                    const QStringList& codeRuleBackends) {
  const QString current = currentBackend();
  specs_ = std::move(specs);
  codeRuleBackends_ = QSet<QString>(codeRuleBackends.begin(), codeRuleBackends.end());
  {
    QSignalBlocker block(backendBox_);
    backendBox_->clear();
    for (const BackendSpec& s : specs_) backendBox_->addItem(qs(s.name));
    int keep = backendBox_->findText(current);
    backendBox_->setCurrentIndex(keep >= 0 ? keep : (backendBox_->count() ? 0 : -1));
  }
  refreshBuiltinView();
}

QStringList PatternEditor::backendNames() const {
  QStringList names;
  for (const BackendSpec& s : specs_) names << qs(s.name);
  return names;
}

void PatternEditor::setUserPatternPath(const QString& path) {
  store_ = UserPatternStore(path.toStdString());
  registerButton_->setToolTip(tr("Save the pattern in %1 for the chosen backend").arg(path));
  reloadUserPatterns();
}

QString PatternEditor::userPatternPath() const { return qs(store_.path()); }

QString PatternEditor::currentBackend() const { return backendBox_->currentText(); }

bool PatternEditor::setCurrentBackend(const QString& name) {
  int i = backendBox_->findText(name);
  if (i < 0) return false;
  backendBox_->setCurrentIndex(i);
  return true;
}

QString PatternEditor::patternName() const { return nameEdit_->text(); }
void PatternEditor::setPatternName(const QString& name) { nameEdit_->setText(name); }
QString PatternEditor::patternText() const { return textEdit_->toPlainText(); }
void PatternEditor::setPatternText(const QString& text) { textEdit_->setPlainText(text); }
QString PatternEditor::statusText() const { return statusLabel_->text(); }

const BackendSpec* PatternEditor::findSpec(const QString& name) const {
  for (const BackendSpec& s : specs_)
    if (qs(s.name) == name) return &s;
  return nullptr;
}

// ---------------------------------------------------------------------------
// Parsing and matching.

void PatternEditor::reparseNow() { parseText(); }

void PatternEditor::parseText() {
  parseTimer_.stop();
  ++generation_;
  pattern_.reset();
  errorText_.clear();
  errorPosition_ = -1;
  textEdit_->setExtraSelections({});
  const QString text = textEdit_->toPlainText();
  if (text.trimmed().isEmpty()) {
    clearMatches();
    showStatus(tr("Type a pattern, e.g. Relu(Conv(*, const, ?const)); see docs/patterns.md"), false);
    return;
  }
  try {
    // Syntax first, then op names and attributes: both point at the spot.
    Pattern pattern = parsePattern(text.toStdString());
    validatePattern(pattern);
    pattern_ = std::move(pattern);
  } catch (const PatternError& e) {
    clearMatches();
    showError(qs(e.what()), positionOf(textEdit_->document(), e.line(), e.column()));
    return;
  } catch (const std::exception& e) {
    clearMatches();
    showError(qs(e.what()), -1);
    return;
  }
  startMatching();
}

void PatternEditor::startMatching() {
  if (!pattern_) return;
  if (!matcher_) {
    clearMatches();
    showStatus(tr("Valid pattern; open a model to see where it matches"), false);
    return;
  }
  matchCount_ = -1;
  matchWatcher_.setFuture(
      QtConcurrent::run(runMatcher, generation_, graph_, matcher_, *pattern_));
}

void PatternEditor::onMatchesReady() {
  PatternMatchResult r = matchWatcher_.result();
  if (r.generation != generation_) return;  // the text or graph changed meanwhile
  if (!r.error.isEmpty()) {
    clearMatches();
    showError(tr("Matching failed: %1").arg(r.error), -1);
    return;
  }
  matches_ = std::move(r.matches);
  matchCount_ = matches_.size();
  {
    QSignalBlocker block(matchList_);
    matchList_->clear();
    for (int i = 0; i < r.labels.size(); ++i) {
      auto* item = new QListWidgetItem(r.labels[i], matchList_);
      item->setData(Qt::UserRole, i);
    }
    if (matchCount_ > r.labels.size())
      new QListWidgetItem(tr("... and %1 more").arg(matchCount_ - r.labels.size()), matchList_);
  }
  QString where = graph_->name.empty() ? tr("the model") : qs(graph_->name);
  showStatus((matchCount_ == 1 ? tr("1 match in %1").arg(where)
                               : tr("%1 matches in %2").arg(matchCount_).arg(where)) +
                 tr(" (%1 ms)").arg(r.milliseconds, 0, 'f', 1),
             false);
  emit matchesChanged(matches_);
}

void PatternEditor::clearMatches() {
  matchCount_ = -1;
  {
    QSignalBlocker block(matchList_);
    matchList_->clear();
  }
  if (!matches_.isEmpty()) {
    matches_.clear();
    emit matchesChanged(matches_);
  }
}

void PatternEditor::onMatchItemActivated(QListWidgetItem* item) {
  if (!item) return;
  QVariant index = item->data(Qt::UserRole);
  if (!index.isValid()) return;
  int i = index.toInt();
  if (i >= 0 && i < matches_.size()) emit matchActivated(matches_[i]);
}

void PatternEditor::showError(const QString& message, int position) {
  errorText_ = message;
  errorPosition_ = position;
  showStatus(message, true);
  if (position < 0) return;
  QTextCursor cursor(textEdit_->document());
  cursor.setPosition(position);
  // An error at the end of a line (a missing ')') has no character under it:
  // mark the one before.
  if (cursor.atBlockEnd() && !cursor.atBlockStart()) cursor.movePosition(QTextCursor::PreviousCharacter);
  cursor.movePosition(QTextCursor::NextCharacter, QTextCursor::KeepAnchor);
  QTextEdit::ExtraSelection mark;
  mark.cursor = cursor;
  mark.format.setUnderlineStyle(QTextCharFormat::WaveUnderline);
  mark.format.setUnderlineColor(Qt::red);
  mark.format.setBackground(QColor(255, 220, 220));
  mark.format.setToolTip(message);
  textEdit_->setExtraSelections({mark});
}

void PatternEditor::showStatus(const QString& message, bool isError) {
  statusLabel_->setText(message);
  statusLabel_->setStyleSheet(isError ? QStringLiteral("color: #b00020;") : QString());
}

// ---------------------------------------------------------------------------
// The user pattern file.

void PatternEditor::reloadUserPatterns() {
  try {
    store_.load();
  } catch (const std::exception& e) {
    // Keep what was shown; say why the file is not used.
    showStatus(tr("Cannot read %1: %2").arg(userPatternPath(), qs(e.what())), true);
    errorText_ = statusLabel_->text();
    store_ = UserPatternStore(store_.path());
  }
  refreshUserPatterns();
  refreshBuiltinView();
}

bool PatternEditor::loadStoreForChange() {
  try {
    store_.load();
    return true;
  } catch (const std::exception& e) {
    errorText_ = tr("Not saved: %1 does not load (%2); fix or move the file first")
                     .arg(userPatternPath(), qs(e.what()));
    errorPosition_ = -1;
    showStatus(errorText_, true);
    store_ = UserPatternStore(store_.path());
    return false;
  }
}

bool PatternEditor::registerPattern() {
  const QString backend = currentBackend();
  const QString name = nameEdit_->text().trimmed();
  const QString text = textEdit_->toPlainText();
  auto refuse = [this](const QString& message) {
    errorText_ = message;
    errorPosition_ = -1;
    showStatus(message, true);
    return false;
  };
  if (backend.isEmpty()) return refuse(tr("Not registered: choose a backend first"));
  if (name.isEmpty()) return refuse(tr("Not registered: give the pattern a name"));
  if (text.trimmed().isEmpty()) return refuse(tr("Not registered: the pattern is empty"));
  try {
    parseValidPattern(text.toStdString());
  } catch (const PatternError& e) {
    showError(tr("Not registered: %1").arg(qs(e.what())),
              positionOf(textEdit_->document(), e.line(), e.column()));
    return false;
  }
  // A clash with a built-in name would make every later spec load fail.
  if (const BackendSpec* spec = findSpec(backend))
    for (const PatternEntry& p : spec->patterns)
      if (!p.userDefined && qs(p.name) == name)
        return refuse(tr("Not registered: %1 already has a built-in pattern '%2' (%3:%4); "
                         "choose another name")
                          .arg(backend, name, qs(p.file))
                          .arg(p.line));
  if (!loadStoreForChange()) return false;
  for (const UserPatternStore::Entry& e : store_.patterns(backend.toStdString()))
    if (qs(e.name) == name)
      return refuse(tr("Not registered: %1 already has a pattern '%2' of yours; remove it first "
                       "or choose another name")
                        .arg(backend, name));
  try {
    store_.add(backend.toStdString(), name.toStdString(), text.toStdString());
    // A name once disabled and removed must not come back disabled.
    store_.setEnabled(backend.toStdString(), name.toStdString(), true);
    store_.save();
  } catch (const std::exception& e) {
    return changeFailed(tr("Not registered: %1").arg(qs(e.what())));
  }
  errorPosition_ = -1;
  return changeDone(tr("Registered '%1' for %2 in %3; the next optimisation uses it")
                        .arg(name, backend, userPatternPath()));
}

bool PatternEditor::removePattern(const QString& backend, const QString& name) {
  if (!loadStoreForChange()) return false;
  try {
    if (!store_.remove(backend.toStdString(), name.toStdString())) {
      errorText_ = tr("%1 has no pattern '%2' of yours").arg(backend, name);
      showStatus(errorText_, true);
      return false;
    }
    store_.setEnabled(backend.toStdString(), name.toStdString(), true);
    store_.save();
  } catch (const std::exception& e) {
    return changeFailed(tr("Not removed: %1").arg(qs(e.what())));
  }
  return changeDone(tr("Removed %1 pattern '%2'").arg(backend, name));
}

bool PatternEditor::setPatternEnabled(const QString& backend, const QString& name, bool enabled) {
  if (!loadStoreForChange()) return false;
  bool known = false;
  for (const UserPatternStore::Entry& e : store_.patterns(backend.toStdString()))
    known = known || qs(e.name) == name;
  if (const BackendSpec* spec = findSpec(backend)) known = known || spec->findPattern(name.toStdString());
  if (!known) {
    errorText_ = tr("%1 has no pattern '%2'").arg(backend, name);
    showStatus(errorText_, true);
    return false;
  }
  try {
    store_.setEnabled(backend.toStdString(), name.toStdString(), enabled);
    store_.save();
  } catch (const std::exception& e) {
    return changeFailed(tr("Not saved: %1").arg(qs(e.what())));
  }
  return changeDone(enabled ? tr("Enabled %1 pattern '%2'").arg(backend, name)
                            : tr("Disabled %1 pattern '%2'").arg(backend, name));
}

bool PatternEditor::changeFailed(const QString& message) {
  // The file may have been changed under us: show what it holds now.
  reloadUserPatterns();
  errorText_ = message;
  showStatus(message, true);
  return false;
}

bool PatternEditor::changeDone(const QString& message) {
  refreshUserPatterns();
  refreshBuiltinView();
  errorText_.clear();
  showStatus(message, false);
  emit patternsChanged();
  return true;
}

void PatternEditor::refreshUserPatterns() {
  // Keep the selected row selected across the reset.
  QString backend, name;
  QModelIndexList rows = userTable_->selectionModel()->selectedRows();
  if (!rows.isEmpty()) {
    backend = userModel_->row(rows.front().row()).backend;
    name = userModel_->row(rows.front().row()).name;
  }
  userModel_->setStore(store_);
  int r = userModel_->findRow(backend, name);
  if (r >= 0) userTable_->selectRow(r);
  onUserSelectionChanged();
}

void PatternEditor::onUserSelectionChanged() {
  QModelIndexList rows = userTable_->selectionModel()->selectedRows();
  bool have = !rows.isEmpty();
  toggleButton_->setEnabled(have);
  removeButton_->setEnabled(have);
  toggleButton_->setText(have && !userModel_->row(rows.front().row()).enabled ? tr("Enable")
                                                                               : tr("Disable"));
}

void PatternEditor::onToggleClicked() {
  QModelIndexList rows = userTable_->selectionModel()->selectedRows();
  if (rows.isEmpty()) return;
  UserPatternRow row = userModel_->row(rows.front().row());
  setPatternEnabled(row.backend, row.name, !row.enabled);
}

void PatternEditor::onRemoveClicked() {
  QModelIndexList rows = userTable_->selectionModel()->selectedRows();
  if (rows.isEmpty()) return;
  UserPatternRow row = userModel_->row(rows.front().row());
  removePattern(row.backend, row.name);
}

// ---------------------------------------------------------------------------
// The selected backend's spec, read-only apart from the enable check boxes.

void PatternEditor::refreshBuiltinView() {
  if (editingBuiltinTree_) return;  // the itemChanged handler schedules it
  QSignalBlocker block(builtinTree_);
  builtinTree_->clear();
  const BackendSpec* spec = findSpec(currentBackend());
  if (!spec) {
    new QTreeWidgetItem(builtinTree_, {tr("No backend"), tr("the window has not given any specs")});
    return;
  }
  auto* head = new QTreeWidgetItem(
      builtinTree_, {qs(spec->name), tr("%1, %2, from %3")
                                         .arg(qs(spec->device.toString()),
                                              qs(std::string(backendKindName(spec->kind))),
                                              qs(spec->path))});
  head->setToolTip(1, qs(spec->path));
  new QTreeWidgetItem(head, {tr("Limits"), qs(spec->limits.toString())});

  int builtin = 0;
  for (const PatternEntry& p : spec->patterns) builtin += p.userDefined ? 0 : 1;
  auto* patterns = new QTreeWidgetItem(builtinTree_, {tr("Patterns (%1)").arg(builtin)});
  for (const PatternEntry& p : spec->patterns) {
    if (p.userDefined) continue;  // those are under "My patterns"
    bool enabled = !store_.isDisabled(spec->name, p.name);
    auto* item = new QTreeWidgetItem(patterns, {qs(p.name), qs(p.text)});
    item->setData(0, Qt::UserRole, qs(p.name));
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
    item->setCheckState(0, enabled ? Qt::Checked : Qt::Unchecked);
    item->setToolTip(0, tr("%1:%2; untick to stop offering this pattern").arg(qs(p.file)).arg(p.line));
    item->setToolTip(1, qs(p.text));
  }
  if (builtin == 0) new QTreeWidgetItem(patterns, {tr("none")});

  auto* rule = new QTreeWidgetItem(builtinTree_, {tr("Declarative rule")});
  if (const DeclarativePatternRule* r = spec->rule.get()) {
    const OpRuleSpec& op = r->opRuleSpec();
    const FusionRuleSpec& fusion = r->fusionRuleSpec();
    std::vector<std::string> kinds, types, attrs;
    for (OpKind k : op.kinds) kinds.emplace_back(opKindName(k));
    for (ElementType t : op.elementTypes) types.emplace_back(elementTypeName(t));
    for (const AttributeCondition& c : op.attributes) {
      std::string allowed;
      for (const auto& a : c.allowed) allowed += (allowed.empty() ? "" : ", ") + a;
      attrs.push_back((c.op.empty() ? "any op" : c.op) + "." + c.attribute + " in [" + allowed + "]");
    }
    if (op.ops.empty() && op.kinds.empty())
      new QTreeWidgetItem(rule, {tr("ops"), tr("every op")});
    if (!op.ops.empty()) new QTreeWidgetItem(rule, {tr("ops"), join(op.ops)});
    if (!kinds.empty()) new QTreeWidgetItem(rule, {tr("op kinds"), join(kinds)});
    if (!op.excludedOps.empty()) new QTreeWidgetItem(rule, {tr("except"), join(op.excludedOps)});
    if (!types.empty()) new QTreeWidgetItem(rule, {tr("element types"), join(types)});
    if (op.maxRank > 0) new QTreeWidgetItem(rule, {tr("max rank"), QString::number(op.maxRank)});
    for (const std::string& a : attrs) new QTreeWidgetItem(rule, {tr("attribute"), qs(a)});
    new QTreeWidgetItem(rule, {tr("fusion"), fusion.styles.empty() ? tr("single ops only")
                                                                   : join(fusion.styles)});
    if (fusion.maxNodes > 0)
      new QTreeWidgetItem(rule, {tr("max nodes"), QString::number(fusion.maxNodes)});
    rule->setToolTip(1, qs(r->toString()));
  } else {
    rule->setText(1, tr("none"));
  }
  bool code = codeRuleBackends_.contains(qs(spec->name));
  new QTreeWidgetItem(builtinTree_,
                      {tr("Code rule"), code ? tr("yes: the backend's C++ rule also proposes groups")
                                             : tr("no")});
  builtinTree_->expandAll();
  builtinTree_->resizeColumnToContents(0);
}

}  // namespace collage
