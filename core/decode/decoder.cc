#include "core/decode/decoder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"

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
  return decoderSignature(importOnnx(path, probe), path);
}

int64_t planCapacity(const DecoderSignature& signature,
                     const std::map<std::string, Shape>& planInputShapes) {
  auto mask = planInputShapes.find(signature.attentionMask);
  return mask == planInputShapes.end() || mask->second.size() != 2 ? 0 : mask->second[1] - 1;
}

DecodeModel importDecodeModel(const std::string& path, int64_t capacity,
                              const DecoderSignature* signature) {
  if (capacity < 1)
    throw Error(path + ": the cache needs at least one row (capacity " + std::to_string(capacity) +
                ")");
  DecodeModel model;
  model.signature = signature ? *signature : probeDecoderSignature(path);
  model.capacity = capacity;
  const DecoderSignature& sig = model.signature;
  ImportOptions options;
  for (const DeclaredInput& in : readDeclaredInputs(path)) {
    Shape shape;
    if (in.name == sig.attentionMask) {
      shape = boundShape(in, 1, capacity + 1, path);
    } else if (in.name == sig.inputIds || in.name == sig.positionIds) {
      shape = boundShape(in, 1, 1, path);
    } else {
      auto pair = std::find_if(sig.cache.begin(), sig.cache.end(),
                               [&](const KvCachePair& p) { return p.past == in.name; });
      if (pair == sig.cache.end()) continue;  // decoderSignature refused anything else
      shape = boundShape(in, pair->sequenceAxis, capacity, path);
    }
    if ((in.name == sig.inputIds || in.name == sig.attentionMask || in.name == sig.positionIds) &&
        shape.size() != 2)
      throw Error(path + ": input '" + in.name + "' is " + dimsText(shape) +
                  ", not [batch, sequence]");
    options.inputShapes[in.name] = shape;
    model.bindings.push_back(in.name + "=" + dimsText(shape));
  }
  model.graph = importOnnx(path, options);
  return model;
}

Decoder::Decoder(const DecodeModel& model, Step step)
    : model_(model), step_(std::move(step)), capacity_(model.capacity) {
  const Graph& g = model.graph;
  const DecoderSignature& sig = model.signature;
  if (!step_) {
    auto reference = std::make_shared<ReferenceExecutor>(g);
    step_ = [reference](const std::vector<Tensor>& in) { return reference->run(in); };
  }
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
  // The cache: allocated once, here.
  for (const KvCachePair& p : sig.cache) cache_.emplace_back(g.value(*g.findValue(p.past)).type);
  presentOutput_.assign(sig.cache.size(), 0);
  for (size_t o = 0; o < g.outputs().size(); ++o) {
    const std::string& n = g.value(g.outputs()[o]).name;
    if (n == sig.logits) logitsOutput_ = o;
    for (size_t i = 0; i < sig.cache.size(); ++i)
      if (sig.cache[i].present == n) presentOutput_[i] = o;
  }
  vocabulary_ = g.value(g.outputs()[logitsOutput_]).type.shape.back();
}

size_t Decoder::cacheBytes() const {
  size_t n = 0;
  for (const Tensor& t : cache_) n += t.byteSize();
  return n;
}

std::vector<float> Decoder::step(int64_t token, int64_t row) {
  const Graph& g = model_.graph;
  std::vector<Tensor> in;
  in.reserve(inputs_.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const TensorType& type = g.value(g.inputs()[i]).type;
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
    switch (inputs_[i].first) {
      case Role::Ids:
        in.push_back(ints({token}));
        break;
      case Role::Positions:
        in.push_back(ints({row}));
        break;
      case Role::Mask: {
        // Rows 0..row-1 of the cache, and the new token after the last row.
        std::vector<int64_t> mask(static_cast<size_t>(capacity_ + 1), 0);
        std::fill(mask.begin(), mask.begin() + row, 1);
        mask.back() = 1;
        in.push_back(ints(mask));
        break;
      }
      // The buffer itself: Tensor shares its storage, nothing is copied.
      case Role::Cache:
        in.push_back(cache_[inputs_[i].second]);
        break;
    }
  }
  std::vector<Tensor> out = step_(in);
  // Append: the present's last row along the sequence axis (the new token's)
  // goes to row `row` of the cache; each (outer index) block is one row.
  for (size_t i = 0; i < cache_.size(); ++i) {
    const Tensor& present = out.at(presentOutput_[i]);
    Tensor& cache = cache_[i];
    const int axis = model_.signature.cache[i].sequenceAxis;
    const Shape& ps = present.shape();
    const Shape& cs = cache.shape();
    if (ps.size() != cs.size() || ps[static_cast<size_t>(axis)] != capacity_ + 1)
      throw Error("output '" + model_.signature.cache[i].present + "' is " +
                  present.type().toString() + ": expected the cache '" +
                  model_.signature.cache[i].past + "' (" + cache.type().toString() +
                  ") with one more row on axis " + std::to_string(axis));
    int64_t outer = 1, inner = 1;
    for (int a = 0; a < axis; ++a) outer *= cs[static_cast<size_t>(a)];
    for (size_t a = static_cast<size_t>(axis) + 1; a < cs.size(); ++a) inner *= cs[a];
    const size_t rowBytes = static_cast<size_t>(inner) * elementSize(cache.elementType());
    const char* src = static_cast<const char*>(present.raw());
    char* dst = static_cast<char*>(cache.raw());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + (o * capacity_ + row) * rowBytes,
                  src + (o * (capacity_ + 1) + capacity_) * rowBytes, rowBytes);
    bytesAppended_ += static_cast<size_t>(outer) * rowBytes;
  }
  const Tensor& logits = out.at(logitsOutput_);
  std::vector<float> all = logits.toFloats();
  return std::vector<float>(all.end() - vocabulary_, all.end());
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
  std::mt19937_64 rng(options.seed);
  Generation g;
  bytesAppended_ = 0;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  for (int64_t i = 0; i < n; ++i) logits = step(prompt[static_cast<size_t>(i)], i);
  g.prefillMs = msSince(t0);
  int64_t row = n;
  for (;;) {
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
    t0 = std::chrono::steady_clock::now();
    logits = step(next, row++);
    g.stepMs.push_back(msSince(t0));
  }
  return g;
}

}  // namespace collage
