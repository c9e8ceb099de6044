// `collage generate` on MPI ranks (cli_generate_ranks.h): the step split
// by the cache's rows or by heads, or each rank on its own, the run's
// attention part reported and stored.
#include "app/cli_generate_ranks.h"

#ifdef COLLAGE_HAVE_MPI

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "backends/native/native_cache_parallel.h"
#include "backends/native/native_sharded_matmul.h"
#include "backends/native/native_tensor_parallel.h"
#include "core/decode/cache_plan.h"
#include "core/decode/decode_runs.h"
#include "core/decode/mpi_cache_exchange.h"
#include "core/ir/error.h"
#include "core/ir/threading.h"
#include "core/ops/reference_executor.h"
#include "core/pipeline/link_measurement.h"
#include "core/pipeline/mpi_pipeline_runtime.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage::cli {

namespace {

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
      waited_.push_back(waitedNow_);
    }
    started_ = true;
    exchangeNow_ = 0;
    waitedNow_ = 0;
  }
  // An exchange of `ms`, of which `waitedMs` before the last peer had sent.
  void addExchange(double ms, double waitedMs) {
    exchangeNow_ += ms;
    waitedNow_ += waitedMs;
  }
  // Medians over the last `steps` runs: the decode steps (a prompt run a
  // token a step came first).
  double attentionMs(size_t steps) const { return medianOfLast(attention_, steps); }
  double exchangeMs(size_t steps) const { return medianOfLast(exchange_, steps); }
  double waitedMs(size_t steps) const { return medianOfLast(waited_, steps); }

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
  std::vector<double> attention_, exchange_, waited_;
  double exchangeNow_ = 0, waitedNow_ = 0;
  bool started_ = false;
};

