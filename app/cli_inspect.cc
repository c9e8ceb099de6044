// `collage inspect model.onnx`: inputs, outputs, op counts, FLOPs, parameters.
#include <iostream>

#include "app/cli_common.h"
#include "core/ops/model_stats.h"

namespace collage::cli {

Action addInspectCommand(CLI::App& app) {
  auto* command = app.add_subcommand("inspect", "print a model's inputs, outputs, ops and cost");
  auto options = std::make_shared<ModelOptions>();
  options->addTo(*command);
  return [options]() {
    std::cout << describeModel(options->load(), options->modelPath);
    return 0;
  };
}

}  // namespace collage::cli
