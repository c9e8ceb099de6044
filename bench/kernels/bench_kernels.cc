// bench_kernels: times every backend on the distinct operator configurations
// of the zoo models (each Conv / MatMul / Gemm once per signature, and the
// fused elementwise tails), and writes a Figure-2-style table: which backend
// wins each configuration and by how much, against this machine's peak.
//
//   bench_kernels [--quick] [--out DIR] [--models a,b] [benchmark flags]
//
// Timing uses Google Benchmark for the iteration control; inside each run we
// also time every iteration so the table can report medians (robust to the
// other processes sharing this machine), not means.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend_list.h"
#include "core/patterns/candidate.h"
#include "core/patterns/candidate_signature.h"
#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/op_registry.h"
#include "core/ir/tensor.h"
#include "core/ir/threading.h"

namespace fs = std::filesystem;

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- machine

struct Peak {
  double ghz = 0;
  int cores = 0;         // the threads the kernels use (threadCount())
  int machineCores = 0;  // every core of the machine
  int flopsPerCycle = 0;
  std::string source;  // where the clock came from
  std::string isa;
  double gflops() const { return ghz * cores * flopsPerCycle; }
  std::string formula() const {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%.3f GHz (%s) x %d threads (of %d cores) x %d FLOP/cycle (%s) = %.1f GFLOP/s "
                  "(whole machine: %.1f GFLOP/s)",
                  ghz, source.c_str(), cores, machineCores, flopsPerCycle, isa.c_str(), gflops(),
                  ghz * machineCores * flopsPerCycle);
    return buf;
  }
};

// The clock: the nominal maximum from cpufreq where the kernel exposes it,
// else "cpu MHz" of /proc/cpuinfo (on a VM that is the host's nominal clock).
// FLOP/cycle: two FMA pipes x vector width in floats x 2 (multiply and add).
Peak machinePeak() {
  Peak p;
  p.machineCores = hardwareCores();
  p.cores = std::min(threadCount(), p.machineCores);
  std::ifstream maxFreq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (maxFreq >> khz && khz > 0) {
    p.ghz = khz / 1e6;
    p.source = "cpuinfo_max_freq";
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(cpuinfo, line)) {
    if (p.ghz == 0 && line.rfind("cpu MHz", 0) == 0) {
      p.ghz = std::atof(line.substr(line.find(':') + 1).c_str()) / 1e3;
      p.source = "/proc/cpuinfo cpu MHz";
    }
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = " " + line.substr(line.find(':') + 1) + " ";
  }
  auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
  if (has("avx512f")) {
    p.flopsPerCycle = 64;
    p.isa = "AVX-512: 2 FMA x 16 floats x 2";
  } else if (has("avx2") && has("fma")) {
    p.flopsPerCycle = 32;
    p.isa = "AVX2+FMA: 2 FMA x 8 floats x 2";
  } else {
    p.flopsPerCycle = 8;
    p.isa = "SSE: 2 x 4 floats";
  }
  return p;
}

// STREAM-style triad a = b + s*c over all cores (the machine's bandwidth,
// whatever --threads says), three 64 MiB float arrays
// (192 MiB, far beyond any cache). Counts 3 x 64 MiB per pass (STREAM's
// convention: no write-allocate traffic); best of several passes.
double measureTriadGBs() {
  const size_t n = size_t{16} << 20;  // floats per array: 64 MiB
  std::vector<float> a(n), b(n), c(n);
  const int threads = hardwareCores();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (size_t i = 0; i < n; ++i) {
    a[i] = 0;
    b[i] = 1;
    c[i] = 2;
  }
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  const float s = 3;
  double best = 0;
  for (int pass = 0; pass < 6; ++pass) {
    auto t0 = Clock::now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 3.0 * n * sizeof(float) / sec / 1e9);
  }
  benchmark::DoNotOptimize(a.data());
  return best;
}

// ---------------------------------------------------------------- configurations

enum class Category { Conv, MatMul, Elementwise };
const char* categoryName(Category c) {
  switch (c) {
    case Category::Conv: return "conv";
    case Category::MatMul: return "matmul";
    default: return "elementwise";
  }
}

