#include "core/search/layout_charges.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/ir/error.h"

namespace collage {

namespace {

// value << 24 | kernels placed that offered the layout << 16 | layout
ValueId valueOf(LayoutCharges::Pending p) { return static_cast<ValueId>(p >> 24); }
int placedOf(LayoutCharges::Pending p) { return static_cast<int>((p >> 16) & 0xff); }
uint16_t layoutOf(LayoutCharges::Pending p) { return static_cast<uint16_t>(p & 0xffff); }
LayoutCharges::Pending pack(ValueId v, int placed, uint16_t layout) {
  return (static_cast<uint64_t>(v) << 24) | (static_cast<uint64_t>(std::min(placed, 255)) << 16) | layout;
}

size_t bytesOf(const Graph& graph, ValueId v) { return graph.value(v).type.byteSize(); }

}  // namespace

std::string ReorderModel::toString() const {
  char line[160];
  std::snprintf(line, sizeof line, "%.2f us + %.3f us/MiB per reorder (fitted on %d kernels)",
                fixedNs / 1e3, perByteNs * 1048576.0 / 1e3, samples);
  return line;
}

ReorderModel fitReorderModel(const Graph& graph, const std::vector<Cost>& plainNs,
                             const std::vector<LayoutOffers>& offers) {
  // Each candidate gives one point: its average reorder (plain - native over
  // its offered boundaries) against the average bytes one moves. A line
  // through them by Theil-Sen (the median of the slopes between pairs, then
  // the median intercept): one kernel measured while the machine was busy
  // would drag a least-squares fit by milliseconds, not this one.
  std::vector<double> x, y;
  for (size_t c = 0; c < offers.size() && c < plainNs.size(); ++c) {
    const LayoutOffers& o = offers[c];
    if (o.offers.empty() || o.agnostic || !isKnown(o.nativeNs) || !isKnown(plainNs[c])) continue;
    const double n = static_cast<double>(o.offers.size());
    double bytes = 0;
    for (const LayoutOffers::Offer& offer : o.offers) bytes += static_cast<double>(bytesOf(graph, offer.value));
    x.push_back(bytes / n);
    y.push_back(std::max(0.0, plainNs[c] - o.nativeNs) / n);
  }
  ReorderModel m;
  m.samples = static_cast<int>(x.size());
  if (x.empty()) return m;
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> slopes;
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = i + 1; j < x.size(); ++j)
      if (x[j] != x[i]) slopes.push_back((y[j] - y[i]) / (x[j] - x[i]));
  m.perByteNs = slopes.empty() ? 0.0 : std::max(0.0, median(slopes));
  std::vector<double> intercepts;
  for (size_t i = 0; i < x.size(); ++i) intercepts.push_back(y[i] - m.perByteNs * x[i]);
  m.fixedNs = std::max(0.0, median(intercepts));
  return m;
}

LayoutCharges::LayoutCharges(const Graph& graph, const CandidateSet& candidates,
                             std::vector<LayoutOffers> offers, ReorderModel model)
    : graph_(graph), candidates_(candidates), offers_(std::move(offers)), model_(model) {
  offers_.resize(candidates.size());
  active_ = model_.samples > 0 &&
            std::any_of(offers_.begin(), offers_.end(), [](const LayoutOffers& o) {
              return !o.offers.empty() && isKnown(o.nativeNs);
            });
  if (!active_) return;
  participants_.resize(static_cast<size_t>(graph.numValues()));
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    for (ValueId v : graph.node(n).inputs)
      if (v != kNoValue) participants_[static_cast<size_t>(v)].push_back(n);
    for (ValueId v : graph.node(n).outputs)
      if (v != kNoValue) participants_[static_cast<size_t>(v)].push_back(n);
  }
  for (auto& p : participants_) {
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
  }
  boundaries_.resize(candidates.size());
  for (size_t c = 0; c < candidates.size(); ++c) {
    // Every candidate has its boundaries (one that offers nothing still ends
    // a pending hand-over); only those charged native have layouts there.
    const bool native = charged(static_cast<int32_t>(c));
    const NodeSet& nodes = candidates[c].nodes;
    auto layoutFor = [&](ValueId v, bool output) -> uint16_t {
      if (!native) return 0;
      for (const LayoutOffers::Offer& o : offers_[c].offers) {
        if (o.value != v || o.output != output) continue;
        auto it = std::find(layouts_.begin(), layouts_.end(), o.layout);
        if (it == layouts_.end()) it = layouts_.insert(layouts_.end(), o.layout);
        return static_cast<uint16_t>(it - layouts_.begin() + 1);
      }
      return 0;
    };
    auto addBoundary = [&](ValueId v, bool output) {
      for (const Boundary& b : boundaries_[c])
        if (b.value == v) return;
      boundaries_[c].push_back({v, layoutFor(v, output), !offers_[c].agnostic});
    };
    nodes.forEach([&](NodeId n) {
      for (ValueId v : graph.node(n).inputs) {
        if (v == kNoValue || graph.value(v).isConstant()) continue;
        const NodeId p = graph.value(v).producer;
        if (p == kNoNode || !nodes.contains(p)) addBoundary(v, false);
      }
      for (ValueId v : graph.node(n).outputs) {
        if (v == kNoValue) continue;
        const Value& value = graph.value(v);
        const bool outside = value.isGraphOutput ||
                             std::any_of(value.consumers.begin(), value.consumers.end(),
                                         [&](NodeId u) { return !nodes.contains(u); });
        if (outside) addBoundary(v, true);
      }
    });
  }
}

