// `collage measure-worker model.onnx`: the isolated measurement process the
// optimizer starts (core/measure/measurer.h). Not for people: it reads JSON requests
// on stdin and answers on stdout.
#include <fstream>
#include <iostream>
#include <sstream>
#include <map>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "core/measure/measurer.h"
#include "core/rewrite/equivalence_check.h"
#include "core/rewrite/substitution_spec_file.h"
#include "core/ir/threading.h"

namespace collage::cli {

Action addMeasureWorkerCommand(CLI::App& app) {
  auto* command = app.add_subcommand("measure-worker", "");  // hidden: empty description
  command->group("");
  auto options = std::make_shared<ModelOptions>();
  options->addTo(*command);
  // The graph the optimizer measures may be the model rewritten by graph
  // substitutions (core/search/substitution_search.h): the sites to replay.
  auto substitutions = std::make_shared<std::string>();
  command->add_option("--substitutions", *substitutions, "");
  // The user's substitution rule files those sites may name (the optimizer's --substitution-rules).
  auto ruleFiles = std::make_shared<std::vector<std::string>>();
  command->add_option("--substitution-rules", *ruleFiles, "");
  return [options, substitutions, ruleFiles]() {
    for (const std::string& file : *ruleFiles)
      for (const std::string& e : registerSubstitutionRules(file)) std::cerr << "warning: " << e << "\n";
    Graph graph = options->load(/*quiet=*/true);
    // Measured as the model is (the protocol follows the model as given).
    const MeasurerOptions measurerOptions = MeasurerOptions::forModel(graph);
    if (!substitutions->empty()) {
      std::ifstream in(*substitutions);
      std::stringstream text;
      text << in.rdbuf();
      graph = replaySubstitutions(graph, sitesFromJson(text.str(), *substitutions));
    }
    std::map<std::string, std::unique_ptr<Backend>> backends;
    auto backendFor = [&](const std::string& name) -> Backend* {
      auto it = backends.find(name);
      if (it == backends.end()) it = backends.emplace(name, createBackend(name)).first;
      return it->second.get();
    };
    runMeasurementWorker(graph, backendFor, measurerOptions, std::cin, std::cout);
    return 0;
  };
}

}  // namespace collage::cli