struct Result {
  std::string backend;
  std::string origin;
  bool ok = false;
  std::string note;  // refusal or error
  double medianNs = 0;
  double minNs = 0;  // best iteration: what the kernel does when nothing preempts it
  int64_t iterations = 0;
};

struct Config {
  std::string label;
  std::string model;
  Category category;
  std::shared_ptr<Graph> graph;
  NodeSet nodes;
  double flops = 0;
  double bytes = 0;  // data inputs + outputs, read and written once
  std::vector<Tensor> inputs, outputs;
  std::vector<DLTensor> inViews, outViews;
  std::vector<const DLTensor*> in;
  std::vector<DLTensor*> out;
  std::vector<std::unique_ptr<Kernel>> kernels;  // parallel to results
  std::vector<Result> results;
};

std::string joinInts(const std::vector<int64_t>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

const Shape& shapeOf(const Graph& g, ValueId v) { return g.value(v).type.shape; }

// "Conv 3x3 s1 64->64 56x56 g1" (batch added when it is not 1).
std::string convLabel(const Graph& g, const Node& n) {
  const Shape& x = shapeOf(g, n.inputs[0]);
  const Shape& w = shapeOf(g, n.inputs[1]);
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  auto strides = n.attrs.getInts("strides", std::vector<int64_t>(kernel.size(), 1));
  int64_t group = n.attrs.getInt("group", 1);
  std::vector<int64_t> spatial(x.begin() + 2, x.end());
  bool uniform = std::all_of(strides.begin(), strides.end(), [&](int64_t v) { return v == strides[0]; });
  std::string stride = uniform && !strides.empty() ? std::to_string(strides[0]) : joinInts(strides, "x");
  std::string s = "Conv " + joinInts(kernel, "x") + " s" + stride + " " +
                  std::to_string(x[1]) + "->" + std::to_string(w[0]) + " " + joinInts(spatial, "x") +
                  " g" + std::to_string(group);
  if (x[0] != 1) s += " n" + std::to_string(x[0]);
  return s;
}

std::string opsLabel(const Graph& g, const NodeSet& nodes) {
  std::string ops;
  nodes.forEach([&](NodeId id) { ops += (ops.empty() ? "" : "+") + g.node(id).op; });
  if (ops.size() > 48) ops = ops.substr(0, 45) + "...";
  return ops;
}

std::string label(const Graph& g, const NodeSet& nodes, Category cat) {
  NodeId first = nodes.first();
  const Node& n = g.node(first);
  if (cat == Category::Conv) return convLabel(g, n);
  if (cat == Category::MatMul)
    return n.op + " [" + joinInts(shapeOf(g, n.inputs[0]), ",") + "] @ [" +
           joinInts(shapeOf(g, n.inputs[1]), ",") + "]";
  // Elementwise: the ops and the shape of the group's last output.
  const Node& last = g.node(nodes.members().back());
  return opsLabel(g, nodes) + " [" + joinInts(shapeOf(g, last.outputs[0]), ",") + "]";
}

bool isElementwiseKind(const std::string& op) {
  auto kind = opKindOf(op);
  return kind == OpKind::ElemWise || kind == OpKind::Broadcast || kind == OpKind::Reduction;
}

Tensor randomTensor(const TensorType& type, std::mt19937& rng) {
  Tensor t(type);
  const int64_t n = t.numElements();
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  if (type.elementType == ElementType::Float32)
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = real(rng);
  else if (type.elementType == ElementType::Int64)
    for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = static_cast<int64_t>(rng() % 4);
  return t;
}

struct ModelFile {
  std::string name;
  std::string path;
};

std::vector<ModelFile> findModels(const std::vector<std::string>& names, bool* usedSmall) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path zoo = xdg && *xdg ? fs::path(xdg) / "collage-studio/zoo"
                             : fs::path(home ? home : "/root") / ".cache/collage-studio/zoo";
  std::vector<ModelFile> files;
  *usedSmall = false;
  for (const auto& name : names) {
    fs::path full = zoo / (name + ".onnx");
    if (fs::exists(full)) {
      files.push_back({name, full.string()});
      continue;
    }
    fs::path small = fs::path(COLLAGE_SOURCE_DIR) / "resources/models" / (name + "_small.onnx");
    std::fprintf(stderr,
                 "notice: %s not found; using the small variant %s (generate the full zoo with "
                 "/usr/bin/python3 bench/models/export_zoo.py --models %s)\n",
                 full.c_str(), small.c_str(), name.c_str());
    files.push_back({name + "_small", small.string()});
    *usedSmall = true;
  }
  return files;
}

