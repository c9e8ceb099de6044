// `collage inspect model.onnx`: inputs, outputs, op counts, FLOPs, parameters.
#include <cstdio>
#include <iostream>

#include "app/cli_common.h"
#include "core/ops/model_stats.h"

namespace collage::cli {

Action addInspectCommand(CLI::App& app) {
  auto* command = app.add_subcommand("inspect", "print a model's inputs, outputs, ops and cost");
  auto options = std::make_shared<ModelOptions>();
  options->addTo(*command);
  return [options]() {
    Graph graph = options->load();
    ModelStats stats = computeModelStats(graph);
    std::cout << "model:   " << options->modelPath << "\n";
    std::cout << "graph:   " << (graph.name.empty() ? "(unnamed)" : graph.name) << ", opset";
    for (const auto& [domain, version] : graph.opsetImports)
      std::cout << " " << (domain.empty() ? "ai.onnx" : domain) << ":" << version;
    std::cout << "\ninputs:\n";
    for (ValueId v : graph.inputs())
      std::cout << "  " << graph.value(v).name << "  " << graph.value(v).type.toString() << "\n";
    std::cout << "outputs:\n";
    for (ValueId v : graph.outputs())
      std::cout << "  " << graph.value(v).name << "  " << graph.value(v).type.toString() << "\n";
    std::cout << "nodes:   " << stats.numNodes << "\n";
    std::cout << "flops:   " << formatFlops(stats.totalFlops) << "\n";
    std::cout << "params:  " << stats.parameterCount << " (" << formatBytes(stats.parameterBytes)
              << ")\n";
    std::cout << "ops:\n";
    for (const auto& [op, count] : stats.opCounts) std::printf("  %-24s %6d\n", op.c_str(), count);
    return 0;
  };
}

}  // namespace collage::cli
