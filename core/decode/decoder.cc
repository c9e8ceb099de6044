#include "core/decode/decoder.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/half_float.h"
#include "core/ops/reference_executor.h"
#include "core/runtime/session.h"

namespace collage {
namespace {

std::string dimsText(const Shape& s) {
  std::string t;
  for (int64_t d : s) t += (t.empty() ? "" : "x") + std::to_string(d);
  return t;
}

// The declared shape with batch 1 and the sequence dim `sequence` (-1: no
// sequence dim, every dynamic dim but the batch is an Error).
Shape boundShape(const DeclaredInput& in, int sequenceAxis, int64_t sequence,
                 const std::string& path) {
  if (!in.rankKnown) throw Error(path + ": input '" + in.name + "' has no declared rank");
  Shape s(in.dims.begin(), in.dims.end());
  for (size_t i = 0; i < s.size(); ++i) {
    if (static_cast<int>(i) == sequenceAxis) {
      if (s[i] >= 0 && s[i] != sequence)
        throw Error(path + ": input '" + in.name + "' has a fixed sequence size " +
                    std::to_string(s[i]) + ": the decode loop needs it dynamic");
      s[i] = sequence;
    } else if (s[i] < 0) {
      if (i != 0)
        throw Error(path + ": input '" + in.name + "' has dynamic dim " + std::to_string(i) +
                    " ('" + in.symbols[i] +
                    "'): the decode loop binds only the batch and the sequence");
      s[i] = 1;
    }
  }
  return s;
}

// Involuntary context switches of every thread of this process so far: the
// scheduler took a core from one of them (for another process, or for a
// thread of ours waiting on the same core).
int64_t involuntarySwitches() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_nivcsw;
}

// The merged form's flag as a constant of its declared shape (a scalar, or
// [1] as Optimum declares it).
Tensor flagConstant(const std::string& path, const std::string& flag, bool withPast) {
  Shape shape;
  for (const DeclaredInput& in : readDeclaredInputs(path))
    if (in.name == flag) shape.assign(in.dims.size(), 1);
  Tensor t(TensorType{ElementType::Bool, shape});
  *static_cast<bool*>(t.raw()) = withPast;
  return t;
}

}  // namespace

DecoderSignature probeDecoderSignature(const std::string& path) {
  // The roles, on the model imported for one token after one past row: the
  // dynamic dims at 1, but the mask's sequence (by its name) at 2, so that
  // a model checking the mask against past + new imports.
  ImportOptions probe;
  for (const DeclaredInput& in : readDeclaredInputs(path)) {
    if (!in.rankKnown) continue;
    Shape s(in.dims.begin(), in.dims.end());
    std::string lower = in.name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] < 0)
        s[i] = (i == 1 && s.size() == 2 && lower.find("mask") != std::string::npos) ? 2 : 1;
    probe.inputShapes[in.name] = s;
  }
  const Graph graph = importOnnx(path, probe);
  std::string flag;
  try {
    return decoderSignature(graph, path);
  } catch (const Error&) {
    // The merged form: its cache path is inside an If (refused here, naming
    // it, when it is not on a use-cache flag); else the separate form's reason.
    flag = mergedDecoderFlag(graph, path);
    if (flag.empty()) throw;
  }
  // The branch with the past, inlined: the roles as in the separate form.
  probe.inputShapes.erase(flag);
  probe.constantInputs[flag] = flagConstant(path, flag, true);
  DecoderSignature sig = decoderSignature(importOnnx(path, probe), path);
  sig.useCacheFlag = flag;
  return sig;
}

int64_t planCapacity(const DecoderSignature& signature,
                     const std::map<std::string, Shape>& planInputShapes) {
  auto mask = planInputShapes.find(signature.attentionMask);
  return mask == planInputShapes.end() || mask->second.size() != 2 ? 0 : mask->second[1] - 1;
}

