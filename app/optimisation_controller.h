// Optimising the open model, the window's second controller: the settings a
// job runs with, the options built from them, the backend set the job and
// the plan runs share, and the words progress is reported in. The work runs
// in the BackgroundWork this controller owns (views/background_work.h: one
// piece at a time, newest request wins, stale results dropped); the window
// connects to work() for results and shows them. No widgets.
//
// Invariant: the backend set is rebuilt only between optimisations. A
// running job's candidates point into its specs, so a change of backends or
// of the user's patterns while one runs takes effect at the next one.
//
//   auto* optimiser = new OptimisationController(this);
//   connect(optimiser->work(), &BackgroundWork::optimizationFinished, this, &W::onDone);
//   optimiser->setUserPatternPath([=] { return editor->userPatternPath(); });
//   optimiser->start(graph, optimiser->jobOptions(path, shapes, overrides->constraints()));
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/plan/plan.h"
#include "core/search/optimization_job.h"
#include "views/optimize_options.h"

namespace collage {

struct BackendSet;
class BackgroundWork;
struct MeasureProgressEvent;
struct SearchStepEvent;

class OptimisationController : public QObject {
  Q_OBJECT
 public:
  explicit OptimisationController(QObject* parent = nullptr);
  ~OptimisationController() override;  // aborts what runs (BackgroundWork's bounded wait)

  BackgroundWork* work() const { return work_; }
  bool isOptimizing() const;

  // Everything the options dialog sets; loaded from QSettings at start.
  const OptimizeSettings& settings() const { return settings_; }
  void setSettings(const OptimizeSettings& settings);
  void setBackends(const QStringList& names);  // empty = all
  void setDatabasePath(const QString& path) { settings_.dbPath = path; }
  // Where the user's registered patterns are, asked when a backend set is
  // built (PatternEditor::userPatternPath; the file may change meanwhile).
  void setUserPatternPath(std::function<QString()> path) { userPatternPath_ = std::move(path); }
  // The user's patterns changed: the backend set is rebuilt at the next optimisation.
  void patternsChanged();

  // The job's options for a model and the user's pins (Error if the
  // measurement worker cannot be found, or a backend cannot be loaded).
  OptimizationJobOptions jobOptions(const QString& modelPath, const QStringList& inputShapes,
                                    const PlacementConstraints& constraints);
  // The backend set of the last job, or, before any, every backend (for
  // running or checking a plan opened from a file).
  std::shared_ptr<BackendSet> backendSet();

  // Starts once whatever runs has been aborted and its thread has ended.
  void start(std::shared_ptr<const Graph> graph, OptimizationJobOptions options);
  // The gentle stop: the job finishes at its next check with what it has.
  void cancel();
  // Runs `plan` end to end (10 timed runs); BackgroundWork::planRunFinished
  // follows. Not beside an optimisation: the request would abort it.
  void runPlan(std::shared_ptr<const Graph> graph, const Plan& plan);

  // The status-bar texts of the job's events and of its result.
  static QString progressText(const MeasureProgressEvent& e);
  static QString searchStepText(const SearchStepEvent& e);
  static QString resultText(const OptimizationResult& result, const QString& diffSummary);

 private:
  // The current set, built from `names` (empty = all) if there is none.
  std::shared_ptr<BackendSet> backendSetOf(const std::vector<std::string>& names);

  BackgroundWork* work_ = nullptr;
  OptimizeSettings settings_;
  std::function<QString()> userPatternPath_;
  // The running job keeps its own reference: its candidates point into the specs.
  std::shared_ptr<BackendSet> backendSet_;
};

}  // namespace collage
