// `collage measure-worker model.onnx`: the isolated measurement process the
// optimizer starts (core/measure/measurer.h). Not for people: it reads JSON requests
// on stdin and answers on stdout.
#include <iostream>
#include <map>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "core/measure/measurer.h"
#include "core/ir/threading.h"

namespace collage::cli {

Action addMeasureWorkerCommand(CLI::App& app) {
  auto* command = app.add_subcommand("measure-worker", "");  // hidden: empty description
  command->group("");
  auto options = std::make_shared<ModelOptions>();
  options->addTo(*command);
  return [options]() {
    Graph graph = options->load(/*quiet=*/true);
    std::map<std::string, std::unique_ptr<Backend>> backends;
    auto backendFor = [&](const std::string& name) -> Backend* {
      auto it = backends.find(name);
      if (it == backends.end()) it = backends.emplace(name, createBackend(name)).first;
      return it->second.get();
    };
    runMeasurementWorker(graph, backendFor, MeasurerOptions::forModel(graph), std::cin, std::cout);
    return 0;
  };
}

}  // namespace collage::cli
