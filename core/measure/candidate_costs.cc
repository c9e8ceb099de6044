#include "core/measure/candidate_costs.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "core/patterns/candidate_signature.h"

namespace collage {

std::string opsLabel(const Graph& graph, const NodeSet& nodes) {
  std::string s;
  nodes.forEach([&](NodeId n) { s += (s.empty() ? "" : "+") + graph.node(n).op; });
  return s;
}

CandidateCoster::CandidateCoster(const Graph& graph, MeasurementDb* db,
                                 HardwareFingerprint fingerprint,
                                 std::function<std::string(const std::string&)> backendVersion,
                                 MeasureFn measure)
    : graph_(graph),
      db_(db),
      fingerprint_(std::move(fingerprint)),
      backendVersion_(std::move(backendVersion)),
      measure_(std::move(measure)) {}

std::vector<Measurement> CandidateCoster::costAll(const CandidateSet& candidates,
                                                  const std::vector<bool>& needed,
                                                  SearchObserver* observer,
                                                  const CancellationToken* cancel,
                                                  CostingReport* report) {
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  CostingReport r;
  r.candidates = static_cast<int>(candidates.size());
  std::vector<Measurement> out(candidates.size());
  for (auto& m : out) {
    m.status = MeasurementStatus::Failed;
    m.message = "not measured";
  }

  // Group candidates by (backend, signature): one measurement per group.
  struct Work {
    MeasurementKey key;
    CandidateSignature signature;
    std::vector<size_t> members;
  };
  std::vector<Work> work;
  std::map<std::pair<std::string, std::string>, size_t> byKey;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!needed.empty() && !needed[i]) continue;
    const Candidate& c = candidates[i];
    CandidateSignature sig = candidateSignature(graph_, c.nodes);
    auto [it, inserted] = byKey.emplace(std::make_pair(c.backend, sig.hash), work.size());
    if (inserted)
      work.push_back(Work{MeasurementKey{c.backend, backendVersion_(c.backend), sig.hash}, sig, {}});
    work[it->second].members.push_back(i);
  }
  r.distinct = static_cast<int>(work.size());

  // Cached first, so that the progress bar's total is what is left to measure.
  std::vector<size_t> toMeasure;
  for (size_t w = 0; w < work.size(); ++w) {
    std::optional<Measurement> hit;
    if (db_) hit = db_->find(fingerprint_, work[w].key);
    if (hit) {
      for (size_t i : work[w].members) out[i] = *hit;
      ++r.cached;
      if (hit->status != MeasurementStatus::Ok) ++r.failed;
    } else {
      toMeasure.push_back(w);
    }
  }
  size_t pending = toMeasure.size();  // to measure or to judge (reference kernels)
  auto progress = [&](const std::string& current) {
    if (!observer) return;
    MeasureProgressEvent e;
    e.total = r.distinct;
    e.cached = r.cached;
    e.measured = r.measured;
    e.done = r.cached + r.measured + r.skipped;
    e.failed = r.failed;
    e.elapsedSeconds = elapsed();
    if (r.measured > 0)
      e.etaSeconds = e.elapsedSeconds / r.measured *
                     static_cast<double>(std::max<size_t>(pending, r.measured + r.skipped) - r.measured - r.skipped);
    e.current = current;
    observer->onMeasureProgress(e);
  };
  progress("");
  // Another process sharing the store (core/measure/shared_store.h) may be
  // measuring the same kernels: each is claimed before it is measured, one
  // claimed elsewhere is put off to the end, and after a claim the store is
  // asked again, so that the processes measure each kernel once between them.
  auto fromStore = [&](const Work& item) -> bool {
    std::optional<Measurement> hit = db_->find(fingerprint_, item.key);
    if (!hit) return false;
    for (size_t i : item.members) out[i] = *hit;
    ++r.cached;
    if (hit->status != MeasurementStatus::Ok) ++r.failed;
    return true;
  };
  auto measure = [&](const Work& item) {
    const Candidate& first = candidates[item.members.front()];
    std::string label = first.backend + " " + opsLabel(graph_, first.nodes);
    progress(label);
    Measurement m = measure_(first);
    if (db_) {
      MeasurementRecord rec;
      rec.fingerprint = fingerprint_;
      rec.key = item.key;
      rec.signatureText = item.signature.text;
      rec.ops = opsLabel(graph_, first.nodes);
      rec.measurement = m;
      db_->store(rec);  // stored at once: an interrupted run loses nothing
    }
    for (size_t i : item.members) out[i] = m;
    ++r.measured;
    if (m.status != MeasurementStatus::Ok) ++r.failed;
    if (m.preemptedRuns > 0) ++r.preempted;
    if (m.environmental()) ++r.environmental;
    if (observer && m.environmental())
      observer->onLog(label + ": " + m.toString() + " (" +
                      std::string(failureCauseDescription(m.cause)) +
                      ", not the kernel: not kept as its verdict, measured again on the next run)");
    else if (observer && m.status != MeasurementStatus::Ok && m.status != MeasurementStatus::Invalid)
      observer->onLog(label + ": " + m.toString());
  };
  const auto isCancelled = [&] {
    if (cancel && cancel->cancelled()) r.cancelled = true;
    return r.cancelled;
  };
  // Lookups only (a plan for another machine, whose kernels were measured
  // there): what the store lacks stays "not measured".
  if (!measure_) {
    for (size_t w : toMeasure)
      for (size_t i : work[w].members) out[i].message = "not measured on " + fingerprint_.toString();
    toMeasure.clear();
  }
  // Reference kernels (reference_skips.h) are set aside, cheapest first:
  // each is judged once everything else is measured, so that what the
  // faster candidates cost is known (and a cheaper reference kernel
  // measured before counts as an alternative to a dearer one).
  std::vector<size_t> referenceWork;
  std::map<size_t, KernelEstimate> estimates;
  if (screen_.estimate) {
    std::vector<size_t> rest;
    for (size_t w : toMeasure) {
      KernelEstimate e = screen_.estimate(candidates[work[w].members.front()]);
      if (!e.runsReference()) {
        rest.push_back(w);
        continue;
      }
      referenceWork.push_back(w);
      estimates.emplace(w, std::move(e));
    }
    std::stable_sort(referenceWork.begin(), referenceWork.end(),
                     [&](size_t a, size_t b) { return estimates.at(a).ns < estimates.at(b).ns; });
    toMeasure = std::move(rest);
  }
  const auto measureAll = [&](const std::vector<size_t>& items) {
    std::vector<size_t> putOff;
    for (size_t w : items) {
      if (isCancelled()) break;
      std::optional<MeasurementDb::Claim> claim;
      if (db_) {
        claim = db_->tryClaim(fingerprint_, work[w].key);
        if (!claim) {
          putOff.push_back(w);
          continue;
        }
        if (claim->shared() && fromStore(work[w])) continue;
      }
      measure(work[w]);
    }
    for (size_t w : putOff) {
      // Wait for the other process's claim: it ends when that kernel is
      // stored, or when the process dies (then it is measured here).
      std::optional<MeasurementDb::Claim> claim;
      while (!isCancelled() && !(claim = db_->tryClaim(fingerprint_, work[w].key)))
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!claim) break;
      progress("");
      if (!fromStore(work[w])) measure(work[w]);
    }
  };
  measureAll(toMeasure);
  for (size_t w : referenceWork) {
    if (isCancelled()) break;
    // One kernel serves every member (same signature): it is skipped only
    // when every member has faster candidates.
    const KernelEstimate& e = estimates.at(w);
    bool skip = true;
    std::string warning;
    std::vector<std::string> skipMessages;  // per member: its own nodes named
    for (size_t i : work[w].members) {
      const KernelEstimate own = i == work[w].members.front() ? e : screen_.estimate(candidates[i]);
      const ReferenceVerdict v = judgeReferenceCandidate(graph_, candidates, i, own, out, screen_);
      skipMessages.push_back(v.message);
      if (v.skip) continue;
      skip = false;
      if (warning.empty()) warning = v.message;
    }
    if (!skip) {
      if (!warning.empty()) {
        r.warnings.push_back(warning);
        if (observer) observer->onLog("warning: " + warning);
      }
      measureAll({w});
      continue;
    }
    for (size_t k = 0; k < work[w].members.size(); ++k) {
      Measurement& m = out[work[w].members[k]];
      m = Measurement{};
      m.status = MeasurementStatus::Skipped;
      m.message = skipMessages[k];
    }
    ++r.skipped;
    r.skippedEstimateSeconds += e.ns * 1e-9;
    if (observer) observer->onLog("skipped " + skipMessages.front());
    progress("");
  }
  progress("");
  r.seconds = elapsed();
  if (report) *report = r;
  return out;
}

Measurement CandidateCoster::remeasure(const Candidate& candidate, const Measurement& current) {
  Measurement fresh = measure_(candidate);
  if (fresh.status != MeasurementStatus::Ok ||
      (current.status == MeasurementStatus::Ok && current.medianNs <= fresh.medianNs))
    return current;
  if (db_) {
    const CandidateSignature sig = candidateSignature(graph_, candidate.nodes);
    MeasurementRecord rec;
    rec.fingerprint = fingerprint_;
    rec.key = MeasurementKey{candidate.backend, backendVersion_(candidate.backend), sig.hash};
    rec.signatureText = sig.text;
    rec.ops = opsLabel(graph_, candidate.nodes);
    rec.measurement = fresh;
    db_->store(rec);
  }
  return fresh;
}

}  // namespace collage
