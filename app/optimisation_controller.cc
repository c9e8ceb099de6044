#include "app/optimisation_controller.h"

#include <QCoreApplication>

#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "views/background_work.h"
#include "views/optimize_worker.h"

namespace collage {
namespace {

QString formatSeconds(double s) {
  if (s < 0) return QStringLiteral("?");
  if (s < 60) return QString::number(s, 'f', 0) + " s";
  return QString::number(s / 60, 'f', 1) + " min";
}

}  // namespace

OptimisationController::OptimisationController(QObject* parent)
    : QObject(parent), work_(new BackgroundWork(this)), settings_(OptimizeSettings::load()) {}

OptimisationController::~OptimisationController() {
  // Aborts and waits at most about a second (BackgroundWork's destructor),
  // before the views its signals would reach are gone.
  delete work_;
  work_ = nullptr;
}

bool OptimisationController::isOptimizing() const { return work_ && work_->isOptimizing(); }

void OptimisationController::setSettings(const OptimizeSettings& settings) {
  setBackends(settings.backends);
  settings_ = settings;
}

void OptimisationController::setBackends(const QStringList& names) {
  if (names == settings_.backends) return;
  settings_.backends = names;
  if (!isOptimizing()) backendSet_.reset();
}

void OptimisationController::patternsChanged() {
  if (!isOptimizing()) backendSet_.reset();
}

std::shared_ptr<BackendSet> OptimisationController::backendSet() { return backendSetOf({}); }

std::shared_ptr<BackendSet> OptimisationController::backendSetOf(const std::vector<std::string>& names) {
  if (!backendSet_)
    backendSet_ = std::make_shared<BackendSet>(loadBackendSet(names, userPatternPath_ ? userPatternPath_().toStdString()
                                                                        : UserPatternStore::defaultPath()));
  return backendSet_;
}

OptimizationJobOptions OptimisationController::jobOptions(const QString& modelPath,
                                                          const QStringList& inputShapes,
                                                          const PlacementConstraints& constraints) {
  std::vector<std::string> names;
  for (const QString& n : settings_.backends) names.push_back(n.toStdString());
  std::shared_ptr<BackendSet> set = backendSetOf(names);
  OptimizationJobOptions options;
  options.modelPath = modelPath.toStdString();
  for (const QString& binding : inputShapes) options.inputShapes.push_back(binding.toStdString());
  options.capabilities = set->capabilities();
  options.versions = set->versions();
  settings_.applyTo(options);
  options.workerExecutable = findCollageCli(QCoreApplication::applicationDirPath()).toStdString();
  if (options.workerExecutable.empty())
    throw Error("cannot find the 'collage' executable that measures kernels (set COLLAGE_CLI)");
  // The user's overrides are pins the optimizer honours.
  options.constraints = constraints;
  // The plan is run end to end against the baselines before it is kept.
  options.backends = [set](const std::string& n) { return set->find(n); };
  return options;
}

void OptimisationController::start(std::shared_ptr<const Graph> graph, OptimizationJobOptions options) {
  work_->optimize(std::move(graph), std::move(options), settings_.timeBudgetSeconds);
}

void OptimisationController::cancel() {
  if (isOptimizing()) work_->cancelOptimization();
}

void OptimisationController::runPlan(std::shared_ptr<const Graph> graph, const Plan& plan) {
  std::shared_ptr<BackendSet> set = backendSet();
  work_->runPlan(std::move(graph), plan, [set](const std::string& n) { return set->find(n); }, 10);
}

QString OptimisationController::progressText(const MeasureProgressEvent& e) {
  return tr("Measuring %1/%2 (%3 cached, %4 failed), ETA %5  %6")
      .arg(e.done)
      .arg(e.total)
      .arg(e.cached)
      .arg(e.failed)
      .arg(formatSeconds(e.etaSeconds))
      .arg(QString::fromStdString(e.current));
}

QString OptimisationController::searchStepText(const SearchStepEvent& e) {
  return tr("%1 search: step %2, %3 evaluated, best %4 ms")
      .arg(QString::fromStdString(e.search))
      .arg(e.step)
      .arg(e.evaluations)
      .arg(e.bestCostNs / 1e6, 0, 'f', 3);
}

QString OptimisationController::resultText(const OptimizationResult& result,
                                           const QString& diffSummary) {
  if (!result.hasPlan) return tr("Cancelled before every kernel was measured; no plan");
  // A graph-level search stopped by Cancel (or the time budget) returns the
  // best plan it found; the job itself finished, so only the search says so.
  const bool cancelled =
      result.cancelled || (result.graphLevelRan &&
                           result.graphLevel.evolution.stop == EvolutionResult::Stop::Cancelled);
  return tr("%1: predicted %2 ms, %3 kernels (%4 measured, %5 cached)")
             .arg(cancelled ? tr("Cancelled, best plan so far") : tr("Done"))
             .arg(result.plan.predictedNs / 1e6, 0, 'f', 3)
             .arg(result.plan.groups.size())
             .arg(result.report.measured)
             .arg(result.report.cached) +
         (result.graphLevelRan ? QStringLiteral("; ") + diffSummary : QString()) +
         (result.warnings.empty()
              ? QString()
              : QStringLiteral("; warning: ") + QString::fromStdString(result.warnings.front()));
}

}  // namespace collage
