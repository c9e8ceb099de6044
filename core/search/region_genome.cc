#include "core/search/region_genome.h"

#include <algorithm>
#include <cmath>

#include "core/ir/error.h"
#include "core/plan/plan.h"

namespace collage {

namespace {
// Regions longer than this many groups are not tried as a whole: the
// greedy split asks about every prefix, and a kernel that long leaves
// nothing to the other backends anyway.
constexpr size_t kMaxRegionGroups = 48;
}  // namespace

RegionEncoding::RegionEncoding(const Graph& graph, const Plan& base, std::vector<GraphLibrary> libraries)
    : graph_(graph), base_(base), libraries_(std::move(libraries)) {
  COLLAGE_CHECK(libraries_.size() < 10, "at most 9 graph libraries fit a gene");
  groups_ = resolvePlanGroups(base_, graph_);
  order_ = planExecutionOrder(base_, graph_, groups_);
}

bool RegionEncoding::accepts(size_t library, size_t first, size_t last) const {
  const auto key = std::make_tuple(library, first, last);
  if (auto it = accepted_.find(key); it != accepted_.end()) return it->second;
  NodeSet nodes(graph_.numNodes());
  for (size_t i = first; i <= last; ++i) nodes |= groups_[order_[i]];
  const bool ok = libraries_[library].refusal(nodes).empty();
  accepted_[key] = ok;
  return ok;
}

RegionEncoding::Decoded RegionEncoding::decode(const Genome& genome) const {
  COLLAGE_CHECK(genome.size() == length(), "a genome of the wrong length");
  Decoded d;
  d.canonical.assign(length(), 0);
  d.plan = base_;
  d.plan.groups.clear();
  d.plan.predictedNs = kUnknownCost;  // other groups: neither the base's time nor its sum
  d.plan.kernelsAloneNs = kUnknownCost;
  auto keep = [&](size_t gene) { d.plan.groups.push_back(base_.groups[order_[gene]]); };
  size_t i = 0;
  while (i < length()) {
    const uint8_t allele = genome[i];
    if (allele == 0 || allele > libraries_.size()) {
      keep(i++);
      continue;
    }
    size_t runEnd = i;  // inclusive
    while (runEnd + 1 < length() && genome[runEnd + 1] == allele) ++runEnd;
    const size_t library = allele - 1u;
    const std::string& backend = libraries_[library].backend;
    for (size_t s = i; s <= runEnd;) {
      // The longest prefix of s..runEnd the library takes as one region.
      size_t best = SIZE_MAX;
      for (size_t t = s; t <= runEnd && t - s < kMaxRegionGroups; ++t)
        if (accepts(library, s, t)) best = t;
      if (best == SIZE_MAX) {  // not even the group alone
        keep(s++);
        continue;
      }
      if (best == s && base_.groups[order_[s]].backend == backend) {  // no change
        keep(s++);
        continue;
      }
      NodeSet nodes(graph_.numNodes());
      for (size_t t = s; t <= best; ++t) {
        nodes |= groups_[order_[t]];
        d.canonical[t] = allele;
      }
      PlanGroup region;
      region.nodes = nodeNames(graph_, nodes);
      region.backend = backend;
      region.pattern = "region";
      region.origin = PlanOrigin::GraphLevel;
      d.plan.groups.push_back(std::move(region));
      ++d.regions;
      s = best + 1;
    }
    i = runEnd + 1;
  }
  d.key = placementKey(d.plan);
  return d;
}

std::string RegionEncoding::toString(const Genome& genome) const {
  std::string s;
  for (uint8_t g : genome) s += static_cast<char>('0' + g);
  return s;
}

std::optional<Genome> RegionEncoding::fromString(const std::string& text) const {
  if (text.size() != length()) return std::nullopt;
  Genome g;
  for (char c : text) {
    if (c < '0' || c - '0' >= alleles()) return std::nullopt;
    g.push_back(static_cast<uint8_t>(c - '0'));
  }
  return g;
}

std::vector<std::string> describeRegionChanges(const Plan& base, const Plan& plan) {
  std::map<std::string, size_t> baseGroupOf;  // node name -> base group
  for (size_t g = 0; g < base.groups.size(); ++g)
    for (const std::string& n : base.groups[g].nodes) baseGroupOf[n] = g;
  std::vector<std::string> lines;
  for (const PlanGroup& group : plan.groups) {
    if (group.origin != PlanOrigin::GraphLevel) continue;
    std::map<size_t, bool> merged;
    std::map<std::string, int> backends;
    for (const std::string& n : group.nodes) {
      auto it = baseGroupOf.find(n);
      if (it == baseGroupOf.end() || merged.count(it->second)) continue;
      merged[it->second] = true;
      ++backends[base.groups[it->second].backend];
    }
    std::string from;
    for (const auto& [b, count] : backends) from += (from.empty() ? "" : ", ") + b + " " + std::to_string(count);
    std::string line = group.backend + " region of " + std::to_string(group.nodes.size()) + " node" +
                       (group.nodes.size() == 1 ? "" : "s") + " (" + group.nodes.front() +
                       (group.nodes.size() > 1 ? " .. " + group.nodes.back() : "") + "): ";
    line += merged.size() == 1 ? "moved 1 group (" + from + ")"
                               : "merged " + std::to_string(merged.size()) + " groups (" + from + ")";
    lines.push_back(line);
  }
  return lines;
}

}  // namespace collage