namespace {

// The model imported for `sequence` new tokens against a past of `capacity`
// rows; `bindings` gets the --input-shape bindings. A merged decoder is
// imported with its flag a constant, the branch taken inlined: the past's
// for a step, and for a prompt (`prompt`) the no-cache branch, whose mask
// covers the prompt alone (the past inputs, bound as for a step, are not
// read).
// `pastRows`: the pasts' rows on their sequence axis (the step graph's:
// `capacity`; a prompt's pass: none, see importPrefillGraph).
Graph importFor(const std::string& path, const DecoderSignature& sig, int64_t capacity,
                int64_t sequence, std::vector<std::string>& bindings, bool prompt = false,
                int64_t pastRows = -1) {
  if (pastRows < 0) pastRows = capacity;
  ImportOptions options;
  const bool noCache = prompt && !sig.useCacheFlag.empty();
  if (!sig.useCacheFlag.empty())
    options.constantInputs[sig.useCacheFlag] = flagConstant(path, sig.useCacheFlag, !noCache);
  for (const DeclaredInput& in : readDeclaredInputs(path)) {
    Shape shape;
    if (in.name == sig.useCacheFlag) {
      continue;
    } else if (in.name == sig.attentionMask) {
      shape = boundShape(in, 1, (noCache ? 0 : pastRows) + sequence, path);
    } else if (in.name == sig.inputIds || in.name == sig.positionIds) {
      shape = boundShape(in, 1, sequence, path);
    } else {
      auto pair = std::find_if(sig.cache.begin(), sig.cache.end(),
                               [&](const KvCachePair& p) { return p.past == in.name; });
      if (pair == sig.cache.end()) continue;  // decoderSignature refused anything else
      shape = boundShape(in, pair->sequenceAxis, pastRows, path);
    }
    if ((in.name == sig.inputIds || in.name == sig.attentionMask || in.name == sig.positionIds) &&
        shape.size() != 2)
      throw Error(path + ": input '" + in.name + "' is " + dimsText(shape) +
                  ", not [batch, sequence]");
    options.inputShapes[in.name] = shape;
    bindings.push_back(in.name + "=" + dimsText(shape));
  }
  // A prompt's pass: the logits of its last position, the ones generating
  // reads (the LM head over every position was a quarter of a 128-token
  // pass); `optimize --last-row` plans the same graph.
  if (prompt && sequence > 1) {
    options.lastRowOutputs.push_back(sig.logits);
    bindings.push_back(sig.logits + std::string(kLastRowBinding));
  }
  return importOnnx(path, options);
}

}  // namespace

DecodeModel importDecodeModel(const std::string& path, int64_t capacity,
                              const DecoderSignature* signature) {
  if (capacity < 1)
    throw Error(path + ": the cache needs at least one row (capacity " + std::to_string(capacity) +
                ")");
  DecodeModel model;
  model.signature = signature ? *signature : probeDecoderSignature(path);
  model.capacity = capacity;
  model.path = path;
  model.graph = importFor(path, model.signature, capacity, 1, model.bindings);
  return model;
}