// The step's attention part (the line `decode-parallel` and the app set
// beside the simulation) and the run stored by rank 0.
// `waitedMs`: the part of the exchange before the last peer had sent.
void reportRankRun(const GenerateCommandOptions& o, DecodeRunRecord run, double waitedMs) {
  // CP exchanges inside the attention kernels; TP in its row-sharded MatMuls.
  const bool inAttention = run.strategy != "TP";
  std::printf(
      "attention: median %.4f ms a step (the decode attention kernels%s: %.4f ms), rest %.4f "
      "ms; %d thread(s) a rank\n",
      run.attentionMs,
      inAttention ? ", their exchange included" : "; the rest includes the all-reduces",
      run.exchangeMs, std::max(0.0, run.stepMs - run.attentionMs), run.threadsPerRank);
  // Where the exchange's time goes: the wait for the slower rank (a barrier
  // a layer), or the messages and the poll's lateness in seeing them.
  if (run.exchangeMs > 0 && run.strategy != "DP")
    std::printf(
        "exchange: median %.4f ms a step, of which %.4f ms before the slower rank had sent (the "
        "ranks' send times, this host's clock); the rest the messages and the poll seeing "
        "them\n",
        run.exchangeMs, std::min(waitedMs, run.exchangeMs));
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

// What a run on ranks reads before it imports the model: the decoder's
// signature, its plan (checked against a merged decoder's flag) and the
// cache's rows: as asked, else the plan's, else the filled rows or the
// prompt, and the new tokens.
struct RankRunInputs {
  DecoderSignature signature;
  std::unique_ptr<Plan> plan;
  int64_t capacity = 0;
};

RankRunInputs rankRunInputs(const GenerateCommandOptions& o) {
  RankRunInputs r;
  r.signature = probeDecoderSignature(o.modelPath);
  if (!o.plan.empty()) r.plan = std::make_unique<Plan>(loadPlan(o.plan));
  if (r.plan) checkMergedDecoderPlan(*r.plan, r.signature, o.modelPath, false);
  int64_t capacity = o.maxLength;
  if (capacity <= 0 && r.plan) capacity = planCapacity(r.signature, r.plan->inputShapes);
  if (capacity <= 0 && o.fillRows >= 0) capacity = o.fillRows + o.generate.maxNewTokens;
  if (capacity <= 0)
    capacity = static_cast<int64_t>(o.promptIds.size()) + o.generate.maxNewTokens;
  r.capacity = capacity;
  return r;
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

// The last floats of every gathered block: when its rank sent it, in
// microseconds of steady_clock (CLOCK_MONOTONIC: one clock for the
// processes of a host), 48 bits as two floats of 24.
constexpr size_t kSentAt = 2;
int64_t microsecondsNow() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Every rank's `block` (its first `header` floats say where the rank is:
// the step's row, then the kernel's index, then sizes; its last kSentAt
// floats are left for the send time), gathered in rank order and timed into
// `times`: the exchange, and the part of it before the last peer had sent
// (the wait for the slower rank; the rest is the transfer and the poll
// seeing it: polling_wait.h). The split reads the peers' clocks, which
// are this rank's on one host. A rank whose header differs is at another
// kernel or row: the run stops naming both (`label`: "cache parallel";
// `kernelIs`: "those of kernel").
std::vector<float> gatherAtTheSameKernel(MpiCacheExchange& exchange, RankStepTimes& times,
                                         std::vector<float>& block, size_t header,
                                         const std::string& what, const std::string& label,
                                         const std::string& kernelIs) {
  const int64_t sentUs = microsecondsNow();
  block[block.size() - 2] = static_cast<float>((sentUs >> 24) & 0xffffff);
  block[block.size() - 1] = static_cast<float>(sentUs & 0xffffff);
  std::vector<float> got = exchange.allGather(block, what);
  const int64_t doneUs = microsecondsNow();
  int64_t lastSent = sentUs;
  for (int64_t p = 0; p < exchange.size(); ++p) {
    const float* t = got.data() + static_cast<size_t>(p + 1) * block.size() - kSentAt;
    const int64_t peer = (static_cast<int64_t>(t[0]) << 24) + static_cast<int64_t>(t[1]);
    // The same 48 bits of the same clock: a peer's is within the run's time.
    const int64_t high = sentUs & ~((int64_t{1} << 48) - 1);
    lastSent = std::max(lastSent, std::min(doneUs, high + peer));
  }
  times.addExchange(static_cast<double>(doneUs - sentUs) / 1e3,
                    static_cast<double>(lastSent - sentUs) / 1e3);
  for (int64_t p = 0; p < exchange.size(); ++p) {
    const float* h = got.data() + static_cast<size_t>(p) * block.size();
    if (!std::equal(block.begin(), block.begin() + static_cast<long>(header), h))
      throw Error(label + ": rank " + std::to_string(exchange.rank()) + ": " + what + ": rank " +
                  std::to_string(p) + " sent " + kernelIs + " " +
                  std::to_string(static_cast<int64_t>(h[1])) + " at row " +
                  std::to_string(static_cast<int64_t>(h[0])) +
                  " (the ranks must run the same model the same way)");
  }
  return got;
}

// The cache bytes each rank holds (Decoder::cacheBytes), gathered on every
// rank, and the line rank 0 prints: "cache per rank: 1.5 MiB of 3.0 MiB
// (50.0 %; bytes: rank 0 N, rank 1 N, one device M)". Exact: each count goes
// as two floats of 24 bits.
std::string cachePerRank(MpiCacheExchange& exchange, const Decoder& decoder) {
  const uint64_t bytes = decoder.cacheBytes();
  const std::vector<float> got =
      exchange.allGather({static_cast<float>(bytes >> 24), static_cast<float>(bytes & 0xffffff)},
                         "the cache bytes each rank holds");
  const double whole = static_cast<double>(decoder.wholeCacheBytes());
  uint64_t most = 0;
  std::string each;
  for (int64_t p = 0; p < exchange.size(); ++p) {
    const uint64_t b = (static_cast<uint64_t>(got[static_cast<size_t>(2 * p)]) << 24) +
                       static_cast<uint64_t>(got[static_cast<size_t>(2 * p + 1)]);
    most = std::max(most, b);
    each += (p ? ", rank " : "rank ") + std::to_string(p) + " " + std::to_string(b);
  }
  char line[160];
  std::snprintf(line, sizeof line, "cache per rank: %.1f MiB of %.1f MiB (%.1f %%; bytes: ",
                static_cast<double>(most) / 1048576.0, whole / 1048576.0,
                whole > 0 ? 100.0 * static_cast<double>(most) / whole : 0.0);
  return line + each + ", one device " + std::to_string(decoder.wholeCacheBytes()) + ")";
}

}  // namespace

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
    RankRunInputs in = rankRunInputs(o);
    const DecoderSignature& signature = in.signature;
    const std::unique_ptr<Plan>& plan = in.plan;
    const int64_t capacity = in.capacity;
    if (capacity < exchange.size())
      throw Error("the cache's " + std::to_string(capacity) + " rows cannot be split across " +
                  std::to_string(exchange.size()) + " ranks (a slice each)");
    const DecodeModel model = importDecodeModel(o.modelPath, capacity, &signature);
    // This rank's rows, the only ones it allocates (the share: a smaller
    // buffer per present, the window Session::appendInPlace writes). The
    // rows are a fixed range of the cache's capacity, so the rows the steps
    // append go to the rank whose range holds them (after a prompt or
    // --fill-rows of most of the cache, the last rank's). DP: every rank
    // holds it all.
    const int64_t n = exchange.size(), r = exchange.rank();
    const int64_t first = r * capacity / n, end = (r + 1) * capacity / n;
    CacheShare share;
    if (!o.dataParallel && n > 1) {
      share.rowFirst = first;
      share.rowEnd = end;
    }
    std::unique_ptr<BackendSet> backends;
    std::unique_ptr<Backend> native;
    PlannedDecoder planned;
    if (plan) {
      backends = std::make_unique<BackendSet>(
          loadBackendsForPlan(*plan, model.graph, o.modelPath, {}, nullptr));
      planned = plannedDecoder(
          model, *plan, [&](const std::string& n) { return backends->find(n); }, share);
      if (!planned.fallback.empty())
        throw Error("cache parallelism appends each rank's rows in place; " + o.plan +
                    " cannot: " + planned.fallback);
    } else {
      native = createBackend("native");
      Backend* b = native.get();
      planned.session = std::make_unique<Session>(
          model.graph, native::decodeAttentionPlan(model.graph),
          [b](const std::string& n) { return n == "native" ? b : nullptr; });
      planned.decoder = std::make_unique<Decoder>(model, *planned.session, share);
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
    // read by the rank that owns the step's row, which appends it. Each
    // kernel reads its rows from the rank's buffers (keys [first, end) at
    // their rows 0.., the new one at their last row): the shard's second
    // range is empty on the other ranks.
    if (share.rowEnd >= 0) native::requireWindowedPresentsReadByDecodeAttention(*planned.session);
    RankStepTimes times(*planned.session);
    int64_t stepRow = 0, layer = 0;
    std::function<void(const native::AttentionPartials&, native::AttentionPartials&)> exchangeOf =
        [&](const native::AttentionPartials& mine, native::AttentionPartials& all) {
      // A header (the step's row, the kernel, the rows, the columns: every
      // rank must be at the same attention, or the merge would mix layers),
      // then per row: max, sum, the unnormalised output.
      const int64_t rows = mine.rows, dv = mine.dv, width = 2 + dv, kernel = layer++ % kernels.size();
      constexpr int64_t kHeader = 4;
      const float header[kHeader] = {static_cast<float>(stepRow), static_cast<float>(kernel),
                                     static_cast<float>(rows), static_cast<float>(dv)};
      std::vector<float> block(static_cast<size_t>(kHeader + rows * width) + kSentAt);
      std::copy(header, header + kHeader, block.begin());
      for (int64_t x = 0; x < rows; ++x) {
        float* b = block.data() + kHeader + x * width;
        b[0] = mine.maxAt(0, x);
        b[1] = mine.sumAt(0, x);
        std::copy(mine.accAt(0, x), mine.accAt(0, x) + dv, b + 2);
      }
      const std::string what = "the attention partials of kernel " + std::to_string(kernel) +
                               " at row " + std::to_string(stepRow);
      const std::vector<float> got = gatherAtTheSameKernel(exchange, times, block, kHeader, what,
                                                           "cache parallel", "those of kernel");
      const size_t stride = block.size();
      all.resize(n, rows, dv);
      for (int64_t p = 0; p < n; ++p)
        for (int64_t x = 0; x < rows; ++x) {
          const float* b = got.data() + p * stride + kHeader + x * width;
          all.maxAt(p, x) = b[0];
          all.sumAt(p, x) = b[1];
          std::copy(b + 2, b + 2 + dv, all.accAt(p, x));
        }
    };
    for (native::DecodeAttentionKernel* k : kernels)
      if (k->L != capacity + 1)
        throw Error("a decode attention kernel reads " + std::to_string(k->L) +
                    " keys, not the cache's " + std::to_string(capacity) +
                    " rows and the new one: it cannot be split by the cache's rows");
    if (o.dataParallel) {
      planned.decoder->setCacheSlice(0, capacity, [&](int64_t) { times.boundary(); });
    } else {
      const std::function<void(int64_t)> keysAt = native::splitByCacheRows(
          kernels, first, end, capacity, share.rowEnd >= 0, exchangeOf);
      planned.decoder->setCacheSlice(first, end, [&, keysAt](int64_t row) {
        times.boundary();
        stepRow = row;
        keysAt(row);
      });
    }
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
    const std::string cacheLine = cachePerRank(exchange, *planned.decoder);
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
    std::printf("%s\n", cacheLine.c_str());
    reportRankRun(o, run, times.waitedMs(g.stepMs.size()));
    return 0;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const bool named = what.find("cache parallel: rank ") != std::string::npos;
    abortMpiRun("error: generate: " + (named ? "" : rankName + ": ") + what, 1);
  }
}

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
    RankRunInputs in = rankRunInputs(o);
    const DecoderSignature& signature = in.signature;
    const std::unique_ptr<Plan>& plan = in.plan;
    const int64_t capacity = in.capacity;
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
    // This rank's KV heads of every cache, the only ones it allocates (the
    // share; every attention has the same KV heads in the exported models:
    // where they differ, each rank holds every head, as before).
    CacheShare share;
    const int64_t kvHeads = split.attentions.empty() ? 0 : split.attentions.front().kvHeads;
    const bool sameHeads =
        std::all_of(split.attentions.begin(), split.attentions.end(),
                    [&](const native::TensorParallelAttention& t) { return t.kvHeads == kvHeads; });
    if (n > 1 && sameHeads && kvHeads > 0) {
      share.headFirst = r * kvHeads / n;
      share.headEnd = (r + 1) * kvHeads / n;
    }
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
      planned = plannedDecoder(
          model, tp,
          [&](const std::string& name) -> Backend* {
            if (name == "tensor_parallel") return sb;
            if (Backend* b = backends->find(name)) return b;
            return name == "native" ? nb : nullptr;
          },
          share);
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
      planned.decoder = std::make_unique<Decoder>(model, *planned.session, share);
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
    if (share.headEnd >= 0) native::requireWindowedPresentsReadByDecodeAttention(session);
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
          if (share.headEnd >= 0) {
            // K and V from the rank's buffers: its heads, every row.
            auto stored = native::storedCacheViews(*k, share.headFirst,
                                                   share.headEnd - share.headFirst, k->L);
            stored->keyRows = {0};
            shard->stored = std::move(stored);
          }
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
          std::vector<float> block(static_cast<size_t>(kHeader + count) + kSentAt);
          std::copy(header, header + kHeader, block.begin());
          std::copy(out, out + count, block.begin() + kHeader);
          const std::string what = "the all-reduce of MatMul " + std::to_string(kernel) +
                                   " at row " + std::to_string(stepRow);
          const std::vector<float> got = gatherAtTheSameKernel(
              exchange, times, block, kHeader, what, "tensor parallel", "that of MatMul");
          const size_t stride = block.size();
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
    const std::string cacheLine = cachePerRank(exchange, *planned.decoder);
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
    std::printf("%s\n", cacheLine.c_str());
    // The attention's part: the decode attention kernels (their heads); the
    // exchange: the all-reduces, in the row-sharded MatMuls.
    reportRankRun(o, rankRun("TP", n, o, capacity, g, times), times.waitedMs(g.stepMs.size()));
    return 0;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const bool named = what.find("tensor parallel: rank ") != std::string::npos;
    abortMpiRun("error: generate: " + (named ? "" : rankName + ": ") + what, 1);
  }
}

}  // namespace collage::cli

#endif  // COLLAGE_HAVE_MPI
