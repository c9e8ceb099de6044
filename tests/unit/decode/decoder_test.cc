// The decode loop (core/decode/): recognising a decoder with a KV cache, the
// cache appended in place, greedy tokens equal to numpy's uncached
// recompute, seeded sampling, EOS, and the refusals.
#include "core/decode/decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "../test_support.h"
#include "backends/backend_list.h"
#include "backends/native/native_cache_parallel.h"
#include "core/decode/cache_plan.h"
#include "core/decode/decoder_signature.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage {
namespace {

using test_support::expectError;

const std::string kDir = std::string(COLLAGE_SOURCE_DIR) + "/tests/models/decoder/";
const std::string kTiny = kDir + "tiny_decoder.onnx";

// The ids after `label: ` on that line of tiny_decoder.greedy.txt (numpy's,
// the whole sequence recomputed each step, no cache).
std::vector<int64_t> greedyFile(const std::string& label) {
  std::ifstream in(kDir + "tiny_decoder.greedy.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(label + ": ", 0) != 0) continue;
    std::istringstream ids(line.substr(label.size() + 2));
    std::vector<int64_t> out;
    for (int64_t id; ids >> id;) out.push_back(id);
    return out;
  }
  ADD_FAILURE() << "no '" << label << "' line";
  return {};
}

TEST(DecoderSignature, PairsEachPastWithItsPresentByStructure) {
  const DecoderSignature sig = decoderSignature(importOnnx(kTiny), kTiny);
  EXPECT_EQ(sig.inputIds, "input_ids");
  EXPECT_EQ(sig.attentionMask, "attention_mask");
  EXPECT_EQ(sig.positionIds, "position_ids");
  EXPECT_EQ(sig.logits, "logits");
  ASSERT_EQ(sig.cache.size(), 4u);
  EXPECT_EQ(sig.cache[0].past, "past_key_values.0.key");
  EXPECT_EQ(sig.cache[0].present, "present.0.key");
  EXPECT_EQ(sig.cache[3].past, "past_key_values.1.value");
  EXPECT_EQ(sig.cache[3].present, "present.1.value");
  EXPECT_EQ(sig.cache[0].sequenceAxis, 2);
}

TEST(DecoderSignature, RefusesAnInputTheLoopCannotFeedNamingIt) {
  // A one-step decoder fed hidden states, not token ids: the cache pairs are
  // found, the float input 'hidden_states' is named.
  const std::string path = kDir + "mha_where_two_layers.onnx";
  expectError([&] { decoderSignature(importOnnx(path), path); },
              {"mha_where_two_layers.onnx", "'hidden_states'", "not read by one Concat"});
}

TEST(DecoderSignature, RefusesAModelWithoutACache) {
  Graph g;
  ValueId ids = g.addInput("input_ids", {ElementType::Int64, {1, 1}});
  ValueId table = g.addConstant("wte", Tensor::fromFloats({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}));
  ValueId logits = g.addValue("logits", {ElementType::Float32, {1, 1, 2}});
  g.addNode(Node{"gather", "Gather", {}, {table, ids}, {logits}});
  g.markOutput(logits);
  g.finalize();
  expectError([&] { decoderSignature(g, "m.onnx"); }, {"m.onnx", "not a decoder with a KV cache"});
}

TEST(DecoderSignature, RefusesAnAppendWhoseResultIsNotReturned) {
  Graph g;
  ValueId ids = g.addInput("input_ids", {ElementType::Int64, {1, 1}});
  g.addInput("attention_mask", {ElementType::Int64, {1, 4}});
  ValueId past = g.addInput("past.0.key", {ElementType::Float32, {1, 2, 3, 8}});
  ValueId c = g.addConstant("c", Tensor::fromFloats({1, 2, 1, 8}, std::vector<float>(16, 1.0f)));
  ValueId fresh = g.addValue("k_new", {ElementType::Float32, {1, 2, 1, 8}});
  g.addNode(Node{"relu", "Relu", {}, {c}, {fresh}});
  ValueId all = g.addValue("k_all", {ElementType::Float32, {1, 2, 4, 8}});
  AttributeMap axis;
  axis.set("axis", int64_t{2});
  g.addNode(Node{"concat", "Concat", axis, {past, fresh}, {all}});
  ValueId table = g.addConstant("wte", Tensor::fromFloats({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}));
  ValueId logits = g.addValue("logits", {ElementType::Float32, {1, 1, 2}});
  g.addNode(Node{"gather", "Gather", {}, {table, ids}, {logits}});
  ValueId sum = g.addValue("sum", {ElementType::Float32, {1, 2, 1, 1}});
  AttributeMap keep;
  g.addNode(Node{"reduce", "ReduceSum", keep, {all}, {sum}});
  g.markOutput(logits);
  g.markOutput(sum);
  g.finalize();
  expectError([&] { decoderSignature(g, "m.onnx"); },
              {"'past.0.key'", "Concat 'concat'", "'k_all' is not a graph output"});
}

TEST(Decoder, TakesTheCapacityAPlanWasMadeFor) {
  const DecoderSignature sig = probeDecoderSignature(kTiny);
  EXPECT_EQ(planCapacity(sig, {{"attention_mask", {1, 14}}, {"input_ids", {1, 1}}}), 13);
  EXPECT_EQ(planCapacity(sig, {{"input_ids", {1, 1}}}), 0);
  const DecodeModel model = importDecodeModel(kTiny, 13, &sig);
  EXPECT_EQ(model.bindings.front(), "input_ids=1x1");
  EXPECT_EQ(model.graph.value(*model.graph.findValue("past_key_values.1.value")).type.shape,
            (Shape{1, 2, 13, 8}));
}

TEST(Decoder, GreedyTokensEqualTheUncachedRecompute) {
  const DecodeModel model = importDecodeModel(kTiny, 16);
  Decoder decoder(model);
  GenerateOptions options;
  options.maxNewTokens = 10;
  const Generation g = decoder.generate(greedyFile("prompt"), options);
  EXPECT_EQ(g.tokens, greedyFile("generated"));
  EXPECT_EQ(g.stop, "max-new-tokens");
  EXPECT_EQ(g.stepMs.size(), 9u);
  // The same on a cache exactly as long as the run needs (3 + 10 - 1 rows):
  // no row beyond the filled ones matters.
  const DecodeModel exact = importDecodeModel(kTiny, 12);
  EXPECT_EQ(Decoder(exact).generate(greedyFile("prompt"), options).tokens, greedyFile("generated"));
}

// The prompt as one run of the model imported for its length (the model's
// own causal mask keeps each token from the later ones): the same tokens,
// and the same cache rows, as the prompt run one token a step.
TEST(Decoder, RunsThePromptInOnePassWhenTheModelTakesASequence) {
  const DecodeModel model = importDecodeModel(kTiny, 16);
  Decoder onePass(model), tokenByToken(model);
  tokenByToken.setPrefillRunner({});
  GenerateOptions options;
  options.maxNewTokens = 10;
  const std::vector<int64_t> prompt = greedyFile("prompt");
  const Generation g = onePass.generate(prompt, options);
  EXPECT_EQ(onePass.promptRuns(), 1) << onePass.promptOneTokenAStepWhy();
  EXPECT_EQ(g.tokens, greedyFile("generated"));
  EXPECT_EQ(g.stepMs.size(), 9u);
  EXPECT_EQ(tokenByToken.generate(prompt, options).tokens, g.tokens);
  EXPECT_EQ(tokenByToken.promptRuns(), 3);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(compareTensors(onePass.cache(i), tokenByToken.cache(i), kPlanTolerance).ok)
        << model.signature.cache[i].past;
  // Another prompt length imports the model again for it.
  const std::vector<int64_t> longer = {1, 2, 3, 4, 30};
  options.maxNewTokens = 8;
  EXPECT_EQ(onePass.generate(longer, options).tokens,
            tokenByToken.generate(longer, options).tokens);
  EXPECT_EQ(onePass.promptRuns(), 1);
}

// The prompt's graph is imported and compiled once per prompt length; that
// time is reported apart from the prompt's pass (a peer's session is made
// before it is timed): the same length again has none.
TEST(Decoder, ReportsThePromptGraphsSetupApartFromThePrefill) {
  const DecodeModel model = importDecodeModel(kTiny, 16);
  Decoder decoder(model);
  GenerateOptions options;
  options.maxNewTokens = 4;
  const std::vector<int64_t> prompt = greedyFile("prompt");
  EXPECT_GT(decoder.generate(prompt, options).prefillSetupMs, 0.0);
  EXPECT_EQ(decoder.generate(prompt, options).prefillSetupMs, 0.0);
  EXPECT_GT(decoder.generate({1, 2, 3, 4}, options).prefillSetupMs, 0.0);
}

// On a shared machine another process may take a core in the middle of the
// prompt's pass, and the pass then lasts scheduler slices (a parallel
// region waits for its preempted thread): the generation says how often,
// so that such a time is not read as the model's. A busy thread pinned to
// this thread's core stands in for the other process; the pass spins for
// 30 ms first, long enough for the scheduler to switch to it.
TEST(Decoder, CountsThePreemptionsDuringThePromptsPass) {
  const DecodeModel model = importDecodeModel(kTiny, 16);
  Decoder decoder(model);
  decoder.setPrefillRunner([](const Graph& prefill, std::string&) -> Decoder::Step {
    auto executor = std::make_shared<ReferenceExecutor>(prefill);
    return [executor](const std::vector<Tensor>& in) {
      const auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(30)) {
      }
      return executor->run(in);
    };
  });
  auto busy = std::make_unique<test_support::BusyThreadOnThisCore>();
  ASSERT_TRUE(busy->ok());
  GenerateOptions options;
  options.maxNewTokens = 2;
  // When to switch is the scheduler's choice: again if it did not.
  Generation g;
  for (int attempt = 0; attempt < 5 && g.prefillPreemptions == 0; ++attempt)
    g = decoder.generate(greedyFile("prompt"), options);
  busy.reset();
  EXPECT_EQ(decoder.promptRuns(), 1) << decoder.promptOneTokenAStepWhy();
  EXPECT_GT(g.prefillPreemptions, 0) << g.prefillMs << " ms";
  EXPECT_GE(g.stepPreemptions, 0);
}