std::optional<Graph> importPrefillGraph(const DecodeModel& model, int64_t tokens,
                                        std::string* why, std::vector<std::string>* boundShapes) {
  std::vector<std::string> bindings;
  try {
    if (model.path.empty()) throw Error("the model's file is not known");
    // An empty past, as ONNX Runtime's loop feeds a prompt: its attention
    // reads the n new rows alone, not n more of the capacity's masked rows
    // (twice the work at a prompt as long as the cache's free rows), and no
    // Concat copies a past. A model that does not import with an empty past
    // gets the cache's rows, masked.
    int64_t pastRows = 0;
    Graph g;
    try {
      g = importFor(model.path, model.signature, model.capacity, tokens, bindings, true, 0);
    } catch (const Error&) {
      bindings.clear();
      pastRows = model.capacity;
      g = importFor(model.path, model.signature, model.capacity, tokens, bindings, true);
    }
    // The outputs the loop reads: the logits of every token, the presents
    // grown by `tokens` rows (a merged decoder's no-cache branch: the
    // prompt's rows alone).
    const int64_t rows = (model.signature.useCacheFlag.empty() ? pastRows : 0) + tokens;
    for (ValueId v : g.outputs()) {
      const Value& out = g.value(v);
      for (const KvCachePair& p : model.signature.cache)
        if (p.present == out.name && (out.type.rank() <= p.sequenceAxis ||
                                      out.type.shape[static_cast<size_t>(p.sequenceAxis)] != rows))
          throw Error("output '" + out.name + "' is " + out.type.toString() + ", not " +
                      std::to_string(rows) + " rows on axis " + std::to_string(p.sequenceAxis));
    }
    if (boundShapes) *boundShapes = std::move(bindings);
    return g;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
}

Decoder::Decoder(const DecodeModel& model, Step step)
    : model_(model), step_(std::move(step)), capacity_(model.capacity) {
  init(!step_);
  // The reference executor runs the step graph: it runs a prefill graph too.
  if (!step_)
    prefillRunner_ = [](const Graph& prefill, std::string&) -> Step {
      auto executor = std::make_shared<ReferenceExecutor>(prefill);
      return [executor](const std::vector<Tensor>& in) { return executor->run(in); };
    };
}

Decoder::Decoder(const DecodeModel& model, Session& session)
    : model_(model), session_(&session), capacity_(model.capacity) {
  init(true);
}

Decoder::Decoder(const DecodeModel& model, Session& session, const CacheShare& share)
    : model_(model), session_(&session), capacity_(model.capacity), share_(share) {
  init(true);
}

void Decoder::init(bool inPlace) {
  inPlace_ = inPlace;
  const Graph& g = model_.graph;
  const DecoderSignature& sig = model_.signature;
  for (ValueId v : g.inputs()) {
    const Value& value = g.value(v);
    if (value.name == sig.inputIds) {
      inputs_.push_back({Role::Ids, 0});
    } else if (value.name == sig.attentionMask) {
      inputs_.push_back({Role::Mask, 0});
    } else if (value.name == sig.positionIds) {
      inputs_.push_back({Role::Positions, 0});
    } else {
      auto pair = std::find_if(sig.cache.begin(), sig.cache.end(),
                               [&](const KvCachePair& p) { return p.past == value.name; });
      if (pair == sig.cache.end())
        throw Error("input '" + value.name + "' has no role in the decode loop");
      inputs_.push_back({Role::Cache, static_cast<size_t>(pair - sig.cache.begin())});
    }
  }
  presentOutput_.assign(sig.cache.size(), 0);
  for (size_t o = 0; o < g.outputs().size(); ++o) {
    const std::string& n = g.value(g.outputs()[o]).name;
    if (n == sig.logits) logitsOutput_ = o;
    for (size_t i = 0; i < sig.cache.size(); ++i)
      if (sig.cache[i].present == n) presentOutput_[i] = o;
  }
  vocabulary_ = g.value(g.outputs()[logitsOutput_]).type.shape.back();
  // The share this device holds: all of it unless the constructor said.
  if (share_.rowEnd < 0) share_.rowEnd = capacity_;
  if (share_.rowFirst < 0 || share_.rowFirst >= share_.rowEnd || share_.rowEnd > capacity_)
    throw Error("cache share rows " + std::to_string(share_.rowFirst) + ".." +
                std::to_string(share_.rowEnd) + " are empty or outside the cache's " +
                std::to_string(capacity_) + " rows");
  const bool headWindow = share_.headFirst != 0 || share_.headEnd >= 0;
  heldRows_ = share_.rowEnd - share_.rowFirst;
  wholeCache_ = heldRows_ == capacity_;
  for (size_t i = 0; i < sig.cache.size() && headWindow; ++i) {
    const Shape& past = g.value(*g.findValue(sig.cache[i].past)).type.shape;
    const int64_t heads = past.size() > 1 ? past[1] : 0;
    if (sig.cache[i].sequenceAxis < 2)
      throw Error("cache '" + sig.cache[i].past + "' has no heads axis before its sequence axis " +
                  std::to_string(sig.cache[i].sequenceAxis) + ": it cannot be held by heads");
    if (share_.headEnd < 0) share_.headEnd = heads;
    if (share_.headFirst < 0 || share_.headFirst >= share_.headEnd || share_.headEnd > heads)
      throw Error("cache share KV heads " + std::to_string(share_.headFirst) + ".." +
                  std::to_string(share_.headEnd) + " are empty or outside cache '" +
                  sig.cache[i].past + "''s " + std::to_string(heads));
    wholeCache_ = wholeCache_ && share_.headFirst == 0 && share_.headEnd == heads;
  }
  if (!wholeCache_) {
    sliceFirst_ = share_.rowFirst;
    sliceEnd_ = share_.rowEnd;
  }
  // The cache: allocated once, here; in place, shaped as the present (or
  // the share's window of it).
  for (size_t i = 0; i < sig.cache.size(); ++i) {
    const ValueId past = *g.findValue(sig.cache[i].past);
    if (!inPlace_) {
      cache_.emplace_back(g.value(past).type);
      continue;
    }
    TensorType held = g.value(g.outputs()[presentOutput_[i]]).type;
    std::vector<int64_t> offsets;
    if (!wholeCache_) {
      held.shape[static_cast<size_t>(sig.cache[i].sequenceAxis)] = heldRows_ + 1;
      offsets.assign(static_cast<size_t>(sig.cache[i].sequenceAxis), 0);
      if (headWindow) {
        held.shape[1] = share_.headEnd - share_.headFirst;
        offsets[1] = share_.headFirst;
      }
    }
    cache_.emplace_back(held);
    // What the step is given for the past: a tensor of its type over the
    // buffer's storage, which neither the Session nor runReferenceInPlace
    // reads (the rows are in place in the present; with a share the buffer
    // is smaller than that type, and still never read through it).
    pastViews_.push_back(Tensor::view(g.value(past).type, cache_.back().raw()));
    concatOf_.push_back(g.value(past).consumers.at(0));
    if (session_) session_->appendInPlace(presentOutput_[i], cache_.back(), offsets);
  }
  if (!wholeCache_ && !session_)
    throw Error("a cache share needs a Session (its attention reads the share's buffers)");
  if (inPlace_ && !session_) {
    lastUse_.assign(static_cast<size_t>(g.numValues()), -1);
    for (NodeId n = 0; n < g.numNodes(); ++n)
      for (ValueId v : g.node(n).inputs)
        if (v != kNoValue) lastUse_[static_cast<size_t>(v)] = n;
    for (ValueId v : g.outputs()) lastUse_[static_cast<size_t>(v)] = g.numNodes();
  }
}

namespace {

// Rows [row, row + n) of `to` along `axis` from the rows [from, from + n) of
// `src` (same shape but on the axis): one block per index before the axis.
size_t copyRows(const Tensor& src, int64_t from, Tensor& to, int64_t row, int64_t n, int axis) {
  const Shape& ss = src.shape();
  const Shape& ts = to.shape();
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < axis; ++a) outer *= ts[static_cast<size_t>(a)];
  for (size_t a = static_cast<size_t>(axis) + 1; a < ts.size(); ++a) inner *= ts[a];
  const size_t rowBytes = static_cast<size_t>(inner) * elementSize(to.elementType());
  const int64_t srcRows = ss[static_cast<size_t>(axis)], toRows = ts[static_cast<size_t>(axis)];
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(to.raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memmove(d + (o * toRows + row) * rowBytes, s + (o * srcRows + from) * rowBytes,
                 static_cast<size_t>(n) * rowBytes);
  return static_cast<size_t>(outer * n) * rowBytes;
}

}  // namespace

std::vector<Tensor> Decoder::runReferenceInPlace(const std::vector<Tensor>& inputs) {
  const Graph& g = model_.graph;
  std::vector<Tensor> env(static_cast<size_t>(g.numValues()));
  for (size_t i = 0; i < inputs.size(); ++i) env[static_cast<size_t>(g.inputs()[i])] = inputs[i];
  for (ValueId v = 0; v < g.numValues(); ++v)
    if (g.value(v).isConstant()) env[static_cast<size_t>(v)] = *g.value(v).constant;
  for (NodeId n = 0; n < g.numNodes(); ++n) {
    const Node& node = g.node(n);
    auto pair = std::find(concatOf_.begin(), concatOf_.end(), n);
    if (pair != concatOf_.end()) {
      // The past's rows are in place: only the new ones are written.
      const size_t i = static_cast<size_t>(pair - concatOf_.begin());
      const Tensor& fresh = env[static_cast<size_t>(node.inputs[1])];
      const int axis = model_.signature.cache[i].sequenceAxis;
      presentBytesWritten_ +=
          copyRows(fresh, 0, cache_[i], capacity_, fresh.shape()[static_cast<size_t>(axis)], axis);
      env[static_cast<size_t>(node.outputs[0])] = cache_[i];
    } else {
      std::vector<const Tensor*> in;
      for (ValueId v : node.inputs)
        in.push_back(v == kNoValue ? nullptr : &env[static_cast<size_t>(v)]);
      std::vector<Tensor> out = evaluateNode(node, in);
      for (size_t o = 0; o < node.outputs.size(); ++o)
        if (node.outputs[o] != kNoValue)
          env[static_cast<size_t>(node.outputs[o])] = std::move(out[o]);
    }
    for (ValueId v : node.inputs)
      if (v != kNoValue && lastUse_[static_cast<size_t>(v)] == n && !g.value(v).isConstant())
        env[static_cast<size_t>(v)] = Tensor();
  }
  std::vector<Tensor> outputs;
  for (ValueId v : g.outputs()) outputs.push_back(env[static_cast<size_t>(v)]);
  return outputs;
}

size_t Decoder::cacheBytes() const {
  size_t n = 0;
  for (const Tensor& t : cache_) n += t.byteSize();
  return n;
}

size_t Decoder::wholeCacheBytes() const {
  const Graph& g = model_.graph;
  size_t n = 0;
  for (size_t i = 0; i < cache_.size(); ++i)
    n += inPlace_ ? g.value(g.outputs()[presentOutput_[i]]).type.byteSize()
                  : g.value(*g.findValue(model_.signature.cache[i].past)).type.byteSize();
  return n;
}

size_t Decoder::copyIntoShare(const Tensor& src, int64_t from, size_t i, int64_t to, int64_t n) {
  Tensor& cache = cache_[i];
  const int axis = model_.signature.cache[i].sequenceAxis;
  if (wholeCache_ || share_.headEnd < 0) return copyRows(src, from, cache, to, n, axis);
  // A head window: buffer block (b, h, p) is the source's (b, headFirst +
  // h, p), p the index over axes 2..axis-1 (none in the exported [batch,
  // heads, rows, width]), which are whole.
  const Shape& ss = src.shape();
  const Shape& ts = cache.shape();
  int64_t inner = 1, per = 1;
  for (size_t a = static_cast<size_t>(axis) + 1; a < ts.size(); ++a) inner *= ts[a];
  for (int a = 2; a < axis; ++a) per *= ts[static_cast<size_t>(a)];
  const size_t rowBytes = static_cast<size_t>(inner) * elementSize(cache.elementType());
  const int64_t srcRows = ss[static_cast<size_t>(axis)], toRows = ts[static_cast<size_t>(axis)];
  const int64_t heads = ts[1], srcHeads = ss[1];
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(cache.raw());
  size_t bytes = 0;
  for (int64_t b = 0; b < ts[0]; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t p = 0; p < per; ++p) {
        const int64_t o = (b * heads + h) * per + p;
        const int64_t so = (b * srcHeads + share_.headFirst + h) * per + p;
        std::memmove(d + (o * toRows + to) * rowBytes, s + (so * srcRows + from) * rowBytes,
                     static_cast<size_t>(n) * rowBytes);
        bytes += static_cast<size_t>(n) * rowBytes;
      }
  return bytes;
}

std::vector<Tensor> Decoder::inputsFor(const Graph& g, const std::vector<int64_t>& tokens,
                                       int64_t row) {
  const DecoderSignature& sig = model_.signature;
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<Tensor> in;
  in.reserve(g.inputs().size());
  for (ValueId v : g.inputs()) {
    const Value& value = g.value(v);
    const TensorType& type = value.type;
    auto ints = [&](const std::vector<int64_t>& values) {
      Tensor t(type);
      for (size_t k = 0; k < values.size(); ++k) {
        if (type.elementType == ElementType::Int32)
          t.data<int32_t>()[k] = static_cast<int32_t>(values[k]);
        else
          t.data<int64_t>()[k] = values[k];
      }
      return t;
    };
    if (value.name == sig.inputIds) {
      in.push_back(ints(tokens));
    } else if (value.name == sig.positionIds) {
      std::vector<int64_t> positions(tokens.size());
      std::iota(positions.begin(), positions.end(), row);
      in.push_back(ints(positions));
    } else if (value.name == sig.attentionMask) {
      // Rows 0..row-1 of the cache, and the new tokens after its last row
      // (a merged decoder's prompt pass: the new tokens alone).
      const int64_t cacheRows = type.shape.back() - n;
      std::vector<int64_t> mask(static_cast<size_t>(cacheRows + n), 0);
      std::fill(mask.begin(), mask.begin() + std::min(row, cacheRows), 1);
      std::fill(mask.end() - n, mask.end(), 1);
      in.push_back(ints(mask));
    } else {
      // The buffer itself: Tensor shares its storage, nothing is copied.
      const size_t i = static_cast<size_t>(
          std::find_if(sig.cache.begin(), sig.cache.end(),
                       [&](const KvCachePair& p) { return p.past == value.name; }) -
          sig.cache.begin());
      // A prompt's graph with an empty past (importPrefillGraph) gets one.
      const Tensor& cache = inPlace_ ? pastViews_.at(i) : cache_.at(i);
      in.push_back(type.shape == cache.shape() ? cache : Tensor(type));
    }
  }
  return in;
}

void Decoder::setCacheSlice(int64_t first, int64_t end,
                            std::function<void(int64_t row)> beforeStep) {
  if (first < 0 || end > capacity_ || first >= end)
    throw Error("cache slice rows " + std::to_string(first) + ".." + std::to_string(end) +
                " is empty or outside the cache's " + std::to_string(capacity_) + " rows");
  if (!wholeCache_ && (first != share_.rowFirst || end != share_.rowEnd))
    throw Error("cache slice rows " + std::to_string(first) + ".." + std::to_string(end) +
                " are not the rows this device holds (" + std::to_string(share_.rowFirst) + ".." +
                std::to_string(share_.rowEnd) + ")");
  sliceFirst_ = first;
  sliceEnd_ = end;
  beforeStep_ = std::move(beforeStep);
}

std::vector<float> Decoder::step(int64_t token, int64_t row) {
  if (beforeStep_) beforeStep_(row);
  std::vector<Tensor> in = inputsFor(model_.graph, {token}, row);
  lastStepRows_ = row + 1;  // the mask inputsFor made: rows 0..row-1 and the new token
  std::vector<Tensor> out;
  if (session_) {
    out = session_->run(in);
    presentBytesWritten_ += session_->appendedBytes();  // this run's
  } else {
    out = inPlace_ ? runReferenceInPlace(in) : step_(in);
  }
  // Append: the present's last row along the sequence axis (the new token's)
  // goes to row `row` of the cache; each (outer index) block is one row.
  for (size_t i = 0; i < cache_.size(); ++i) {
    const Tensor& present = out.at(presentOutput_[i]);
    Tensor& cache = cache_[i];
    const int axis = model_.signature.cache[i].sequenceAxis;
    const Shape& ps = present.shape();
    const Shape& cs = cache.shape();
    if (ps.size() != cs.size() || ps[static_cast<size_t>(axis)] != heldRows_ + 1)
      throw Error("output '" + model_.signature.cache[i].present + "' is " +
                  present.type().toString() + ": expected the cache '" +
                  model_.signature.cache[i].past + "' (" + cache.type().toString() +
                  ") with one more row on axis " + std::to_string(axis));
    if (inPlace_ && present.raw() != cache.raw())
      throw Error("output '" + model_.signature.cache[i].present +
                  "' was not written into its cache buffer");
    if (!inPlace_) presentBytesWritten_ += present.byteSize();
    if (row >= sliceFirst_ && row < sliceEnd_)  // another device's row otherwise
      bytesAppended_ += copyRows(present, heldRows_, cache, row - share_.rowFirst, 1, axis);
  }
  const Tensor& logits = out.at(logitsOutput_);
  std::vector<float> all = logits.toFloats();
  return std::vector<float>(all.end() - vocabulary_, all.end());
}

void Decoder::fillCache(int64_t rows, uint64_t seed) {
  if (rows < 0 || rows > capacity_)
    throw Error("cannot fill " + std::to_string(rows) + " cache rows: the cache has " +
                std::to_string(capacity_));
  // Each row's values follow from (seed, buffer, row) alone, so a device
  // that fills only its slice (cache parallelism) writes the same values
  // there as one device filling every row; the same seed writes the same
  // values on every machine (splitmix64, 53 bits as pick() draws).
  uint64_t state = 0;
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
  };
  const int64_t first = std::max<int64_t>(0, sliceFirst_), end = std::min(rows, sliceEnd_);
  for (size_t i = 0; i < cache_.size(); ++i) {
    Tensor& cache = cache_[i];
    const int axis = model_.signature.cache[i].sequenceAxis;
    const Shape& s = cache.shape();
    int64_t outer = 1, inner = 1;
    for (int a = 0; a < axis; ++a) outer *= s[static_cast<size_t>(a)];
    for (size_t a = static_cast<size_t>(axis) + 1; a < s.size(); ++a) inner *= s[a];
    const int64_t rowsInBuffer = s[static_cast<size_t>(axis)];
    const ElementType type = cache.elementType();
    if (type != ElementType::Float32 && type != ElementType::Float64 &&
        type != ElementType::Float16 && type != ElementType::BFloat16)
      throw Error("cache '" + model_.signature.cache[i].past + "' is " + cache.type().toString() +
                  ": fillCache writes float32, float64, float16 or bfloat16 rows only");
    // Block o of the buffer is block `whole` of one device's whole cache:
    // with a share of the heads (axis 1), block (b, h, p) is (b, headFirst + h, p).
    const bool headShare = !wholeCache_ && share_.headEnd >= 0;
    const int64_t heads = headShare ? s[1] : 1, per = headShare ? outer / s[0] / heads : 1;
    const int64_t allHeads =
        headShare ? model_.graph.value(*model_.graph.findValue(model_.signature.cache[i].past))
                        .type.shape[1]
                  : 1;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = first; r < end; ++r) {
        const int64_t at = (o * rowsInBuffer + (r - share_.rowFirst)) * inner;
        const int64_t whole =
            headShare ? ((o / (heads * per)) * allHeads + share_.headFirst + o / per % heads) * per +
                            o % per
                      : o;
        state = seed ^ ((static_cast<uint64_t>(i) << 48) + (static_cast<uint64_t>(whole) << 32) +
                        static_cast<uint64_t>(r)) * 0xd6e8feb86659fd93ull;
        for (int64_t k = 0; k < inner; ++k) {
          const float v = next();
          switch (type) {
            case ElementType::Float32:
              cache.data<float>()[at + k] = v;
              break;
            case ElementType::Float64:
              cache.data<double>()[at + k] = v;
              break;
            case ElementType::Float16:
              cache.data<uint16_t>()[at + k] = floatToHalf(v);
              break;
            default: {  // bfloat16: the float's upper half (v is exact enough)
              uint32_t bits;
              std::memcpy(&bits, &v, sizeof bits);
              cache.data<uint16_t>()[at + k] = static_cast<uint16_t>(bits >> 16);
            }
          }
        }
      }
  }
}

