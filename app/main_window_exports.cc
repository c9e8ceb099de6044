// MainWindow's plans and exports: a plan saved and opened (checked against
// the open model), and the graph, the annotated model, Model Explorer's node
// data, the kernel timeline and the kernel table written for other tools.
// Each export returns false with the reason rather than showing it, so the
// dialogs and the tests share one path.
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QImage>
#include <QLabel>
#include <QMessageBox>
#include <QPainter>
#include <QSortFilterProxyModel>
#include <QSvgGenerator>
#include <QTextStream>

#include <functional>

#include "app/main_window.h"
#include "backends/backend_list.h"
#include "core/plan/plan_export.h"
#include "views/background_work.h"
#include "views/graph_scene.h"
#include "views/session_runner.h"

namespace collage {
namespace {

// Writes the plan on screen with `write`; false and the reason when there
// is none yet or writing fails.
bool writePlan(const std::optional<Plan>& plan, QString* error,
               const std::function<void(const Plan&)>& write) {
  if (!plan) {
    if (error) *error = MainWindow::tr("no plan yet: optimise first");
    return false;
  }
  try {
    write(*plan);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

}  // namespace

bool MainWindow::savePlanTo(const QString& path, QString* error) {
  return writePlan(plan_, error, [&](const Plan& plan) { savePlan(plan, path.toStdString()); });
}

bool MainWindow::exportAnnotatedModel(const QString& path, QString* error) {
  return writePlan(plan_, error, [&](const Plan& plan) {
    exportAnnotatedOnnx(modelPath_.toStdString(), plan, path.toStdString());
  });
}

bool MainWindow::exportNodeData(const QString& path, QString* error) {
  return writePlan(plan_, error, [&](const Plan& plan) {
    exportModelExplorerNodeData(plan, path.toStdString(), NodeDataKind::Backend);
  });
}

bool MainWindow::exportTrace(const QString& path, QString* error) {
  const SessionRunner* run = work_->lastPlanRun();
  if (!run || run->timings().empty()) {
    if (error) *error = tr("no kernel timings yet: Measure plan first");
    return false;
  }
  try {
    exportChromeTrace(run->plan(), run->timings(), path.toStdString());
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool MainWindow::exportImage(const QString& path, QString* error) {
  QRectF source = scene_->sceneRect();
  if (path.endsWith(QLatin1String(".svg"), Qt::CaseInsensitive)) {
    QSvgGenerator svg;
    svg.setFileName(path);
    svg.setSize(source.size().toSize());
    svg.setViewBox(QRectF(QPointF(0, 0), source.size()));
    svg.setTitle(windowTitle());
    QPainter painter;
    if (!painter.begin(&svg)) {
      if (error) *error = tr("cannot write %1").arg(path);
      return false;
    }
    scene_->render(&painter, QRectF(QPointF(0, 0), source.size()), source);
    painter.end();
    return true;
  }
  // PNG: cap the size so a huge graph does not need gigabytes.
  double scale = std::min(2.0, 16000.0 / std::max(1.0, std::max(source.width(), source.height())));
  QImage image((source.size() * scale).toSize(), QImage::Format_ARGB32);
  image.fill(Qt::white);
  QPainter painter(&image);
  painter.setRenderHint(QPainter::Antialiasing);
  scene_->render(&painter, QRectF(QPointF(0, 0), QSizeF(image.size())), source);
  painter.end();
  if (!image.save(path)) {
    if (error) *error = tr("cannot write %1").arg(path);
    return false;
  }
  return true;
}

bool MainWindow::exportMeasurementsCsv(const QString& path, QString* error) {
  QFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
    if (error) *error = tr("cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  // RFC 4180: quote every field, double the quotes inside.
  auto quoted = [](QString text) { return '"' + text.replace('"', QLatin1String("\"\"")) + '"'; };
  QTextStream out(&file);
  QStringList header;
  for (int c = 0; c < proxy_->columnCount(); ++c)
    header << quoted(proxy_->headerData(c, Qt::Horizontal).toString());
  out << header.join(',') << '\n';
  for (int r = 0; r < proxy_->rowCount(); ++r) {
    QStringList row;
    for (int c = 0; c < proxy_->columnCount(); ++c) row << quoted(proxy_->index(r, c).data().toString());
    out << row.join(',') << '\n';
  }
  out.flush();
  if (file.error() != QFileDevice::NoError) {
    if (error) *error = tr("cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  return true;
}

bool MainWindow::openPlan(const QString& path, QString* error) {
  if (!graph_) {
    if (error) *error = tr("open the plan's model first");
    return false;
  }
  // The graph on screen is about to give way to another (a model importing,
  // or a graph replayed for a plan or a result): a plan checked against this
  // one now would arrive on that one. Refused; it opens once that is shown.
  if (loader_->isLoadingModel()) {
    const QString why = tr("a model is still loading: open the plan once it is shown");
    if (error) *error = why;
    status_->setText(tr("Cannot use plan %1: %2").arg(QFileInfo(path).fileName(), why));
    return false;
  }
  try {
    Plan plan = loadPlan(path.toStdString());
    std::vector<SubstitutionSite> sites;
    for (const PlanSubstitution& s : plan.substitutions) sites.push_back(s.site);
    const std::string modelPath = modelPath_.toStdString();
    const std::vector<BackendVersion> versions = optimiser_->backendSet()->versions();
    if (sites != rewriteSites_) {
      // Its groups name the nodes of another graph: replayed and laid out in
      // the background (each substitution checked again), checked there.
      if (isOptimizing()) throw Error("cancel the optimisation before opening a plan for another graph");
      // The model's own file first: a plan for another model is refused at once.
      checkPlanModelFile(plan, modelPath);
      pendingPlanName_ = QFileInfo(path).fileName();
      pendingResult_.reset();
      pendingFor_ = modelGraph_;
      // The file's sha256 was just checked: the rest needs the rewritten graph.
      showRewritten(sites, nullptr, [plan, versions](const Graph& graph) {
        return checkPlanAgainst(plan, graph, /*modelPath=*/"", versions);
      });
      pendingPlan_ = std::move(plan);
      return true;
    }
    std::vector<std::string> warnings = checkPlanAgainst(plan, *graph_, modelPath, versions);
    showOpenedPlan(std::move(plan), QFileInfo(path).fileName(), warnings);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    status_->setText(tr("Cannot use plan %1").arg(QFileInfo(path).fileName()));
    return false;
  }
}

void MainWindow::showOpenedPlan(Plan plan, const QString& fileName, const std::vector<std::string>& warnings) {
  plan_ = std::move(plan);
  showPlan();
  QString text = tr("Plan %1: predicted %2 ms, %3 kernels")
                     .arg(fileName)
                     .arg(plan_->predictedNs / 1e6, 0, 'f', 3)
                     .arg(plan_->groups.size());
  if (!plan_->substitutions.empty())
    text += tr(", %n graph substitution(s)", "", int(plan_->substitutions.size()));
  for (const std::string& w : warnings) text += QStringLiteral("; ") + QString::fromStdString(w);
  status_->setText(text);
}

void MainWindow::savePlanDialog() {
  QString path = QFileDialog::getSaveFileName(this, tr("Save plan"), "plan.json", tr("Plans (*.json)"));
  if (path.isEmpty()) return;
  QString error;
  if (!savePlanTo(path, &error)) QMessageBox::warning(this, tr("Cannot save plan"), error);
}

void MainWindow::openPlanDialog() {
  QString path = QFileDialog::getOpenFileName(this, tr("Open plan"), QString(), tr("Plans (*.json)"));
  if (path.isEmpty()) return;
  QString error;
  if (!openPlan(path, &error)) QMessageBox::warning(this, tr("Cannot use this plan"), error);
}

void MainWindow::exportImageDialog() {
  QString path = QFileDialog::getSaveFileName(this, tr("Export graph"), "graph.svg",
                                              tr("SVG (*.svg);;PNG (*.png)"));
  if (path.isEmpty()) return;
  QString error;
  if (!exportImage(path, &error)) QMessageBox::warning(this, tr("Cannot export"), error);
}

void MainWindow::exportDialog(const QString& title, const QString& defaultName, const QString& filter,
                              bool (MainWindow::*exporter)(const QString&, QString*)) {
  QString path = QFileDialog::getSaveFileName(this, title, defaultName, filter);
  if (path.isEmpty()) return;
  QString error;
  if ((this->*exporter)(path, &error))
    status_->setText(tr("Wrote %1").arg(path));
  else
    QMessageBox::warning(this, title, error);
}

}  // namespace collage
