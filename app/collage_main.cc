// `collage`: the command line face of Collage Studio. Every subcommand is a
// thin layer over collage_core, the same library the desktop app uses.
#include <CLI/CLI.hpp>
#include <iostream>
#include <map>

#include "app/cli_common.h"
#include "core/ir/error.h"
#include "core/ir/tensor.h"
#include "core/ir/threading.h"

namespace collage::cli {

void ModelOptions::addTo(CLI::App& command) {
  command.add_option("model", modelPath, "ONNX model file")->required();
  command.add_option("--input-shape", inputShapes,
                     "bind an input's dynamic dimensions, e.g. input_ids=1x128 (repeatable)");
  command.add_option("--input-value", inputValues,
                     "bind a one-element input to a constant, e.g. use_cache_branch=true: the "
                     "importer folds what it decides (an If on it keeps the branch taken; a merged "
                     "decoder's steps and prompt, docs/decoding.md) (repeatable)");
  command.add_option("--last-row", lastRows,
                     "compute this output at the last index of its second-to-last axis only, e.g. "
                     "logits: a decoder's prompt pass, whose last position's logits are what "
                     "generating reads (generate --print-prefill-bindings prints it; "
                     "docs/decoding.md) (repeatable)");
}

std::vector<std::string> ModelOptions::bindings() const {
  std::vector<std::string> words = inputShapes;
  for (const std::string& text : inputValues) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error("bad --input-value '" + text + "': expected NAME=VALUE, e.g. use_cache_branch=true");
    words.push_back(text.substr(0, eq) + ":" + text.substr(eq));
  }
  for (const std::string& name : lastRows) words.push_back(name + std::string(kLastRowBinding));
  return words;
}

namespace {

// The constant of an --input-value binding: one element of the type its text
// says (true/false: bool; an integer: int64; else float32; the importer
// refuses one of another type than the input's), shaped as the input is
// declared, every dim 1 (a scalar, or [1] as exporters declare a flag).
Tensor inputValueTensor(const std::string& modelPath, const std::string& name,
                        const std::string& text) {
  const std::string label = "--input-value " + name + "=" + text;
  Shape shape;
  bool found = false;
  for (const DeclaredInput& in : readDeclaredInputs(modelPath)) {
    if (in.name != name) continue;
    found = true;
    for (int64_t d : in.dims)
      if (d > 1)
        throw Error(label + ": input '" + name + "' of " + modelPath + " has " +
                    std::to_string(d) + " elements on a dim: one value binds a one-element input");
    shape.assign(in.dims.size(), 1);
  }
  if (!found) return Tensor(TensorType{ElementType::Bool, {}});  // the importer names it
  if (text == "true" || text == "false") {
    Tensor t(TensorType{ElementType::Bool, shape});
    *static_cast<bool*>(t.raw()) = text == "true";
    return t;
  }
  size_t used = 0;
  try {
    if (text.find_first_of(".eE") == std::string::npos) {
      const int64_t v = std::stoll(text, &used);
      if (used == text.size()) {
        Tensor t(TensorType{ElementType::Int64, shape});
        *static_cast<int64_t*>(t.raw()) = v;
        return t;
      }
    } else {
      const float v = std::stof(text, &used);
      if (used == text.size()) {
        Tensor t(TensorType{ElementType::Float32, shape});
        *static_cast<float*>(t.raw()) = v;
        return t;
      }
    }
  } catch (const std::exception&) {
  }
  throw Error("bad " + label + ": the value must be true, false, an integer or a decimal number");
}

}  // namespace

ImportOptions ModelOptions::importOptions() const {
  ImportOptions options;
  for (const auto& text : bindings()) {
    if (std::string output = lastRowOutputOf(text); !output.empty()) {
      options.lastRowOutputs.push_back(std::move(output));
      continue;
    }
    if (const size_t value = text.find(":="); value != std::string::npos) {
      const std::string name = text.substr(0, value);
      options.constantInputs[name] = inputValueTensor(modelPath, name, text.substr(value + 2));
      continue;
    }
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
