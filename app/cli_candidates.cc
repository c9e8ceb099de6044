// `collage candidates model.onnx`: what each backend could run, and where.
#include <cstdio>
#include <iostream>
#include <map>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "core/patterns/candidate.h"
#include "core/ir/error.h"

namespace collage::cli {

Action addCandidatesCommand(CLI::App& app) {
  struct Options : ModelOptions {
    std::vector<std::string> backends;
    std::string node;
    bool list = false;
  };
  auto* command = app.add_subcommand("candidates", "enumerate every (group, backend) candidate");
  auto options = std::make_shared<Options>();
  options->addTo(*command);
  command->add_option("--backends", options->backends, "backends to ask (default: all)")
      ->delimiter(',');
  command->add_option("--node", options->node, "list the candidates covering this node (name)");
  command->add_flag("--list", options->list, "list every candidate");
  return [options]() {
    Graph graph = options->load();
    BackendSet set = loadBackendSet(options->backends);
    for (const auto& w : set.warnings) std::cerr << "warning: " << w << "\n";
    CandidateSet candidates = enumerateCandidates(graph, set.capabilities());
    std::map<std::pair<std::string, std::string>, int> counts;
    std::map<std::string, int> perBackend;
    for (const auto& c : candidates.all()) {
      ++counts[{c.backend, c.origin}];
      ++perBackend[c.backend];
    }
    std::printf("%zu candidates for %d nodes\n", candidates.size(), graph.numNodes());
    for (const auto& [backend, n] : perBackend) {
      std::printf("%-10s %6d\n", backend.c_str(), n);
      for (const auto& [key, count] : counts)
        if (key.first == backend) std::printf("    %-40s %6d\n", key.second.c_str(), count);
    }
    if (!options->node.empty()) {
      auto id = graph.findNode(options->node);
      if (!id) throw Error(options->modelPath + ": no node named '" + options->node + "'");
      std::printf("candidates covering '%s' (%s):\n", options->node.c_str(),
                  graph.node(*id).op.c_str());
      for (int32_t i : candidates.covering(*id))
        std::printf("  %s\n", candidates[i].toString(graph).c_str());
    }
    if (options->list)
      for (const auto& c : candidates.all()) std::printf("  %s\n", c.toString(graph).c_str());
    return 0;
  };
}

}  // namespace collage::cli
