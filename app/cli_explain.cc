// `collage explain plan.json`: for each group, why this backend: its cost
// against every other backend that has a valid candidate for the same nodes
// (costs from the measurement database), or that it was pinned or the only
// choice.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "backends/reduced_precision.h"
#include "core/patterns/candidate_signature.h"
#include "core/ir/error.h"
#include "core/measure/measurement_db.h"
#include "core/plan/plan.h"

namespace collage::cli {

Action addExplainCommand(CLI::App& app) {
  struct Options {
    std::string plan;
    std::string model;
    std::string db = MeasurementDb::defaultPath();
  };
  auto* command = app.add_subcommand("explain", "say why each group of a plan runs where it does");
  auto options = std::make_shared<Options>();
  command->add_option("plan", options->plan, "plan file from collage optimize")->required();
  command->add_option("--model", options->model, "the model (default: the path in the plan)");
  command->add_option("--db", options->db, "measurement database to read costs from");
  return [options]() {
    Plan plan = loadPlan(options->plan);
    std::string modelPath = options->model.empty() ? plan.modelPath : options->model;
    ImportOptions importOptions;
    importOptions.inputShapes = plan.inputShapes;
    const Graph model = importOnnx(modelPath, importOptions);
    // The groups name the nodes of the model with the plan's substitutions.
    const Graph graph = planGraph(plan, model);
    // The default backends, and any other the plan uses (a reduced-precision
    // one it was allowed), so that its groups' alternatives are all shown.
    std::vector<std::string> names = defaultBackendNames();
    for (const PlanGroup& g : plan.groups)
      if (std::find(names.begin(), names.end(), g.backend) == names.end() &&
          backendUnavailableReason(g.backend).empty() && createBackend(g.backend))
        names.push_back(g.backend);
    BackendSet set = loadBackendSet(names);
    for (const auto& w : checkPlanAgainst(plan, graph, modelPath, set.versions(), nullptr))
      std::cerr << "warning: " << w << "\n";
    CandidateSet candidates =
        enumerateCandidates(graph, set.capabilities(), EnumerationOptions{false});
    MeasurementDb db(options->db);
    HardwareFingerprint here = set.fingerprint(model);

    std::printf("%s: %zu groups, predicted %s\n", options->plan.c_str(), plan.groups.size(),
                costToString(plan.predictedNs).c_str());
    if (!plan.createdBy.empty()) std::printf("made by %s\n", plan.createdBy.c_str());
    if (const GraphLevelSummary& gl = plan.graphLevel; gl.ran) {
      // What the second level changed, and what it measured doing so.
      if (gl.changes.empty())
        std::printf("graph-level search: %d generations, %d plans run; no plan beat the starting plan "
                    "(%.3f ms), which is kept\n",
                    gl.generations, gl.plansRun, gl.startMs);
      else
        std::printf("graph-level search: %.2fx faster than the starting plan, %.3f -> %.3f ms measured "
                    "whole and paired (%d generations, %d plans run); it changed:\n",
                    gl.gain, gl.startMs, gl.ms, gl.generations, gl.plansRun);
      for (const std::string& c : gl.changes) std::printf("  %s\n", c.c_str());
    }
    if (!plan.substitutions.empty()) {
      // What each rewrite bought: the op-level DP's cost before its move
      // minus after, shared among the sites of the move.
      std::printf("substitutions applied to the model before placement (%zu):\n", plan.substitutions.size());
      for (const PlanSubstitution& s : plan.substitutions) {
        const Substitution* rule = findSubstitution(s.site.rule);
        std::printf("  %-60s saved %s%s\n", s.site.toString().c_str(),
                    std::isnan(s.savedNs) ? "?" : (std::to_string(s.savedNs / 1e3).substr(0, 7) + " us").c_str(),
                    s.savedNs < 0 ? " (it cost more on its own: forced, or a relaxed step)" : "");
        if (rule && &s == &plan.substitutions.front()) std::printf("    (%s)\n", rule->describe().c_str());
      }
    }
    // Reduced precision: which groups trade it for speed, and what verify
    // then checks the plan's outputs with.
    if (const PlanTolerance tolerance = planTolerance(plan); !tolerance.reducedBackends.empty())
      std::printf("reduced precision: %s\n", tolerance.why.c_str());
    std::vector<NodeSet> groups = resolvePlanGroups(plan, graph);
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      const PlanGroup& group = plan.groups[g];
      std::printf("\n%s\n", plan.describeGroup(g).c_str());
      std::printf("  chosen: %s %s (%s)\n", group.backend.c_str(), costToString(group.costNs).c_str(),
                  std::string(planOriginName(group.origin)).c_str());
      if (const std::string note = precisionNote(group.backend); !note.empty())
        std::printf("  precision: %s\n", note.c_str());
      // Alternatives: every candidate with exactly these nodes.
      CandidateSignature sig = candidateSignature(graph, groups[g]);
      struct Alt {
        std::string backend, origin;
        Cost cost;
        std::string note;
      };
      std::vector<Alt> alts;
      for (const auto& c : candidates.all()) {
        if (!(c.nodes == groups[g]) || c.backend == group.backend) continue;
        Backend* b = set.find(c.backend);
        auto m = db.find(here, MeasurementKey{c.backend, b ? b->version() : "", sig.hash});
        alts.push_back(Alt{c.backend, c.origin, m ? m->cost() : kUnknownCost,
                           m ? (m->status == MeasurementStatus::Ok ? "" : m->toString()) : "not measured"});
      }
      std::sort(alts.begin(), alts.end(), [](const Alt& a, const Alt& b) { return a.cost < b.cost; });
      if (group.origin == PlanOrigin::User) {
        std::printf("  why: pinned by the user\n");
      } else if (group.origin == PlanOrigin::GraphLevel) {
        std::printf("  why: the graph-level search: whole plans ran faster with these nodes as one region "
                    "of %s (the region's own time, caches flushed, is shown; in sequence it runs faster)\n",
                    group.backend.c_str());
      } else if (alts.empty()) {
        std::printf("  why: the only backend with a candidate for exactly these nodes\n");
      } else {
        bool best = std::all_of(alts.begin(), alts.end(),
                                [&](const Alt& a) { return !(a.cost < group.costNs); });
        std::printf("  why: %s\n", best ? "fastest measured candidate for these nodes"
                                        : "cheaper overall with its neighbours' groups (the cover "
                                          "as a whole is cheapest)");
      }
      for (const auto& a : alts)
        std::printf("  vs %-9s %-12s %s%s%s\n", a.backend.c_str(), costToString(a.cost).c_str(),
                    a.origin.c_str(), a.note.empty() ? "" : "  ", a.note.c_str());
    }
    return 0;
  };
}

}  // namespace collage::cli