std::vector<float> Decoder::decodeStep(int64_t token, int64_t row) {
  if (row < 0 || row >= capacity_)
    throw Error("a decode step at row " + std::to_string(row) + " is outside the cache's " +
                std::to_string(capacity_) + " rows");
  if (token < 0 || token >= vocabulary_)
    throw Error("token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                std::to_string(vocabulary_ - 1) + ", the size of output '" +
                model_.signature.logits + "')");
  bytesAppended_ = 0;
  presentBytesWritten_ = 0;
  return step(token, row);
}

bool Decoder::prefill(const std::vector<int64_t>& prompt, std::vector<float>& logits) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n == 1) {
    prefillWhy_ = "a one-token prompt is a decode step";
    return false;
  }
  if (!prefillRunner_) {
    prefillWhy_ = "no runner for a prefill graph (a step function runs only the step graph)";
    return false;
  }
  if (prefillTokens_ != n) {
    const auto setup = std::chrono::steady_clock::now();
    const int64_t switches = involuntarySwitches();
    // Another length: import the model for it (the Step first, it may hold
    // a Session on the old graph).
    prefillStep_ = {};
    prefillGraph_.reset();
    prefillTokens_ = n;
    prefillWhy_.clear();
    if (std::optional<Graph> g = importPrefillGraph(model_, n, &prefillWhy_)) {
      prefillGraph_ = std::make_unique<Graph>(std::move(*g));
      prefillStep_ = prefillRunner_(*prefillGraph_, prefillWhy_);
    }
    prefillSetupMs_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - setup).count();
    prefillSetupPreemptions_ = involuntarySwitches() - switches;
  }
  if (!prefillStep_) return false;
  const std::vector<Tensor> out = prefillStep_(inputsFor(*prefillGraph_, prompt, 0));
  const Graph& g = *prefillGraph_;
  for (size_t i = 0; i < cache_.size(); ++i) {
    const KvCachePair& pair = model_.signature.cache[i];
    size_t o = 0;
    while (g.value(g.outputs()[o]).name != pair.present) ++o;
    const Tensor& present = out.at(o);
    // The prompt's rows are the last n (all of them after an empty past or
    // a merged decoder's no-cache branch; else its Concat copied the
    // masked past once).
    presentBytesWritten_ += present.byteSize();
    const int64_t first = present.shape()[static_cast<size_t>(pair.sequenceAxis)] - n;
    // This device's rows of the prompt's (all of them, but with a slice).
    const int64_t a = std::max<int64_t>(0, sliceFirst_), b = std::min(n, sliceEnd_);
    if (a < b) bytesAppended_ += copyIntoShare(present, first + a, i, a - share_.rowFirst, b - a);
  }
  size_t o = 0;
  while (g.value(g.outputs()[o]).name != model_.signature.logits) ++o;
  const std::vector<float> all = out.at(o).toFloats();
  logits.assign(all.end() - vocabulary_, all.end());
  return true;
}

