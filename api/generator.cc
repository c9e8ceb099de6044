#include "collage/generator.h"

#include <mutex>

#include "api/api_internal.h"
#include "backends/backend_list.h"
#include "core/decode/cache_plan.h"
#include "core/decode/decoder.h"
#include "core/decode/tokenizer.h"
#include "core/ir/element_type.h"
#include "core/ir/threading.h"
#include "core/onnx/onnx_import.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage::api {

struct Generator::Impl {
  collage::DecodeModel model;
  std::unique_ptr<collage::Plan> plan;
  BackendSet backends;
  // The Session (with a plan) and the Decoder; in place unless the plan's
  // cache Concats cannot be split out (planned.fallback).
  collage::PlannedDecoder planned;
  std::mutex running;  // one generation at a time: the cache is shared
  std::string modelPath;
  SessionOptions options;
  // setPrefillPlan's: the plan, its file, and the Session it made (shown in
  // Generation::prefill).
  std::shared_ptr<const collage::Plan> prefillPlan;
  std::string prefillPlanPath;
  std::shared_ptr<std::string> prefillRunner = std::make_shared<std::string>();
  // The Decoder's own runner, back when the prefill plan is removed.
  collage::Decoder::PrefillRunner defaultRunner;
  // The model's tokenizer, read on first use unless set (tokenizerLock).
  std::unique_ptr<collage::Tokenizer> tokenizer;
  std::mutex tokenizerLock;

  const collage::Tokenizer& theTokenizer() {
    std::lock_guard<std::mutex> lock(tokenizerLock);
    if (!tokenizer) {
      const std::string path = collage::Tokenizer::findBeside(model.path);
      if (path.empty()) {
        std::string looked;
        for (const std::string& c : collage::Tokenizer::candidatesBeside(model.path))
          looked += (looked.empty() ? "" : ", ") + c;
        throw collage::Error("no tokenizer beside " + model.path + " (looked for " + looked +
                             "): give one with setTokenizer");
      }
      tokenizer = collage::Tokenizer::load(path);
    }
    return *tokenizer;
  }
};

Generator::Generator(const std::string& model, int64_t maxLength, const std::string& plan,
                     const SessionOptions& options)
    : impl_(std::make_unique<Impl>()) {
  translateErrors([&] {
    if (options.threads > 0) setThreadCount(options.threads);
    Impl* impl = impl_.get();
    impl->modelPath = model;
    impl->options = options;
    const DecoderSignature signature = probeDecoderSignature(model);
    if (!plan.empty()) impl->plan = std::make_unique<collage::Plan>(loadPlan(plan));
    // A merged decoder's plan names its branch with the past inlined, not the If.
    if (impl->plan) checkMergedDecoderPlan(*impl->plan, signature, model, false);
    // No length given: the one the plan was made for.
    if (maxLength <= 0 && impl->plan) maxLength = planCapacity(signature, impl->plan->inputShapes);
    impl->model = importDecodeModel(model, maxLength, &signature);
    if (impl->plan) {
      if (!impl->plan->substitutions.empty())
        throw api::Error(plan +
                         ": a plan with graph substitutions is not supported by the Generator yet");
      std::vector<std::string> warnings;
      impl->backends =
          loadBackendsForPlan(*impl->plan, impl->model.graph, model, options.backends, &warnings);
      if (!warnings.empty() && !options.acceptStalePlan) {
        std::string why;
        for (const auto& w : warnings) why += (why.empty() ? "" : "; ") + w;
        throw api::Error("refused: " + why +
                         " (or accept the plan with SessionOptions::acceptStalePlan)");
      }
      impl->planned =
          collage::plannedDecoder(impl->model, *impl->plan,
                                  [impl](const std::string& n) { return impl->backends.find(n); },
                                  {}, "native");
    } else {
      impl->planned.decoder = std::make_unique<collage::Decoder>(impl->model);
    }
  });
}

Generator::Generator(Generator&&) noexcept = default;
Generator& Generator::operator=(Generator&&) noexcept = default;
Generator::~Generator() = default;