bool LayoutCharges::charged(int32_t c) const {
  const LayoutOffers& o = offers_[static_cast<size_t>(c)];
  return !o.offers.empty() && isKnown(o.nativeNs);
}

Cost LayoutCharges::kernelNs(int32_t c, Cost plainNs) const {
  if (!active_ || !charged(c) || !isKnown(plainNs)) return plainNs;
  return std::min(plainNs, offers_[static_cast<size_t>(c)].nativeNs);
}

Cost LayoutCharges::reorderNs(ValueId v) const { return model_.ns(bytesOf(graph_, v)); }

Cost LayoutCharges::add(const NodeSet& covered, const std::vector<Pending>& pending, int32_t c,
                        std::vector<Pending>* next) const {
  *next = pending;
  if (!active_) return 0;
  const NodeSet& nodes = candidates_[static_cast<size_t>(c)].nodes;
  Cost cost = 0;
  for (const Boundary& b : boundaries_[static_cast<size_t>(c)]) {
    const Value& value = graph_.value(b.value);
    // A graph input or output is plain for its reader or the caller.
    if (value.producer == kNoNode || value.isGraphOutput) {
      cost += reorderNs(b.value) * b.charged();
      continue;
    }
    int placedOthers = 0;
    bool allPlaced = true;
    for (NodeId n : participants_[static_cast<size_t>(b.value)]) {
      if (nodes.contains(n)) continue;
      if (covered.contains(n))
        ++placedOthers;
      else
        allPlaced = false;
    }
    auto it = std::find_if(next->begin(), next->end(),
                           [&](Pending p) { return valueOf(p) == b.value; });
    if (it != next->end()) {
      if (layoutOf(*it) == b.layout) {
        if (allPlaced)
          next->erase(it);  // handed over
        else
          *it = pack(b.value, placedOf(*it) + b.charged(), b.layout);
        continue;
      }
      // The hand-over is off: every kernel placed so far reorders, and so do we.
      cost += reorderNs(b.value) * (placedOf(*it) + b.charged());
      next->erase(it);
    } else if (placedOthers == 0) {
      if (b.layout != 0 && !allPlaced) next->push_back(pack(b.value, b.charged(), b.layout));
    } else {
      cost += reorderNs(b.value) * b.charged();  // a participant placed before offered nothing, or another layout
    }
  }
  std::sort(next->begin(), next->end());
  return cost;
}

Cost LayoutCharges::pendingSpread(const NodeSet& covered, const std::vector<Pending>& ref,
                                  const std::vector<Pending>& other) const {
  // A value's future reorders: none pending = one per later kernel that
  // offers a layout; pending with k deferred = none if every later kernel
  // offers its layout, else k more than that, at most.
  Cost spread = 0;
  size_t i = 0, j = 0;
  while (i < ref.size() || j < other.size()) {
    const ValueId a = i < ref.size() ? valueOf(ref[i]) : kNoValue;
    const ValueId b = j < other.size() ? valueOf(other[j]) : kNoValue;
    if (j == other.size() || (i < ref.size() && a < b)) {
      spread += reorderNs(a) * placedOf(ref[i]);  // `other` has paid them already
      ++i;
    } else if (i == ref.size() || b < a) {
      int left = 0;  // `ref` pays one per later kernel where `other` may hand over
      for (NodeId n : participants_[static_cast<size_t>(b)]) left += covered.contains(n) ? 0 : 1;
      spread += reorderNs(b) * left;
      ++j;
    } else {
      if (ref[i] != other[j]) {
        int left = placedOf(ref[i]);
        for (NodeId n : participants_[static_cast<size_t>(a)]) left += covered.contains(n) ? 0 : 1;
        spread += reorderNs(a) * left;
      }
      ++i;
      ++j;
    }
  }
  return spread;
}

NodeId LayoutCharges::lastParticipant(const NodeSet& covered, ValueId v) const {
  NodeId last = kNoNode;
  for (NodeId n : participants_[static_cast<size_t>(v)]) {
    if (covered.contains(n)) continue;
    if (last != kNoNode) return kNoNode;
    last = n;
  }
  return last;
}

Cost LayoutCharges::coverCost(const std::vector<int32_t>& chosen) const {
  if (!active_) return 0;
  // Per value: the layouts of its producer's and consumers' kernels.
  std::map<ValueId, std::vector<Boundary>> sides;
  for (int32_t c : chosen)
    for (const Boundary& b : boundaries_[static_cast<size_t>(c)]) sides[b.value].push_back(b);
  Cost cost = 0;
  for (const auto& [v, bs] : sides) {
    const Value& value = graph_.value(v);
    const bool same = value.producer != kNoNode && !value.isGraphOutput && bs.size() >= 2 && bs[0].layout != 0 &&
                      std::all_of(bs.begin(), bs.end(), [&](const Boundary& b) { return b.layout == bs[0].layout; });
    if (same) continue;
    for (const Boundary& b : bs) cost += reorderNs(v) * b.charged();
  }
  return cost;
}

void chargeKernelsAsTheDp(const LayoutCharges& charges, std::vector<PlanGroup>& groups) {
  for (PlanGroup& g : groups)
    if (g.candidate && g.origin != PlanOrigin::GraphLevel) g.costNs = charges.kernelNs(*g.candidate, g.costNs);
}

}  // namespace collage
