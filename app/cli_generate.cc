// `collage generate model.onnx --prompt-ids 1,2,3 --max-new-tokens N`: runs a
// decoder with a KV cache through the runtime's decode loop (core/decode/)
// on the reference executor or a plan's Session, and prints the generated ids
// and the latency of the prefill and of the median decode step. Text in and
// out (`--prompt`) with the model's tokenizer (core/decode/tokenizer.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "app/cli_common.h"
#include "app/cli_generate_options.h"
#include "app/cli_generate_ranks.h"
#include "backends/backend_list.h"
#include "core/decode/cache_plan.h"
#include "core/decode/decoder.h"
#include "core/decode/tokenizer.h"
#include "core/ir/error.h"
#include "core/ir/threading.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage::cli {

namespace {

// The rows --cache-in's files hold: one file per past input, each named as
// its input (the TensorProto's name), all with the same rows on their
// sequence axis. Only the files' headers matter here, but a TensorProto is
// read whole: setCacheRows checks each file's shape and type when it fills.
int64_t cacheInRows(const GenerateCommandOptions& o, const DecoderSignature& signature) {
  std::map<std::string, std::string> fileOf;
  int64_t rows = -1;
  std::string first;
  for (const std::string& file : o.cacheIn) {
    std::string name;
    const Tensor t = readTensorProtoFile(file, &name);
    auto pair = std::find_if(signature.cache.begin(), signature.cache.end(),
                             [&](const KvCachePair& p) { return p.past == name; });
    if (pair == signature.cache.end())
      throw Error(file + ": tensor '" + name + "' is no past input of " + o.modelPath +
                  " (--cache-in takes one file per past input, named as it)");
    if (!fileOf.emplace(name, file).second)
      throw Error(file + ": tensor '" + name + "' is also in " + fileOf[name]);
    const auto axis = static_cast<size_t>(pair->sequenceAxis);
    if (t.shape().size() <= axis)
      throw Error(file + ": tensor '" + name + "' is " + t.type().toString() +
                  ": it has no sequence axis " + std::to_string(axis));
    const int64_t n = t.shape()[axis];
    if (rows >= 0 && n != rows)
      throw Error(file + ": tensor '" + name + "' holds " + std::to_string(n) + " rows, " + first +
                  " " + std::to_string(rows) + ": every past must hold the same rows");
    rows = n;
    first = fileOf[name];
  }
  for (const KvCachePair& p : signature.cache)
    if (!fileOf.count(p.past))
      throw Error("--cache-in has no file for past input '" + p.past + "' of " + o.modelPath);
  return rows;
}

// The model's tokenizer: --tokenizer, else one beside the model. `--prompt`
// needs one and is encoded with it (printGeneration prints the ids);
// with ids in, a tokenizer beside the model only adds the text, so one that
// does not load is a warning there.
void loadTokenizer(GenerateCommandOptions& o, bool textIn) {
  std::string path = o.tokenizerPath;
  if (path.empty()) path = Tokenizer::findBeside(o.modelPath);
  if (path.empty()) {
    if (!textIn) return;
    std::string looked;
    for (const std::string& c : Tokenizer::candidatesBeside(o.modelPath))
      looked += (looked.empty() ? "" : ", ") + c;
    throw Error("--prompt needs the model's tokenizer, and there is none beside " + o.modelPath +
                " (looked for " + looked +
                "): give one with --tokenizer PATH, or the ids with --prompt-ids");
  }
  try {
    o.tokenizer = Tokenizer::load(path);
  } catch (const Error& e) {
    if (textIn || !o.tokenizerPath.empty()) throw;
    std::cerr << "warning: no text out: " << e.what() << "\n";
    return;
  }
  if (!textIn) return;
  o.promptIds = o.tokenizer->encode(o.promptText);
  if (o.promptIds.empty()) throw Error("--prompt \"" + o.promptText + "\" encodes to no ids");
}

}  // namespace