// Collects the distinct configurations of one model into `configs`
// (deduplicated across models by candidate signature).
void collectConfigs(const ModelFile& model, BackendSet& set, std::set<std::string>& seen,
                    std::vector<std::unique_ptr<Config>>& configs) {
  auto graph = std::make_shared<Graph>(importOnnx(model.path));
  const Graph& g = *graph;
  CandidateSet candidates = enumerateCandidates(g, set.capabilities());
  // Node set -> (backend -> origin), first origin per backend.
  std::map<std::vector<NodeId>, std::map<std::string, std::string>> byNodes;
  for (const auto& c : candidates.all()) byNodes[c.nodes.members()].emplace(c.backend, c.origin);

  // Elementwise groups: keep those that are maximal among the elementwise
  // groups of the model (the tails a fusing backend would actually run), and
  // those offered by more than one backend (a real contest).
  std::vector<std::vector<NodeId>> elementwise;
  for (const auto& [members, backends] : byNodes) {
    if (members.size() < 2) continue;
    bool all = std::all_of(members.begin(), members.end(),
                           [&](NodeId n) { return isElementwiseKind(g.node(n).op); });
    if (all) elementwise.push_back(members);
  }
  auto isStrictSubset = [](const std::vector<NodeId>& a, const std::vector<NodeId>& b) {
    return a.size() < b.size() && std::includes(b.begin(), b.end(), a.begin(), a.end());
  };

  for (const auto& [members, backends] : byNodes) {
    Category cat;
    if (members.size() == 1 && (g.node(members[0]).op == "Conv")) {
      cat = Category::Conv;
    } else if (members.size() == 1 &&
               (g.node(members[0]).op == "MatMul" || g.node(members[0]).op == "Gemm")) {
      // Weight-by-activation matmuls only matter as much as their FLOPs; keep all.
      cat = Category::MatMul;
    } else if (members.size() == 1 && backends.size() >= 2 &&
               (g.node(members[0]).op == "LayerNormalization" || g.node(members[0]).op == "Softmax")) {
      // Normalisations that one library runs as a single primitive: contested tails.
      cat = Category::Elementwise;
    } else if (std::find(elementwise.begin(), elementwise.end(), members) != elementwise.end()) {
      bool maximal = std::none_of(elementwise.begin(), elementwise.end(),
                                  [&](const auto& other) { return isStrictSubset(members, other); });
      if (!maximal && backends.size() < 2) continue;
      cat = Category::Elementwise;
    } else {
      continue;
    }
    NodeSet nodes = NodeSet::of(g.numNodes(), members);
    std::string hash = candidateSignature(g, nodes).hash;
    if (!seen.insert(hash).second) continue;

    auto cfg = std::make_unique<Config>();
    cfg->model = model.name;
    cfg->category = cat;
    cfg->graph = graph;
    cfg->nodes = nodes;
    cfg->label = label(g, nodes, cat);
    for (NodeId n : members) cfg->flops += flopsOf(g, n);
    for (const auto& [backend, origin] : backends) {
      Result r;
      r.backend = backend;
      r.origin = origin;
      cfg->results.push_back(r);
    }
    configs.push_back(std::move(cfg));
  }
}