// A model whose token inputs are fixed at one token ([batch, 1]) cannot
// take the prompt at once: it runs one token a step, and says why.
TEST(Decoder, RunsThePromptOneTokenAStepWhenTheModelFixesOneToken) {
  const DecodeModel model = importDecodeModel(kDir + "tiny_decoder_one_token.onnx", 16);
  Decoder decoder(model);
  GenerateOptions options;
  options.maxNewTokens = 10;
  EXPECT_EQ(decoder.generate(greedyFile("prompt"), options).tokens, greedyFile("generated"));
  EXPECT_EQ(decoder.promptRuns(), 3);
  EXPECT_NE(decoder.promptOneTokenAStepWhy().find("'input_ids' has a fixed sequence size 1"),
            std::string::npos)
      << decoder.promptOneTokenAStepWhy();
}

TEST(Decoder, AppendsTheNewRowsInPlaceWithoutCopyingTheCache) {
  const DecodeModel model = importDecodeModel(kTiny, 32);
  // A step that records where its cache inputs live.
  std::vector<const void*> seen;
  std::vector<size_t> cacheInputs;
  for (size_t i = 0; i < model.graph.inputs().size(); ++i)
    if (model.graph.value(model.graph.inputs()[i]).name.rfind("past_key_values.", 0) == 0)
      cacheInputs.push_back(i);
  auto executor = std::make_shared<ReferenceExecutor>(model.graph);
  Decoder decoder(model, [&](const std::vector<Tensor>& in) {
    for (size_t i : cacheInputs) seen.push_back(in[i].raw());
    return executor->run(in);
  });
  std::vector<const void*> before;
  for (size_t i = 0; i < 4; ++i) before.push_back(decoder.cache(i).raw());
  GenerateOptions options;
  options.maxNewTokens = 10;
  const Generation g = decoder.generate({1, 2, 3}, options);
  ASSERT_EQ(g.tokens, greedyFile("generated"));
  // Every step read the cache buffers themselves, and they never moved.
  ASSERT_EQ(seen.size(), 4u * 12);
  for (size_t s = 0; s < seen.size(); ++s) EXPECT_EQ(seen[s], before[s % 4]) << "step " << s / 4;
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(decoder.cache(i).raw(), before[i]);
  // 12 tokens ran; each appended one row (2 heads x 8 floats) to 4 buffers.
  EXPECT_EQ(decoder.bytesAppended(), 12u * 4 * 2 * 8 * sizeof(float));
  EXPECT_EQ(decoder.cacheBytes(), 4u * 2 * 32 * 8 * sizeof(float));
  // The rows after the 12 filled ones were never written.
  for (size_t i = 0; i < 4; ++i) {
    const std::vector<float> c = decoder.cache(i).toFloats();  // [1, 2, 32, 8]
    for (size_t head = 0; head < 2; ++head)
      for (size_t r = 0; r < 32; ++r) {
        bool zero = true;
        for (size_t d = 0; d < 8; ++d) zero = zero && c[(head * 32 + r) * 8 + d] == 0.0f;
        EXPECT_EQ(zero, r >= 12) << "cache " << i << " head " << head << " row " << r;
      }
  }
}

