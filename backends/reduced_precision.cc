#include "backends/reduced_precision.h"

#include <algorithm>
#include <cstdio>

#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/runtime/session.h"

namespace collage {

namespace {
std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

std::string toleranceText(const Tolerance& t) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "rtol %g, atol %g", t.rtol, t.atol);
  return buf;
}
}  // namespace

std::vector<std::string> knownPrecisions() {
  std::vector<std::string> out;
  for (const std::string& name : compiledBackendNames())
    if (const auto r = reducedPrecisionOf(name);
        r && std::find(out.begin(), out.end(), r->precision) == out.end())
      out.push_back(r->precision);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> withAllowedPrecisions(std::vector<std::string> names,
                                               const std::vector<std::string>& allowed) {
  if (allowed.empty()) return names;
  if (names.empty()) names = defaultBackendNames();
  const std::vector<std::string> known = knownPrecisions();
  const std::vector<std::string> available = builtinBackendNames();
  for (const std::string& precision : allowed) {
    if (std::find(known.begin(), known.end(), precision) == known.end())
      throw Error("precision '" + precision + "': no backend of this build computes in it (known: " +
                  (known.empty() ? std::string("none") : joined(known)) + ")");
    std::vector<std::string> unavailable;
    bool any = false;
    for (const std::string& name : compiledBackendNames()) {
      const auto r = reducedPrecisionOf(name);
      if (!r || r->precision != precision) continue;
      if (std::find(available.begin(), available.end(), name) == available.end()) {
        unavailable.push_back(name + ": " + backendUnavailableReason(name));
        continue;
      }
      any = true;
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    if (!any)
      throw Error("precision '" + precision + "' is allowed, but no backend can run it here (" +
                  joined(unavailable) + ")");
  }
  return names;
}

PlanTolerance planTolerance(const Plan& plan) {
  PlanTolerance out;
  out.tolerance = kPlanTolerance;
  std::vector<std::string> parts;
  bool reduced = false;
  for (const PlanGroup& g : plan.groups) {
    if (std::find(out.reducedBackends.begin(), out.reducedBackends.end(), g.backend) !=
        out.reducedBackends.end())
      continue;
    const std::optional<ReducedPrecision> r = reducedPrecisionOf(g.backend);
    if (!r) continue;
    out.reducedBackends.push_back(g.backend);
    // The loosest of the declared tolerances, never tighter than float32's.
    out.tolerance.rtol = std::max(out.tolerance.rtol, r->tolerance.rtol);
    out.tolerance.atol = std::max(out.tolerance.atol, r->tolerance.atol);
    size_t groups = 0;
    for (const PlanGroup& h : plan.groups) groups += h.backend == g.backend ? 1 : 0;
    parts.push_back(std::to_string(groups) + " group(s) on " + g.backend + " in " + r->precision +
                    " (" + r->arithmetic + "; declared " + toleranceText(r->tolerance) + ")");
    reduced = true;
  }
  out.bound = std::max(kFloat32Bound, scaledBound(out.tolerance));
  char bound[96];
  std::snprintf(bound, sizeof bound, "%g of each output's largest value", out.bound);
  out.why =
      reduced ? std::string(bound) + ": the plan's loosest declared tolerance, for " +
                    joined(parts) + "; each group alone within its own backend's bound"
              : std::string(bound) + ": float32, every group on a backend that computes in float32";
  return out;
}

std::vector<std::string> kernelsBeyondDeclared(const std::vector<GroupError>& errors) {
  std::vector<std::string> out;
  for (const GroupError& e : errors) {
    const std::optional<ReducedPrecision> r = reducedPrecisionOf(e.backend);
    if (!r || r->kernelError <= 0 || !e.notRun.empty() || e.scaledError <= r->kernelError) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.3g of its largest value alone, beyond the %g %s declares",
                  e.scaledError, r->kernelError, r->precision.c_str());
    out.push_back("group " + std::to_string(e.group + 1) + " on " + e.backend + " (" + e.what +
                  "): max abs error " + std::to_string(e.maxAbsError) + " on '" + e.worstOutput +
                  "', " + buf);
  }
  return out;
}

std::string precisionNote(const std::string& backend) {
  const std::optional<ReducedPrecision> r = reducedPrecisionOf(backend);
  if (!r) return "";
  std::string note = "runs in " + r->precision + ": " + r->arithmetic + "; checked within " +
                     toleranceText(r->tolerance);
  if (r->kernelError > 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ", each kernel alone within %g of its largest value", r->kernelError);
    note += buf;
  }
  return note;
}

}  // namespace collage