namespace {

int64_t pick(const std::vector<float>& logits, const GenerateOptions& options,
             std::mt19937_64& rng) {
  if (options.temperature <= 0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<int64_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  // Most likely first, the lower id first on a tie: the order is the same on
  // every machine, so a seed gives the same tokens.
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (options.topK > 0 && options.topK < static_cast<int64_t>(ids.size())) ids.resize(options.topK);
  std::vector<double> p(ids.size());
  const double top = logits[ids[0]];
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    sum += p[i] = std::exp((logits[ids[i]] - top) / options.temperature);
  // 53 random bits, not std::uniform_real_distribution (its algorithm is the
  // library's own).
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * sum;
  double acc = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    if ((acc += p[i]) > u) return ids[i];
  return ids.back();
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Generation Decoder::generate(const std::vector<int64_t>& prompt, const GenerateOptions& options) {
  if (prompt.empty()) throw Error("the prompt is empty: give at least one token id");
  for (int64_t id : prompt)
    if (id < 0 || id >= vocabulary_)
      throw Error("prompt token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(vocabulary_ - 1) + ", the size of output '" +
                  model_.signature.logits + "')");
  if (options.maxNewTokens < 1) throw Error("max-new-tokens must be at least 1");
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n > capacity_)
    throw Error("the prompt's " + std::to_string(n) + " tokens are longer than the cache (" +
                std::to_string(capacity_) + " rows)");
  // The last new token is never run, so the cache holds n + new - 1 rows.
  if (n + options.maxNewTokens - 1 > capacity_)
    throw Error("the prompt's " + std::to_string(n) + " tokens and " +
                std::to_string(options.maxNewTokens) + " new ones need a cache of " +
                std::to_string(n + options.maxNewTokens - 1) + " rows; it has " +
                std::to_string(capacity_));
  if (options.temperature < 0) throw Error("the temperature must be 0 (greedy) or more");
  Generation g;
  bytesAppended_ = 0;
  presentBytesWritten_ = 0;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  prefillSetupMs_ = 0;
  prefillSetupPreemptions_ = 0;
  const int64_t switches = involuntarySwitches();
  if (prefill(prompt, logits)) {
    promptRuns_ = 1;
  } else {
    for (int64_t i = 0; i < n; ++i) logits = step(prompt[static_cast<size_t>(i)], i);
    promptRuns_ = n;
  }
  g.prefillSetupMs = prefillSetupMs_;
  g.prefillMs = msSince(t0) - prefillSetupMs_;
  g.prefillPreemptions = involuntarySwitches() - switches - prefillSetupPreemptions_;
  decodeSteps(g, std::move(logits), n, options);
  return g;
}

void Decoder::decodeSteps(Generation& g, std::vector<float> logits, int64_t row,
                          const GenerateOptions& options) {
  std::mt19937_64 rng(options.seed);
  for (;;) {
    if (options.keepLogits) g.logits.push_back(logits);
    const int64_t next = pick(logits, options, rng);
    g.tokens.push_back(next);
    if (options.eos && next == *options.eos) {
      g.stop = "eos";
      break;
    }
    if (static_cast<int64_t>(g.tokens.size()) >= options.maxNewTokens) {
      g.stop = "max-new-tokens";
      break;
    }
    const int64_t before = involuntarySwitches();
    const auto t0 = std::chrono::steady_clock::now();
    logits = step(next, row++);
    g.stepMs.push_back(msSince(t0));
    g.stepPreemptions += involuntarySwitches() - before;
  }
}

Generation Decoder::generateFrom(int64_t row, int64_t token, const GenerateOptions& options) {
  if (options.maxNewTokens < 1) throw Error("max-new-tokens must be at least 1");
  if (options.temperature < 0) throw Error("the temperature must be 0 (greedy) or more");
  // The steps run at rows row .. row + new - 1.
  if (row < 0 || row + options.maxNewTokens > capacity_)
    throw Error(std::to_string(options.maxNewTokens) + " new token(s) after " +
                std::to_string(row) + " filled rows need a cache of " +
                std::to_string(row + options.maxNewTokens) + " rows; it has " +
                std::to_string(capacity_));
  Generation g;
  const int64_t before = involuntarySwitches();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = decodeStep(token, row);  // checks the token; resets the byte counts
  g.stepMs.push_back(msSince(t0));
  g.stepPreemptions += involuntarySwitches() - before;
  promptRuns_ = 0;
  prefillWhy_ = "no prompt: the cache's rows were filled directly";
  decodeSteps(g, std::move(logits), row + 1, options);
  return g;
}

int64_t Decoder::setCacheRows(const std::string& past, const Tensor& rows) {
  size_t i = 0;
  while (i < cache_.size() && model_.signature.cache[i].past != past) ++i;
  if (i == cache_.size()) {
    std::string names;
    for (const KvCachePair& p : model_.signature.cache) names += (names.empty() ? "" : ", ") + p.past;
    throw Error("cache rows '" + past + "': the model has no past input of that name (its pasts: " +
                names + ")");
  }
  const int axis = model_.signature.cache[i].sequenceAxis;
  const TensorType& want = model_.graph.value(*model_.graph.findValue(past)).type;
  const Shape& s = rows.shape();
  bool same = s.size() == want.shape.size() && rows.elementType() == want.elementType;
  for (size_t a = 0; same && a < s.size(); ++a)
    same = a == static_cast<size_t>(axis) || s[a] == want.shape[a];
  if (!same)
    throw Error("cache rows '" + past + "' are " + rows.type().toString() + ": expected " +
                want.toString() + " with any number of rows on axis " + std::to_string(axis));
  const int64_t n = s[static_cast<size_t>(axis)];
  if (n > capacity_)
    throw Error("cache rows '" + past + "' hold " + std::to_string(n) + " rows: the cache has " +
                std::to_string(capacity_));
  const int64_t a = std::max<int64_t>(0, sliceFirst_), b = std::min(n, sliceEnd_);
  if (a < b) copyIntoShare(rows, a, i, a - share_.rowFirst, b - a);
  return n;
}

}  // namespace collage
