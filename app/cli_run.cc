// `collage run model.onnx --backend reference`: runs a model on random or given
// inputs, prints the outputs' summary and latency, and optionally checks them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "app/cli_common.h"
#include "core/error.h"
#include "core/reference_executor.h"
#include "core/tensor_compare.h"

namespace collage::cli {

Action addRunCommand(CLI::App& app) {
  struct RunOptions : ModelOptions {
    std::string backend = "reference";
    std::vector<std::string> inputFiles;
    std::vector<std::string> expectFiles;
    int repeat = 1;
    uint64_t seed = 0;
  };
  auto* command = app.add_subcommand("run", "run a model and report latency");
  auto options = std::make_shared<RunOptions>();
  options->addTo(*command);
  command->add_option("--backend", options->backend, "executor: reference")
      ->check(CLI::IsMember({"reference"}));
  command->add_option("--input", options->inputFiles,
                      "input TensorProto (.pb) files, in input order (default: random)");
  command->add_option("--expect", options->expectFiles,
                      "expected output TensorProto files, in output order: checked with "
                      "rtol 1e-3, atol 1e-5");
  command->add_option("--repeat", options->repeat, "timed runs")->check(CLI::PositiveNumber);
  command->add_option("--seed", options->seed, "seed of the random inputs");
  return [options]() {
    Graph graph = options->load();
    std::vector<Tensor> inputs;
    if (options->inputFiles.empty()) {
      inputs = randomInputs(graph, options->seed);
    } else {
      if (options->inputFiles.size() != graph.inputs().size())
        throw Error(options->modelPath + ": the model has " +
                    std::to_string(graph.inputs().size()) + " inputs, " +
                    std::to_string(options->inputFiles.size()) + " --input files given");
      for (const auto& f : options->inputFiles) inputs.push_back(readTensorProtoFile(f));
    }
    ReferenceExecutor executor(graph);
    std::vector<Tensor> outputs;
    std::vector<double> ms;
    for (int r = 0; r < options->repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      outputs = executor.run(inputs);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count());
    }
    std::sort(ms.begin(), ms.end());
    for (size_t i = 0; i < outputs.size(); ++i)
      std::cout << "output " << graph.value(graph.outputs()[i]).name << ": "
                << outputs[i].toString() << "\n";
    std::printf("latency: median %.3f ms over %d run(s) (min %.3f, max %.3f), backend %s\n",
                ms[ms.size() / 2], options->repeat, ms.front(), ms.back(),
                options->backend.c_str());
    int status = 0;
    if (!options->expectFiles.empty()) {
      if (options->expectFiles.size() != outputs.size())
        throw Error("the model has " + std::to_string(outputs.size()) + " outputs, " +
                    std::to_string(options->expectFiles.size()) + " --expect files given");
      // PyTorch and the reference sum in different orders: deep nets accumulate
      // float32 rounding, hence an absolute floor above ONNX's 1e-7.
      for (size_t i = 0; i < outputs.size(); ++i) {
        Tensor expected = readTensorProtoFile(options->expectFiles[i]);
        CompareResult c = compareTensors(outputs[i], expected, Tolerance{1e-3, 1e-5});
        std::cout << "check " << graph.value(graph.outputs()[i]).name << ": "
                  << (c.ok ? "matches" : "MISMATCH: " + c.message) << " (max abs error "
                  << c.maxAbsError << ")\n";
        if (!c.ok) status = 3;
      }
    }
    return status;
  };
}

}  // namespace collage::cli
