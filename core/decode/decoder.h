// The decode loop the runtime owns: prefill, then one step per new token,
// greedy or sampled with a seed, until max-new-tokens or an EOS id, over a
// KV cache the Decoder owns.
//
// The cache. One buffer per past input (decoderSignature's pairs), shaped as
// the input with its sequence axis at `capacity` rows, allocated once, when
// the Decoder is made; its address never changes. Shapes are static in this
// tree (a Graph is imported for one binding of the dynamic dims), so the
// Decoder imports the model once for one new token against a past of exactly
// `capacity` rows (importDecodeModel) and runs every step, prefill included,
// on that one graph (one Session, compiled once):
//  - each past input is the cache buffer itself (a view: no copy in);
//  - the attention mask is 1 for the rows filled so far and for the new
//    token (the Concat's last row), 0 for the unused rows, so the model's
//    own padding mask hides them (their scores get the mask's minimum);
//  - the positions input, when the model has one, is the row count (a model
//    without it must derive positions from the mask, as exporters' cumsum
//    does);
//  - after the step the new token's K and V rows, the last row of each
//    present output, are written into the cache at the next free row: the
//    Decoder appends in place and never copies the cache (bytesAppended()).
//
// In place (a Session given, or no step: the reference path): the exported
// graph's Concat(past, new) -> present would copy the whole past into a
// fresh present every step. Instead each cache buffer is shaped as the
// present (`capacity` + 1 rows on the sequence axis: the cache's rows, then
// the step's new row), the present is that buffer (Session::appendInPlace;
// the reference path runs the graph node by node and does the same), so the
// past rows are already in place and the Concat writes only the new row; the
// past input is never read. After the step the new row is appended at the
// next free row as above. Per step the cache Concats write the new rows
// only (presentBytesWritten()).
// With any other Step (a function of the inputs), the step gets the past as
// a plain tensor of `capacity` rows, and its Concat copies it (the old path).
// Still not avoided: every step attends over all `capacity` rows, masked;
// see docs/decoding.md.
//
// The prompt (prefill) runs as ONE pass when the model takes a sequence of
// new tokens: a second graph, the model imported for the prompt's n tokens
// against an empty past, as ONNX Runtime's loop feeds it (importPrefillGraph;
// a model that does not import so gets a past of `capacity` rows, masked),
// fed the n ids, the positions 0..n-1 and a mask of 1 over the n new ones;
// the model's own causal mask (exporters build it from the shapes: query i
// sees the past and new tokens 0..i) keeps each token from seeing later
// ones. Its presents' last n rows go into the cache's rows 0..n-1. A model
// whose sequence is fixed at 1, or that does not import for n tokens, runs
// the prompt one token a step, as a decode step.
//
// A merged decoder (decoder_signature.h) is imported with its use-cache
// flag a constant: true for the step graph (the branch with the past), false
// for the prompt's graph (the no-cache branch: its mask and presents cover
// the n new tokens alone, and the past inputs are not read).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/decode/decoder_signature.h"
#include "core/ir/graph.h"
#include "core/ir/tensor.h"

