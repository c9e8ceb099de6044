// bench_decode_split: where the native decode attention kernel's split of
// the keys pays (backends/native/native_decode_attention.h, issue #42).
// One decode step's attention (one query row against a cache of L keys,
// the additive mask as the exported decoders pass it) is compiled by the
// native backend from a small graph, as a plan compiles it; the kernel's
// minimum keys per part is then set to each setting in turn. A setting
// only changes the part count P (parts()), so the settings giving the same
// P run the same code and are timed once. Every P's output is checked
// against the unsplit output (P = 1) within the plan check's float32
// bound before it is timed: a wrong split fails the run.
//
// Timing: per L, rounds of one sample per distinct P, the order rotated
// each round (interleaved: a load change hits every setting alike); a
// sample repeats the step until it takes --sample-ms. Per cell the median
// and the interquartile range (the spread). Splitting pays at L when the
// unsplit median exceeds the best split's by more than either spread; the
// threshold is the smallest L from which it pays at every longer L.
// `--clock cpu` times the calling thread's CPU time instead of the wall
// clock: at --threads 1 on a shared machine, the kernel's own time (other
// threads' time is not counted, so it means nothing at more threads).
// `--ring-mb N` runs each sample over a ring of distinct K/V copies of at
// least N MB, so that every call reads its cache from memory as a step
// does across its layers (without it, one copy: at short L it stays in the
// caches); each row then also gives the best cell's cache read in GB/s.
//
//   bench_decode_split [--threads 2] [--rounds 15] [--sample-ms 2] [--ring-mb 0]
//                      [--lengths 64,96,...,32768] [--settings none,64,...,4096]
//                      [--shapes 12/12/64,16/4/64,16/1/64] [--clock wall|cpu]
//
// A shape is query heads / KV heads / head width, batch 1: 12/12/64 is the
// GPT-2-style bench decoder's, 16/4/64 the LLaMA-style one's (grouped
// queries; bench/models/export_decoders.py), 16/1/64 one KV head (multi-
// query). With B x KV heads tasks at least the threads the kernel does not
// split at any setting: the table says so. Figures depend on the machine
// and its load: run it on a quiet machine (bench/README.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend_list.h"
#include "backends/native/native_backend.h"
#include "backends/native/native_decode_attention.h"
#include "core/ir/tensor_compare.h"
#include "core/ir/threading.h"
#include "core/measure/kernel_check.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"
#include "core/runtime/session.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;
using Ints = std::vector<int64_t>;
constexpr int64_t kNoSplit = std::numeric_limits<int64_t>::max();

struct DecodeShape {
  int64_t H = 12, Hkv = 12, D = 64;
  std::string name() const {
    return std::to_string(H) + "/" + std::to_string(Hkv) + "/" + std::to_string(D);
  }
};

// One decode step's attention as the exported decoders write it: Q [1, H,
// 1, D]; the cache K, V [1, Hkv, L, D], repeated to H heads (Unsqueeze ->
// Expand -> Reshape) when grouped; Kᵀ by Transpose; the scale a Div; the
// additive mask [1, 1, 1, L] (an input: the decoders compute it from
// attention_mask outside the attention).
void buildStep(GraphBuilder& b, const DecodeShape& s, int64_t L) {
  const int64_t r = s.H / s.Hkv;
  const ValueId q = b.input({1, s.H, 1, s.D});
  auto cache = [&]() {
    ValueId kv = b.input({1, s.Hkv, L, s.D});
    if (r == 1) return kv;
    kv = b.op("Unsqueeze", {kv}, attrs({{"axes", Ints{2}}}));
    kv = b.op("Expand", {kv}, attrs({{"shape", Ints{1, s.Hkv, r, L, s.D}}}));
    return b.op("Reshape", {kv}, attrs({{"shape", Ints{1, s.H, L, s.D}}}));
  };
  const ValueId k = cache(), v = cache();
  const ValueId mask = b.input({1, 1, 1, L});
  const ValueId kt = b.op("Transpose", {k}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId scores =
      b.op("Div", {b.op("MatMul", {q, kt}), b.scalar(std::sqrt(static_cast<float>(s.D)))});
  scores = b.op("Add", {scores, mask});
  const ValueId p = b.op("Softmax", {scores}, attrs({{"axis", int64_t{-1}}}));
  b.finish(b.op("MatMul", {p, v}));
}

// The calling thread's CPU time, us: with --clock cpu (one thread) a sample
// is the kernel's own time, whatever other processes take of the core.
double threadCpuUs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
}