Generation Generator::generate(const std::vector<int64_t>& prompt, const GenerateOptions& options) {
  return translateErrors([&] {
    std::lock_guard<std::mutex> lock(impl_->running);
    collage::GenerateOptions o;
    o.maxNewTokens = options.maxNewTokens;
    if (options.eos >= 0) o.eos = options.eos;
    o.temperature = options.temperature;
    o.topK = options.topK;
    o.seed = options.seed;
    collage::Decoder& decoder = *impl_->planned.decoder;
    if (impl_->prefillPlan && prompt.size() < 2)
      throw api::Error(impl_->prefillPlanPath +
                       ": a one-token prompt runs as a decode step, it has no prefill pass");
    collage::Generation g = decoder.generate(prompt, o);
    std::string prefill = "one token a step: " + decoder.promptOneTokenAStepWhy();
    if (decoder.promptRuns() == 1)
      prefill = impl_->prefillPlan ? "one pass, " + *impl_->prefillRunner : "one pass";
    return Generation{std::move(g.tokens), std::move(g.stop), g.prefillMs, std::move(g.stepMs),
                      std::move(prefill)};
  });
}

void Generator::setPrefillPlan(const std::string& plan) {
  translateErrors([&] {
    std::lock_guard<std::mutex> lock(impl_->running);
    Impl* impl = impl_.get();
    collage::Decoder& decoder = *impl->planned.decoder;
    if (!impl->defaultRunner) impl->defaultRunner = decoder.prefillRunner();
    if (plan.empty()) {
      impl->prefillPlan.reset();
      decoder.setPrefillRunner(impl->defaultRunner);
      return;
    }
    auto loaded = std::make_shared<const collage::Plan>(loadPlan(plan));
    checkMergedDecoderPlan(*loaded, impl->model.signature, impl->modelPath, true);
    if (!loaded->substitutions.empty())
      throw api::Error(plan +
                       ": a plan with graph substitutions is not supported by the Generator yet");
    impl->prefillPlan = loaded;
    impl->prefillPlanPath = plan;
    impl->prefillRunner->clear();
    // Checked against the prefill graph as a plan is against its model (the
    // same shapes, the same file, its groups) when the Decoder imports that
    // graph for the prompt's length: a mismatch is an Error naming the file.
    const int64_t capacity = decoder.capacity();
    decoder.setPrefillRunner([impl, loaded, plan, capacity](
                                 const collage::Graph& prefill,
                                 std::string&) -> collage::Decoder::Step {
      std::shared_ptr<BackendSet> backends;
      std::shared_ptr<collage::Session> session;
      std::vector<std::string> warnings;
      try {
        const collage::Plan forPrompt = planForPrompt(*loaded, prefill, "native");
        backends = std::make_shared<BackendSet>(loadBackendsForPlan(
            forPrompt, prefill, impl->modelPath, impl->options.backends, &warnings));
        session = std::make_shared<collage::Session>(
            prefill, forPrompt, [backends](const std::string& n) { return backends->find(n); });
      } catch (const collage::Error& e) {
        throw api::Error(std::string(e.what()) +
                         " (a prefill plan is made for the prefill graph of one prompt length "
                         "against a " +
                         std::to_string(capacity) + "-row cache: see prefillBindings)");
      }
      if (!warnings.empty() && !impl->options.acceptStalePlan) {
        std::string why;
        for (const auto& w : warnings) why += (why.empty() ? "" : "; ") + w;
        throw api::Error(plan + " refused: " + why +
                         " (or accept the plan with SessionOptions::acceptStalePlan)");
      }
      *impl->prefillRunner =
          "plan " + plan + ": " + std::to_string(session->groupCount()) + " group(s)";
      return
          [backends, session](const std::vector<collage::Tensor>& in) { return session->run(in); };
    });
  });
}