// Compiles every backend's kernel for a configuration and builds its inputs.
void prepare(Config& cfg, BackendSet& set) {
  const Graph& g = *cfg.graph;
  KernelRequest request = KernelRequest::of(g, cfg.nodes, "bench");
  std::mt19937 rng(42);
  for (ValueId v : request.inputs) {
    cfg.inputs.push_back(randomTensor(g.value(v).type, rng));
    cfg.bytes += static_cast<double>(g.value(v).type.byteSize());
  }
  for (ValueId v : request.outputs) {
    cfg.outputs.emplace_back(g.value(v).type);
    cfg.bytes += static_cast<double>(g.value(v).type.byteSize());
  }
  for (auto& t : cfg.inputs) cfg.inViews.push_back(t.toDLTensor());
  for (auto& t : cfg.outputs) cfg.outViews.push_back(t.toDLTensor());
  for (auto& d : cfg.inViews) cfg.in.push_back(&d);
  for (auto& d : cfg.outViews) cfg.out.push_back(&d);
  for (auto& r : cfg.results) {
    std::unique_ptr<Kernel> kernel;
    try {
      request.origin = r.origin;
      CompileResult compiled = set.find(r.backend)->compile(request);
      if (compiled) kernel = std::move(compiled.kernel);
      else r.note = "refused: " + compiled.refusal;
    } catch (const std::exception& e) {
      r.note = std::string("compile threw: ") + e.what();
    }
    cfg.kernels.push_back(std::move(kernel));
  }
}

void runBenchmark(benchmark::State& state, Config* cfg, size_t index) {
  Kernel* kernel = cfg->kernels[index].get();
  Result& r = cfg->results[index];
  std::vector<double> samples;
  try {
    kernel->run(cfg->in, cfg->out);  // warm caches and lazy setup
    for (auto _ : state) {
      auto t0 = Clock::now();
      kernel->run(cfg->in, cfg->out);
      double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      state.SetIterationTime(ns * 1e-9);
      samples.push_back(ns);
    }
  } catch (const std::exception& e) {
    r.note = std::string("run threw: ") + e.what();
    r.ok = false;
    state.SkipWithError(r.note.c_str());
    return;
  }
  // Google Benchmark calls us several times while it sizes the run; the last
  // call is the reported one, so it overwrites.
  std::sort(samples.begin(), samples.end());
  size_t n = samples.size();
  r.medianNs = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  r.minNs = samples.front();
  r.iterations = static_cast<int64_t>(n);
  r.ok = true;
  state.counters["GFLOP/s"] = cfg->flops / r.medianNs;
  state.counters["GB/s"] = cfg->bytes / r.medianNs;
  state.counters["median_us"] = r.medianNs / 1e3;
}

// ---------------------------------------------------------------- report

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

struct Verdict {
  int winner = -1, runnerUp = -1;
};

Verdict judge(const Config& cfg) {
  Verdict v;
  for (size_t i = 0; i < cfg.results.size(); ++i) {
    if (!cfg.results[i].ok) continue;
    int ii = static_cast<int>(i);
    if (v.winner < 0 || cfg.results[i].medianNs < cfg.results[v.winner].medianNs) {
      v.runnerUp = v.winner;
      v.winner = ii;
    } else if (v.runnerUp < 0 || cfg.results[i].medianNs < cfg.results[v.runnerUp].medianNs) {
      v.runnerUp = ii;
    }
  }
  return v;
}

