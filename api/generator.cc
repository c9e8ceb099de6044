#include "collage/generator.h"

#include <mutex>

#include "api/api_internal.h"
#include "backends/backend_list.h"
#include "core/decode/cache_plan.h"
#include "core/decode/decoder.h"
#include "core/decode/tokenizer.h"
#include "core/ir/threading.h"
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
    const DecoderSignature signature = probeDecoderSignature(model);
    if (!plan.empty()) impl->plan = std::make_unique<collage::Plan>(loadPlan(plan));
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
                                  [impl](const std::string& n) { return impl->backends.find(n); });
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
    collage::Generation g = impl_->planned.decoder->generate(prompt, o);
    return Generation{std::move(g.tokens), std::move(g.stop), g.prefillMs, std::move(g.stepMs)};
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
