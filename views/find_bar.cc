#include "views/find_bar.h"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QToolButton>

#include "views/graph_scene.h"
#include "views/graph_view.h"

namespace collage {

QVector<NodeId> findNodes(const Graph& graph, const QString& query) {
  QVector<NodeId> out;
  QString q = query.trimmed();
  if (q.isEmpty()) return out;
  const bool opOnly = q.startsWith(QStringLiteral("op:"), Qt::CaseInsensitive);
  if (opOnly) q = q.mid(3).trimmed();
  if (q.isEmpty()) return out;
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    const Node& node = graph.node(n);
    QString op = QString::fromStdString(node.op);
    bool match = opOnly ? op.compare(q, Qt::CaseInsensitive) == 0
                        : op == q || QString::fromStdString(node.name).contains(q, Qt::CaseInsensitive);
    if (match) out.push_back(n);
  }
  return out;
}

FindBar::FindBar(GraphScene* scene, GraphView* view, QWidget* parent)
    : QWidget(parent), scene_(scene), view_(view) {
  edit_ = new QLineEdit(this);
  edit_->setPlaceholderText(tr("Find node name, or op:Conv"));
  edit_->setClearButtonEnabled(true);
  previous_ = new QToolButton(this);
  previous_->setArrowType(Qt::UpArrow);
  previous_->setToolTip(tr("Previous match (Shift+Enter)"));
  next_ = new QToolButton(this);
  next_->setArrowType(Qt::DownArrow);
  next_->setToolTip(tr("Next match (Enter)"));
  status_ = new QLabel(this);
  status_->setMinimumWidth(90);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 2, 4, 2);
  layout->addWidget(edit_, 1);
  layout->addWidget(previous_);
  layout->addWidget(next_);
  layout->addWidget(status_);
  connect(edit_, &QLineEdit::textChanged, this, [this] {
    recompute();
    go(matches_.isEmpty() ? -1 : 0);
  });
  connect(next_, &QToolButton::clicked, this, &FindBar::findNext);
  connect(previous_, &QToolButton::clicked, this, &FindBar::findPrevious);
  // A new model makes the old matches meaningless.
  connect(scene_, &QGraphicsScene::changed, this, [this] {
    if (matchedGraph_ && scene_->graph() != matchedGraph_) {
      recompute();
      current_ = -1;
      updateStatus();
    }
  });
  updateStatus();
}

void FindBar::setQuery(const QString& query) {
  if (edit_->text() == query) {
    recompute();
    go(matches_.isEmpty() ? -1 : 0);
  } else {
    edit_->setText(query);  // textChanged recomputes and goes to the first
  }
}

QString FindBar::query() const { return edit_->text(); }

void FindBar::activate() {
  show();
  edit_->setFocus(Qt::ShortcutFocusReason);
  edit_->selectAll();
}

void FindBar::recompute() {
  const Graph* graph = scene_ ? scene_->graph() : nullptr;
  matchedGraph_ = graph;
  matches_ = graph ? findNodes(*graph, edit_->text()) : QVector<NodeId>{};
  current_ = -1;
}

void FindBar::findNext() {
  if (scene_ && scene_->graph() != matchedGraph_) recompute();
  if (matches_.isEmpty()) return;
  go(current_ < 0 ? 0 : (current_ + 1) % matches_.size());
}

void FindBar::findPrevious() {
  if (scene_ && scene_->graph() != matchedGraph_) recompute();
  if (matches_.isEmpty()) return;
  go(current_ <= 0 ? matches_.size() - 1 : current_ - 1);
}

void FindBar::go(int index) {
  current_ = index;
  updateStatus();
  if (index < 0) return;
  NodeId n = matches_[index];
  if (scene_) scene_->selectNodes({n});
  if (view_) view_->centerOnNodes({n});
  emit nodeFound(n);
}

QString FindBar::statusText() const { return status_->text(); }

void FindBar::updateStatus() {
  if (edit_->text().trimmed().isEmpty())
    status_->clear();
  else if (matches_.isEmpty())
    status_->setText(tr("no match"));
  else if (current_ < 0)
    status_->setText(tr("%1 matches").arg(matches_.size()));
  else
    status_->setText(tr("%1 of %2").arg(current_ + 1).arg(matches_.size()));
  previous_->setEnabled(matches_.size() > 0);
  next_->setEnabled(matches_.size() > 0);
}

void FindBar::keyPressEvent(QKeyEvent* event) {
  if (event->key() == Qt::Key_Return || event->key() == Qt::Key_Enter) {
    if (event->modifiers() & Qt::ShiftModifier)
      findPrevious();
    else
      findNext();
    return;
  }
  if (event->key() == Qt::Key_Escape) {
    hide();
    return;
  }
  QWidget::keyPressEvent(event);
}

}  // namespace collage