void writeReport(const std::vector<std::unique_ptr<Config>>& configs,
                 const std::vector<std::string>& backendNames, const Peak& peak, double triad,
                 double loadAtStart,
                 const std::string& outDir, bool usedSmall) {
  std::ostringstream md, csv;
  md << "## Kernels: per-configuration backend comparison\n\n";
  md << "Times are medians of per-iteration times from this one run on this machine "
        "(shared, possibly loaded); only ratios within one run are comparable.\n\n";
  md << "- Peak: " << peak.formula() << "\n";
  md << "- Load average when the run started: " << fmt("%.2f", loadAtStart) << " (" << peak.machineCores
     << " cores); kernels used " << peak.cores << " thread(s)\n";
  md << "- Memory bandwidth (STREAM triad, 192 MiB, " << hardwareCores()
     << " threads): " << fmt("%.1f", triad) << " GB/s\n";
  if (usedSmall) md << "- **Small zoo variants used** (full zoo not found): shapes are not the real ones.\n";
  md << "- % peak: the winner's GFLOP/s over peak, from its median / its best iteration; % BW: the "
        "same for its GB/s (data inputs + outputs counted once) over the triad bandwidth. The best "
        "iteration shows what the kernel does when no other process preempts it.\n\n";

  md << "| category | model | configuration |";
  for (const auto& b : backendNames) md << " " << b << " us | " << b << " GFLOP/s |";
  md << " winner | speed-up | % peak (median / best) | % BW (median / best) |\n|---|---|---|";
  for (size_t i = 0; i < backendNames.size(); ++i) md << "---:|---:|";
  md << "---|---:|---:|---:|\n";
  csv << "category,model,configuration,flops,bytes";
  for (const auto& b : backendNames) csv << "," << b << "_us," << b << "_gflops";
  for (const auto& b : backendNames) csv << "," << b << "_best_us";
  csv << ",winner,speedup,pct_peak,pct_bw,pct_peak_best,pct_bw_best\n";

  // wins[category][backend]
  std::map<std::string, std::map<std::string, int>> wins;
  std::map<std::string, std::vector<double>> speedups;  // backend -> speed-ups where it won
  for (const auto& cfgPtr : configs) {
    const Config& cfg = *cfgPtr;
    Verdict v = judge(cfg);
    md << "| " << categoryName(cfg.category) << " | " << cfg.model << " | " << cfg.label << " |";
    csv << categoryName(cfg.category) << "," << cfg.model << ",\"" << cfg.label << "\","
        << cfg.flops << "," << cfg.bytes;
    for (const auto& b : backendNames) {
      auto it = std::find_if(cfg.results.begin(), cfg.results.end(),
                             [&](const Result& r) { return r.backend == b; });
      if (it == cfg.results.end()) {
        md << " – | – |";
        csv << ",,";
      } else if (!it->ok) {
        md << " refused | – |";
        csv << ",,";
      } else {
        md << " " << fmt("%.1f", it->medianNs / 1e3) << " | " << fmt("%.1f", cfg.flops / it->medianNs)
           << " |";
        csv << "," << it->medianNs / 1e3 << "," << cfg.flops / it->medianNs;
      }
    }
    if (v.winner < 0) {
      md << " none | | | |\n";
      for (size_t i = 0; i < backendNames.size(); ++i) csv << ",";
      csv << ",,,,,,\n";
      continue;
    }
    const Result& w = cfg.results[v.winner];
    double speedup = v.runnerUp >= 0 ? cfg.results[v.runnerUp].medianNs / w.medianNs : 0;
    double pctPeak = 100.0 * cfg.flops / w.medianNs / peak.gflops();
    double pctBw = 100.0 * cfg.bytes / w.medianNs / triad;
    double pctPeakBest = 100.0 * cfg.flops / w.minNs / peak.gflops();
    double pctBwBest = 100.0 * cfg.bytes / w.minNs / triad;
    md << " **" << w.backend << "** | " << (speedup > 0 ? fmt("%.2fx", speedup) : "only") << " | "
       << fmt("%.0f%%", pctPeak) << " / " << fmt("%.0f%%", pctPeakBest) << " | " << fmt("%.0f%%", pctBw)
       << " / " << fmt("%.0f%%", pctBwBest) << " |\n";
    for (const auto& b : backendNames) {
      auto it = std::find_if(cfg.results.begin(), cfg.results.end(),
                             [&](const Result& r) { return r.backend == b && r.ok; });
      csv << ",";
      if (it != cfg.results.end()) csv << it->minNs / 1e3;
    }
    csv << "," << w.backend << "," << speedup << "," << pctPeak << "," << pctBw << "," << pctPeakBest
        << "," << pctBwBest << "\n";
    if (v.runnerUp >= 0) {
      ++wins[categoryName(cfg.category)][w.backend];
      ++wins["all"][w.backend];
      speedups[w.backend].push_back(speedup);
    } else {
      ++wins[std::string(categoryName(cfg.category)) + " (uncontested)"][w.backend];
    }
  }

  md << "\n### Wins per backend (contested configurations, Figure 2 style)\n\n| category |";
  for (const auto& b : backendNames) md << " " << b << " |";
  md << "\n|---|";
  for (size_t i = 0; i < backendNames.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& [cat, counts] : wins) {
    md << "| " << cat << " |";
    for (const auto& b : backendNames) {
      auto it = counts.find(b);
      md << " " << (it == counts.end() ? 0 : it->second) << " |";
    }
    md << "\n";
  }
  md << "\nMedian speed-up of the winner over the runner-up, where it won: ";
  for (auto& [b, s] : speedups) {
    std::sort(s.begin(), s.end());
    md << b << " " << fmt("%.2fx", s[s.size() / 2]) << " (max " << fmt("%.2fx", s.back()) << "); ";
  }
  md << "\n";

  std::cout << "\n" << md.str() << std::flush;
  std::error_code ec;
  fs::create_directories(outDir, ec);
  std::ofstream(fs::path(outDir) / "kernels.md") << md.str();
  std::ofstream(fs::path(outDir) / "kernels.csv") << csv.str();
  std::cerr << "wrote " << (fs::path(outDir) / "kernels.md").string() << " and kernels.csv\n";
}

