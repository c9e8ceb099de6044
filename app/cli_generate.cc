// `collage generate model.onnx --prompt-ids 1,2,3 --max-new-tokens N`: runs a
// decoder with a KV cache through the runtime's decode loop (core/decode/)
// on the reference executor or a plan's Session, and prints the generated ids
// and the latency of the prefill and of the median decode step. Text in and
// out (`--prompt`) with the model's tokenizer (core/decode/tokenizer.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "backends/native/native_cache_parallel.h"
#include "backends/native/native_sharded_matmul.h"
#include "backends/native/native_tensor_parallel.h"
#include "core/decode/cache_plan.h"
#include "core/decode/decode_runs.h"
#include "core/decode/decoder.h"
#include "core/decode/tokenizer.h"
#include "core/ir/error.h"
#include "core/ir/threading.h"
#include "core/measure/measurement_db.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"
#ifdef COLLAGE_HAVE_MPI
#include "core/decode/mpi_cache_exchange.h"
#include "core/pipeline/link_measurement.h"
#include "core/pipeline/mpi_pipeline_runtime.h"
#endif

namespace collage::cli {

namespace {

struct GenerateCommandOptions {
  std::string modelPath;
  std::string plan;
  std::string prefillPlan;
  std::vector<int64_t> promptIds;
  std::string promptText;  // --prompt: encoded with `tokenizer`
  std::string tokenizerPath;
  std::shared_ptr<Tokenizer> tokenizer;  // the model's, when there is one
  int64_t maxLength = 0;
  GenerateOptions generate;
  int64_t eos = -1;
  bool printBindings = false;
  bool printPrefillBindings = false;
  std::string logitsOut;
  bool cacheParallel = false;
  bool dataParallel = false;  // every rank the whole generation, on its own
  bool tensorParallel = false;
  double mpiTimeout = 120;
  // A run on ranks is stored here by rank 0 (core/decode/decode_runs.h).
  std::string db = MeasurementDb::defaultPath();
  bool noDb = false;
  // No prompt's pass: the cache's rows filled directly, seeded (--fill-rows)
  // or from a past tensor per input (--cache-in), then the steps from there.
  int64_t fillRows = -1;
  uint64_t fillSeed = 1;
  std::vector<std::string> cacheIn;
  std::string fillWhat;  // how they were filled, for the report
  double fillMs = 0;
};

// The generation's report (what every generate prints).
void printGeneration(const GenerateCommandOptions& o, const Decoder& decoder, const Generation& g,
                     const std::string& runner, const std::string& prefillRunner = "") {
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

#ifdef COLLAGE_HAVE_MPI
// The parts of each step a run on ranks reports and stores: the decode
// attention kernels' time (Session profiling; the kernel runs the exchange,
// so it is in) and the exchanges' own. The Decoder's step calls boundary()
// before each step, the caller once after the last: each closes the run before.
class RankStepTimes {
 public:
  explicit RankStepTimes(Session& session) : session_(session) {
    session.setProfiling(true);
    for (size_t g = 0; g < session.groupCount(); ++g)
      if (dynamic_cast<native::DecodeAttentionKernel*>(&session.groupKernel(g)))
        attentionGroups_.insert(g);
  }
  void boundary() {
    if (started_) {
      double us = 0;
      for (const KernelTiming& t : session_.lastTimings())
        if (attentionGroups_.count(t.group)) us += t.durUs;
      attention_.push_back(us / 1e3);
      exchange_.push_back(exchangeNow_);
    }
    started_ = true;
    exchangeNow_ = 0;
  }
  void addExchange(double ms) { exchangeNow_ += ms; }
  // Medians over the last `steps` runs: the decode steps (a prompt run a
  // token a step came first).
  double attentionMs(size_t steps) const { return medianOfLast(attention_, steps); }
  double exchangeMs(size_t steps) const { return medianOfLast(exchange_, steps); }

 private:
  static double medianOfLast(const std::vector<double>& v, size_t n) {
    n = std::min(n, v.size());
    if (n == 0) return 0;
    std::vector<double> last(v.end() - static_cast<long>(n), v.end());
    std::sort(last.begin(), last.end());
    return last[last.size() / 2];
  }
  Session& session_;
  std::set<size_t> attentionGroups_;
  std::vector<double> attention_, exchange_;
  double exchangeNow_ = 0;
  bool started_ = false;
};

// The step's attention part (the line `decode-parallel` and the app set
// beside the simulation) and the run stored by rank 0.
void reportRankRun(const GenerateCommandOptions& o, DecodeRunRecord run) {
  // CP exchanges inside the attention kernels; TP in its row-sharded MatMuls.
  const bool inAttention = run.strategy != "TP";
  std::printf(
      "attention: median %.4f ms a step (the decode attention kernels%s: %.4f ms), rest %.4f "
      "ms; %d thread(s) a rank\n",
      run.attentionMs,
      inAttention ? ", their exchange included" : "; the rest includes the all-reduces",
      run.exchangeMs, std::max(0.0, run.stepMs - run.attentionMs), run.threadsPerRank);
  if (o.noDb || run.steps == 0) return;
  try {
    run.modelKey = decodeModelKey(o.modelPath);
    MeasurementDb db(o.db);
    db.storeDecodeRun(linkFingerprint(), run);
    std::printf("stored: %s, %d rank(s), %lld rows, in %s\n", run.strategy.c_str(), run.ranks,
                static_cast<long long>(run.context), db.path().c_str());
  } catch (const Error& e) {
    // The generation ran; a database that cannot take it is no reason to fail it.
    std::fprintf(stderr, "warning: the run is not stored: %s\n", e.what());
  }
}

// Every rank must take the same steps, or one would wait on another: the
// arguments that decide them, compared across the ranks before any step.
void requireSameArguments(MpiCacheExchange& exchange, const GenerateCommandOptions& o) {
  std::vector<int64_t> args(o.promptIds);
  double temperature = o.generate.temperature;
  int64_t temperatureBits = 0;
  std::memcpy(&temperatureBits, &temperature, sizeof temperatureBits);
  for (int64_t x : {o.generate.maxNewTokens, o.maxLength, o.eos, o.generate.topK,
                    static_cast<int64_t>(o.generate.seed), temperatureBits,
                    static_cast<int64_t>(!o.plan.empty()), o.fillRows,
                    static_cast<int64_t>(o.fillSeed), static_cast<int64_t>(o.dataParallel),
                    static_cast<int64_t>(o.tensorParallel)})
    args.push_back(x);
  exchange.requireSame(args,
                       "arguments (--prompt-ids, --max-new-tokens, --max-length, --eos, "
                       "sampling, --plan, --fill-rows, the split)");
}

// The cache's rows of a run on ranks: as asked, else the plan's, else the
// filled rows or the prompt, and the new tokens.
int64_t rankRunCapacity(const GenerateCommandOptions& o, const DecoderSignature& signature,
                        const Plan* plan) {
  int64_t capacity = o.maxLength;
  if (capacity <= 0 && plan) capacity = planCapacity(signature, plan->inputShapes);
  if (capacity <= 0 && o.fillRows >= 0) capacity = o.fillRows + o.generate.maxNewTokens;
  if (capacity <= 0)
    capacity = static_cast<int64_t>(o.promptIds.size()) + o.generate.maxNewTokens;
  return capacity;
}

// The generation of a run on ranks: the prompt, or (--fill-rows) no
// prompt's pass: each rank fills the rows it holds (seeded: a row's values
// are the same on any rank), then the steps. `report` gets what was filled.
Generation generateOnRank(const GenerateCommandOptions& o, Decoder& decoder,
                          const GenerateOptions& options, GenerateCommandOptions& report,
                          const std::string& whoFills) {
  if (o.fillRows < 0) return decoder.generate(o.promptIds, options);
  const auto t0 = std::chrono::steady_clock::now();
  decoder.fillCache(o.fillRows, o.fillSeed);
  report.fillWhat = std::to_string(o.fillRows) + " cache rows filled with seeded values (seed " +
                    std::to_string(o.fillSeed) + whoFills + ")";
  report.fillMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return decoder.generateFrom(o.fillRows, o.promptIds[0], options);
}

// The run rank 0 reports and stores: one device's medians.
DecodeRunRecord rankRun(const std::string& strategy, int64_t ranks, const GenerateCommandOptions& o,
                        int64_t capacity, const Generation& g, const RankStepTimes& times) {
  std::vector<double> sorted = g.stepMs;
  std::sort(sorted.begin(), sorted.end());
  DecodeRunRecord run;
  run.strategy = strategy;
  run.ranks = static_cast<int>(ranks);
  run.threadsPerRank = threadCount();
  run.context = o.fillRows >= 0 ? o.fillRows : static_cast<int64_t>(o.promptIds.size());
  run.capacity = capacity;
  run.steps = static_cast<int64_t>(g.stepMs.size());
  run.stepMs = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  run.attentionMs = times.attentionMs(g.stepMs.size());
  run.exchangeMs = times.exchangeMs(g.stepMs.size());
  run.tokensPerSecond = run.stepMs > 0 ? 1e3 / run.stepMs : 0;
  return run;
}

// `collage generate ... --cache-parallel` in each rank mpirun starts
// (docs/decoding.md): rank r of n holds rows [r*L/n, (r+1)*L/n) of the
// cache; every layer's decode attention reads only those rows and the ranks
// merge their partials (MpiCacheExchange, then the log-sum-exp merge, in
// rank order: every rank gets the same output, so the same token); the rest
// of the step runs on every rank. Rank 0 prints. A rank that fails stops
// the run (abortMpiRun), naming itself.
//
// With --data-parallel (dataParallel) every rank runs the whole generation
// on its own, the same plan and no shard (DP: each device steps its own
// request); the ranks meet only to compare the arguments and the tokens
// and to gather each rank's median step. Both report the attention's part
// of the step and store the run (rank 0, unless --no-db).
int generateCacheParallel(const GenerateCommandOptions& o) {
  MpiScope mpi;
  const std::string rankName = "rank " + std::to_string(mpi.rank());
  try {
    MpiCacheExchange exchange(o.mpiTimeout);
    requireSameArguments(exchange, o);
    const DecoderSignature signature = probeDecoderSignature(o.modelPath);
    std::unique_ptr<Plan> plan;
    if (!o.plan.empty()) plan = std::make_unique<Plan>(loadPlan(o.plan));
    if (plan) checkMergedDecoderPlan(*plan, signature, o.modelPath, false);
    const int64_t capacity = rankRunCapacity(o, signature, plan.get());
    if (capacity < exchange.size())
      throw Error("the cache's " + std::to_string(capacity) + " rows cannot be split across " +
                  std::to_string(exchange.size()) + " ranks (a slice each)");
    const DecodeModel model = importDecodeModel(o.modelPath, capacity, &signature);
    std::unique_ptr<BackendSet> backends;
    std::unique_ptr<Backend> native;
    PlannedDecoder planned;
    if (plan) {
      backends = std::make_unique<BackendSet>(
          loadBackendsForPlan(*plan, model.graph, o.modelPath, {}, nullptr));
      planned =
          plannedDecoder(model, *plan, [&](const std::string& n) { return backends->find(n); });
      if (!planned.fallback.empty())
        throw Error("cache parallelism appends each rank's rows in place; " + o.plan +
                    " cannot: " + planned.fallback);
    } else {
      native = createBackend("native");
      Backend* b = native.get();
      planned.session = std::make_unique<Session>(
          model.graph, native::decodeAttentionPlan(model.graph),
          [b](const std::string& n) { return n == "native" ? b : nullptr; });
      planned.decoder = std::make_unique<Decoder>(model, *planned.session);
      // The prompt in one pass, on every rank (it reads none of the cache):
      // the reference executor, as a one-device generate without a plan.
      planned.decoder->setPrefillRunner([](const Graph& prefill, std::string&) -> Decoder::Step {
        auto executor = std::make_shared<ReferenceExecutor>(prefill);
        return [executor](const std::vector<Tensor>& in) { return executor->run(in); };
      });
    }
    const std::vector<native::DecodeAttentionKernel*> kernels =
        native::decodeAttentionKernels(*planned.session);
    if (kernels.empty())
      throw Error((plan ? o.plan : std::string("the step graph")) +
                  " runs no native decode attention kernel: there is no attention to split "
                  "across ranks");
    // This rank's rows; the new row (the present's last, key `capacity`) is
    // read by the rank that owns the step's row, which appends it.
    const int64_t n = exchange.size(), r = exchange.rank();
    const int64_t first = r * capacity / n, end = (r + 1) * capacity / n;
    RankStepTimes times(*planned.session);
    auto shard = std::make_shared<native::DecodeAttentionShard>();
    int64_t stepRow = 0, layer = 0;
    shard->exchange = [&](const native::AttentionPartials& mine, native::AttentionPartials& all) {
      // A header (the step's row, the kernel, the rows, the columns: every
      // rank must be at the same attention, or the merge would mix layers),
      // then per row: max, sum, the unnormalised output.
      const int64_t rows = mine.rows, dv = mine.dv, width = 2 + dv, kernel = layer++ % kernels.size();
      constexpr int64_t kHeader = 4;
      const float header[kHeader] = {static_cast<float>(stepRow), static_cast<float>(kernel),
                                     static_cast<float>(rows), static_cast<float>(dv)};
      std::vector<float> block(static_cast<size_t>(kHeader + rows * width));
      std::copy(header, header + kHeader, block.begin());
      for (int64_t x = 0; x < rows; ++x) {
        float* b = block.data() + kHeader + x * width;
        b[0] = mine.maxAt(0, x);
        b[1] = mine.sumAt(0, x);
        std::copy(mine.accAt(0, x), mine.accAt(0, x) + dv, b + 2);
      }
      const std::string what = "the attention partials of kernel " + std::to_string(kernel) +
                               " at row " + std::to_string(stepRow);
      const auto sent = std::chrono::steady_clock::now();
      const std::vector<float> got = exchange.allGather(block, what);
      times.addExchange(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent)
              .count());
      const size_t stride = block.size();
      for (int64_t p = 0; p < n; ++p) {
        const float* h = got.data() + p * stride;
        if (!std::equal(header, header + kHeader, h))
          throw Error("cache parallel: rank " + std::to_string(r) + ": " + what + ": rank " +
                      std::to_string(p) + " sent those of kernel " + std::to_string(static_cast<int64_t>(h[1])) +
                      " at row " + std::to_string(static_cast<int64_t>(h[0])) +
                      " (the ranks must run the same model the same way)");
      }
      all.resize(n, rows, dv);
      for (int64_t p = 0; p < n; ++p)
        for (int64_t x = 0; x < rows; ++x) {
          const float* b = got.data() + p * stride + kHeader + x * width;
          all.maxAt(p, x) = b[0];
          all.sumAt(p, x) = b[1];
          std::copy(b + 2, b + 2 + dv, all.accAt(p, x));
        }
    };
    for (native::DecodeAttentionKernel* k : kernels) {
      if (k->L != capacity + 1)
        throw Error("a decode attention kernel reads " + std::to_string(k->L) +
                    " keys, not the cache's " + std::to_string(capacity) +
                    " rows and the new one: it cannot be split by the cache's rows");
      if (!o.dataParallel) k->shard = shard;
    }
    if (o.dataParallel)
      planned.decoder->setCacheSlice(0, capacity, [&](int64_t) { times.boundary(); });
    else
      planned.decoder->setCacheSlice(first, end, [&, shard](int64_t row) {
        times.boundary();
        stepRow = row;
        shard->keys.assign(1, {first, end});
        if (row >= first && row < end) shard->keys.emplace_back(capacity, capacity + 1);
      });
    GenerateOptions options = o.generate;
    options.keepLogits = !o.logitsOut.empty();
    GenerateCommandOptions report = o;
    const Generation g = generateOnRank(o, *planned.decoder, options, report,
                                        o.dataParallel ? "" : ", each rank its rows");
    times.boundary();
    exchange.requireSame(g.tokens, o.dataParallel ? "tokens (the ranks' generations differ)"
                                                  : "tokens (the ranks' merges disagree)");
    DecodeRunRecord run = rankRun(o.dataParallel ? "DP" : "CP", n, o, capacity, g, times);
    // DP: each rank's median step and attention, gathered on every rank.
    std::vector<float> perRank;
    if (o.dataParallel)
      perRank = exchange.allGather(
          {static_cast<float>(run.stepMs), static_cast<float>(run.attentionMs)},
          "the ranks' median steps");
    if (r != 0) return 0;
    if (o.dataParallel) {
      std::vector<double> steps, attention;
      run.tokensPerSecond = 0;
      for (int64_t p = 0; p < n; ++p) {
        steps.push_back(perRank[static_cast<size_t>(2 * p)]);
        attention.push_back(perRank[static_cast<size_t>(2 * p + 1)]);
        run.tokensPerSecond += steps.back() > 0 ? 1e3 / steps.back() : 0;
        char b[64];
        std::snprintf(b, sizeof b, "%srank %lld %.4f ms", p ? ", " : "", static_cast<long long>(p),
                      steps.back());
        run.detail += b;
      }
      std::sort(steps.begin(), steps.end());
      std::sort(attention.begin(), attention.end());
      run.stepMs = steps[steps.size() / 2];
      run.attentionMs = attention[attention.size() / 2];
      run.detail = "median step per rank: " + run.detail;
      std::printf(
          "data parallel: %lld rank(s), each running the whole generation on its own (%s); "
          "%.1f tokens/s over the ranks\n",
          (long long)n, run.detail.c_str(), run.tokensPerSecond);
    } else {
      std::printf("cache parallel: %lld rank(s), %zu decode attention kernel(s) split;",
                  (long long)n, kernels.size());
      for (int64_t p = 0; p < n; ++p)
        std::printf("%s rows %lld..%lld on rank %lld", p ? "," : "",
                    static_cast<long long>(p * capacity / n),
                    static_cast<long long>((p + 1) * capacity / n - 1), static_cast<long long>(p));
      std::printf("\n");
    }
    printGeneration(report, *planned.decoder, g,
                    (plan ? "plan " + o.plan : std::string("native decode attention")) +
                        (o.dataParallel ? ", data parallel" : ", cache parallel"));
    reportRankRun(o, run);
    return 0;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const bool named = what.find("cache parallel: rank ") != std::string::npos;
    abortMpiRun("error: generate: " + (named ? "" : rankName + ": ") + what, 1);
  }
}
#endif

#ifdef COLLAGE_HAVE_MPI
// `collage generate ... --tensor-parallel` in each rank mpirun starts
// (docs/decoding.md): rank r of n owns KV heads [r Hkv / n, (r + 1) Hkv / n)
// of every decode attention and the query heads that read them; the weight
// MatMuls feeding those heads and the MLP's first MatMuls compute only the
// rank's columns, the MatMuls after them only the rank's rows, summed
// across the ranks (an all-reduce through MpiCacheExchange, in rank order:
// every rank gets the same bits, so the same token); the rest of the step
// runs on every rank (native_tensor_parallel.h). Rank 0 prints. A rank that
// fails stops the run (abortMpiRun), naming itself.
int generateTensorParallel(const GenerateCommandOptions& o) {
  MpiScope mpi;
  const std::string rankName = "rank " + std::to_string(mpi.rank());
  try {
    MpiCacheExchange exchange(o.mpiTimeout, "tensor parallel");
    requireSameArguments(exchange, o);
    const DecoderSignature signature = probeDecoderSignature(o.modelPath);
    std::unique_ptr<Plan> plan;
    if (!o.plan.empty()) plan = std::make_unique<Plan>(loadPlan(o.plan));
    if (plan) checkMergedDecoderPlan(*plan, signature, o.modelPath, false);
    const int64_t capacity = rankRunCapacity(o, signature, plan.get());
    const DecodeModel model = importDecodeModel(o.modelPath, capacity, &signature);
    // The same step graph on every rank, or the sums would add another
    // model's rows (an all-reduce's size alone does not tell).
    const std::string digest = model.graph.digest();
    exchange.requireSame(std::vector<int64_t>(digest.begin(), digest.end()),
                         "step graphs (the model or its --max-length differ)");
    const native::TensorParallelSplit split = native::findTensorParallelSplit(model.graph);
    const int64_t n = exchange.size(), r = exchange.rank();
    for (size_t a = 0; a < split.attentions.size(); ++a)
      if (split.attentions[a].kvHeads % n != 0)
        throw Error("tensor parallel: attention " + std::to_string(a) + " has " +
                    std::to_string(split.attentions[a].kvHeads) + " KV head(s), which do not " +
                    "split across " + std::to_string(n) + " ranks (each rank takes whole KV " +
                    "heads and the query heads that read them): run on a divisor of " +
                    std::to_string(split.attentions[a].kvHeads) + " ranks");
    std::unique_ptr<Backend> native = createBackend("native");
    std::unique_ptr<Backend> sharded = native::createTensorParallelBackend(threadCount());
    Backend* nb = native.get();
    Backend* sb = sharded.get();
    PlannedDecoder planned;
    std::string planText;
    std::unique_ptr<BackendSet> backends;
    if (plan) {
      // The plan's groups, but those holding a sharded MatMul or a decode
      // attention split into the split's groups; the cache Concats alone
      // (plannedDecoder), the prompt's pass on the plan's groups too, whole
      // (its Session's MatMuls have no shard).
      std::vector<std::string> warnings;
      backends = std::make_unique<BackendSet>(
          loadBackendsForPlan(*plan, model.graph, o.modelPath, {}, &warnings));
      for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
      size_t kept = 0;
      const Plan tp = native::tensorParallelPlan(model.graph, split, *plan, &kept);
      planned = plannedDecoder(model, tp, [&](const std::string& name) -> Backend* {
        if (name == "tensor_parallel") return sb;
        if (Backend* b = backends->find(name)) return b;
        return name == "native" ? nb : nullptr;
      });
      if (!planned.fallback.empty() && r == 0)
        std::cerr << "warning: the cache is copied into each step's present: " << planned.fallback
                  << "\n";
      planText = "plan " + o.plan + " (" + std::to_string(kept) + " of its " +
                 std::to_string(plan->groups.size()) + " group(s) kept, the rest split), ";
    } else {
      planned.session = std::make_unique<Session>(
          model.graph, native::tensorParallelPlan(model.graph, split),
          [nb, sb](const std::string& name) -> Backend* {
            return name == "native" ? nb : name == "tensor_parallel" ? sb : nullptr;
          });
      planned.decoder = std::make_unique<Decoder>(model, *planned.session);
      // The prompt in one pass, on every rank, whole: the reference
      // executor, as a one-device generate without a plan.
      planned.decoder->setPrefillRunner([](const Graph& prefill, std::string&) -> Decoder::Step {
        auto executor = std::make_shared<ReferenceExecutor>(prefill);
        return [executor](const std::vector<Tensor>& in) { return executor->run(in); };
      });
    }
    // Each kernel its shard: the attentions their heads, the MatMuls their
    // columns or rows; each row-sharded one an all-reduce.
    Session& session = *planned.session;
    RankStepTimes times(session);
    int64_t stepRow = 0;
    size_t attentionKernels = 0, reduced = 0;
    for (size_t g = 0; g < session.groupCount(); ++g) {
      const NodeId first = session.request(g).members().front();
      if (auto* k = dynamic_cast<native::DecodeAttentionKernel*>(&session.groupKernel(g))) {
        for (const native::TensorParallelAttention& t : split.attentions) {
          if (!t.nodes.contains(first)) continue;
          if (k->Hkv != t.kvHeads || k->H != t.heads)
            throw Error("tensor parallel: the decode attention kernel of " +
                        model.graph.node(first).name + " has " + std::to_string(k->H) + " on " +
                        std::to_string(k->Hkv) + " heads, the graph " +
                        std::to_string(t.heads) + " on " + std::to_string(t.kvHeads));
          auto shard = std::make_shared<native::DecodeAttentionShard>();
          shard->keys.assign(1, {0, k->L});
          shard->kvHeadFirst = r * t.kvHeads / n;
          shard->kvHeadEnd = (r + 1) * t.kvHeads / n;
          k->shard = shard;
          ++attentionKernels;
        }
        continue;
      }
      auto* k = dynamic_cast<native::ShardedMatMulKernel*>(&session.groupKernel(g));
      if (!k) continue;
      auto m = std::find_if(split.matmuls.begin(), split.matmuls.end(),
                            [&](const native::TensorParallelMatMul& x) { return x.node == first; });
      if (m == split.matmuls.end()) continue;
      auto shard = std::make_shared<native::MatMulShard>();
      shard->rows = m->rows;
      shard->ranges = native::ownedRanges(model.graph, *m, r, n);
      if (m->rows) {
        // A header (the step's row, the kernel, the floats: every rank must
        // be at the same MatMul, or the sum would mix layers), then the
        // partial output; the sum in rank order.
        const int64_t kernel = static_cast<int64_t>(reduced++);
        shard->allReduce = [&exchange, &stepRow, &times, kernel, n, r](float* out, int64_t count) {
          constexpr int64_t kHeader = 3;
          const float header[kHeader] = {static_cast<float>(stepRow), static_cast<float>(kernel),
                                         static_cast<float>(count)};
          std::vector<float> block(static_cast<size_t>(kHeader + count));
          std::copy(header, header + kHeader, block.begin());
          std::copy(out, out + count, block.begin() + kHeader);
          const std::string what = "the all-reduce of MatMul " + std::to_string(kernel) +
                                   " at row " + std::to_string(stepRow);
          const auto sent = std::chrono::steady_clock::now();
          const std::vector<float> got = exchange.allGather(block, what);
          times.addExchange(
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent)
                  .count());
          const size_t stride = block.size();
          for (int64_t p = 0; p < n; ++p) {
            const float* h = got.data() + p * stride;
            if (!std::equal(header, header + kHeader, h))
              throw Error("tensor parallel: rank " + std::to_string(r) + ": " + what +
                          ": rank " + std::to_string(p) + " sent that of MatMul " +
                          std::to_string(static_cast<int64_t>(h[1])) + " at row " +
                          std::to_string(static_cast<int64_t>(h[0])) +
                          " (the ranks must run the same model the same way)");
          }
          bool nan = false;
          for (int64_t i = 0; i < count; ++i) {
            float sum = got[static_cast<size_t>(kHeader + i)];
            for (int64_t p = 1; p < n; ++p)
              sum += got[static_cast<size_t>(p) * stride + static_cast<size_t>(kHeader + i)];
            out[i] = sum;
            nan = nan || std::isnan(sum);
          }
          // The columns and heads a rank does not compute are NaN: a sum
          // that is NaN read one (or the model overflowed); say so rather
          // than pick a token from NaN logits.
          if (nan)
            throw Error("tensor parallel: rank " + std::to_string(r) + ": " + what +
                        ": the sum is NaN (a rank read columns or heads it does not compute: "
                        "the split is wrong for this model, or the model overflows)");
        };
      }
      k->shard = shard;
    }
    if (attentionKernels != split.attentions.size())
      throw Error("tensor parallel: " + std::to_string(split.attentions.size()) +
                  " decode attention(s) in the step graph, " + std::to_string(attentionKernels) +
                  " native decode attention kernel(s) in its Session");
    planned.decoder->setCacheSlice(0, capacity, [&stepRow, &times](int64_t row) {
      times.boundary();
      stepRow = row;
    });
    GenerateOptions options = o.generate;
    options.keepLogits = !o.logitsOut.empty();
    GenerateCommandOptions report = o;
    const Generation g = generateOnRank(o, *planned.decoder, options, report, "");
    times.boundary();
    exchange.requireSame(g.tokens, "tokens (the ranks' sums disagree)");
    if (r != 0) return 0;
    std::printf("tensor parallel: %lld rank(s), %s;", static_cast<long long>(n),
                native::describeSplit(model.graph, split).c_str());
    const native::TensorParallelAttention& t = split.attentions.front();
    for (int64_t p = 0; p < n; ++p)
      std::printf("%s KV heads %lld..%lld (query heads %lld..%lld) on rank %lld", p ? "," : "",
                  static_cast<long long>(p * t.kvHeads / n),
                  static_cast<long long>((p + 1) * t.kvHeads / n - 1),
                  static_cast<long long>(p * t.heads / n),
                  static_cast<long long>((p + 1) * t.heads / n - 1), static_cast<long long>(p));
    std::printf("\n");
    printGeneration(report, *planned.decoder, g,
                    (plan ? planText : std::string("native, ")) + "tensor parallel");
    // The attention's part: the decode attention kernels (their heads); the
    // exchange: the all-reduces, in the row-sharded MatMuls.
    reportRankRun(o, rankRun("TP", n, o, capacity, g, times));
    return 0;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const bool named = what.find("tensor parallel: rank ") != std::string::npos;
    abortMpiRun("error: generate: " + (named ? "" : rankName + ": ") + what, 1);
  }
}
#endif

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
        for (const std::string& b : bindings) std::cout << "--input-shape " << b << "\n";
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
            plannedDecoder(model, *plan, [&](const std::string& n) { return backends->find(n); });
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
          backends = std::make_shared<BackendSet>(
              loadBackendsForPlan(*prefillPlan, prefill, o->modelPath, {}, &warnings));
          session = std::make_shared<Session>(
              prefill, *prefillPlan,
              [backends](const std::string& n) { return backends->find(n); });
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