namespace {

// `graph` (the model at `path` imported with `bindings` and, for a merged
// decoder, its flag at `withPast`) as the API's Model.
Model modelOfGraph(collage::Graph graph, const std::string& path,
                   const std::vector<std::string>& bindings, const DecoderSignature& signature,
                   bool withPast) {
  auto impl = std::make_shared<Model::Impl>();
  impl->path = path;
  // Shapes; a prompt's last-row logits ("logits@last") travel as words.
  for (const std::string& b : bindings) {
    if (!lastRowOutputOf(b).empty())
      impl->valueBindings.push_back(b);
    else
      impl->inputShapes.insert(parseInputShapeBinding(b));
  }
  if (!signature.useCacheFlag.empty())
    impl->valueBindings.push_back(signature.useCacheFlag + (withPast ? ":=true" : ":=false"));
  impl->graph = std::move(graph);
  auto info = [&](ValueId v) {
    const collage::Value& value = impl->graph.value(v);
    return TensorInfo{value.name, std::string(elementTypeName(value.type.elementType)),
                      value.type.shape};
  };
  for (ValueId v : impl->graph.inputs()) impl->inputs.push_back(info(v));
  for (ValueId v : impl->graph.outputs()) impl->outputs.push_back(info(v));
  return Model(std::move(impl));
}

}  // namespace

std::vector<std::string> Generator::prefillBindings(int64_t promptLength) const {
  return translateErrors([&] {
    if (promptLength < 2) throw api::Error("a one-token prompt has no one-pass prefill graph");
    std::string why;
    std::vector<std::string> bindings;
    if (!importPrefillGraph(impl_->model, promptLength, &why, &bindings))
      throw api::Error(impl_->model.path + ": no one-pass prefill graph for a " +
                       std::to_string(promptLength) + "-token prompt: " + why);
    // The input shapes: a plan made on them runs the prompt with its last
    // position's logits alone too (planForPrompt); prefillModel is that graph.
    std::erase_if(bindings, [](const std::string& b) { return !lastRowOutputOf(b).empty(); });
    return bindings;
  });
}

Model Generator::stepModel() const {
  return translateErrors([&] {
    return modelOfGraph(impl_->model.graph, impl_->model.path, impl_->model.bindings,
                        impl_->model.signature, true);
  });
}

Model Generator::prefillModel(int64_t promptLength) const {
  return translateErrors([&] {
    if (promptLength < 2) throw api::Error("a one-token prompt has no one-pass prefill graph");
    std::string why;
    std::vector<std::string> bindings;
    std::optional<collage::Graph> graph =
        importPrefillGraph(impl_->model, promptLength, &why, &bindings);
    if (!graph)
      throw api::Error(impl_->model.path + ": no one-pass prefill graph for a " +
                       std::to_string(promptLength) + "-token prompt: " + why);
    return modelOfGraph(std::move(*graph), impl_->model.path, bindings, impl_->model.signature,
                        false);
  });
}

int64_t Generator::maxLength() const { return impl_->planned.decoder->capacity(); }
int64_t Generator::vocabulary() const { return impl_->planned.decoder->vocabulary(); }
std::vector<std::string> Generator::stepBindings() const { return impl_->model.bindings; }

void Generator::setTokenizer(const std::string& path) {
  translateErrors([&] {
    auto t = collage::Tokenizer::load(path);
    std::lock_guard<std::mutex> lock(impl_->tokenizerLock);
    impl_->tokenizer = std::move(t);
  });
}

std::vector<int64_t> Generator::encode(const std::string& text) const {
  return translateErrors([&] { return impl_->theTokenizer().encode(text); });
}

std::string Generator::decode(const std::vector<int64_t>& ids) const {
  return translateErrors([&] { return impl_->theTokenizer().decode(ids); });
}

std::string Generator::tokenizerPath() const {
  std::lock_guard<std::mutex> lock(impl_->tokenizerLock);
  return impl_->tokenizer ? impl_->tokenizer->path()
                          : collage::Tokenizer::findBeside(impl_->model.path);
}

}  // namespace collage::api