// Cache parallelism (setCacheSlice): a Decoder holding rows [2, 9) of a
// 16-row cache writes only those (the prompt's row 2 from its one pass, the
// steps' rows 3..8), leaves every other row zero, and tells the hook each
// step's row before the step runs. Its tokens are not checked: the reference
// step attends over every row, which only a split attention may not.
TEST(Decoder, HoldsOnlyItsSliceOfTheCacheRows) {
  const DecodeModel model = importDecodeModel(kTiny, 16);
  Decoder full(model), sliced(model);
  std::vector<int64_t> rows;
  sliced.setCacheSlice(2, 9, [&](int64_t row) { rows.push_back(row); });
  EXPECT_EQ(sliced.cacheSlice(), (std::pair<int64_t, int64_t>{2, 9}));
  GenerateOptions options;
  options.maxNewTokens = 10;
  full.generate({1, 2, 3}, options);
  sliced.generate({1, 2, 3}, options);
  EXPECT_EQ(rows, (std::vector<int64_t>{3, 4, 5, 6, 7, 8, 9, 10, 11}));
  // Rows 2..8 of 4 buffers, one row (2 heads x 8 floats) each.
  EXPECT_EQ(sliced.bytesAppended(), 7u * 4 * 2 * 8 * sizeof(float));
  for (size_t i = 0; i < 4; ++i) {
    const std::vector<float> c = sliced.cache(i).toFloats(), f = full.cache(i).toFloats();
    const size_t R = static_cast<size_t>(sliced.cache(i).shape()[2]);  // 16, or 17 in place
    for (size_t head = 0; head < 2; ++head)
      for (size_t r = 0; r < 16; ++r) {
        bool zero = true, same = true;
        for (size_t d = 0; d < 8; ++d) {
          const size_t at = (head * R + r) * 8 + d;
          zero = zero && c[at] == 0.0f;
          same = same && c[at] == f[at];
        }
        EXPECT_EQ(zero, r < 2 || r >= 9) << "cache " << i << " head " << head << " row " << r;
        if (r == 2) {
          EXPECT_TRUE(same) << "cache " << i << " head " << head << ": the prompt's row";
        }
      }
  }
  EXPECT_THROW(sliced.setCacheSlice(4, 4), Error);
  EXPECT_THROW(sliced.setCacheSlice(0, 17), Error);
}

