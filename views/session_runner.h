// Runs a Plan in a Session (core/runtime/session.h) on a worker thread: compiles its
// kernels once, runs once untimed, then `repeats` timed runs on random
// inputs, and reports the measured end-to-end latency that the window shows
// next to the plan's predicted total. Cancel is checked between runs; the UI
// thread never waits on it.
//
//   auto* runner = new SessionRunner(graph, plan,
//       [set = backendSet](const std::string& n) { return set->find(n); }, 10, this);
//   connect(runner, &SessionRunner::finished, this, [=](double ms, double spread, qint64) {
//     label->setText(formatPredictedVsMeasured(plan.predictedNs, ms, spread)); });
//   runner->start();
#pragma once

#include <QObject>
#include <QString>
#include <QThread>
#include <memory>

#include "core/ir/graph.h"
#include "core/plan/plan.h"
#include "core/ir/search_events.h"
#include "core/runtime/session.h"

namespace collage {

class SessionRunner : public QObject {
  Q_OBJECT
 public:
  // `backends` must stay valid while the runner runs (capture the BackendSet's
  // shared_ptr in it). `repeats` >= 1.
  SessionRunner(std::shared_ptr<const Graph> graph, Plan plan, BackendLookup backends,
                int repeats = 10, QObject* parent = nullptr);
  ~SessionRunner() override;  // cancels and waits for the current run to end

  void start();  // returns at once
  void cancel() { token_.cancel(); }
  bool isRunning() const { return thread_ && thread_->isRunning(); }
  bool wait(unsigned long ms) { return !thread_ || thread_->wait(ms); }
  int repeats() const { return repeats_; }
  // Every kernel of every timed run (Session profiling), for the Chrome
  // trace and Model Explorer exports. Read it after finished().
  const std::vector<Session::KernelTiming>& timings() const { return timings_; }
  const Plan& plan() const { return plan_; }

 signals:
  // Median and relative spread ((p75 - p25) / median, 0 under 4 runs) of the
  // timed runs, and the Session's peak bytes of intermediate values.
  void finished(double medianMs, double spread, qint64 peakBytes);
  void failed(QString message);  // compile or run error (Error's message)
  void cancelled();
  void progress(int runsDone, int runsTotal);  // after each timed run
  // The thread has returned (after finished(), failed() or cancelled()): no
  // kernel of this runner runs any more.
  void ended();

 private:
  void runAll();  // on thread_

  std::shared_ptr<const Graph> graph_;
  Plan plan_;
  BackendLookup backends_;
  int repeats_;
  CancellationToken token_;
  std::unique_ptr<QThread> thread_;
  std::vector<Session::KernelTiming> timings_;  // written on thread_ before finished()
};

// "predicted 12.345 ms, measured 13.210 ms (spread 3.1 %)"; a prediction that
// is not known is left out.
QString formatPredictedVsMeasured(double predictedNs, double measuredMs, double spread);

}  // namespace collage
