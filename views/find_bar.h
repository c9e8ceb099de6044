// Find in the graph: a line edit, previous / next and "n of m". A query
// matches nodes whose name contains it (case-insensitive) or whose op type is
// exactly it; "op:Conv" matches the op type only (case-insensitive). Each
// step selects the match and centres the view on it, so every panel that
// follows the scene's selection follows the find.
//
//   auto* find = new FindBar(scene, view, this);
//   find->hide();
//   new QShortcut(QKeySequence::Find, this, [find] { find->activate(); });
#pragma once

#include <QVector>
#include <QWidget>

#include "core/ir/graph.h"

class QLabel;
class QLineEdit;
class QToolButton;

namespace collage {

class GraphScene;
class GraphView;

// The nodes of `graph` that `query` matches (see above), ascending.
QVector<NodeId> findNodes(const Graph& graph, const QString& query);

class FindBar : public QWidget {
  Q_OBJECT
 public:
  FindBar(GraphScene* scene, GraphView* view, QWidget* parent = nullptr);

  // Sets the query (as if typed) and goes to the first match.
  void setQuery(const QString& query);
  QString query() const;
  const QVector<NodeId>& matches() const { return matches_; }
  int currentIndex() const { return current_; }  // into matches(), -1 if none
  NodeId currentNode() const { return current_ >= 0 ? matches_[current_] : kNoNode; }
  QString statusText() const;  // "3 of 53", "no match", ""

 public slots:
  // Shows the bar and focuses the query, text selected.
  void activate();
  void findNext();
  void findPrevious();

 signals:
  // The node found (after it was selected and centred).
  void nodeFound(collage::NodeId node);

 protected:
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void recompute();
  void go(int index);
  void updateStatus();

  GraphScene* scene_;
  GraphView* view_;
  QLineEdit* edit_;
  QToolButton* previous_;
  QToolButton* next_;
  QLabel* status_;
  QVector<NodeId> matches_;
  int current_ = -1;
  const Graph* matchedGraph_ = nullptr;  // the graph matches_ belong to
};

}  // namespace collage
