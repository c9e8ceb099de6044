#include "core/pipeline/link_measurement.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>

#include "core/ir/error.h"
#include "core/pipeline/stage_queue.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

void pinTo(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc != 0)
    throw Error("link measurement: cannot pin a thread to cpu " + std::to_string(cpu) +
                " (error " + std::to_string(rc) + ")");
}

// (a, b) of seconds = a + b * bytes minimising sum w (a + b x - t)^2.
std::pair<double, double> weightedFit(const std::vector<LinkSample>& s, bool throughOrigin) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const LinkSample& p : s) {
    const double w = 1 / (p.seconds * p.seconds);
    sw += w;
    sx += w * p.bytes;
    sy += w * p.seconds;
    sxx += w * p.bytes * p.bytes;
    sxy += w * p.bytes * p.seconds;
  }
  if (throughOrigin) return {0, sxx > 0 ? sxy / sxx : 0};
  const double det = sw * sxx - sx * sx;
  const double b = (sw * sxy - sx * sy) / det;
  return {(sy - b * sx) / sw, b};
}

}  // namespace

std::vector<size_t> linkMessageSizes() {
  std::vector<size_t> sizes;
  for (size_t b = size_t{4} << 10; b <= size_t{16} << 20; b *= 4) sizes.push_back(b);
  return sizes;
}

std::string linkProtocol() { return "pingpong-4K-16M-r" + std::to_string(kLinkRounds); }

LinkFit fitLink(const std::vector<LinkSample>& samples) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const LinkSample& s : samples) {
    if (!(s.seconds > 0) || !(s.bytes >= 0) || !std::isfinite(s.seconds))
      throw Error("link fit: a sample of " + std::to_string(s.bytes) + " B took " +
                  std::to_string(s.seconds) + " s; every time must be > 0");
    lo = std::min(lo, s.bytes);
    hi = std::max(hi, s.bytes);
  }
  if (samples.size() < 2 || !(hi > lo))
    throw Error("link fit: needs samples of at least two message sizes, got " +
                std::to_string(samples.size()) + " sample(s)");
  std::pair<double, double> ab = weightedFit(samples, false);
  if (ab.first < 0) ab = weightedFit(samples, true);
  const double a = ab.first, b = ab.second;
  LinkFit fit;
  fit.cost.latencyS = std::max(0.0, a);
  if (b <= 0) {
    // Time does not grow with size: all latency (the mean, relatively weighted).
    double sw = 0, sy = 0;
    for (const LinkSample& s : samples) {
      sw += 1 / (s.seconds * s.seconds);
      sy += 1 / s.seconds;
    }
    fit.cost.latencyS = sy / sw;
    fit.cost.bandwidthBytesPerS = std::numeric_limits<double>::infinity();
  } else {
    fit.cost.bandwidthBytesPerS = 1 / b;
  }
  for (const LinkSample& s : samples)
    fit.worstError = std::max(
        fit.worstError, std::abs(fit.cost.latencyS + s.bytes / fit.cost.bandwidthBytesPerS - s.seconds) /
                            s.seconds);
  return fit;
}

std::vector<LinkSample> pingPongInProcess(int cpuA, int cpuB, int rounds) {
  rounds = std::max(1, rounds);
  // A message is a buffer the receiver reads whole (copies into its own), as
  // a consumer stage reads what its producer wrote on another core.
  using Message = std::shared_ptr<std::vector<char>>;
  StageQueue<Message> there(1), back(1);
  const std::vector<size_t> sizes = linkMessageSizes();
  std::string echoError;
  std::thread echo([&] {
    try {
      pinTo(cpuB);
      std::vector<char> mine;
      Message m;
      while (there.pop(m)) {
        mine.resize(m->size());
        std::memcpy(mine.data(), m->data(), m->size());
        std::swap(*m, mine);
        if (!back.push(std::move(m))) return;
      }
    } catch (const std::exception& e) {
      echoError = e.what();
      back.close();
    }
  });
  // Side A runs on a thread of its own too, so the caller's affinity stays
  // as it was (a pinned caller would then see one CPU: assignCores).
  std::vector<LinkSample> samples;
  std::string pingError;
  std::thread ping([&] {
    try {
      pinTo(cpuA);
      std::vector<char> mine;
      for (size_t bytes : sizes) {
        auto msg = std::make_shared<std::vector<char>>(bytes, 1);
        std::vector<double> trips;
        for (int r = -1; r < rounds; ++r) {  // r = -1: warm-up (page faults)
          const Clock::time_point t0 = Clock::now();
          if (!there.push(msg)) break;
          Message got;
          if (!back.pop(got)) break;
          mine.resize(got->size());
          std::memcpy(mine.data(), got->data(), got->size());
          const double s = std::chrono::duration<double>(Clock::now() - t0).count();
          if (r >= 0) trips.push_back(s);
          msg = std::move(got);
        }
        if (trips.empty()) break;
        std::sort(trips.begin(), trips.end());
        samples.push_back({static_cast<double>(bytes), trips[trips.size() / 2] / 2});
      }
    } catch (const std::exception& e) {
      pingError = e.what();
    }
    there.close();
  });
  ping.join();
  echo.join();
  if (!pingError.empty()) throw Error(pingError);
  if (!echoError.empty()) throw Error(echoError);
  return samples;
}

HardwareFingerprint linkFingerprint() {
  HardwareFingerprint fp = HardwareFingerprint::current();
  fp.threads = 0;
  fp.libraryVersions.clear();
  return fp;
}

LinkRecord linkRecordOf(const LinkKey& key, const LinkFit& fit, size_t sizes) {
  LinkRecord r;
  r.key = key;
  r.latencySeconds = fit.cost.latencyS;
  // "No bandwidth term" is stored as 0 (not every reader of the file takes
  // an infinite REAL) and read back as +inf.
  r.bandwidthBytesPerSecond = std::isfinite(fit.cost.bandwidthBytesPerS) ? fit.cost.bandwidthBytesPerS : 0;
  r.sizes = static_cast<int>(sizes);
  r.worstError = fit.worstError;
  return r;
}

LinkKey inProcessLinkKey(int cpuA, int cpuB) {
  return {"in-process", linkProtocol(), "cpus " + std::to_string(cpuA) + "|" + std::to_string(cpuB)};
}

LinkKey mpiLinkKey(const std::string& transport, const std::string& endpoints) {
  return {transport, linkProtocol(), endpoints};
}

LinkRecord inProcessLink(MeasurementDb* db, int cpuA, int cpuB, bool* measured) {
  const LinkKey key = inProcessLinkKey(cpuA, cpuB);
  const HardwareFingerprint fp = linkFingerprint();
  if (measured) *measured = false;
  if (db)
    if (std::optional<LinkRecord> stored = db->findLink(fp, key)) return *stored;
  const std::vector<LinkSample> samples = pingPongInProcess(cpuA, cpuB, kLinkRounds);
  LinkRecord r = linkRecordOf(key, fitLink(samples), samples.size());
  if (db) db->storeLink(fp, r);
  if (measured) *measured = true;
  return r;
}

LinkCost linkCostOf(const LinkRecord& record) {
  LinkCost c;
  c.latencyS = record.latencySeconds;
  c.bandwidthBytesPerS = record.bandwidthBytesPerSecond > 0
                             ? record.bandwidthBytesPerSecond
                             : std::numeric_limits<double>::infinity();
  return c;
}

Topology withEveryLink(const Topology& topology, const LinkCost& link, const std::string& origin) {
  return Topology(topology.devices(), {}, &link, origin);
}

}  // namespace collage