void printGeneration(const GenerateCommandOptions& o, const Decoder& decoder, const Generation& g,
                     const std::string& runner, const std::string& prefillRunner) {
  auto joined = [](const std::vector<int64_t>& v) {
    std::string s;
    for (int64_t t : v) s += (s.empty() ? "" : ",") + std::to_string(t);
    return s;
  };
  // --prompt's ids, as --prompt-ids would take them.
  if (!o.promptText.empty())
    std::printf("prompt ids: %s (%s %s)\n", joined(o.promptIds).c_str(),
                o.tokenizer->format().c_str(), o.tokenizer->path().c_str());
  std::printf("generated: %s\n", joined(g.tokens).c_str());
  // The new ids' text; ids out always work, so an id the tokenizer lacks
  // (a model's vocabulary larger than its tokenizer's) is said, not fatal.
  if (o.tokenizer) {
    try {
      std::printf("text: %s\n", o.tokenizer->decode(g.tokens).c_str());
    } catch (const Error& e) {
      std::printf("text: none (%s)\n", e.what());
    }
  }
  std::printf("stopped: %s after %zu new token(s)\n", g.stop.c_str(), g.tokens.size());
  std::vector<double> steps = g.stepMs;
  std::sort(steps.begin(), steps.end());
  if (!o.fillWhat.empty())
    std::printf("prefill: none: %s in %.3f ms; the first id ran at row %lld\n", o.fillWhat.c_str(),
                o.fillMs, static_cast<long long>(o.fillRows));
  else if (decoder.promptRuns() == 1 && o.promptIds.size() > 1)
    std::printf("prefill: %.3f ms for %zu token(s) (one pass%s)\n", g.prefillMs, o.promptIds.size(),
                prefillRunner.empty() ? "" : (", " + prefillRunner).c_str());
  else
    std::printf("prefill: %.3f ms for %zu token(s) (one step each: %s)\n", g.prefillMs,
                o.promptIds.size(), decoder.promptOneTokenAStepWhy().c_str());
  if (g.prefillSetupMs > 0)
    std::printf("prefill setup: %.3f ms (importing and compiling the prompt's graph, not above)\n",
                g.prefillSetupMs);
  if (g.prefillPreemptions + g.stepPreemptions > 0)
    std::printf(
        "preempted: %lld time(s) in the prefill, %lld in the steps (the scheduler took a core "
        "from a thread: those times are the machine's, docs/decoding.md)\n",
        static_cast<long long>(g.prefillPreemptions), static_cast<long long>(g.stepPreemptions));
  if (steps.empty())
    std::printf("decode step: none run\n");
  else
    std::printf("decode step: median %.3f ms over %zu step(s) (min %.3f, max %.3f), %s\n",
                steps[steps.size() / 2], steps.size(), steps.front(), steps.back(), runner.c_str());
  std::printf("cache: %lld rows, %zu bytes preallocated, %zu bytes appended\n",
              static_cast<long long>(decoder.capacity()), decoder.cacheBytes(),
              decoder.bytesAppended());
  // What the steps' Concat(past, new) wrote: the new rows only in place,
  // the whole present each step when copied.
  std::printf("cache concats: %zu bytes written (%s)\n", decoder.presentBytesWritten(),
              decoder.inPlace() ? "in place" : "copied each step");
  if (!o.logitsOut.empty()) {
    // One line per new token: the logits it was picked from, exactly
    // (%.9g round-trips a float).
    std::FILE* f = std::fopen(o.logitsOut.c_str(), "w");
    if (!f) throw Error(o.logitsOut + ": cannot be written");
    for (const std::vector<float>& row : g.logits) {
      for (size_t i = 0; i < row.size(); ++i) std::fprintf(f, i ? " %.9g" : "%.9g", row[i]);
      std::fprintf(f, "\n");
    }
    std::fclose(f);
  }
}

