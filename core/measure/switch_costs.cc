#include "core/measure/switch_costs.h"

#include <cstdio>
#include <set>

namespace collage {

double SwitchCostTable::epsilonInto(const std::string& to) const {
  double sum = 0;
  int n = 0;
  for (const auto& [key, ns] : pairNs)
    if (key.second == to) {
      sum += ns;
      ++n;
    }
  return n ? sum / n : 0.0;
}

std::string SwitchCostTable::toString() const {
  std::set<std::string> names;
  for (const auto& [key, ns] : pairNs) {
    names.insert(key.first);
    names.insert(key.second);
  }
  std::string s = "switching cost (us), from \\ to:\n";
  char buf[64];
  std::snprintf(buf, sizeof buf, "  %-10s", "");
  s += buf;
  for (const auto& to : names) {
    std::snprintf(buf, sizeof buf, " %9s", to.c_str());
    s += buf;
  }
  s += "\n";
  for (const auto& from : names) {
    std::snprintf(buf, sizeof buf, "  %-10s", from.c_str());
    s += buf;
    for (const auto& to : names) {
      auto it = pairNs.find({from, to});
      if (it == pairNs.end()) std::snprintf(buf, sizeof buf, " %9s", "-");
      else std::snprintf(buf, sizeof buf, " %9.2f", it->second / 1e3);
      s += buf;
    }
    s += "\n";
  }
  return s;
}

SwitchCostTable measureSwitchCosts(const CandidateSet& candidates,
                                   const std::vector<Measurement>& measurements,
                                   const std::map<std::string, std::string>& versions,
                                   MeasurementDb* db, const HardwareFingerprint& fingerprint,
                                   const MeasurePairFn& measurePair) {
  // The cheapest successfully measured candidate of each backend.
  std::map<std::string, size_t> representative;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Measurement& m = measurements[i];
    if (m.status != MeasurementStatus::Ok) continue;
    auto it = representative.find(candidates[i].backend);
    if (it == representative.end() || m.medianNs < measurements[it->second].medianNs)
      representative[candidates[i].backend] = i;
  }
  SwitchCostTable table;
  for (const auto& [from, fi] : representative) {
    for (const auto& [to, ti] : representative) {
      MeasurementDb::BackendVersion fv{from, versions.count(from) ? versions.at(from) : ""};
      MeasurementDb::BackendVersion tv{to, versions.count(to) ? versions.at(to) : ""};
      if (db) {
        if (auto cached = db->findSwitchCost(fingerprint, fv, tv)) {
          table.pairNs[{from, to}] = *cached;
          continue;
        }
      }
      Measurement m = measurePair(candidates[fi], candidates[ti]);
      if (m.status != MeasurementStatus::Ok) continue;  // unknown: charged as 0
      table.pairNs[{from, to}] = m.medianNs;
      ++table.measured;
      if (db) db->storeSwitchCost(fingerprint, fv, tv, m);
    }
  }
  return table;
}

}  // namespace collage
