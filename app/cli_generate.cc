// `collage generate model.onnx --prompt-ids 1,2,3 --max-new-tokens N`: runs a
// decoder with a KV cache through the runtime's decode loop (core/decode/)
// on the reference executor or a plan's Session, and prints the generated ids
// and the latency of the prefill and of the median decode step. Ids in and
// out only: no tokenizer yet (#42).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "core/decode/cache_plan.h"
#include "core/decode/decoder.h"
#include "core/ir/error.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage::cli {

Action addGenerateCommand(CLI::App& app) {
  struct GenerateCommandOptions {
    std::string modelPath;
    std::string plan;
    std::vector<int64_t> promptIds;
    int64_t maxLength = 0;
    GenerateOptions generate;
    int64_t eos = -1;
    bool printBindings = false;
  };
  auto* command = app.add_subcommand(
      "generate",
      "generate token ids with a decoder model that has a KV cache (prefill, then decode steps)");
  auto o = std::make_shared<GenerateCommandOptions>();
  command
      ->add_option("model", o->modelPath,
                   "ONNX decoder with past_key_values inputs and present outputs")
      ->required();
  command->add_option("--prompt-ids", o->promptIds, "the prompt's token ids, e.g. 1,2,3")
      ->delimiter(',')
      ->required();
  command->add_option("--max-new-tokens", o->generate.maxNewTokens, "stop after this many new ids")
      ->check(CLI::PositiveNumber);
  command->add_option(
      "--max-length", o->maxLength,
      "the cache's rows (default: those --plan was made for, else the prompt plus the new tokens)");
  command->add_option(
      "--plan", o->plan,
      "run the steps with this plan's Session (optimize the model with the bindings "
      "--print-bindings shows)");
  command->add_option("--seed", o->generate.seed, "seed of the sampling");
  command
      ->add_option("--temperature", o->generate.temperature, "0: greedy (default); more: sampled")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--top-k", o->generate.topK, "sample from the K most likely ids (0: all)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--eos", o->eos, "stop after generating this id");
  command->add_flag(
      "--print-bindings", o->printBindings,
      "print the --input-shape bindings of the step graph (what a plan must be optimized with)");
  return [o]() {
    if (o->eos >= 0) o->generate.eos = o->eos;
    const DecoderSignature signature = probeDecoderSignature(o->modelPath);
    std::unique_ptr<Plan> plan;
    if (!o->plan.empty()) plan = std::make_unique<Plan>(loadPlan(o->plan));
    // The cache's rows: as asked, else those the plan was made for, else
    // the prompt and the new tokens.
    int64_t capacity = o->maxLength;
    if (capacity <= 0 && plan) capacity = planCapacity(signature, plan->inputShapes);
    if (capacity <= 0)
      capacity = static_cast<int64_t>(o->promptIds.size()) + o->generate.maxNewTokens;
    const DecodeModel model = importDecodeModel(o->modelPath, capacity, &signature);
    if (o->printBindings) {
      for (const std::string& b : model.bindings) std::cout << "--input-shape " << b << "\n";
      return 0;
    }
    std::unique_ptr<BackendSet> backends;
    PlannedDecoder planned;
    if (plan) {
      if (!plan->substitutions.empty())
        throw Error(o->plan + ": a plan with graph substitutions is not supported by generate yet");
      std::vector<std::string> warnings;
      // A plan made for other bindings is refused with them; say which
      // bindings this cache needs (and that --max-length sets them).
      try {
        backends = std::make_unique<BackendSet>(
            loadBackendsForPlan(*plan, model.graph, o->modelPath, {}, &warnings));
        planned =
            plannedDecoder(model, *plan, [&](const std::string& n) { return backends->find(n); });
      } catch (const Error& e) {
        std::string hint;
        for (const std::string& b : model.bindings) hint += " --input-shape " + b;
        throw Error(std::string(e.what()) + " (generate runs a plan made for the step graph of a " +
                    std::to_string(capacity) + "-row cache:" + hint +
                    "; --max-length sets the rows)");
      }
      for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
      if (!planned.fallback.empty())
        std::cerr << "warning: the cache is copied into each step's present: " << planned.fallback
                  << "\n";
    } else {
      planned.decoder = std::make_unique<Decoder>(model);
    }
    Decoder& decoder = *planned.decoder;
    const Generation g = decoder.generate(o->promptIds, o->generate);
    std::string ids;
    for (int64_t t : g.tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
    std::printf("generated: %s\n", ids.c_str());
    std::printf("stopped: %s after %zu new token(s)\n", g.stop.c_str(), g.tokens.size());
    std::vector<double> steps = g.stepMs;
    std::sort(steps.begin(), steps.end());
    if (decoder.promptRuns() == 1 && o->promptIds.size() > 1)
      std::printf("prefill: %.3f ms for %zu token(s) (one pass)\n", g.prefillMs,
                  o->promptIds.size());
    else
      std::printf("prefill: %.3f ms for %zu token(s) (one step each: %s)\n", g.prefillMs,
                  o->promptIds.size(), decoder.promptOneTokenAStepWhy().c_str());
    if (steps.empty())
      std::printf("decode step: none run\n");
    else
      std::printf("decode step: median %.3f ms over %zu step(s) (min %.3f, max %.3f), %s\n",
                  steps[steps.size() / 2], steps.size(), steps.front(), steps.back(),
                  plan ? ("plan " + o->plan).c_str() : "reference executor");
    std::printf("cache: %lld rows, %zu bytes preallocated, %zu bytes appended\n",
                static_cast<long long>(decoder.capacity()), decoder.cacheBytes(),
                decoder.bytesAppended());
    // What the steps' Concat(past, new) wrote: the new rows only in place,
    // the whole present each step when copied.
    std::printf("cache concats: %zu bytes written (%s)\n", decoder.presentBytesWritten(),
                decoder.inPlace() ? "in place" : "copied each step");
    return 0;
  };
}

}  // namespace collage::cli