// fillCache writes the cache's rows without a prompt's pass (the Decode
// panel and `collage decode-parallel` time a step at a long context on it):
// the step at row L - 1 is shown L rows by its mask (the filled ones and its
// own), the filled rows hold the seed's values and the rest stay zero.
TEST(Decoder, FillsTheCacheRowsTheNextStepAttendsOver) {
  const DecodeModel model = importDecodeModel(kTiny, 32);
  size_t maskInput = 0;
  for (size_t i = 0; i < model.graph.inputs().size(); ++i)
    if (model.graph.value(model.graph.inputs()[i]).name == model.signature.attentionMask)
      maskInput = i;
  std::vector<int64_t> mask;
  auto executor = std::make_shared<ReferenceExecutor>(model.graph);
  Decoder decoder(model, [&](const std::vector<Tensor>& in) {
    const Tensor& m = in[maskInput];
    mask.assign(m.data<int64_t>(), m.data<int64_t>() + m.type().numElements());
    return executor->run(in);
  });
  EXPECT_EQ(decoder.lastStepRows(), 0);
  decoder.fillCache(31, 7);
  for (size_t i = 0; i < 4; ++i) {
    const std::vector<float> c = decoder.cache(i).toFloats();  // [1, 2, 32, 8]
    for (size_t head = 0; head < 2; ++head)
      for (size_t r = 0; r < 32; ++r) {
        bool zero = true, inRange = true;
        for (size_t d = 0; d < 8; ++d) {
          const float v = c[(head * 32 + r) * 8 + d];
          zero = zero && v == 0.0f;
          inRange = inRange && v >= -1.0f && v < 1.0f;
        }
        EXPECT_EQ(zero, r >= 31) << "cache " << i << " head " << head << " row " << r;
        EXPECT_TRUE(inRange) << "cache " << i << " head " << head << " row " << r;
      }
  }
  decoder.decodeStep(5, 31);
  EXPECT_EQ(decoder.lastStepRows(), 32);
  ASSERT_EQ(mask.size(), 33u);  // the cache's 32 rows and the new token
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 32);
  EXPECT_EQ(std::count(mask.begin(), mask.begin() + 31, 1), 31);
  EXPECT_EQ(mask.back(), 1);
  // The same seed writes the same rows, another seed others.
  Decoder same(model), other(model);
  same.fillCache(31, 7);
  other.fillCache(31, 8);
  const std::vector<float> filled = same.cache(0).toFloats();  // in place: 33 rows a head
  EXPECT_NE(filled, other.cache(0).toFloats());
  // The step-function Decoder's cache (32 rows a head) holds the same values
  // in rows 0..30, the layout apart.
  const std::vector<float> mine = decoder.cache(0).toFloats();
  for (size_t head = 0; head < 2; ++head)
    for (size_t r = 0; r < 31; ++r)
      for (size_t d = 0; d < 8; ++d)
        ASSERT_EQ(mine[(head * 32 + r) * 8 + d], filled[(head * 33 + r) * 8 + d])
            << "head " << head << " row " << r;
  // A device that holds a slice of the rows (cache parallelism) fills them
  // with the values one device fills there, and leaves the others zero.
  Decoder sliced(model);
  sliced.setCacheSlice(9, 20);
  sliced.fillCache(31, 7);
  const std::vector<float> slice = sliced.cache(0).toFloats();
  for (size_t head = 0; head < 2; ++head)
    for (size_t r = 0; r < 31; ++r)
      for (size_t d = 0; d < 8; ++d) {
        const size_t at = (head * 33 + r) * 8 + d;
        ASSERT_EQ(slice[at], r >= 9 && r < 20 ? filled[at] : 0.0f) << "head " << head << " row " << r;
      }
  expectError([&] { decoder.fillCache(33); }, {"cannot fill 33 cache rows: the cache has 32"});
  expectError([&] { decoder.decodeStep(0, 32); }, {"outside the cache's 32 rows"});
  expectError([&] { decoder.decodeStep(decoder.vocabulary(), 3); }, {"outside the vocabulary"});
}

// Cache parallelism with each device holding only its share (CacheShare):
// two devices, each a Session and a Decoder on its own thread, rows [0, 8)
// and [8, 16) of a 16-row cache, their attention partials gathered in
// process (as MpiCacheExchange does between ranks). Each holds 9 of the 17
// rows a buffer (its rows and the step's new one), about half the bytes, and
// both generate one device's tokens, logits within float32's reordering,
// after a prompt in one pass and after fillCache. A device that read
// another's rows, or its own at the wrong place, would differ.
TEST(Decoder, EachDeviceHoldsOnlyItsShareOfTheCacheRows) {
  test_support::ThreadCountGuard guard;
  setThreadCount(1);
  for (const std::string& path : {kTiny, kDir + "llama_style_tiny.onnx"}) {
    SCOPED_TRACE(path);
    const DecodeModel model = importDecodeModel(path, 16);
    std::unique_ptr<Backend> native = createBackend("native");
    const BackendLookup lookup = [&](const std::string& n) {
      return n == "native" ? native.get() : nullptr;
    };
    const Plan plan = native::decodeAttentionPlan(model.graph);
    PlannedDecoder whole = plannedDecoder(model, plan, lookup);
    ASSERT_EQ(whole.fallback, "");
    // An all-gather of two threads' partials; the sent blocks kept per
    // round's parity, so a fast thread's next round leaves the last alone.
    std::mutex mutex;
    std::condition_variable arrived;
    native::AttentionPartials sent[2][2];
    int waiting = 0;
    uint64_t round = 0;
    auto gather = [&](int dev, const native::AttentionPartials& mine,
                      native::AttentionPartials& all) {
      std::unique_lock<std::mutex> lock(mutex);
      const uint64_t r = round;
      sent[r % 2][dev] = mine;
      if (++waiting == 2) {
        waiting = 0;
        ++round;
        arrived.notify_all();
      } else {
        arrived.wait(lock, [&] { return round != r; });
      }
      all.resize(2, mine.rows, mine.dv);
      for (int p = 0; p < 2; ++p)
        for (int64_t x = 0; x < mine.rows; ++x)
          native::combineAttentionPartials(sent[r % 2][p], 0, 1, x, all, p, x);
    };
    PlannedDecoder device[2];
    for (int d = 0; d < 2; ++d) {
      CacheShare share;
      share.rowFirst = d * 8;
      share.rowEnd = d * 8 + 8;
      device[d] = plannedDecoder(model, plan, lookup, share);
      native::requireWindowedPresentsReadByDecodeAttention(*device[d].session);
      const auto keysAt = native::splitByCacheRows(
          native::decodeAttentionKernels(*device[d].session), share.rowFirst, share.rowEnd, 16,
          true, [&gather, d](const native::AttentionPartials& m, native::AttentionPartials& a) {
            gather(d, m, a);
          });
      device[d].decoder->setCacheSlice(share.rowFirst, share.rowEnd, keysAt);
      EXPECT_EQ(device[d].decoder->wholeCacheBytes(), whole.decoder->cacheBytes());
      EXPECT_EQ(device[d].decoder->cacheBytes() * 17, whole.decoder->cacheBytes() * 9);
    }
    GenerateOptions options;
    options.maxNewTokens = 10;
    options.keepLogits = true;
    // Both devices at once, each on its thread; `run` is one device's part.
    auto both = [&](const std::function<Generation(Decoder&)>& run) {
      Generation g[2];
      std::string failed[2];
      std::vector<std::thread> threads;
      for (int d = 0; d < 2; ++d)
        threads.emplace_back([&, d] {
          try {
            g[d] = run(*device[d].decoder);
          } catch (const std::exception& e) {
            failed[d] = e.what();
          }
        });
      for (std::thread& t : threads) t.join();
      EXPECT_EQ(failed[0] + failed[1], "");
      EXPECT_EQ(g[0].tokens, g[1].tokens);
      return g[0];
    };
    auto same = [](const Generation& a, const Generation& b) {
      EXPECT_EQ(a.tokens, b.tokens);
      ASSERT_EQ(a.logits.size(), b.logits.size());
      for (size_t t = 0; t < a.logits.size(); ++t)
        for (size_t i = 0; i < a.logits[t].size(); ++i)
          ASSERT_NEAR(a.logits[t][i], b.logits[t][i], 1e-4) << "token " << t << " logit " << i;
    };
    same(both([&](Decoder& d) { return d.generate({1, 2, 3}, options); }),
         whole.decoder->generate({1, 2, 3}, options));
    // Filled rows: each device fills its share, with one device's values.
    options.maxNewTokens = 4;
    auto filled = [&](Decoder& d) {
      d.fillCache(11, 5);
      return d.generateFrom(11, 7, options);
    };
    same(both(filled), filled(*whole.decoder));
  }
}

