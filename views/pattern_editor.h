// The pattern editor: type a pattern, see where it matches in the open model,
// register it for a backend, and manage the patterns registered so far.
//
//   [backend v] [name      ] [Register]
//   +--------------------------------------+
//   | Relu(Conv(*, const, ?const))         |   parsed 150 ms after the last key;
//   +--------------------------------------+   an error is underlined where it is
//   line 1, column 12: expected ')' ...      or "14 matches"
//   [Matches | My patterns | Built-in]       matches: click one to show it;
//                                            user patterns: enable, remove;
//                                            built-in: the backend's spec patterns
//                                            and rules, read-only
//
// Registered patterns go to a UserPatternStore file (userPatternPath()); the
// editor only writes that file and emits patternsChanged(). The window must
// then rebuild its BackendSet with loadBackendSet(names, userPatternPath()) so
// the next optimisation sees them. Matching runs on a pool thread (a big graph
// and a loose pattern take a while); a result that arrives after the text
// changed again is dropped.
#pragma once

#include <QFutureWatcher>
#include <QSet>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <QVector>
#include <QWidget>
#include <memory>
#include <optional>
#include <vector>

#include "core/patterns/backend_spec.h"
#include "core/ir/graph.h"
#include "core/patterns/pattern.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QListWidgetItem;
class QPlainTextEdit;
class QPushButton;
class QTableView;
class QTabWidget;
class QTreeWidget;

namespace collage {

class PatternMatcher;
class UserPatternModel;

// What a matching run found, handed from the pool thread to the UI.
struct PatternMatchResult {
  quint64 generation = 0;  // which parse it belongs to
  QVector<QVector<NodeId>> matches;  // node ids of each match, ascending
  QStringList labels;                // one line per match for the list
  double milliseconds = 0;
  QString error;  // the matcher threw (should not happen; shown, not fatal)
};

class PatternEditor : public QWidget {
  Q_OBJECT
 public:
  explicit PatternEditor(QWidget* parent = nullptr);
  ~PatternEditor() override;

  // The graph the pattern is matched against (null: none). Re-matches.
  void setGraph(std::shared_ptr<const Graph> graph);
  // The backends one can register for, as loaded (loadAllSpecs or a
  // BackendSet's specs; user patterns merged or not: only entries that are
  // not userDefined are shown as built-in). `codeRuleBackends` names the
  // backends whose Backend::codeRule() is not null, for the built-in view.
  void setBackendSpecs(std::vector<BackendSpec> specs, const QStringList& codeRuleBackends = {});
  QStringList backendNames() const;

  // The user pattern file it reads and writes; default
  // UserPatternStore::defaultPath(). Setting it reloads the list.
  void setUserPatternPath(const QString& path);
  QString userPatternPath() const;

  QString currentBackend() const;
  bool setCurrentBackend(const QString& name);  // false if there is none of that name
  QString patternName() const;
  void setPatternName(const QString& name);
  QString patternText() const;
  void setPatternText(const QString& text);  // parsed after the usual delay

  // Matches of the current pattern in the current graph; -1 while there is
  // no result (the text does not parse, no graph, or matching in progress).
  int matchCount() const { return matchCount_; }
  const QVector<QVector<NodeId>>& matches() const { return matches_; }
  // The parse/validation error of the text ("line 1, column 6: unknown op
  // 'Convv'"), or the reason the last Register/Remove/Enable was refused;
  // empty when there is none.
  QString errorText() const { return errorText_; }
  // The message line as shown ("14 matches", the error, "Registered ...").
  QString statusText() const;
  // Where the error points in the text (a QString index), or -1.
  int errorPosition() const { return errorPosition_; }
  bool isMatching() const { return matchWatcher_.isRunning(); }
  UserPatternModel* userPatternModel() const { return userModel_; }

 public slots:
  // Parses and starts matching now, skipping the typing delay.
  void reparseNow();
  // Saves the current name/text for the current backend. Refuses (false,
  // reason in errorText()) an empty or malformed name, a name the backend
  // already has (built-in or user), and a text that does not parse.
  bool registerPattern();
  bool removePattern(const QString& backend, const QString& name);
  bool setPatternEnabled(const QString& backend, const QString& name, bool enabled);
  // Re-reads the user pattern file (another program may have changed it).
  void reloadUserPatterns();

 signals:
  // Every match of a valid pattern (empty when it stops being valid), for the
  // graph view to highlight.
  void matchesChanged(QVector<QVector<collage::NodeId>> matches);
  // The user picked one match in the list.
  void matchActivated(QVector<collage::NodeId> nodes);
  // The user pattern file changed: rebuild the BackendSet before optimising.
  void patternsChanged();

 private:
  void buildUi();
  void parseText();
  void startMatching();
  void onMatchesReady();
  void showError(const QString& message, int position);
  void showStatus(const QString& message, bool isError);
  void clearMatches();
  void refreshUserPatterns();
  void refreshBuiltinView();
  void onUserSelectionChanged();
  void onToggleClicked();
  void onRemoveClicked();
  void onMatchItemActivated(QListWidgetItem* item);
  const BackendSpec* findSpec(const QString& name) const;
  // Re-reads the file before a change so nothing written by `collage spec` in
  // the meantime is lost; false (error shown) if it does not load.
  bool loadStoreForChange();
  // The ends of a change to the user file: a failure re-reads the file and
  // shows `message` as an error; a success refreshes the lists, shows
  // `message` and emits patternsChanged().
  bool changeFailed(const QString& message);
  bool changeDone(const QString& message);

  // Widgets.
  QComboBox* backendBox_ = nullptr;
  QLineEdit* nameEdit_ = nullptr;
  QPushButton* registerButton_ = nullptr;
  QPlainTextEdit* textEdit_ = nullptr;
  QLabel* statusLabel_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QListWidget* matchList_ = nullptr;
  QTableView* userTable_ = nullptr;
  QPushButton* toggleButton_ = nullptr;
  QPushButton* removeButton_ = nullptr;
  QTreeWidget* builtinTree_ = nullptr;
  UserPatternModel* userModel_ = nullptr;

  // State.
  std::shared_ptr<const Graph> graph_;
  std::shared_ptr<const PatternMatcher> matcher_;  // indexes graph_; shared with pool threads
  std::vector<BackendSpec> specs_;
  QSet<QString> codeRuleBackends_;
  UserPatternStore store_;
  std::optional<Pattern> pattern_;  // the text's parse, when valid
  QTimer parseTimer_;
  QFutureWatcher<PatternMatchResult> matchWatcher_;
  quint64 generation_ = 0;
  int matchCount_ = -1;
  QVector<QVector<NodeId>> matches_;
  QString errorText_;
  int errorPosition_ = -1;
  bool editingBuiltinTree_ = false;
};

}  // namespace collage
