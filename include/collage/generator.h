// A Generator runs a decoder model with a KV cache token by token: the
// runtime's decode loop (docs/decoding.md), as `collage generate` runs it.
//
//   collage::api::Generator generator("decoder.onnx", /*maxLength=*/256);
//   collage::api::GenerateOptions options;
//   options.maxNewTokens = 32;
//   auto g = generator.generate({1, 2, 3}, options);  // g.tokens: the new ids
//
// Ids in and out; encode() and decode() turn text into ids and back with the
// model's tokenizer (a tokenizer.json or tokenizer.model beside the model, or
// setTokenizer()). The cache is the Generator's, allocated to
// maxLength rows once and appended in place. Errors (api::Error) name the
// tensor of a model that is not such a decoder, and refuse a prompt longer
// than the cache or an id outside the vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collage/export.h"
#include "collage/model.h"
#include "collage/session.h"

namespace collage::api {

struct GenerateOptions {
  int64_t maxNewTokens = 16;
  int64_t eos = -1;        // stop after generating this id; -1: none
  double temperature = 0;  // 0: greedy; more: sampled from softmax(logits / T)
  int64_t topK = 0;        // sample from the K most likely ids; 0: all
  uint64_t seed = 0;       // the same seed, the same ids
};

struct Generation {
  std::vector<int64_t> tokens;  // the new ids, after the prompt
  std::string stop;             // "max-new-tokens" or "eos"
  double prefillMs = 0;         // the prompt (one pass where the model takes a sequence)
  std::vector<double> stepMs;   // each decode step after them
  // How the prompt ran: "one pass" (with setPrefillPlan: "one pass, plan
  // FILE: N group(s)"), or "one token a step: " and why.
  std::string prefill;
};

class COLLAGE_API Generator {
 public:
  // `model`: a decoder with past/present KV tensors; `maxLength`: the cache's
  // rows (the prompt plus the new tokens, minus one, must fit; 0 with a plan:
  // the rows the plan was made for); `plan`: a plan for the step graph
  // (made with stepBindings()), or "" for the reference executor.
  Generator(const std::string& model, int64_t maxLength, const std::string& plan = "",
            const SessionOptions& options = {});
  Generator(Generator&&) noexcept;
  Generator& operator=(Generator&&) noexcept;
  ~Generator();

  // Runs the prompt, then one step per new id. Generations take turns.
  Generation generate(const std::vector<int64_t>& prompt, const GenerateOptions& options = {});

  int64_t maxLength() const;
  int64_t vocabulary() const;
  // The --input-shape bindings of the step graph ("input_ids=1x1", ...).
  std::vector<std::string> stepBindings() const;
  // The step graph as a Model: what a plan for the steps is made for
  // (Plan::singleBackend, optimize). For a merged decoder (an If on a
  // use-cache flag, docs/decoding.md) the graph is its branch with the past
  // inlined, the flag fixed, which stepBindings alone do not say.
  Model stepModel() const;
  // The prompt's one pass on its own plan, as `collage generate
  // --prefill-plan`: a plan made for the prefill graph of a prompt of one
  // length (prefillBindings); without one, the step plan's groups run it
  // where they fit, else one token a step. A prompt of another length, or a
  // plan for other shapes, is an Error naming the plan's file when
  // generate() runs it, never a silent fallback; stale findings as for the
  // step plan (SessionOptions::acceptStalePlan). A model that cannot take
  // the prompt in one pass runs it one token a step (Generation::prefill
  // says why). "" removes it.
  void setPrefillPlan(const std::string& plan);
  // The --input-shape bindings of the prefill graph for a prompt of
  // `promptLength` (at least 2) tokens; Error when the model has none.
  std::vector<std::string> prefillBindings(int64_t promptLength) const;
  // The prefill graph for that length as a Model (a merged decoder's: its
  // no-cache branch inlined): what setPrefillPlan's plan is made for.
  Model prefillModel(int64_t promptLength) const;

  // Text in and out (docs/decoding.md, "Text in and out"). setTokenizer
  // reads a Hugging Face tokenizer.json or a SentencePiece model; without
  // it, the first encode() or decode() reads tokenizer.json, else
  // tokenizer.model, beside the model, and throws Error saying where it
  // looked when there is none. encode() applies the file's own template (a
  // BOS for most tokenizer.json files; none for a SentencePiece model).
  void setTokenizer(const std::string& path);
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  // The tokenizer's file: setTokenizer's, else the one beside the model, or
  // "" when there is none.
  std::string tokenizerPath() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collage::api