// On the plan that times a step (the decode attention kernel, which reads
// only the rows the mask shows), the step at row 31 after fillCache(31)
// reads row 0: changing it changes the logits; a step at row 20 does not
// read row 25.
TEST(Decoder, AStepAfterFillCacheReadsTheRowsFarBack) {
  const DecodeModel model = importDecodeModel(kTiny, 32);
  std::unique_ptr<Backend> native = createBackend("native");
  const BackendLookup lookup = [&](const std::string& n) {
    return n == "native" ? native.get() : nullptr;
  };
  PlannedDecoder planned = plannedDecoder(model, native::decodeAttentionPlan(model.graph), lookup);
  ASSERT_EQ(planned.fallback, "");
  Decoder& decoder = *planned.decoder;
  // Row `row` of pair 0 (layer 0's keys), both heads, moved by 0.5.
  auto nudge = [&](int64_t row) {
    Tensor keys = decoder.cache(0);  // shares the buffer
    const int64_t rows = keys.shape()[2];
    for (int64_t head = 0; head < 2; ++head)
      for (int64_t d = 0; d < 8; ++d) keys.data<float>()[(head * rows + row) * 8 + d] += 0.5f;
  };
  decoder.fillCache(31, 3);
  const std::vector<float> before = decoder.decodeStep(5, 31);
  EXPECT_EQ(decoder.lastStepRows(), 32);
  nudge(0);
  EXPECT_NE(decoder.decodeStep(5, 31), before);

  decoder.fillCache(31, 3);
  const std::vector<float> at20 = decoder.decodeStep(5, 20);
  nudge(25);
  EXPECT_EQ(decoder.decodeStep(5, 20), at20);
  nudge(0);
  EXPECT_NE(decoder.decodeStep(5, 20), at20);
}