namespace collage {

class Session;

struct GenerateOptions {
  int64_t maxNewTokens = 16;
  std::optional<int64_t> eos;  // stop after generating this id
  double temperature = 0;      // 0: greedy (argmax, the lowest id on a tie)
  int64_t topK = 0;            // sampling from the K most likely ids; 0: all
  uint64_t seed = 0;           // sampling: the same seed, the same tokens
  bool keepLogits = false;     // Generation::logits
};

struct Generation {
  std::vector<int64_t> tokens;  // the generated ids, after the prompt
  std::string stop;             // "max-new-tokens" or "eos"
  double prefillMs = 0;         // the prompt: one pass, or its steps together
  std::vector<double> stepMs;   // each decode step after the prefill
  // With GenerateOptions::keepLogits: per new token, the logits it was picked from.
  std::vector<std::vector<float>> logits;
  // Importing the prompt's graph and compiling its Session (first prompt of
  // a length only), not in prefillMs: a peer's session is made beforehand.
  double prefillSetupMs = 0;
  // How often the scheduler took a core from one of this process's threads
  // (involuntary context switches: for another process, or for a thread of
  // its own pool sharing the core) during the prefill's pass (its setup
  // left out) and during the timed steps: 0 for times that are the model's
  // alone. On a shared machine a kernel's parallel region waits for its
  // preempted thread for scheduler slices (docs/decoding.md, "Timing on a
  // shared machine"), so a time with preemptions is the machine's.
  int64_t prefillPreemptions = 0;
  int64_t stepPreemptions = 0;
};

// The model at `path` imported for decode steps: one new token, batch 1,
// a past of `capacity` rows. Error naming the input whose dims the loop
// cannot bind (a dynamic dim other than batch and sequence).
struct DecodeModel {
  Graph graph;
  DecoderSignature signature;
  int64_t capacity = 0;
  // The --input-shape bindings this import used ("name=1x2x64x8"): what a
  // plan for the loop must be optimized with.
  std::vector<std::string> bindings;
  std::string path;  // the model file (importPrefillGraph imports it again)
};
// With `signature` (probeDecoderSignature's), the roles are not found again.
DecodeModel importDecodeModel(const std::string& path, int64_t capacity,
                              const DecoderSignature* signature = nullptr);
// The model imported for a prefill of `tokens` new tokens (batch 1) against
// an empty past: the ids, positions and mask [1, tokens] (against a past of
// model.capacity rows, the mask [1, capacity + tokens], when the model does
// not import with an empty one). nullopt, with the reason in `why`, when the model
// cannot take them (its sequence fixed at 1, a shape that does not import).
// `bindings` (optional) gets its --input-shape bindings, as DecodeModel's:
// what a plan for the prompt's pass (generate --prefill-plan) is optimized
// with.
std::optional<Graph> importPrefillGraph(const DecodeModel& model, int64_t tokens,
                                        std::string* why = nullptr,
                                        std::vector<std::string>* bindings = nullptr);
// The roles alone (decoderSignature on the model imported for one token
// after one past row).
DecoderSignature probeDecoderSignature(const std::string& path);
// The capacity a plan for the step graph was made for: its attention mask's
// length minus the new token; 0 when the plan does not record the mask.
int64_t planCapacity(const DecoderSignature& signature,
                     const std::map<std::string, Shape>& planInputShapes);

// What one device holds of every cache buffer when the cache is split
// across devices (docs/decoding.md): rows [rowFirst, rowEnd) of the
// sequence axis (cache parallelism) and KV heads [headFirst, headEnd) of
// axis 1 (tensor parallelism); -1: to the end. The defaults: all of it.
struct CacheShare {
  int64_t rowFirst = 0, rowEnd = -1;
  int64_t headFirst = 0, headEnd = -1;
};

class Decoder {
 public:
  // Runs the step graph: inputs in graph.inputs() order, outputs in
  // graph.outputs() order (a Session's run, or the reference executor's).
  using Step = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  // What runs a prefill graph (importPrefillGraph's, which the Decoder owns
  // and keeps while the Step lives): a Step, or an empty one to run the
  // prompt one token a step (`why` says why, for the caller's messages).
  using PrefillRunner = std::function<Step(const Graph& prefill, std::string& why)>;

  // `model` must outlive the Decoder. Without `step`, the reference executor's
  // kernels run the steps, the cache appended in place.
  explicit Decoder(const DecodeModel& model, Step step = {});
  // The steps on `session` (made for model.graph; it must outlive the
  // Decoder), the cache appended in place (Session::appendInPlace): Error
  // naming the present the Session cannot write in place.
  Decoder(const DecodeModel& model, Session& session);
  // The same, this device holding only `share` of the cache: each buffer is
  // [batch, its heads, its rows + the step's new row, ...], a window of the
  // present (Session::appendInPlace with offsets), so its memory is the
  // share's. The caller makes the Session's decode attention kernels read
  // those buffers (native_cache_parallel.h: storedCacheViews). The rows are
  // also the slice setCacheSlice sets (the prompt's and the steps' rows
  // outside it are not kept, fillCache and setCacheRows write only the
  // share). Error for a share outside the cache, a head window on a cache
  // whose axis 1 is its sequence axis, or a Session that cannot write a
  // present in place.
  Decoder(const DecodeModel& model, Session& session, const CacheShare& share);

