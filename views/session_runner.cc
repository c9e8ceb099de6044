#include "views/session_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <vector>

#include "core/measure/machine_timing_lock.h"
#include "core/ops/reference_executor.h"

namespace collage {

SessionRunner::SessionRunner(std::shared_ptr<const Graph> graph, Plan plan, BackendLookup backends,
                             int repeats, QObject* parent)
    : QObject(parent),
      graph_(std::move(graph)),
      plan_(std::move(plan)),
      backends_(std::move(backends)),
      repeats_(std::max(1, repeats)) {}

SessionRunner::~SessionRunner() {
  token_.cancel();
  if (thread_) thread_->wait();
}

void SessionRunner::start() {
  if (thread_) return;
  thread_.reset(QThread::create([this] { runAll(); }));
  connect(thread_.get(), &QThread::finished, this, &SessionRunner::ended);
  thread_->start();
}

void SessionRunner::runAll() {
  // Signals emitted here are queued to the receivers' (UI) thread.
  try {
    Session session(*graph_, plan_, backends_);
    std::vector<Tensor> inputs = randomInputs(*graph_);
    if (token_.cancelled()) {
      emit cancelled();
      return;
    }
    // Timed alone on the machine (core/measure/machine_timing_lock.h).
    MachineTimingLock turn("running a plan in Collage Studio", {},
                           [this] { return token_.cancelled(); });
    if (!turn.held()) {
      emit cancelled();
      return;
    }
    // One untimed run: the first pays page faults and thread start-up.
    session.run(inputs);
    // Per-kernel timings cost two clock reads per kernel: noise well under
    // the run-to-run spread, and the exports need them.
    session.setProfiling(true);
    std::vector<double> ms;
    for (int r = 0; r < repeats_; ++r) {
      if (token_.cancelled()) {
        emit cancelled();
        return;
      }
      auto t0 = std::chrono::steady_clock::now();
      session.run(inputs);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      timings_.insert(timings_.end(), session.lastTimings().begin(), session.lastTimings().end());
      emit progress(r + 1, repeats_);
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double spread =
        ms.size() >= 4 && median > 0 ? (ms[3 * ms.size() / 4] - ms[ms.size() / 4]) / median : 0;
    emit finished(median, spread, static_cast<qint64>(session.peakBytes()));
  } catch (const std::exception& e) {
    emit failed(QString::fromStdString(e.what()));
  }
}

QString formatPredictedVsMeasured(double predictedNs, double measuredMs, double spread) {
  QString measured = SessionRunner::tr("measured %1 ms (spread %2 %)")
                         .arg(measuredMs, 0, 'f', 3)
                         .arg(100 * spread, 0, 'f', 1);
  if (!std::isfinite(predictedNs) || predictedNs <= 0) return measured;
  return SessionRunner::tr("predicted %1 ms, ").arg(predictedNs / 1e6, 0, 'f', 3) + measured;
}

}  // namespace collage