// setCacheRows takes a past as ONNX Runtime is fed one (L rows on the
// sequence axis) and generateFrom steps on from row L: from the rows a
// prompt's pass wrote, a second Decoder without that pass generates the
// same ids as generate() does after it (`collage generate --cache-in`).
TEST(Decoder, StepsFromCacheRowsSetDirectlyAsAfterTheirPrompt) {
  const DecodeModel model = importDecodeModel(kTiny, 16);
  Decoder prompted(model), direct(model);
  GenerateOptions one;
  one.maxNewTokens = 1;
  const std::vector<int64_t> first = prompted.generate({1, 2, 3}, one).tokens;
  const std::vector<int64_t> want = greedyFile("generated");
  ASSERT_EQ(first[0], want[0]);
  for (size_t i = 0; i < 4; ++i) {
    const Tensor& cache = prompted.cache(i);  // [1, 2, 17, 8]: in place, the present's
    Tensor rows(TensorType{ElementType::Float32, Shape{1, 2, 3, 8}});
    for (int64_t head = 0; head < 2; ++head)
      std::memcpy(rows.data<float>() + head * 3 * 8, cache.data<float>() + head * 17 * 8,
                  3 * 8 * sizeof(float));
    EXPECT_EQ(direct.setCacheRows(model.signature.cache[i].past, rows), 3);
  }
  GenerateOptions rest;
  rest.maxNewTokens = 9;
  const Generation g = direct.generateFrom(3, want[0], rest);
  EXPECT_EQ(g.tokens, std::vector<int64_t>(want.begin() + 1, want.begin() + 10));
  EXPECT_EQ(g.stepMs.size(), 9u);  // every step timed, the first too
  EXPECT_EQ(g.prefillMs, 0);
  EXPECT_EQ(direct.promptRuns(), 0);
  EXPECT_EQ(direct.lastStepRows(), 12);

  const std::string& past = model.signature.cache[0].past;
  expectError([&] { direct.setCacheRows("nope", Tensor(TensorType{ElementType::Float32, Shape{1, 2, 3, 8}})); },
              {"cache rows 'nope'", "no past input of that name", past});
  expectError([&] { direct.setCacheRows(past, Tensor(TensorType{ElementType::Float32, Shape{1, 3, 3, 8}})); },
              {"cache rows '" + past + "' are", "with any number of rows on axis 2"});
  expectError([&] { direct.setCacheRows(past, Tensor(TensorType{ElementType::Float64, Shape{1, 2, 3, 8}})); },
              {"cache rows '" + past + "' are"});
  expectError([&] { direct.setCacheRows(past, Tensor(TensorType{ElementType::Float32, Shape{1, 2, 17, 8}})); },
              {"hold 17 rows: the cache has 16"});
  rest.maxNewTokens = 14;
  expectError([&] { direct.generateFrom(3, 1, rest); },
              {"14 new token(s) after 3 filled rows need a cache of 17 rows; it has 16"});
  rest.maxNewTokens = 1;
  expectError([&] { direct.generateFrom(3, direct.vocabulary(), rest); }, {"outside the vocabulary"});
}

TEST(Decoder, RunsItsStepsOnAPlansSession) {
  // Every node on the native backend, compiled once for the step graph.
  const DecodeModel model = importDecodeModel(kTiny, 16);
  std::unique_ptr<Backend> native = createBackend("native");
  Session session(model.graph, singleNodePlan(model.graph, "native"),
                  [&](const std::string& n) { return n == "native" ? native.get() : nullptr; });
  Decoder decoder(model, [&](const std::vector<Tensor>& in) { return session.run(in); });
  GenerateOptions options;
  options.maxNewTokens = 10;
  EXPECT_EQ(decoder.generate({1, 2, 3}, options).tokens, greedyFile("generated"));
  EXPECT_EQ(session.runsDone(), 12);
}

// In place, the step's Concat(past, new) writes the new rows only, into the
// cache buffer that is the present: the reference path and a plan's Session.
TEST(Decoder, TheStepsConcatWritesOnlyTheNewRowsIntoTheCache) {
  const DecodeModel model = importDecodeModel(kTiny, 32);
  std::unique_ptr<Backend> native = createBackend("native");
  Session session(model.graph, singleNodePlan(model.graph, "native"),
                  [&](const std::string& n) { return n == "native" ? native.get() : nullptr; });
  for (bool onSession : {false, true}) {
    SCOPED_TRACE(onSession ? "session" : "reference");
    Decoder decoder = onSession ? Decoder(model, session) : Decoder(model);
    ASSERT_TRUE(decoder.inPlace());
    std::vector<const void*> before;
    for (size_t i = 0; i < 4; ++i) {
      before.push_back(decoder.cache(i).raw());
      EXPECT_EQ(decoder.cache(i).shape(), (Shape{1, 2, 33, 8}));  // the present's
    }
    GenerateOptions options;
    options.maxNewTokens = 10;
    EXPECT_EQ(decoder.generate({1, 2, 3}, options).tokens, greedyFile("generated"));
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(decoder.cache(i).raw(), before[i]);
    // 12 tokens, 4 presents, one row (2 heads x 8 floats) each: not 33 rows.
    // The reference runs the prompt in one pass against an empty past, whose
    // presents (its 3 rows, not 32 + 3) are written once; the Session given
    // alone runs it token by token.
    const size_t row = 4u * 2 * 8 * sizeof(float);
    EXPECT_EQ(decoder.promptRuns(), onSession ? 3 : 1);
    EXPECT_EQ(decoder.presentBytesWritten(), onSession ? 12 * row : 3 * row + 9 * row);
    EXPECT_EQ(decoder.bytesAppended(), 12 * row);
  }
}

// The placement `collage optimize` makes for the tiny decoder: each cache
// Concat in one native group with what makes its new rows (the Reshape and
// Transpose of K or V) and, for the keys, the Kᵀ Transpose that reads the
// present; every other node alone.
Plan fusedCacheConcatPlan(const Graph& g, const DecoderSignature& sig) {
  std::vector<NodeId> groupOf(static_cast<size_t>(g.numNodes()));
  for (NodeId n = 0; n < g.numNodes(); ++n) groupOf[static_cast<size_t>(n)] = n;
  for (const KvCachePair& pair : sig.cache) {
    const NodeId concat = g.value(*g.findValue(pair.present)).producer;
    const NodeId transpose = g.value(g.node(concat).inputs[1]).producer;
    const NodeId reshape = g.value(g.node(transpose).inputs[0]).producer;
    for (NodeId n : {transpose, reshape}) groupOf[static_cast<size_t>(n)] = concat;
    for (NodeId reader : g.value(g.node(concat).outputs[0]).consumers)
      if (g.node(reader).op == "Transpose") groupOf[static_cast<size_t>(reader)] = concat;
  }
  Plan plan = singleNodePlan(g, "native");
  plan.groups.clear();
  std::map<NodeId, size_t> index;
  for (NodeId n = 0; n < g.numNodes(); ++n) {
    const NodeId key = groupOf[static_cast<size_t>(n)];
    if (!index.count(key)) {
      index[key] = plan.groups.size();
      PlanGroup group;
      group.backend = "native";
      group.pattern = "rule:op";
      plan.groups.push_back(group);
    }
    plan.groups[index[key]].nodes.push_back(g.node(n).name);
  }
  return plan;
}