  // How the prompt runs in one pass: the default is the reference executor
  // for a Decoder without a step or Session, and one token a step for the
  // others (a Step given for the step graph says nothing of other graphs);
  // an empty runner: one token a step.
  void setPrefillRunner(PrefillRunner runner) {
    prefillRunner_ = std::move(runner);
    prefillTokens_ = 0;  // a prefill graph's Step made by the old runner is not reused
  }
  const PrefillRunner& prefillRunner() const { return prefillRunner_; }
  // The runs the last generate() spent on the prompt: 1 in one pass, else
  // one per token; and, if not in one pass, why.
  int64_t promptRuns() const { return promptRuns_; }
  const std::string& promptOneTokenAStepWhy() const { return prefillWhy_; }

  // Cache parallelism across devices (docs/decoding.md): this Decoder's
  // device holds only rows [first, end) of the cache. A step's new row, and
  // a one-pass prompt's rows, are written into the cache only where they
  // fall in the slice (the other rows stay zero and must never be read: the
  // step's attention reads only its device's rows); `beforeStep` (optional)
  // is told each step's row before the step runs, so the attention knows
  // whether the new row is this device's. Error for an empty or out-of-range
  // slice.
  // With a CacheShare, the slice is its rows (Error for others).
  void setCacheSlice(int64_t first, int64_t end, std::function<void(int64_t row)> beforeStep = {});
  std::pair<int64_t, int64_t> cacheSlice() const { return {sliceFirst_, sliceEnd_}; }
  const CacheShare& cacheShare() const { return share_; }

  // Error for an empty prompt, a token id outside the vocabulary, or a
  // prompt (with the new tokens) longer than the cache.
  Generation generate(const std::vector<int64_t>& prompt, const GenerateOptions& options);

  // Rows [0, rows) of every cache buffer (those of them in this device's
  // slice) set to values drawn from `seed`, uniform in [-1, 1), as if a
  // prompt of `rows` tokens had run, without running it: a prompt's pass at
  // a long context takes far longer than the step one wants to time there
  // (the Decode panel, `collage decode-parallel`). The rows are no model's,
  // so the logits of a step after them mean nothing; the rows it reads, and
  // so its time, are a real step's at that context. A row's values follow
  // from the seed, its buffer and its index alone: a slice's rows hold what
  // one device filling every row writes there. Error for `rows` outside
  // 0..capacity() or a cache of a type other than float32/64, float16 or
  // bfloat16.
  void fillCache(int64_t rows, uint64_t seed = 0);
  // Rows [0, L) of the cache of the past input named `past` set from
  // `rows`: a tensor of that input's shape with L rows on its sequence axis
  // and its element type, i.e. the past ONNX Runtime would be fed after L
  // tokens (`collage generate --cache-in`, bench/decode_bench.py: both
  // runners get the same past without a prompt's pass). Only this device's
  // slice is written. Returns L. Error naming the tensor for a name that is
  // no past input, another shape or type, or L above capacity().
  int64_t setCacheRows(const std::string& past, const Tensor& rows);
  // Decode steps with the rows before `row` taken as filled (fillCache,
  // setCacheRows): `token` runs at `row`, then each picked id at the next
  // row, until options.maxNewTokens ids or the EOS id. Every step is timed
  // (Generation::stepMs; no prefill: prefillMs 0, promptRuns() 0). Error for
  // a token outside the vocabulary or steps past the cache's last row.
  Generation generateFrom(int64_t row, int64_t token, const GenerateOptions& options);
  // One decode step of `token` at row `row`, the rows before it taken as
  // filled (by fillCache, or by a generate() before): the mask shows them
  // and the new token, its K and V rows are appended at `row`. The logits.
  // Error for a row outside 0..capacity()-1 or a token outside the
  // vocabulary.
  std::vector<float> decodeStep(int64_t token, int64_t row);
  // The rows the last step's mask let its attention see: the cache's rows
  // before it and its own new one (row + 1); 0 before any step.
  int64_t lastStepRows() const { return lastStepRows_; }