struct Cell {
  double median = 0, spread = 0;  // us; spread: interquartile range
};

Cell summarise(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double f) { return us[static_cast<size_t>(f * static_cast<double>(us.size() - 1) + 0.5)]; };
  return Cell{at(0.5), at(0.75) - at(0.25)};
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The outcome at one L of one shape.
struct Row {
  int64_t L = 0;
  bool splits = false;  // some setting gives P > 1
  bool pays = false;
};

int run(int argc, char** argv) {
  int threads = 2, rounds = 15;
  bool cpuClock = false;
  double sampleMs = 2.0;
  int64_t ringMb = 0;
  std::vector<int64_t> lengths;
  for (int64_t p = 64; p <= 32768; p *= 2) {
    lengths.push_back(p);
    if (p * 3 / 2 <= 32768 && p < 32768) lengths.push_back(p * 3 / 2);
  }
  std::vector<int64_t> settings{kNoSplit, 64, 128, 256, 512, 1024, 2048, 4096};
  std::vector<DecodeShape> shapes{{12, 12, 64}, {16, 4, 64}, {16, 1, 64}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_decode_split: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string value = argv[++i];
    if (a == "--clock") {
      cpuClock = value == "cpu";
    } else if (a == "--threads") {
      threads = std::max(1, std::atoi(value.c_str()));
    } else if (a == "--rounds") {
      rounds = std::max(3, std::atoi(value.c_str()));
    } else if (a == "--ring-mb") {
      ringMb = std::max(0LL, std::atoll(value.c_str()));
    } else if (a == "--sample-ms") {
      sampleMs = std::max(0.01, std::atof(value.c_str()));
    } else if (a == "--lengths") {
      lengths.clear();
      for (const std::string& x : splitList(value)) lengths.push_back(std::max(1LL, std::atoll(x.c_str())));
    } else if (a == "--settings") {
      settings.clear();
      for (const std::string& x : splitList(value))
        settings.push_back(x == "none" ? kNoSplit : std::max(1LL, std::atoll(x.c_str())));
    } else if (a == "--shapes") {
      shapes.clear();
      for (const std::string& x : splitList(value)) {
        DecodeShape s;
        if (std::sscanf(x.c_str(), "%ld/%ld/%ld", &s.H, &s.Hkv, &s.D) != 3 || s.H < 1 || s.Hkv < 1 ||
            s.D < 1 || s.H % s.Hkv != 0) {
          std::fprintf(stderr, "bench_decode_split: shape '%s' is not H/Hkv/D with Hkv dividing H\n",
                       x.c_str());
          return 2;
        }
        shapes.push_back(s);
      }
    } else {
      std::fprintf(stderr, "bench_decode_split: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (std::find(settings.begin(), settings.end(), kNoSplit) == settings.end())
    settings.insert(settings.begin(), kNoSplit);  // the baseline every cell is checked against
  setThreadCount(threads);
  std::unique_ptr<Backend> native = createBackend("native");
  if (!native) {
    std::fprintf(stderr, "bench_decode_split: the native backend is missing\n");
    return 1;
  }
  auto settingName = [](int64_t m) { return m == kNoSplit ? std::string("none") : std::to_string(m); };
  std::printf("decode attention, batch 1, one query; %d thread(s), %d rounds, samples of >= %.2f ms;\n"
              "cells: median us (P parts), settings: minimum keys per part\n",
              threads, rounds, sampleMs);

  std::map<std::string, int64_t> thresholds;  // per shape that splits somewhere
  for (const DecodeShape& shape : shapes) {
    std::printf("\nshape %s (query heads / KV heads / width)\n%8s", shape.name().c_str(), "L");
    for (int64_t m : settings) std::printf(" %14s", settingName(m).c_str());
    std::printf("  %6s %9s %s\n", "best", "speedup", "pays");
    std::vector<Row> rows;
    for (int64_t L : lengths) {
      GraphBuilder b;
      buildStep(b, shape, L);
      const Graph& graph = b.graph();
      NodeSet all(graph.numNodes());
      for (NodeId n = 0; n < graph.numNodes(); ++n) all.insert(n);
      const KernelRequest request = KernelRequest::of(graph, all);
      CompileResult c = native->compile(request);
      auto* kernel = c ? dynamic_cast<native::DecodeAttentionKernel*>(c.kernel.get()) : nullptr;
      if (!kernel) {
        std::fprintf(stderr, "bench_decode_split: shape %s, L %ld did not compile to the decode kernel: %s\n",
                     shape.name().c_str(), static_cast<long>(L),
                     c ? describeNativeKernel(*c.kernel).c_str() : c.refusal.c_str());
        return 1;
      }
      // The kernel's inputs in the request's order (a graph input each).
      const std::vector<Tensor> graphInputs = randomInputs(graph, 3);
      std::vector<Tensor> inputs;
      for (ValueId v : request.inputs) {
        const auto at = std::find(graph.inputs().begin(), graph.inputs().end(), v);
        inputs.push_back(graphInputs.at(static_cast<size_t>(at - graph.inputs().begin())));
      }
      std::vector<DLTensor> inDl, outDl;
      for (Tensor& t : inputs) inDl.push_back(t.toDLTensor());
      std::vector<Tensor> outputs{Tensor(graph.value(request.outputs.at(0)).type)};
      outDl.push_back(outputs[0].toDLTensor());
      std::vector<const DLTensor*> in;
      for (const DLTensor& d : inDl) in.push_back(&d);
      std::vector<DLTensor*> out{&outDl[0]};
      // The ring (--ring-mb): copies of the inputs with the cache's shape
      // (K and V), the others shared; ring[0] is `in`.
      const int64_t cacheBytes = 2 * shape.Hkv * L * shape.D * 4;
      const int64_t copies = std::max<int64_t>(1, (ringMb * 1000000 + cacheBytes - 1) / cacheBytes);
      std::vector<Tensor> ringTensors;
      std::vector<std::vector<DLTensor>> ringDl(static_cast<size_t>(copies));
      std::vector<std::vector<const DLTensor*>> ring{in};
      ringTensors.reserve(static_cast<size_t>((copies - 1) * static_cast<int64_t>(inputs.size())));
      for (int64_t c = 1; c < copies; ++c) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          const bool cache = inputs[i].shape() == std::vector<int64_t>{1, shape.Hkv, L, shape.D};
          if (cache) ringTensors.push_back(inputs[i].clone());
          ringDl[static_cast<size_t>(c)].push_back(cache ? ringTensors.back().toDLTensor()
                                                         : inDl[i]);
        }
        ring.emplace_back();
        for (const DLTensor& d : ringDl[static_cast<size_t>(c)]) ring.back().push_back(&d);
      }

      // The distinct part counts, each with the largest setting giving it
      // (the one "best" names: the most keys per part for that P).
      std::map<int64_t, int64_t> byParts;  // P -> minimum keys per part
      std::vector<int64_t> partsOf;
      for (int64_t m : settings) {
        kernel->minKeysPerPart = m;
        const int64_t P = kernel->parts();
        partsOf.push_back(P);
        auto [it, fresh] = byParts.emplace(P, m);
        if (!fresh) it->second = std::max(it->second, m);
      }
      // The unsplit output; at short lengths checked against the reference
      // executor too (the unit tests do that at every length).
      kernel->minKeysPerPart = kNoSplit;
      kernel->run(in, out);
      const Tensor unsplit = outputs[0].clone();
      if (L <= 1024) {
        const std::vector<Tensor> env = referenceValues(graph, graphInputs);
        const CompareResult r = compareScaled(unsplit, env[request.outputs[0]], kFloat32Bound);
        if (!r.ok) {
          std::fprintf(stderr, "bench_decode_split: shape %s, L %ld: unsplit output differs from the reference: %s\n",
                       shape.name().c_str(), static_cast<long>(L), r.message.c_str());
          return 1;
        }
      }
      for (const auto& [P, m] : byParts) {
        kernel->minKeysPerPart = m;
        kernel->run(in, out);
        const CompareResult r = compareScaled(outputs[0], unsplit, kFloat32Bound);
        if (!r.ok) {
          std::fprintf(stderr, "bench_decode_split: shape %s, L %ld, %ld parts (minimum %s keys): "
                       "output differs from the unsplit output: %s\n",
                       shape.name().c_str(), static_cast<long>(L), static_cast<long>(P),
                       settingName(m).c_str(), r.message.c_str());
          return 1;
        }
      }
      // Repeats per sample, from the unsplit step's time (warm now).
      kernel->minKeysPerPart = kNoSplit;
      auto t0 = Clock::now();
      kernel->run(in, out);
      const double oneUs = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      const int reps = std::max(static_cast<int>(std::min<int64_t>(copies, 1000)),
                                static_cast<int>(sampleMs * 1000.0 / std::max(oneUs, 0.1)));
      std::vector<int64_t> order;
      for (const auto& entry : byParts) order.push_back(entry.first);
      std::map<int64_t, std::vector<double>> samples;
      for (int round = 0; round < rounds; ++round)
        for (size_t i = 0; i < order.size(); ++i) {
          const int64_t P = order[(i + static_cast<size_t>(round)) % order.size()];
          kernel->minKeysPerPart = byParts[P];
          t0 = Clock::now();
          const double cpu0 = threadCpuUs();
          for (int rep = 0; rep < reps; ++rep)
            kernel->run(ring[static_cast<size_t>(rep % copies)], out);
          samples[P].push_back((cpuClock ? threadCpuUs() - cpu0
                                         : std::chrono::duration<double, std::micro>(Clock::now() - t0).count()) /
                               reps);
        }
      std::map<int64_t, Cell> cells;
      for (auto& [P, us] : samples) cells[P] = summarise(us);

      Row row{L, order.size() > 1, false};
      const Cell& whole = cells[1];
      int64_t bestP = 1;
      for (const auto& [P, cell] : cells)
        if (cell.median < cells[bestP].median) bestP = P;
      std::printf("%8ld", static_cast<long>(L));
      for (size_t i = 0; i < settings.size(); ++i) {
        char cell[32];
        std::snprintf(cell, sizeof cell, "%.1f (%ld)", cells[partsOf[i]].median, static_cast<long>(partsOf[i]));
        std::printf(" %14s", cell);
      }
      if (ringMb > 0)
        std::printf(" %6.1f GB/s", static_cast<double>(cacheBytes) / (cells[bestP].median * 1e3));
      if (!row.splits) {
        std::printf("  %6s %9s %s\n", "none", "-", "no split at any setting");
      } else {
        // The best split against no split: pays by more than either spread.
        int64_t bestSplit = 0;
        for (const auto& [P, cell] : cells)
          if (P > 1 && (bestSplit == 0 || cell.median < cells[bestSplit].median)) bestSplit = P;
        const Cell& split = cells[bestSplit];
        row.pays = whole.median - split.median > std::max(whole.spread, split.spread);
        std::printf("  %6s %8.2fx %s\n", settingName(byParts[bestP]).c_str(), whole.median / split.median,
                    row.pays ? "yes" : "no");
      }
      rows.push_back(row);
    }
    // The smallest L from which splitting pays at every longer L that splits.
    int64_t threshold = -1;
    bool anySplit = false;
    for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
      if (!it->splits) continue;
      anySplit = true;
      if (!it->pays) break;
      threshold = it->L;
    }
    if (!anySplit)
      std::printf("threshold %s: the kernel splits at no setting (batch x KV heads = %ld tasks, %d thread(s))\n",
                  shape.name().c_str(), static_cast<long>(shape.Hkv), threads);
    else if (threshold < 0)
      std::printf("threshold %s: splitting does not pay at the longest length measured\n", shape.name().c_str());
    else {
      std::printf("threshold %s: splitting pays from L = %ld on\n", shape.name().c_str(), static_cast<long>(threshold));
      thresholds[shape.name()] = threshold;
    }
  }
  if (thresholds.empty()) {
    std::printf("\nno threshold: splitting paid at no measured length of any shape\n");
    return 0;
  }
  // P >= 2 needs L >= 2 x the minimum keys per part, so the kernel splits
  // from the threshold on with the minimum at half the largest threshold
  // (rounded down: L / m >= 2).
  int64_t most = 0;
  for (const auto& entry : thresholds) most = std::max(most, entry.second);
  std::printf("\nthreshold (the largest over the shapes that split): L = %ld; "
              "kDecodeMinKeysPerPart = %ld makes the kernel split from there on\n",
              static_cast<long>(most), static_cast<long>(most / 2));
  return 0;
}

}  // namespace
}  // namespace collage

int main(int argc, char** argv) { return collage::run(argc, argv); }