// With an optimized plan the cache Concat shares a group, which
// appendInPlace refuses; planWithCacheConcatsAlone takes it out and the
// steps append in place on that plan's Session: per step one row per
// present is written, not the L + 1 rows a copying step writes.
TEST(Decoder, APlanWithFusedCacheConcatsRunsInPlaceOnceTheyAreTakenOut) {
  const DecodeModel model = importDecodeModel(kTiny, 32);
  const Graph& g = model.graph;
  std::unique_ptr<Backend> native = createBackend("native");
  auto lookup = [&](const std::string& n) { return n == "native" ? native.get() : nullptr; };
  const Plan fused = fusedCacheConcatPlan(g, model.signature);
  GenerateOptions options;
  options.maxNewTokens = 10;
  {
    // As the plan was made: in place is refused, and the copying step
    // writes each whole present (33 rows) every step.
    Session session(g, fused, lookup);
    expectError([&] { Decoder decoder(model, session); },
                {"output 'present.0.key' cannot be written in place", "with other nodes"});
    Decoder copying(model, [&](const std::vector<Tensor>& in) { return session.run(in); });
    EXPECT_EQ(copying.generate({1, 2, 3}, options).tokens, greedyFile("generated"));
    EXPECT_EQ(copying.presentBytesWritten(), 12u * 4 * 2 * 33 * 8 * sizeof(float));
  }
  std::vector<std::string> split;
  const Plan alone = planWithCacheConcatsAlone(fused, g, model.signature, &split);
  ASSERT_EQ(split.size(), 4u);
  EXPECT_NE(split[0].find("Concat '"), std::string::npos) << split[0];
  // Keys: Reshape + Transpose, Concat, Kᵀ; values: Reshape + Transpose, Concat.
  EXPECT_EQ(alone.groups.size(), fused.groups.size() + 2 * 2 + 2 * 1);
  for (const PlanGroup& group : alone.groups)
    for (const KvCachePair& pair : model.signature.cache)
      if (std::find(group.nodes.begin(), group.nodes.end(),
                    g.node(g.value(*g.findValue(pair.present)).producer).name) !=
          group.nodes.end()) {
        EXPECT_EQ(group.nodes.size(), 1u) << pair.present;
      }
  // The prompt graph's last-row Gather, which the step plan lacks, runs on native.
  PlannedDecoder planned = plannedDecoder(model, fused, lookup, {}, "native");
  ASSERT_EQ(planned.fallback, "");
  Decoder& decoder = *planned.decoder;
  ASSERT_TRUE(decoder.inPlace());
  std::vector<const void*> before;
  for (size_t i = 0; i < 4; ++i) before.push_back(decoder.cache(i).raw());
  EXPECT_EQ(decoder.generate({1, 2, 3}, options).tokens, greedyFile("generated"));
  // The prompt in one pass on the plan against an empty past (its presents,
  // the prompt's 3 rows, written once), then 9 steps of one row (2 heads x 8
  // floats) per present.
  EXPECT_EQ(decoder.promptRuns(), 1) << decoder.promptOneTokenAStepWhy();
  EXPECT_EQ(decoder.presentBytesWritten(), (3u + 9u) * 4 * 2 * 8 * sizeof(float));
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(decoder.cache(i).raw(), before[i]);
  EXPECT_EQ(planned.session->runsDone(), 9);
}

// Session::appendInPlace: the Concat's output is the caller's buffer, the
// past rows there are not rewritten (the past input is not even read: here
// it holds zeros, the buffer's head a sentinel), and only the new row is.
TEST(Decoder, TheSessionWritesAPresentInPlaceWithoutReadingThePast) {
  const DecodeModel model = importDecodeModel(kTiny, 8);
  const Graph& g = model.graph;
  std::unique_ptr<Backend> native = createBackend("native");
  Session session(g, singleNodePlan(g, "native"),
                  [&](const std::string& n) { return n == "native" ? native.get() : nullptr; });
  size_t present = 0, logits = 0;
  for (size_t o = 0; o < g.outputs().size(); ++o) {
    if (g.value(g.outputs()[o]).name == "present.0.key") present = o;
    if (g.value(g.outputs()[o]).name == "logits") logits = o;
  }
  Tensor buffer(g.value(g.outputs()[present]).type);  // [1, 2, 9, 8]
  std::vector<float> sentinel(static_cast<size_t>(buffer.numElements()), 7.5f);
  std::memcpy(buffer.raw(), sentinel.data(), buffer.byteSize());
  session.appendInPlace(present, buffer);
  std::vector<Tensor> in;
  for (ValueId v : g.inputs()) {
    Tensor t(g.value(v).type);
    std::memset(t.raw(), 0, t.byteSize());
    const std::string& name = g.value(v).name;
    if (name == "input_ids") t.data<int64_t>()[0] = 5;
    if (name == "attention_mask") t.data<int64_t>()[8] = 1;  // the new token only
    in.push_back(t);
  }
  const std::vector<Tensor> out = session.run(in);
  const std::vector<Tensor> expected = ReferenceExecutor(g).run(in);
  EXPECT_EQ(out[present].raw(), buffer.raw());
  EXPECT_EQ(session.appendedBytes(), 2u * 8 * sizeof(float));
  const std::vector<float> got = buffer.toFloats(), want = expected[present].toFloats();
  for (size_t head = 0; head < 2; ++head)
    for (size_t r = 0; r < 9; ++r)
      for (size_t d = 0; d < 8; ++d) {
        const size_t k = (head * 9 + r) * 8 + d;
        if (r < 8)
          ASSERT_EQ(got[k], 7.5f) << "head " << head << " row " << r << " was rewritten";
        else
          EXPECT_NEAR(got[k], want[k], 1e-5) << "head " << head;
      }
  // The logits do not depend on the masked past rows.
  EXPECT_TRUE(compareTensors(out[logits], expected[logits], kPlanTolerance).ok);
  expectError([&] { session.appendInPlace(logits, Tensor(g.value(g.outputs()[logits]).type)); },
              {"output 'logits' cannot be written in place", "not made by a Concat"});
  // A window of the present (a device's share: KV head 1, 4 rows and the
  // new one): one that does not fit is refused; one that does is bound, and
  // since this plan's nodes read the present whole, refused for it.
  TensorType window = g.value(g.outputs()[present]).type;
  window.shape = {1, 1, 5, 8};
  expectError([&] { session.appendInPlace(present, Tensor(window), {0, 2}); },
              {"output 'present.0.key'", "nor a window of it"});
  window.shape = {1, 1, 5, 7};
  expectError([&] { session.appendInPlace(present, Tensor(window), {0, 1}); },
              {"nor a window of it"});
  window.shape = {1, 1, 5, 8};
  session.appendInPlace(present, Tensor(window), {0, 1});
  EXPECT_EQ(session.windowedOutputs(), std::vector<ValueId>{g.outputs()[present]});
  expectError([&] { native::requireWindowedPresentsReadByDecodeAttention(session); },
              {"'present.0.key' is held in part on this device", "decode attention"});
}

