#include <cmath>
#include <cstdio>
#include <map>

#include "api/api_internal.h"
#include "core/ir/hashing.h"
#include "core/plan/plan_export.h"

namespace collage::api {

Plan Plan::load(const std::string& path) {
  return translateErrors([&] { return wrapPlan(loadPlan(path)); });
}

Plan Plan::fromAnnotatedOnnx(const std::string& path) {
  return translateErrors([&] { return wrapPlan(planFromAnnotatedOnnx(path)); });
}

Plan Plan::singleBackend(const Model& model, const std::string& backend) {
  return translateErrors([&] {
    collage::Plan plan = singleNodePlan(model.impl().graph, backend);
    // Pinned to the model file, as an optimized plan is.
    plan.modelPath = model.path();
    plan.modelSha256 = sha256File(model.path());
    return wrapPlan(std::move(plan));
  });
}

void Plan::save(const std::string& path) const {
  translateErrors([&] { savePlan(impl_->plan, path); });
}

std::string Plan::toJson() const { return planToJson(impl_->plan); }

std::vector<PlanGroup> Plan::groups() const {
  std::vector<PlanGroup> out;
  for (const auto& g : impl_->plan.groups)
    out.push_back(PlanGroup{g.backend, g.nodes, g.pattern, std::string(planOriginName(g.origin)),
                            g.costNs / 1e6});
  return out;
}

double Plan::predictedMs() const { return impl_->plan.predictedNs / 1e6; }
std::string Plan::modelSha256() const { return impl_->plan.modelSha256; }
std::string Plan::createdBy() const { return impl_->plan.createdBy; }

std::string Plan::summary() const {
  // Per backend: groups and the share of the measured cost.
  std::map<std::string, std::pair<int, double>> perBackend;
  double total = 0;
  for (const auto& g : impl_->plan.groups) {
    auto& [groups, ns] = perBackend[g.backend];
    ++groups;
    if (std::isfinite(g.costNs)) ns += g.costNs, total += g.costNs;
  }
  std::string s = std::to_string(impl_->plan.groups.size()) + " groups:";
  bool first = true;
  for (const auto& [backend, v] : perBackend) {
    char share[32] = "";
    if (total > 0) std::snprintf(share, sizeof share, " (%.1f%%)", 100 * v.second / total);
    s += (first ? " " : ", ") + backend + " " + std::to_string(v.first) + share;
    first = false;
  }
  if (std::isfinite(impl_->plan.predictedNs)) {
    char predicted[48];
    std::snprintf(predicted, sizeof predicted, "; predicted %.3f ms",
                  impl_->plan.predictedNs / 1e6);
    s += predicted;
  }
  return s;
}

}  // namespace collage::api