  int64_t capacity() const { return capacity_; }
  int64_t vocabulary() const { return vocabulary_; }
  // The cache buffer of pair i (decoderSignature order): the past's shape,
  // or in place the present's (one more row, the step's new one).
  const Tensor& cache(size_t i) const { return cache_.at(i); }
  bool inPlace() const { return inPlace_; }
  // The bytes all cache buffers hold, and the bytes the last generate()
  // wrote into them (the new rows only).
  size_t cacheBytes() const;
  // The bytes the cache buffers of one device holding all of the cache take
  // (cacheBytes() without a CacheShare).
  size_t wholeCacheBytes() const;
  size_t bytesAppended() const { return bytesAppended_; }
  // The bytes the steps' cache Concats wrote into the presents over the last
  // generate(): in place, the new rows only; with another Step, the whole
  // present each step (a fresh tensor, the past copied in).
  size_t presentBytesWritten() const { return presentBytesWritten_; }

 private:
  // Picks the next ids from `logits` (the step at row - 1's) and runs them
  // from `row` on, until max-new-tokens or EOS: generate()'s steps.
  void decodeSteps(Generation& g, std::vector<float> logits, int64_t row,
                   const GenerateOptions& options);
  // Runs the token at row `row` (the rows before it are in the cache);
  // appends its K and V rows; returns its logits.
  std::vector<float> step(int64_t token, int64_t row);
  // The whole prompt in one run of the prefill graph; false (nothing run)
  // when it cannot be (prefillWhy_ says why).
  bool prefill(const std::vector<int64_t>& prompt, std::vector<float>& logits);
  // The inputs of a run of `graph` (the step graph or a prefill graph):
  // `tokens` at rows `row`.. of the cache.
  std::vector<Tensor> inputsFor(const Graph& graph, const std::vector<int64_t>& tokens,
                                int64_t row);
  // The graph's nodes by the reference kernels, each cache Concat writing
  // its new rows into its buffer (the present) in place.
  std::vector<Tensor> runReferenceInPlace(const std::vector<Tensor>& in);
  void init(bool inPlace);
  // Rows [from, from + n) of `src` (a tensor of the graph's present or past
  // shape: every head) into the buffer of pair i at the buffer's row `to`,
  // the share's heads only. The bytes written.
  size_t copyIntoShare(const Tensor& src, int64_t from, size_t i, int64_t to, int64_t n);

  const DecodeModel& model_;
  Step step_;
  Session* session_ = nullptr;
  bool inPlace_ = false;
  std::vector<Tensor> pastViews_;  // in place: per pair, the past input (never read)
  std::vector<NodeId> concatOf_;   // per pair: its Concat
  std::vector<int32_t> lastUse_;   // per value: the last node reading it
  size_t presentBytesWritten_ = 0;
  int64_t capacity_ = 0;
  int64_t vocabulary_ = 0;
  std::vector<Tensor> cache_;
  // Per graph input: what it is (a cache pair's index, or a role).
  enum class Role { Ids, Mask, Positions, Cache };
  std::vector<std::pair<Role, size_t>> inputs_;
  size_t logitsOutput_ = 0;
  std::vector<size_t> presentOutput_;  // per pair
  size_t bytesAppended_ = 0;
  int64_t lastStepRows_ = 0;
  // The prefill graph for the last prompt length tried (declared before its
  // Step, which may hold a Session on it: destroyed after it).
  PrefillRunner prefillRunner_;
  int64_t prefillTokens_ = 0;  // its length; 0: none tried
  std::unique_ptr<Graph> prefillGraph_;
  Step prefillStep_;
  std::string prefillWhy_;
  double prefillSetupMs_ = 0;            // the last prefill's import and compile
  int64_t prefillSetupPreemptions_ = 0;  // and the preemptions during them
  int64_t promptRuns_ = 0;
  // The share held (the constructor's, resolved: every bound set), and
  // whether it is all of the cache; the buffers' rows before the new row.
  CacheShare share_;
  bool wholeCache_ = true;
  int64_t heldRows_ = 0;
  // setCacheSlice's rows (all by default) and hook.
  int64_t sliceFirst_ = 0, sliceEnd_ = INT64_MAX;
  std::function<void(int64_t)> beforeStep_;
};

}  // namespace collage