TEST(Decoder, SeededSamplingIsReproducibleAndTheSeedMatters) {
  const DecodeModel model = importDecodeModel(kTiny, 24);
  Decoder decoder(model);
  GenerateOptions options;
  options.maxNewTokens = 12;
  options.temperature = 1.5;
  options.topK = 8;
  options.seed = 11;
  const std::vector<int64_t> a = decoder.generate({1, 2, 3}, options).tokens;
  EXPECT_EQ(decoder.generate({1, 2, 3}, options).tokens, a);
  options.seed = 12;
  const std::vector<int64_t> b = decoder.generate({1, 2, 3}, options).tokens;
  EXPECT_NE(a, b);
  // Top-1 sampling is greedy whatever the temperature.
  options.topK = 1;
  options.maxNewTokens = 10;
  EXPECT_EQ(decoder.generate({1, 2, 3}, options).tokens, greedyFile("generated"));
}

TEST(Decoder, StopsAfterTheEosId) {
  const DecodeModel model = importDecodeModel(kTiny, 16);
  Decoder decoder(model);
  const std::vector<int64_t> greedy = greedyFile("generated");  // 4 30 4 0 26 ...
  GenerateOptions options;
  options.maxNewTokens = 10;
  options.eos = greedy[3];
  const Generation g = decoder.generate({1, 2, 3}, options);
  EXPECT_EQ(g.tokens, std::vector<int64_t>(greedy.begin(), greedy.begin() + 4));
  EXPECT_EQ(g.stop, "eos");
}

TEST(Decoder, RefusesPromptsItCannotRun) {
  const DecodeModel model = importDecodeModel(kTiny, 4);
  Decoder decoder(model);
  GenerateOptions options;
  options.maxNewTokens = 1;
  expectError(
      [&] {
        decoder.generate({1, 2, 3, 4, 5}, options);
      },
      {"prompt's 5 tokens are longer than the cache (4 rows)"});
  options.maxNewTokens = 3;
  expectError([&] { decoder.generate({1, 2, 3}, options); }, {"need a cache of 5 rows; it has 4"});
  expectError(
      [&] {
        decoder.generate({1, 32}, options);
      },
      {"token id 32 is outside the vocabulary", "'logits'"});
  expectError([&] { decoder.generate({}, options); }, {"prompt is empty"});
}

// A prompt's pass gets an empty past, as ONNX Runtime's loop feeds it: its
// attention reads the prompt's rows alone, not the cache's masked ones too.
TEST(Decoder, APromptsGraphTakesAnEmptyPast) {
  const DecodeModel model = importDecodeModel(kTiny, 32);
  std::string why;
  std::vector<std::string> bindings;
  const std::optional<Graph> prompt = importPrefillGraph(model, 5, &why, &bindings);
  ASSERT_TRUE(prompt) << why;
  for (ValueId v : prompt->inputs()) {
    const Value& in = prompt->value(v);
    if (in.name == model.signature.attentionMask) {
      EXPECT_EQ(in.type.shape, (Shape{1, 5}));
    }
    for (const KvCachePair& p : model.signature.cache) {
      if (p.past == in.name) {
        EXPECT_EQ(in.type.shape[static_cast<size_t>(p.sequenceAxis)], 0) << in.name;
      }
    }
  }
  for (ValueId v : prompt->outputs()) {
    for (const KvCachePair& p : model.signature.cache) {
      if (p.present == prompt->value(v).name) {
        EXPECT_EQ(prompt->value(v).type.shape[static_cast<size_t>(p.sequenceAxis)], 5) << p.present;
      }
    }
  }
  EXPECT_NE(std::find(bindings.begin(), bindings.end(), model.signature.attentionMask + "=1x5"),
            bindings.end());
}

}  // namespace
}  // namespace collage
