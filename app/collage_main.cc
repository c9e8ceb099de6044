// `collage`: the command line face of Collage Studio. Every subcommand is a
// thin layer over collage_core, the same library the desktop app uses.
#include <CLI/CLI.hpp>
#include <iostream>
#include <map>

#include "app/cli_common.h"
#include "core/ir/error.h"
#include "core/ir/threading.h"

namespace collage::cli {

void ModelOptions::addTo(CLI::App& command) {
  command.add_option("model", modelPath, "ONNX model file")->required();
  command.add_option("--input-shape", inputShapes,
                     "bind an input's dynamic dimensions, e.g. input_ids=1x128 (repeatable)");
}

ImportOptions ModelOptions::importOptions() const {
  ImportOptions options;
  for (const auto& text : inputShapes) {
    auto [name, shape] = parseInputShapeBinding(text);
    options.inputShapes[name] = shape;
  }
  return options;
}

Graph ModelOptions::load(bool quiet) const {
  std::vector<std::string> notes;
  ImportOptions options = importOptions();
  options.notes = &notes;
  Graph graph = importOnnx(modelPath, options);
  if (!quiet)
    for (const auto& note : notes) std::cerr << "note: " << note << "\n";
  return graph;
}

}  // namespace collage::cli

int main(int argc, char** argv) {
  using namespace collage;
  CLI::App app{"collage: place the parts of an ONNX model on the backends that run them fastest"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads,
                 "threads for every backend (default: the number of cores)");
  std::map<CLI::App*, cli::Action> actions;
  auto add = [&](cli::Action (*registrar)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    cli::Action action = registrar(app);
    actions[app.get_subcommands({})[before]] = std::move(action);
  };
  add(cli::addInspectCommand);
  add(cli::addRunCommand);
  add(cli::addGenerateCommand);
  add(cli::addDecodeParallelCommand);
  add(cli::addCandidatesCommand);
  add(cli::addSpecCommand);
  add(cli::addOptimizeCommand);
  add(cli::addMeasureWorkerCommand);
  add(cli::addMeasureBatchCommand);
  add(cli::addMeasurePlanPairCommand);
  add(cli::addDbCommand);
  add(cli::addExplainCommand);
  add(cli::addLayoutWorkerCommand);
  add(cli::addPipelineCommand);
  add(cli::addLinkCommand);

  CLI11_PARSE(app, argc, argv);
  setThreadCount(threads);
  try {
    for (auto& [command, action] : actions)
      if (command->parsed()) return action();
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