Action addGenerateCommand(CLI::App& app) {
  auto* command = app.add_subcommand(
      "generate",
      "generate token ids with a decoder model that has a KV cache (prefill, then decode steps)");
  auto o = std::make_shared<GenerateCommandOptions>();
  command
      ->add_option("model", o->modelPath,
                   "ONNX decoder with past_key_values inputs and present outputs")
      ->required();
  auto* promptIds =
      command->add_option("--prompt-ids", o->promptIds, "the prompt's token ids, e.g. 1,2,3")
          ->delimiter(',');
  auto* promptText = command->add_option(
      "--prompt", o->promptText,
      "the prompt as text, encoded with the model's tokenizer (tokenizer.json or tokenizer.model "
      "beside the model, or --tokenizer)");
  promptIds->excludes(promptText);
  command->add_option("--tokenizer", o->tokenizerPath,
                      "the tokenizer file (a Hugging Face tokenizer.json or a SentencePiece model; "
                      "default: tokenizer.json, else tokenizer.model, beside the model)");
  command->add_option("--max-new-tokens", o->generate.maxNewTokens, "stop after this many new ids")
      ->check(CLI::PositiveNumber);
  command->add_option(
      "--max-length", o->maxLength,
      "the cache's rows (default: those --plan was made for, else the prompt plus the new tokens)");
  command->add_option(
      "--plan", o->plan,
      "run the steps with this plan's Session (optimize the model with the bindings "
      "--print-bindings shows)");
  command->add_option(
      "--prefill-plan", o->prefillPlan,
      "run the prompt's one pass with this plan's Session (optimize the model with the bindings "
      "--print-prefill-bindings shows; default: the --plan's groups on the prompt's graph)");
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
  command->add_flag("--print-prefill-bindings", o->printPrefillBindings,
                    "print the --input-shape bindings of the prompt's one-pass graph, for this "
                    "prompt's length (what a --prefill-plan must be optimized with)");
  command->add_option("--logits-out", o->logitsOut,
                      "write the logits each new token was picked from, one line per token");
  command
      ->add_option("--fill-rows", o->fillRows,
                   "no prefill: fill this many cache rows with seeded values (--fill-seed), then "
                   "run --prompt-ids' one id at that row and the steps after it (to time a step "
                   "at a long context; the logits mean nothing)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--fill-seed", o->fillSeed, "with --fill-rows: the values' seed (default 1)");
  command->add_option(
      "--cache-in", o->cacheIn,
      "no prefill: the cache's first rows from TensorProto (.pb) files, one per past input and "
      "named as it, of its shape with L rows on the sequence axis (the past ONNX Runtime would "
      "be fed); --prompt-ids' one id runs at row L");
  command->add_flag("--cache-parallel", o->cacheParallel,
                    "split the KV cache along the sequence across MPI ranks (start with mpirun "
                    "-n N): each rank attends over its rows, the ranks merge the partials");
  command->add_flag("--data-parallel", o->dataParallel,
                    "under mpirun -n N: every rank runs the whole generation on its own (data "
                    "parallelism, no messages); rank 0 gathers and stores the ranks' steps");
  command->add_flag("--tensor-parallel", o->tensorParallel,
                    "split the step by heads across MPI ranks (start with mpirun -n N): each "
                    "rank computes its KV heads' attention and its share of the projections and "
                    "the MLP, the ranks sum the partial outputs (two all-reduces per layer)");
  command
      ->add_option("--mpi-timeout", o->mpiTimeout,
                   "with --cache-parallel, --data-parallel or --tensor-parallel: seconds a rank "
                   "waits for another "
                   "before the run fails (default 120)")
      ->check(CLI::PositiveNumber);
  command->add_option("--db", o->db,
                      "with --cache-parallel or --data-parallel: the measurement database rank 0 "
                      "stores the run in (default: this machine's)");
  command->add_flag("--no-db", o->noDb, "store no run");
  return [o, promptIds, promptText]() {
    if (promptIds->count() == 0 && promptText->count() == 0)
      throw Error("give the prompt with --prompt-ids 1,2,3 or --prompt \"text\"");
    loadTokenizer(*o, promptText->count() > 0);
    if (o->eos >= 0) o->generate.eos = o->eos;
    o->generate.keepLogits = !o->logitsOut.empty();
    const bool filled = o->fillRows >= 0 || !o->cacheIn.empty();
    if (o->fillRows >= 0 && !o->cacheIn.empty())
      throw Error("--fill-rows and --cache-in both fill the cache: give one");
    if (filled) {
      if (o->promptIds.size() != 1)
        throw Error(std::string(o->fillRows >= 0 ? "--fill-rows" : "--cache-in") +
                    " runs no prompt: give the one id that follows the filled rows with "
                    "--prompt-ids (" +
                    std::to_string(o->promptIds.size()) + " given)");
      if (!o->cacheIn.empty() && (o->cacheParallel || o->dataParallel || o->tensorParallel))
        throw Error(
            "--cache-in does not go with --cache-parallel, --data-parallel or --tensor-parallel "
            "(--fill-rows does)");
      if (o->printPrefillBindings || !o->prefillPlan.empty())
        throw Error(
            "--fill-rows and --cache-in run no prefill: they do not go with "
            "--print-prefill-bindings or --prefill-plan");
    }
    if (int(o->cacheParallel) + int(o->dataParallel) + int(o->tensorParallel) > 1)
      throw Error(
          "--cache-parallel, --data-parallel and --tensor-parallel are three ways to use the "
          "ranks (the cache split by rows, each rank on its own, the heads split): give one");
    if (o->tensorParallel) {
#ifdef COLLAGE_HAVE_MPI
      if (o->printBindings || o->printPrefillBindings || !o->prefillPlan.empty())
        throw Error(
            "--print-bindings, --print-prefill-bindings and --prefill-plan do not go with "
            "--tensor-parallel");
      return generateTensorParallel(*o);
#else
      throw Error(
          "--tensor-parallel needs MPI, and this build has none (install Open MPI and "
          "rebuild)");
#endif
    }
    if (o->cacheParallel || o->dataParallel) {
#ifdef COLLAGE_HAVE_MPI
      if (o->printBindings || o->printPrefillBindings || !o->prefillPlan.empty())
        throw Error(
            "--print-bindings, --print-prefill-bindings and --prefill-plan do not go with "
            "--cache-parallel or --data-parallel");
      return generateCacheParallel(*o);
#else
      throw Error(
          "--cache-parallel and --data-parallel need MPI, and this build has none (install Open "
          "MPI and rebuild)");
#endif
    }
    const DecoderSignature signature = probeDecoderSignature(o->modelPath);
    std::unique_ptr<Plan> plan;
    if (!o->plan.empty()) plan = std::make_unique<Plan>(loadPlan(o->plan));
    // A merged decoder's plans name one branch inlined (not the If).
    if (plan) checkMergedDecoderPlan(*plan, signature, o->modelPath, false);
    // The cache's rows: as asked, else those the plan was made for, else
    // the prompt and the new tokens.
    std::unique_ptr<Plan> prefillPlan;
    if (!o->prefillPlan.empty()) prefillPlan = std::make_unique<Plan>(loadPlan(o->prefillPlan));
    if (prefillPlan) checkMergedDecoderPlan(*prefillPlan, signature, o->modelPath, true);
    const auto promptLength = static_cast<int64_t>(o->promptIds.size());
    int64_t capacity = o->maxLength;
    if (capacity <= 0 && plan) capacity = planCapacity(signature, plan->inputShapes);
    // The rows --cache-in's files hold (read again to fill, one at a time:
    // a long cache's files are large).
    int64_t fillRows = o->fillRows;
    if (!o->cacheIn.empty()) o->fillRows = fillRows = cacheInRows(*o, signature);
    if (capacity <= 0 && filled) capacity = fillRows + o->generate.maxNewTokens;
    if (capacity <= 0)
      capacity = static_cast<int64_t>(o->promptIds.size()) + o->generate.maxNewTokens;
    const DecodeModel model = importDecodeModel(o->modelPath, capacity, &signature);
    if (o->printBindings || o->printPrefillBindings) {
      // A merged decoder's flag too: the graph is the branch it takes.
      const std::string stepFlag = useCacheBinding(signature, true);
      if (o->printBindings) {
        for (const std::string& b : model.bindings) std::cout << "--input-shape " << b << "\n";
        if (!stepFlag.empty()) std::cout << "--input-value " << stepFlag << "\n";
      }
      if (o->printPrefillBindings) {
        std::string why;
        std::vector<std::string> bindings;
        if (promptLength < 2) throw Error("a one-token prompt has no one-pass prefill graph");
        if (!importPrefillGraph(model, promptLength, &why, &bindings))
          throw Error(o->modelPath + ": no one-pass prefill graph for a " +
                      std::to_string(promptLength) + "-token prompt: " + why);
        for (const std::string& b : bindings)
          if (const std::string output = lastRowOutputOf(b); !output.empty())
            std::cout << "--last-row " << output << "\n";
          else
            std::cout << "--input-shape " << b << "\n";
        if (!stepFlag.empty()) std::cout << "--input-value " << useCacheBinding(signature, false) << "\n";
      }
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
            plannedDecoder(model, *plan, [&](const std::string& n) { return backends->find(n); },
                           {}, "native");
      } catch (const Error& e) {
        std::string hint;
        for (const std::string& b : model.bindings) hint += " --input-shape " + b;
        if (!signature.useCacheFlag.empty()) hint += " --input-value " + useCacheBinding(signature, true);
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
    // The prompt's pass on its own plan: checked against the prefill graph
    // as a plan is against its model (the same shapes, the same file, its
    // groups), when the Decoder imports that graph; a mismatch is an Error
    // naming the plan's file, never a silent fallback.
    auto prefillRunner = std::make_shared<std::string>();
    if (prefillPlan) {
      if (!prefillPlan->substitutions.empty())
        throw Error(o->prefillPlan +
                    ": a plan with graph substitutions is not supported by generate yet");
      if (promptLength < 2)
        throw Error(o->prefillPlan +
                    ": a one-token prompt runs as a decode step, it has no prefill pass");
      decoder.setPrefillRunner([&o, &prefillPlan, &signature, prefillRunner, capacity, promptLength](
                                   const Graph& prefill, std::string&) -> Decoder::Step {
        std::shared_ptr<BackendSet> backends;
        std::shared_ptr<Session> session;
        std::vector<std::string> warnings;
        try {
          const Plan forPrompt = planForPrompt(*prefillPlan, prefill, "native");
          backends = std::make_shared<BackendSet>(
              loadBackendsForPlan(forPrompt, prefill, o->modelPath, {}, &warnings));
          session = std::make_shared<Session>(
              prefill, forPrompt, [backends](const std::string& n) { return backends->find(n); });
        } catch (const Error& e) {
          throw Error(std::string(e.what()) +
                      " (--prefill-plan runs a plan made for the prefill graph of a " +
                      std::to_string(promptLength) + "-token prompt against a " +
                      std::to_string(capacity) +
                      "-row cache: --print-prefill-bindings prints its bindings" +
                      (signature.useCacheFlag.empty()
                           ? std::string()
                           : ", and --input-value " + useCacheBinding(signature, false) +
                                 ": a merged decoder's prompt runs its no-cache branch") +
                      ")");
        }
        for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
        std::map<std::string, int> perBackend;
        for (const PlanGroup& group : session->plan().groups) ++perBackend[group.backend];
        std::string text;
        for (const auto& [backend, count] : perBackend)
          text += (text.empty() ? "" : ", ") + std::to_string(count) + " on " + backend;
        *prefillRunner = "plan " + o->prefillPlan + ": " + std::to_string(session->groupCount()) +
                         " group(s), " + text;
        return [backends, session](const std::vector<Tensor>& in) { return session->run(in); };
      });
    }
    if (filled) {
      const auto t0 = std::chrono::steady_clock::now();
      if (o->cacheIn.empty()) {
        decoder.fillCache(fillRows, o->fillSeed);
        o->fillWhat = std::to_string(fillRows) + " cache rows filled with seeded values (seed " +
                      std::to_string(o->fillSeed) + ")";
      } else {
        for (const std::string& file : o->cacheIn) {
          std::string name;
          const Tensor rows = readTensorProtoFile(file, &name);
          try {
            decoder.setCacheRows(name, rows);
          } catch (const Error& e) {
            throw Error(file + ": " + e.what());
          }
        }
        o->fillWhat = std::to_string(fillRows) + " cache rows read from " +
                      std::to_string(o->cacheIn.size()) + " file(s)";
      }
      o->fillMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                      .count();
      const Generation g = decoder.generateFrom(fillRows, o->promptIds[0], o->generate);
      printGeneration(*o, decoder, g, plan ? "plan " + o->plan : std::string("reference executor"));
      return 0;
    }
    const Generation g = decoder.generate(o->promptIds, o->generate);
    if (prefillPlan && prefillRunner->empty())
      std::cerr << "warning: " << o->prefillPlan << " not used: the prompt ran one token a step ("
                << decoder.promptOneTokenAStepWhy() << ")\n";
    printGeneration(*o, decoder, g, plan ? "plan " + o->plan : std::string("reference executor"),
                    *prefillRunner);
    return 0;
  };
}

}  // namespace collage::cli