std::vector<std::string> splitComma(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) if (!item.empty()) out.push_back(item);
  return out;
}

int runMain(int argc, char** argv) {
  bool quick = false;
  std::string outDir = std::string(COLLAGE_SOURCE_DIR) + "/bench/results";
  std::vector<std::string> modelNames = {"resnet50", "resnext50_32x4d", "bert_base"};
  bool minTimeGiven = false;
  // Our own flags first; the rest goes to Google Benchmark.
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--out" && i + 1 < argc) outDir = argv[++i];
    else if (a == "--models" && i + 1 < argc) modelNames = splitComma(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) setThreadCount(std::atoi(argv[++i]));
    else {
      if (a.rfind("--benchmark_min_time", 0) == 0) minTimeGiven = true;
      rest.push_back(argv[i]);
    }
  }
  std::string minTime = "--benchmark_min_time=0.05";
  if (!minTimeGiven) rest.push_back(minTime.data());
  int restArgc = static_cast<int>(rest.size());
  benchmark::Initialize(&restArgc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(restArgc, rest.data())) return 1;

  Peak peak = machinePeak();
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  if (peak.cores > 1 && load > 0.5 * peak.machineCores)
    std::fprintf(stderr,
                 "warning: load average %.2f on %d cores: multi-threaded kernels will wait for "
                 "descheduled OpenMP workers (times in multiples of a scheduler slice); consider "
                 "--threads 1\n",
                 load, peak.machineCores);
  double triad = measureTriadGBs();
  std::printf("peak: %s\nmemory bandwidth (triad): %.1f GB/s\n", peak.formula().c_str(), triad);

  BackendSet set = loadBackendSet();
  for (const auto& w : set.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  std::vector<std::string> backendNames;
  for (const auto& b : set.backends) backendNames.push_back(b->name());

  bool usedSmall = false;
  std::set<std::string> seen;
  std::vector<std::unique_ptr<Config>> configs;
  for (const auto& m : findModels(modelNames, &usedSmall)) {
    size_t before = configs.size();
    collectConfigs(m, set, seen, configs);
    std::printf("%s: %zu distinct configurations\n", m.name.c_str(), configs.size() - before);
  }
  // Largest first within each category, so --quick keeps the ones that matter.
  std::stable_sort(configs.begin(), configs.end(), [](const auto& a, const auto& b) {
    if (a->category != b->category) return a->category < b->category;
    return a->flops + a->bytes > b->flops + b->bytes;
  });
  if (quick) {
    // The four largest convolutions, three largest matmuls, three tails.
    std::vector<std::unique_ptr<Config>> kept;
    std::map<Category, int> taken;
    const std::map<Category, int> limit = {
        {Category::Conv, 4}, {Category::MatMul, 3}, {Category::Elementwise, 3}};
    for (auto& c : configs)
      if (taken[c->category]++ < limit.at(c->category)) kept.push_back(std::move(c));
    configs = std::move(kept);
  }

  for (auto& cfgPtr : configs) {
    Config* cfg = cfgPtr.get();
    prepare(*cfg, set);
    for (size_t i = 0; i < cfg->results.size(); ++i) {
      if (!cfg->kernels[i]) continue;
      std::string name = std::string(categoryName(cfg->category)) + "/" + cfg->label + "/" +
                         cfg->results[i].backend;
      benchmark::RegisterBenchmark(name.c_str(), runBenchmark, cfg, i)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  writeReport(configs, backendNames, peak, triad, load, outDir, usedSmall);
  return 0;
}

}  // namespace
}  // namespace collage

int main(int argc, char** argv) {
  try {
    return collage::runMain(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 1;
  }
}
