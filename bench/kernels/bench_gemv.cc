// bench_gemv: the decode step's weight MatMuls at a few rows (one token)
// against the memory bandwidth, per backend (issue #42: a decode step's time
// is bounded below by reading its weights once). Each shape's MatMul
// [rows, K] x [K, N] is compiled by each backend from a one-node graph with
// the weight a graph input, then run over a ring of distinct weight copies
// larger than the caches (--ring-mb), so every call reads its weight from
// memory, as a step does across its layers. The same ring is also summed by
// the threads (a plain parallel read: the bandwidth bound). Rounds are
// interleaved (every backend and the read once per round, the order
// rotated); cells are the median GB/s of weight read. `--clock cpu` times
// the calling thread's CPU time: meaningful at --threads 1 only.
//
//   bench_gemv [--threads 2] [--rounds 7] [--ring-mb 1024] [--rows 1]
//              [--shapes 1024x1024,1024x256,1024x2816,2816x1024]
//              [--backends native,openblas,onednn] [--clock wall|cpu]
//
// The default shapes are the LLaMA-style bench decoder's projections
// (bench/models/export_decoders.py): Q and O, K and V, gate and up, down.
// Figures depend on the machine and its load (bench/README.md).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend_list.h"
#include "backends/native/native_backend.h"
#include "core/ir/threading.h"
#include "core/measure/kernel_check.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The calling thread's CPU time (--clock cpu: at one thread, the kernel's
// own time on a shared machine).
double threadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  int threads = 2, rounds = 7;
  int64_t ringMb = 1024, rows = 1;
  bool cpuClock = false;
  std::vector<std::pair<int64_t, int64_t>> shapes{{1024, 1024}, {1024, 256}, {1024, 2816}, {2816, 1024}};
  std::vector<std::string> backends{"native", "openblas", "onednn"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], value = argv[i + 1];
    if (a == "--clock") cpuClock = value == "cpu";
    else if (a == "--threads") threads = std::max(1, std::atoi(value.c_str()));
    else if (a == "--rounds") rounds = std::max(1, std::atoi(value.c_str()));
    else if (a == "--ring-mb") ringMb = std::max(1LL, std::atoll(value.c_str()));
    else if (a == "--rows") rows = std::max(1LL, std::atoll(value.c_str()));
    else if (a == "--backends") backends = splitList(value);
    else if (a == "--shapes") {
      shapes.clear();
      for (const std::string& x : splitList(value)) {
        long k = 0, n = 0;
        if (std::sscanf(x.c_str(), "%ldx%ld", &k, &n) != 2 || k < 1 || n < 1) {
          std::fprintf(stderr, "bench_gemv: shape '%s' is not KxN\n", x.c_str());
          return 2;
        }
        shapes.emplace_back(k, n);
      }
    } else {
      std::fprintf(stderr, "bench_gemv: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  setThreadCount(threads);
  std::printf("MatMul [%ld, K] x [K, N], weights from a %ld MB ring; %d thread(s), %d rounds; "
              "median GB/s of weight read (us per call)\n",
              static_cast<long>(rows), static_cast<long>(ringMb), threads, rounds);
  for (const auto& [K, N] : shapes) {
    const int64_t bytes = K * N * 4;
    const int64_t copies = std::max<int64_t>(2, ringMb * (1 << 20) / bytes);
    std::vector<Tensor> ring;
    for (int64_t c = 0; c < copies; ++c) {
      Tensor t(ElementType::Float32, {K, N});
      float* p = t.data<float>();
      for (int64_t i = 0; i < K * N; ++i) p[i] = static_cast<float>((i * 7 + c) % 13) * 0.01f - 0.06f;
      ring.push_back(std::move(t));
    }
    GraphBuilder b;
    const ValueId a = b.input({rows, K});
    const ValueId w = b.input({K, N});
    b.finish(b.op("MatMul", {a, w}));
    const Graph& graph = b.graph();
    NodeSet all(graph.numNodes());
    for (NodeId n = 0; n < graph.numNodes(); ++n) all.insert(n);
    const KernelRequest request = KernelRequest::of(graph, all);
    Tensor x(ElementType::Float32, {rows, K});
    for (int64_t i = 0; i < rows * K; ++i) x.data<float>()[i] = static_cast<float>(i % 5) * 0.1f;
    struct Runner {
      std::string name;
      std::unique_ptr<Backend> backend;
      std::unique_ptr<Kernel> kernel;
      std::vector<double> gbs;
    };
    std::vector<Runner> runners;
    for (const std::string& name : backends) {
      Runner r{name, createBackend(name), nullptr, {}};
      if (!r.backend) continue;
      CompileResult c = r.backend->compile(request);
      if (!c) {
        std::printf("  %s: refused: %s\n", name.c_str(), c.refusal.c_str());
        continue;
      }
      r.kernel = std::move(c.kernel);
      runners.push_back(std::move(r));
    }
    Tensor y(graph.value(request.outputs.at(0)).type);
    DLTensor xd = x.toDLTensor(), yd = y.toDLTensor();
    std::vector<DLTensor> wd;
    for (Tensor& t : ring) wd.push_back(t.toDLTensor());
    const bool aFirst = request.inputs.at(0) == a;
    auto runOnce = [&](Kernel& k, int64_t c) {
      std::vector<const DLTensor*> in = aFirst ? std::vector<const DLTensor*>{&xd, &wd[c]}
                                               : std::vector<const DLTensor*>{&wd[c], &xd};
      std::vector<DLTensor*> out{&yd};
      k.run(in, out);
    };
    std::vector<double> readGbs;
    volatile float sink = 0.0f;
    const int slots = static_cast<int>(runners.size()) + 1;
    for (int round = 0; round < rounds; ++round)
      for (int i = 0; i < slots; ++i) {
        const int which = (i + round) % slots;
        const auto t0 = Clock::now();
        const double cpu0 = threadCpuSeconds();
        if (which == static_cast<int>(runners.size())) {
          float total = 0.0f;
          for (int64_t c = 0; c < copies; ++c) {
            const float* p = ring[static_cast<size_t>(c)].data<float>();
#pragma omp parallel for simd num_threads(threads) reduction(+ : total) schedule(static)
            for (int64_t e = 0; e < K * N; ++e) total += p[e];
          }
          sink = sink + total;
        } else {
          for (int64_t c = 0; c < copies; ++c) runOnce(*runners[static_cast<size_t>(which)].kernel, c);
        }
        const double s = cpuClock ? threadCpuSeconds() - cpu0
                                  : std::chrono::duration<double>(Clock::now() - t0).count();
        const double gbs = static_cast<double>(bytes) * static_cast<double>(copies) / s / 1e9;
        if (which == static_cast<int>(runners.size())) readGbs.push_back(gbs);
        else runners[static_cast<size_t>(which)].gbs.push_back(gbs);
      }
    std::printf("%ldx%ld (%.1f MB, %ld copies):", static_cast<long>(K), static_cast<long>(N), bytes / 1e6,
                static_cast<long>(copies));
    for (const Runner& r : runners) {
      const double g = median(r.gbs);
      std::printf("  %s %.1f (%.0f us)", r.name.c_str(), g, static_cast<double>(bytes) / g / 1e3);
    }
    std::printf("  read %.1f\n", median(readGbs));
    for (const Runner& r : runners)
      if (r.name == "native") std::printf("  native: %s\n", describeNativeKernel(*r.kernel).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace collage

int main(int argc, char** argv) { return collage::run(argc, argv); }
