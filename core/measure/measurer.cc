#include "core/measure/measurer.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <list>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "core/ir/error.h"
#include "core/ir/memory_budget.h"
#include "core/ir/threading.h"
#include "core/measure/machine_timing_lock.h"
#include "core/runtime/device_runtime.h"
#include "core/ops/control_flow_ops.h"
#include "core/runtime/kernel_activity.h"
#include "core/ops/reference_executor.h"
#include "core/ops/runtime_inputs.h"

extern char** environ;

namespace collage {

namespace {
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// SplitMix64's finaliser: element i of a tensor drawn with `key` is
// mix(key + i), so the values do not depend on how the fill is split.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Random values: floats uniform in [-1, 1) (24 bits), integers in [0, 4).
// Filled in parallel from a hash of the index, not drawn one by one from
// the generator: a long prompt's 4 GiB score tensor took 10-20 s to fill
// with std::uniform_real_distribution (most of its measurement, 0.4-1.5 s
// a run), and each candidate that reads it fills one.
Tensor randomTensor(const TensorType& type, std::mt19937& rng) {
  Tensor t(type);
  const int64_t n = t.numElements();
  const uint64_t key = (static_cast<uint64_t>(rng()) << 32) | rng();
  switch (type.elementType) {
    case ElementType::Float32: {
      float* out = t.data<float>();
#pragma omp parallel for num_threads(threadCount()) schedule(static)
      for (int64_t i = 0; i < n; ++i)
        out[i] = static_cast<float>(mix(key + static_cast<uint64_t>(i)) >> 40) * 0x1p-23f - 1.0f;
      break;
    }
    case ElementType::Int64: {
      int64_t* out = t.data<int64_t>();
#pragma omp parallel for num_threads(threadCount()) schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(mix(key + static_cast<uint64_t>(i)) % 4);
      break;
    }
    case ElementType::Int32: {
      int32_t* out = t.data<int32_t>();
#pragma omp parallel for num_threads(threadCount()) schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(mix(key + static_cast<uint64_t>(i)) % 4);
      break;
    }
    default:
      break;  // zeros: valid for bools and indices
  }
  return t;
}
}  // namespace

void summarizeSamples(std::vector<double>& s, Measurement& m) {
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  m.samples = static_cast<int32_t>(n);
  if (n == 0) return;
  // Quantiles by linear interpolation between order statistics.
  auto at = [&](double q) {
    double pos = q * static_cast<double>(n - 1);
    size_t lo = static_cast<size_t>(pos);
    size_t hi = std::min(n - 1, lo + 1);
    return s[lo] + (pos - static_cast<double>(lo)) * (s[hi] - s[lo]);
  };
  m.medianNs = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  m.minNs = s.front();
  m.spread = m.medianNs > 0 ? (at(0.75) - at(0.25)) / m.medianNs : 0;
}

namespace {
// A compiled kernel with random inputs and allocated outputs, ready to run.
// A backend with a device runtime gets them in device memory, as the Session
// hands them over: the time is the kernel's own, and the copies a plan needs
// at its device edges are charged by the search from the measured copy model
// (core/measure/copy_cost_measurement.h), not hidden in each kernel's time.
struct PreparedKernel {
  CompileResult compiled;
  std::vector<Tensor> inputs, outputs;
  std::vector<DLTensor> inViews, outViews;
  std::vector<const DLTensor*> in;
  std::vector<DLTensor*> out;
  // Given back when the kernel is done with, or when preparing it throws.
  struct DeviceMemory {
    DeviceRuntime* runtime = nullptr;
    std::vector<void*> blocks;
    DeviceMemory() = default;
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;
    ~DeviceMemory() {
      for (void* b : blocks) runtime->release(b);
    }
  } deviceMemory;

  // An If one of whose branches cannot run at the bound sizes succeeds only
  // when it takes the other (control_flow_ops.h): a condition that is an
  // input of the kernel is set so, since only such runs have a time.
  void takeTheRunnableBranch(const KernelRequest& request) {
    const Graph& g = *request.graph;
    request.nodes.forEach([&](NodeId n) {
      const Node& node = g.node(n);
      if (node.op != "If" || node.inputs.empty()) return;
      const std::string unrunnable = node.attrs.getString(kUnrunnableBranch, "");
      if (unrunnable.empty()) return;
      auto at = std::find(request.inputs.begin(), request.inputs.end(), node.inputs[0]);
      if (at == request.inputs.end()) return;
      Tensor& cond = inputs[static_cast<size_t>(at - request.inputs.begin())];
      const bool take = unrunnable == "else_branch";  // true takes then_branch
      if (cond.elementType() == ElementType::Bool && cond.numElements() == 1) cond.data<bool>()[0] = take;
    });
  }

  PreparedKernel(Backend& backend, const KernelRequest& request, uint32_t seed,
                 bool nativeLayouts = false) {
    compiled = backend.compile(request);
    if (!compiled) return;
    // The kernel as it runs between kernels of its own library: every
    // boundary it offers in its own layout switched to it (outputs first, as
    // the Session does), with buffers as large as that layout needs.
    std::vector<size_t> nativeIn(request.inputs.size(), 0), nativeOut(request.outputs.size(), 0);
    if (nativeLayouts) {
      for (size_t o = 0; o < request.outputs.size(); ++o)
        if (auto l = compiled.kernel->nativeOutputLayout(o)) nativeOut[o] = std::max<size_t>(l->bytes, 1);
      for (size_t i = 0; i < request.inputs.size(); ++i)
        if (auto l = compiled.kernel->nativeInputLayout(i)) nativeIn[i] = std::max<size_t>(l->bytes, 1);
      for (size_t o = 0; o < nativeOut.size(); ++o)
        if (nativeOut[o]) compiled.kernel->useNativeOutputLayout(o);
      for (size_t i = 0; i < nativeIn.size(); ++i)
        if (nativeIn[i]) compiled.kernel->useNativeInputLayout(i);
    }
    const Graph& g = *request.graph;
    std::mt19937 rng(seed);
    // A node whose output shape a run-time input decides accepts only
    // values that give the planned shape: take the values the model itself
    // computes (from random graph inputs) rather than random ones.
    bool valuesDecideShapes = false;
    request.nodes.forEach([&](NodeId n) {
      valuesDecideShapes = valuesDecideShapes || shapeDecidingRuntimeInput(g.node(n)) != nullptr;
    });
    if (valuesDecideShapes) {
      try {
        for (Tensor& t : ReferenceExecutor(g).valuesOf(randomInputs(g, seed), request.inputs))
          inputs.push_back(t.clone());
      } catch (const Error&) {
        inputs.clear();  // random values then: the run reports what they give
      }
    }
    if (inputs.empty())
      for (ValueId v : request.inputs) inputs.push_back(randomTensor(g.value(v).type, rng));
    takeTheRunnableBranch(request);
    for (ValueId v : request.outputs) outputs.emplace_back(g.value(v).type);
    for (auto& t : inputs) inViews.push_back(t.toDLTensor());
    for (auto& t : outputs) outViews.push_back(t.toDLTensor());
    // A native layout larger than plain memory (channels padded to a block):
    // a buffer of its size, starting with the plain (random) values.
    auto widen = [&](DLTensor& view, const Tensor& t, size_t bytes) {
      if (bytes <= t.byteSize()) return;
      native.emplace_back(bytes, 0);
      if (t.byteSize() > 0) std::memcpy(native.back().data(), t.raw(), t.byteSize());
      view.data = native.back().data();
      view.byte_offset = 0;
    };
    for (size_t i = 0; i < inputs.size() && i < nativeIn.size(); ++i) widen(inViews[i], inputs[i], nativeIn[i]);
    for (size_t o = 0; o < outputs.size() && o < nativeOut.size(); ++o) widen(outViews[o], outputs[o], nativeOut[o]);
    DeviceRuntime* runtime = backend.deviceRuntime();
    if (!(backend.device() == Device{}) && runtime) {
      deviceMemory.runtime = runtime;
      auto toDevice = [&](DLTensor& view, const Tensor& t, bool upload) {
        void* memory = runtime->allocate(t.byteSize());
        deviceMemory.blocks.push_back(memory);
        if (upload && t.byteSize() > 0) runtime->copyToDevice(memory, t.raw(), t.byteSize());
        view.data = memory;
        view.device = toDLDevice(runtime->device());
      };
      for (size_t i = 0; i < inputs.size(); ++i) toDevice(inViews[i], inputs[i], true);
      for (size_t i = 0; i < outputs.size(); ++i) toDevice(outViews[i], outputs[i], false);
      runtime->synchronize();
    }
    for (auto& d : inViews) in.push_back(&d);
    for (auto& d : outViews) out.push_back(&d);
  }
  // A kernel on a device runs asynchronously: its time is until it is done.
  void run() {
    compiled.kernel->run(in, out);
    if (deviceMemory.runtime) deviceMemory.runtime->synchronize();
  }
  std::list<std::vector<unsigned char>> native;  // buffers of native layouts larger than plain
  // Reads the inputs (one byte a cache line), as their producer's writes
  // would have left them in the cache; inputs on a device are left alone.
  void touchInputs() {
    if (deviceMemory.runtime) return;
    unsigned sum = 0;
    for (const Tensor& t : inputs) {
      const auto* bytes = static_cast<const unsigned char*>(t.raw());
      for (size_t i = 0; i < t.byteSize(); i += 64) sum += bytes[i];
    }
    touched = sum;
  }
  volatile unsigned touched = 0;  // keeps the reads
};

// How a measurement refused for memory begins: the kernel's inputs and
// outputs do not fit in this machine's memory now (core/ir/memory_budget.h).
// It is Failed with FailureCause::OutOfMemory (the machine's, so never stored
// as the kernel's verdict), before anything is compiled or allocated.
constexpr const char* kDoesNotFitInMemory = "not measured: its tensors do not fit in memory: ";

// Empty when what PreparedKernel allocates for `requests` (each one's inputs,
// random, and its outputs) fits in this machine's memory now; else the
// refusal, naming the largest tensor (core/ir/memory_budget.h). Checked
// before compiling or allocating anything: a 64 GiB score tensor must be a
// refused candidate, not a worker the out-of-memory killer takes (and with
// it the measurement, or another process). A kernel's own workspace is not
// counted: the kernel knows it, not the request.
std::string kernelMemoryRefusal(const std::vector<const KernelRequest*>& requests) {
  std::vector<TensorBytes> tensors;
  for (const KernelRequest* request : requests) {
    const Graph& g = *request->graph;
    for (ValueId v : request->inputs)
      tensors.push_back({"input '" + g.value(v).name + "' " + g.value(v).type.toString(), g.value(v).type.byteSize()});
    for (ValueId v : request->outputs)
      tensors.push_back({"output '" + g.value(v).name + "' " + g.value(v).type.toString(), g.value(v).type.byteSize()});
  }
  const std::string why = memoryRefusal(tensors);
  return why.empty() ? "" : std::string(kDoesNotFitInMemory) + why;
}

// Writes `bytes` of a buffer kept for the purpose (one cache line in 64
// bytes is enough to claim the line), displacing whatever the caches held.
// Every thread of the pool writes its share, so each core's own cache is
// displaced, not only the calling thread's: a kernel's threads read their
// part of its data from their own core's cache.
void evictCaches(size_t bytes) {
  static std::vector<unsigned char> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  unsigned char* data = buffer.data();
  const auto lines = static_cast<std::ptrdiff_t>(bytes / 64);
#pragma omp parallel for num_threads(threadCount()) schedule(static)
  for (std::ptrdiff_t i = 0; i < lines; ++i) data[i * 64] = static_cast<unsigned char>(data[i * 64] + 1);
}

// The cold protocol's eviction takes milliseconds, about as long as
// libgomp's pool spins before its threads sleep (GOMP_SPINCOUNT, 300,000 by
// default), while in a run of the model the kernel before keeps them awake. An empty parallel region
// wakes them without touching the caches, so the timed run does not pay
// for waking threads that a plan's kernel finds running.
void wakeThreadPool() {
#pragma omp parallel num_threads(threadCount())
  {
  }
}

double timeOnceNs(const std::function<void()>& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

// Involuntary context switches of every thread of this process so far (the
// kernels' OpenMP workers included): the scheduler took a core from us to
// give it to another process.
long involuntarySwitches() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_nivcsw;
}

// One timed run, and whether another process preempted it. On a shared
// machine such a run lasts a scheduler time slice or more whatever the
// kernel (a parallel region waits at its barrier for the thread that was
// preempted), and a median over mostly preempted runs was seen 3,500x a
// kernel's real time: 16 ms for a 4.6 us pooling while a build ran.
struct TimedRun {
  double ns = 0;
  bool preempted = false;
};
TimedRun timeRun(const std::function<void()>& f) {
  const long before = involuntarySwitches();
  TimedRun r;
  r.ns = timeOnceNs(f);
  r.preempted = involuntarySwitches() != before;
  return r;
}
}  // namespace

namespace {
// The data (or unified) cache of `level` that sysfs lists for CPU 0, in
// bytes (0 when it lists none).
size_t sysfsCacheBytes(int level) {
  size_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream levelFile(dir + "level"), typeFile(dir + "type"), sizeFile(dir + "size");
    int cacheLevel = 0;
    std::string type, text;
    if (!(levelFile >> cacheLevel) || cacheLevel != level) continue;
    if ((typeFile >> type) && type == "Instruction") continue;
    if (!(sizeFile >> text) || text.empty()) continue;
    size_t value = std::strtoull(text.c_str(), nullptr, 10);
    const char unit = text.back();
    value *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1;
    largest = std::max(largest, value);
  }
  return largest;
}

size_t nextPowerOfTwo(size_t bytes) {
  size_t p = 1;
  while (p < bytes) p <<= 1;
  return p;
}
}  // namespace

size_t lastLevelCacheBytes() {
  static const size_t bytes = [] {
    size_t largest = 0;
    for (int level = 1; level <= 4; ++level) largest = std::max(largest, sysfsCacheBytes(level));
    return largest == 0 ? size_t{32} << 20 : largest;
  }();
  return bytes;
}

size_t privateCacheBytes() {
  static const size_t perCore = [] {
    // A core's own cache is the level-2 one; sysfs lists it even where the
    // shared level-3 one it reports is a virtual machine's whole socket.
    const size_t l2 = sysfsCacheBytes(2);
    return l2 == 0 ? size_t{1} << 20 : l2;
  }();
  return perCore * static_cast<size_t>(std::max(1, threadCount()));
}

size_t cacheEvictionBytes(size_t workingSetBytes) {
  const size_t most = std::min(size_t{256} << 20, nextPowerOfTwo(2 * lastLevelCacheBytes()));
  const size_t least = nextPowerOfTwo(2 * privateCacheBytes());
  return std::clamp(nextPowerOfTwo(workingSetBytes), std::min(least, most), most);
}

size_t modelWorkingSetBytes(const Graph& graph) {
  const auto bytesOf = [](const TensorType& t) -> size_t {
    if (t.isSequence() || t.numElements() < 0) return 0;
    return static_cast<size_t>(t.numElements()) * elementSize(t.elementType);
  };
  const int64_t nodes = static_cast<int64_t>(graph.nodes().size());
  size_t constants = 0;
  // live[i]: the change in the bytes alive when node i runs (nodes are in
  // topological order); a value lives from its producer (the start, for a
  // graph input) to its last consumer (the end, for a graph output).
  std::vector<int64_t> live(static_cast<size_t>(nodes) + 2, 0);
  std::vector<bool> isOutput(static_cast<size_t>(graph.numValues()), false);
  for (ValueId v : graph.outputs()) isOutput[static_cast<size_t>(v)] = true;
  for (ValueId v = 0; v < graph.numValues(); ++v) {
    const Value& value = graph.value(v);
    const size_t bytes = bytesOf(value.type);
    if (value.isConstant()) {
      constants += bytes;
      continue;
    }
    const int64_t first = value.producer == kNoNode ? 0 : value.producer;
    int64_t last = value.consumers.empty() ? first : value.consumers.back();
    if (isOutput[static_cast<size_t>(v)]) last = nodes;
    live[static_cast<size_t>(first)] += static_cast<int64_t>(bytes);
    live[static_cast<size_t>(last) + 1] -= static_cast<int64_t>(bytes);
  }
  int64_t alive = 0, peak = 0;
  for (int64_t change : live) peak = std::max(peak, alive += change);
  return constants + static_cast<size_t>(peak);
}

HardwareFingerprint measurementFingerprint(const std::vector<std::pair<std::string, std::string>>& versions,
                                           const std::string& protocol) {
  HardwareFingerprint f = HardwareFingerprint::current();
  for (const auto& [name, version] : versions)
    f.libraryVersions += (f.libraryVersions.empty() ? "" : ";") + name + "=" + version;
  f.libraryVersions += ";measure=" + protocol;  // how the costs were taken
  return f;
}

std::vector<std::string> measurementWorkerCommand(const std::string& collageExecutable,
                                                  const std::string& modelPath,
                                                  const std::vector<std::string>& inputShapes) {
  std::vector<std::string> cmd = {collageExecutable, "--threads", std::to_string(threadCount()),
                                  "measure-worker", modelPath};
  for (const auto& s : inputShapes) {
    cmd.push_back("--input-shape");
    cmd.push_back(s);
  }
  return cmd;
}

namespace {
// A run of the model keeps all of its data in the caches of the cores that
// run it, so each kernel finds its weights where its last run left them.
bool runsInPrivateCaches(const Graph& graph) { return modelWorkingSetBytes(graph) <= privateCacheBytes(); }
}  // namespace

std::string measurementProtocol(const Graph& graph) {
  if (runsInPrivateCaches(graph)) return "hot";
  return "cold-" + std::to_string(cacheEvictionBytes(modelWorkingSetBytes(graph)) >> 20) + "MiB-inputs-hot";
}

MeasurerOptions MeasurerOptions::forModel(const Graph& graph) {
  MeasurerOptions o;
  if (!runsInPrivateCaches(graph)) o.evictBytes = cacheEvictionBytes(modelWorkingSetBytes(graph));
  return o;
}

// Called after each run of a kernel being measured in the worker: it tells
// the parent the worker is not hung (runMeasurementWorker sets it for the
// request; empty elsewhere). The parent's deadline is for silence
// (MeasurerOptions::timeoutSeconds), so a kernel of 15 s a run (a 32k-token
// prompt's attention) is measured, not killed at 60 s with its runs done.
thread_local std::function<void()> kernelRan;

// The fewest timed runs of a kernel whose runs outlast MeasurerOptions::maxSeconds
// (a median of three is still robust to one outlier).
constexpr int kSlowKernelSamples = 3;

Measurement measureKernel(Backend& backend, const KernelRequest& request,
                          const MeasurerOptions& options, bool nativeLayouts) {
  Measurement m;
  auto start = Clock::now();
  // The machine's memory, not the kernel: refused (not stored), and checked
  // again on the next run.
  if (std::string why = kernelMemoryRefusal({&request}); !why.empty()) {
    m.status = MeasurementStatus::Failed;
    m.cause = FailureCause::OutOfMemory;
    m.message = why;
    return m;
  }
  std::unique_ptr<PreparedKernel> k;
  try {
    k = std::make_unique<PreparedKernel>(backend, request, 42, nativeLayouts);
  } catch (const std::bad_alloc& e) {
    // The machine's memory, not the kernel: measured again on the next run.
    m.status = MeasurementStatus::Failed;
    m.cause = FailureCause::OutOfMemory;
    m.message = std::string("compile ran out of memory: ") + e.what();
    m.measureSeconds = secondsSince(start);
    return m;
  } catch (const DoesNotFitInMemory& e) {
    // A kernel that refused to allocate its own intermediates, for the same reason.
    m.status = MeasurementStatus::Failed;
    m.cause = FailureCause::OutOfMemory;
    m.message = std::string(kDoesNotFitInMemory) + e.what();
    m.measureSeconds = secondsSince(start);
    return m;
  } catch (const std::exception& e) {
    m.status = MeasurementStatus::Failed;
    m.message = std::string("compile threw: ") + e.what();
    m.measureSeconds = secondsSince(start);
    return m;
  }
  if (!k->compiled) {
    m.status = MeasurementStatus::Invalid;
    m.message = k->compiled.refusal;
    m.measureSeconds = secondsSince(start);
    return m;
  }
  try {
    auto warm = Clock::now();
    do {
      k->run();
    } while (secondsSince(warm) < options.warmupSeconds);
    if (kernelRan && secondsSince(warm) > 1.0) kernelRan();
    // Runs another process preempted are set aside: the cost is the
    // kernel's, not the machine's load at the minute it was measured.
    std::vector<double> samples, preempted;
    auto timed = Clock::now();
    double total = 0;
    const bool cold = options.evictBytes > 0;
    while (true) {
      if (cold) {
        evictCaches(options.evictBytes);
        k->touchInputs();
        wakeThreadPool();
      }
      const TimedRun run = timeRun([&] { k->run(); });
      if (kernelRan && run.ns > 1e9) kernelRan();  // only slow runs: a fast kernel finishes well in time
      (run.preempted ? preempted : samples).push_back(run.ns);
      total += run.ns * 1e-9;
      const int n = static_cast<int>(samples.size());
      if (n < options.minSamples && !preempted.empty() && secondsSince(timed) >= options.maxSeconds) {
        // Out of time with too few unpreempted runs: the fastest preempted
        // ones make up the number rather than the measurement never ending.
        // When they are most runs, the machine was busy, and it says so.
        if (preempted.size() >= samples.size())
          m.message = "the machine was busy: " + std::to_string(preempted.size()) + " of " +
                      std::to_string(preempted.size() + samples.size()) +
                      " timed runs were preempted by other processes; the fastest count";
        std::sort(preempted.begin(), preempted.end());
        const size_t missing = std::min(preempted.size(), static_cast<size_t>(options.minSamples - n));
        samples.insert(samples.end(), preempted.begin(), preempted.begin() + static_cast<std::ptrdiff_t>(missing));
        preempted.erase(preempted.begin(), preempted.begin() + static_cast<std::ptrdiff_t>(missing));
        break;
      }
      // A kernel whose timed runs pass maxSeconds before minSamples (a long
      // prompt's attention scores: seconds a run) stops at kSlowKernelSamples:
      // its noise, the scheduler's milliseconds, is far below its spread of
      // interest, and seven runs of a 4 s kernel were half a minute each.
      const bool slowEnough = n >= kSlowKernelSamples && secondsSince(timed) >= options.maxSeconds;
      if ((n < options.minSamples && !slowEnough) || (!cold && total < options.minTotalSeconds)) continue;
      if (n >= (cold ? options.coldMaxSamples : options.maxSamples) ||
          secondsSince(timed) >= options.maxSeconds)
        break;
      std::vector<double> copy = samples;
      Measurement probe;
      summarizeSamples(copy, probe);
      if (probe.spread <= options.targetSpread) break;
    }
    summarizeSamples(samples, m);
    m.preemptedRuns = static_cast<int32_t>(preempted.size());
    m.status = MeasurementStatus::Ok;
  } catch (const std::bad_alloc& e) {
    m.status = MeasurementStatus::Failed;
    m.cause = FailureCause::OutOfMemory;
    m.message = std::string("run ran out of memory: ") + e.what();
  } catch (const std::exception& e) {
    m.status = MeasurementStatus::Failed;
    m.message = std::string("run threw: ") + e.what();
  }
  m.measureSeconds = secondsSince(start);
  return m;
}

constexpr double kSwitchMinTotalSeconds = 0.05;

Measurement measureSwitch(Backend& first, const KernelRequest& firstRequest, Backend& second,
                          const KernelRequest& secondRequest, const MeasurerOptions& options) {
  Measurement m;
  auto start = Clock::now();
  if (std::string why = kernelMemoryRefusal({&firstRequest, &secondRequest}); !why.empty()) {
    m.status = MeasurementStatus::Failed;
    m.cause = FailureCause::OutOfMemory;
    m.message = why;
    return m;
  }
  try {
    PreparedKernel a(first, firstRequest, 1), b(second, secondRequest, 2);
    if (!a.compiled || !b.compiled) {
      m.status = MeasurementStatus::Invalid;
      m.message = !a.compiled ? a.compiled.refusal : b.compiled.refusal;
      return m;
    }
    // Interleave A, B and A-then-B so that drift hits all three alike. The
    // pair's extra time over its parts is what a boundary between the two
    // kernels costs (pool hand-over, caches), whatever the kernels compute.
    auto warm = Clock::now();
    do {
      a.run();
      b.run();
    } while (secondsSince(warm) < options.warmupSeconds);
    std::vector<double> ta, tb, tab;
    auto timed = Clock::now();
    // A boundary's cost is a difference of medians, noisier than one: it
    // keeps at least 50 ms of timed runs (there are a few backend pairs).
    while (static_cast<int>(tab.size()) < std::max(options.minSamples, 31) ||
           secondsSince(timed) < std::max(options.minTotalSeconds, kSwitchMinTotalSeconds)) {
      const TimedRun ra = timeRun([&] { a.run(); });
      const TimedRun rb = timeRun([&] { b.run(); });
      const TimedRun rab = timeRun([&] {
        a.run();
        b.run();
      });
      // A preempted run would be charged to the boundary (out of time, they count).
      const bool outOfTime = secondsSince(timed) >= options.maxSeconds;
      if ((ra.preempted || rb.preempted || rab.preempted) && !outOfTime) continue;
      ta.push_back(ra.ns);
      tb.push_back(rb.ns);
      tab.push_back(rab.ns);
      if (static_cast<int>(tab.size()) >= options.maxSamples || secondsSince(timed) >= options.maxSeconds)
        break;
    }
    Measurement ma, mb;
    summarizeSamples(ta, ma);
    summarizeSamples(tb, mb);
    summarizeSamples(tab, m);
    m.medianNs = std::max(0.0, m.medianNs - ma.medianNs - mb.medianNs);
    m.status = MeasurementStatus::Ok;
  } catch (const std::bad_alloc& e) {
    m.status = MeasurementStatus::Failed;
    m.cause = FailureCause::OutOfMemory;
    m.message = std::string("ran out of memory: ") + e.what();
  } catch (const DoesNotFitInMemory& e) {
    m.status = MeasurementStatus::Failed;
    m.cause = FailureCause::OutOfMemory;
    m.message = std::string(kDoesNotFitInMemory) + e.what();
  } catch (const std::exception& e) {
    m.status = MeasurementStatus::Failed;
    m.message = e.what();
  }
  m.measureSeconds = secondsSince(start);
  return m;
}

namespace {
nlohmann::json toJson(const Measurement& m) {
  return {{"status", measurementStatusName(m.status)}, {"median_ns", m.medianNs},
          {"spread", m.spread}, {"min_ns", m.minNs}, {"samples", m.samples},
          {"preempted", m.preemptedRuns}, {"seconds", m.measureSeconds}, {"message", m.message},
          {"cause", failureCauseName(m.cause)}};
}
Measurement fromJson(const nlohmann::json& j) {
  Measurement m;
  m.status = measurementStatusFromName(j.value("status", "failed"));
  m.medianNs = j.value("median_ns", 0.0);
  m.spread = j.value("spread", 0.0);
  m.minNs = j.value("min_ns", 0.0);
  m.samples = j.value("samples", 0);
  m.preemptedRuns = j.value("preempted", 0);
  m.measureSeconds = j.value("seconds", 0.0);
  m.message = j.value("message", "");
  m.cause = failureCauseFromName(j.value("cause", ""));
  return m;
}
}  // namespace

void runMeasurementWorker(const Graph& graph,
                          const std::function<Backend*(const std::string&)>& backendFor,
                          const MeasurerOptions& options, std::istream& in, std::ostream& out) {
  std::string line;
  std::unique_ptr<PairedPlanRunner> planRunner;  // made on the first plan request
  const std::string what = "measuring " + graph.sourcePath;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    // Each request is timed alone on the machine. While another holds the
    // lock, the parent is told (and stops its deadline until it is taken).
    std::optional<MachineTimingLock> turn;
    try {
      turn.emplace(what, [&](const std::string& holder) {
        out << nlohmann::json{{"waiting", holder}}.dump() << "\n" << std::flush;
      });
    } catch (const Error& e) {
      // Nothing was measured: the machine's failure, not the kernel's.
      Measurement failed;
      failed.status = MeasurementStatus::Failed;
      failed.cause = FailureCause::TimingLock;
      failed.message = e.what();
      out << toJson(failed).dump() << "\n" << std::flush;
      continue;
    }
    if (turn->waited()) out << nlohmann::json{{"acquired", true}}.dump() << "\n" << std::flush;
    Measurement m;
    try {
      auto req = nlohmann::json::parse(line);
      if (req.contains("pair")) {
        // Two whole plans timed against each other (core/measure/paired_plan_runs.h).
        PairedPlanRuns runs;
        try {
          const auto& pair = req["pair"];
          const Plan a = planFromJson(pair.at("a").dump(), "plan A");
          const Plan b = planFromJson(pair.at("b").dump(), "plan B");
          PairedRunOptions options;
          options.minRounds = pair.value("min_rounds", options.minRounds);
          options.maxRounds = pair.value("max_rounds", options.maxRounds);
          options.seconds = pair.value("seconds", options.seconds);
          options.verify = pair.value("verify", options.verify);
          if (!planRunner) planRunner = std::make_unique<PairedPlanRunner>(graph, backendFor);
          runs = planRunner->run(a, b, options);
        } catch (const std::bad_alloc& e) {
          runs.status = MeasurementStatus::Failed;
          runs.message = std::string("ran out of memory: ") + e.what();
          nlohmann::json reply = toJson(runs);
          reply["cause"] = failureCauseName(FailureCause::OutOfMemory);
          out << reply.dump() << "\n" << std::flush;
          continue;
        } catch (const std::exception& e) {
          runs.status = MeasurementStatus::Failed;
          runs.message = e.what();
        }
        out << toJson(runs).dump() << "\n" << std::flush;
        continue;
      }
      std::string name = req.at("backend").get<std::string>();
      const bool nativeLayouts = name.size() > kNativeLayoutsSuffix.size() &&
                                 name.compare(name.size() - kNativeLayoutsSuffix.size(),
                                              kNativeLayoutsSuffix.size(), kNativeLayoutsSuffix) == 0;
      if (nativeLayouts) name.resize(name.size() - kNativeLayoutsSuffix.size());
      Backend* backend = backendFor(name);
      if (!backend) throw Error("unknown backend '" + name + "'");
      auto nodesOf = [&](const nlohmann::json& list) {
        NodeSet nodes(graph.numNodes());
        for (int n : list) {
          if (n < 0 || n >= graph.numNodes()) throw Error("node index out of range");
          nodes.insert(n);
        }
        return nodes;
      };
      KernelRequest request = KernelRequest::of(graph, nodesOf(req.at("nodes")), "measure");
      if (req.contains("then")) {
        std::string secondName = req["then"].at("backend").get<std::string>();
        Backend* second = backendFor(secondName);
        if (!second) throw Error("unknown backend '" + secondName + "'");
        m = measureSwitch(*backend, request, *second,
                          KernelRequest::of(graph, nodesOf(req["then"].at("nodes")), "switch"),
                          options);
      } else {
        kernelRan = [&out] { out << nlohmann::json{{"ran", true}}.dump() << "\n" << std::flush; };
        m = measureKernel(*backend, request, options, nativeLayouts);
        kernelRan = nullptr;
      }
    } catch (const std::bad_alloc& e) {
      m.status = MeasurementStatus::Failed;
      m.cause = FailureCause::OutOfMemory;
      m.message = std::string("ran out of memory: ") + e.what();
    } catch (const std::exception& e) {
      m.status = MeasurementStatus::Failed;
      m.message = e.what();
    }
    out << toJson(m).dump() << "\n" << std::flush;
  }
}

double othersCpuSeconds(int pid) {
  // /proc/stat's first line: the machine's time per state, in clock ticks.
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) ||
      cpu != "cpu")
    return 0;  // unknown: never "busy"
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  double busy = (user + nice + system + irq + softirq + steal) / tick;
  if (pid > 0) {
    // Less the worker's own: utime and stime, fields 14 and 15 of
    // /proc/<pid>/stat, after the command name (which may hold spaces).
    std::ifstream own("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(own)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close != std::string::npos) {
      std::istringstream fields(text.substr(close + 2));
      std::string field;
      double utime = 0, stime = 0;
      for (int i = 3; i <= 15 && fields >> field; ++i) {
        if (i == 14) utime = std::atof(field.c_str());
        if (i == 15) stime = std::atof(field.c_str());
      }
      busy -= (utime + stime) / tick;
    }
  }
  return busy;
}

IsolatedMeasurer::IsolatedMeasurer(std::vector<std::string> workerCommand, MeasurerOptions options)
    : command_(std::move(workerCommand)), options_(options), loadProbe_(othersCpuSeconds) {
  // A worker that dies makes our next write raise SIGPIPE: report it instead.
  signal(SIGPIPE, SIG_IGN);
}

IsolatedMeasurer::~IsolatedMeasurer() { stopWorker(false); }

void IsolatedMeasurer::startWorker() {
  int toChild[2], fromChild[2];
  if (pipe(toChild) != 0 || pipe(fromChild) != 0) throw Error("cannot create pipes for a worker");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, toChild[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fromChild[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, toChild[1]);
  posix_spawn_file_actions_addclose(&actions, fromChild[0]);
  std::vector<char*> argv;
  for (auto& a : command_) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(toChild[0]);
  close(fromChild[1]);
  if (rc != 0) {
    close(toChild[1]);
    close(fromChild[0]);
    throw Error("cannot start the measurement worker '" + command_[0] + "': " + std::strerror(rc));
  }
  pid_ = pid;
  toWorker_ = toChild[1];
  fromWorker_ = fromChild[0];
  readBuffer_.clear();
  ++workersStarted_;
}

void IsolatedMeasurer::stopWorker(bool killIt) {
  if (pid_ < 0) return;
  if (killIt) kill(pid_, SIGKILL);
  reapWorker();
}

int IsolatedMeasurer::reapWorker() {
  if (toWorker_ >= 0) close(toWorker_);
  if (fromWorker_ >= 0) close(fromWorker_);
  toWorker_ = fromWorker_ = -1;
  int status = 0;
  if (pid_ >= 0) waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

void IsolatedMeasurer::describeExit(int status, Measurement& failed) const {
  failed.status = MeasurementStatus::Failed;
  failed.cause = FailureCause::None;
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    // A kill from outside is the machine's doing: SIGKILL is what the
    // out-of-memory killer sends (we send it only on a timeout or an abort,
    // which do not come here), SIGTERM, SIGINT, SIGHUP and SIGQUIT come from a
    // person or a job scheduler. Any other signal (SIGSEGV, SIGBUS, SIGFPE,
    // SIGILL, SIGABRT, ...) is the kernel crashing the worker: its own verdict.
    if (sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT) {
      failed.cause = FailureCause::Killed;
      failed.message = std::string("the measurement worker was killed from outside (signal ") +
                       strsignal(sig) + (sig == SIGKILL ? ": the out-of-memory killer?" : "") + ")";
      return;
    }
    failed.message = std::string("the kernel crashed the measurement worker (signal ") +
                     strsignal(sig) + ")";
    return;
  }
  if (WIFEXITED(status))
    failed.message = "the measurement worker exited with status " + std::to_string(WEXITSTATUS(status));
  else
    failed.message = "the measurement worker stopped";
}

Measurement IsolatedMeasurer::measure(const std::string& backend, const NodeSet& nodes) {
  return request(nlohmann::json{{"backend", backend}, {"nodes", nodes.members()}}.dump());
}

Measurement IsolatedMeasurer::measureSwitch(const std::string& first, const NodeSet& firstNodes,
                                            const std::string& second, const NodeSet& secondNodes) {
  return request(nlohmann::json{{"backend", first},
                                {"nodes", firstNodes.members()},
                                {"then", {{"backend", second}, {"nodes", secondNodes.members()}}}}
                     .dump());
}

Measurement IsolatedMeasurer::request(const std::string& json) {
  Measurement failed;
  std::optional<nlohmann::json> reply = exchange(json, options_.timeoutSeconds, failed);
  if (!reply) return failed;
  try {
    return fromJson(*reply);
  } catch (const std::exception& e) {
    failed.status = MeasurementStatus::Failed;
    failed.message = "garbled reply from the measurement worker: " + reply->dump().substr(0, 200);
    stopWorker(true);
    return failed;
  }
}

PairedPlanRuns IsolatedMeasurer::timePlans(const Plan& a, const Plan& b, const PairedRunOptions& options,
                                           double timeoutSeconds) {
  const nlohmann::json req{{"pair",
                            {{"a", nlohmann::json::parse(planToJson(a))},
                             {"b", nlohmann::json::parse(planToJson(b))},
                             {"min_rounds", options.minRounds},
                             {"max_rounds", options.maxRounds},
                             {"seconds", options.seconds},
                             {"verify", options.verify}}}};
  Measurement failed;
  PairedPlanRuns runs;
  std::optional<nlohmann::json> reply =
      exchange(req.dump(), pairedRunTimeoutSeconds(a, b, options, timeoutSeconds), failed);
  if (reply) {
    try {
      PairedPlanRuns back = pairedPlanRunsFromJson(*reply);
      // The machine's failure (its timing lock, its memory): no verdict on
      // the plans, as for a worker lost.
      if (failureCauseFromName(reply->value("cause", "")) != FailureCause::None) back.workerLost = true;
      return back;
    } catch (const std::exception&) {
      failed.status = MeasurementStatus::Failed;
      failed.message = "garbled reply from the measurement worker: " + reply->dump().substr(0, 200);
      stopWorker(true);
    }
  }
  runs.status = failed.status;
  runs.message = failed.message;
  runs.seconds = failed.measureSeconds;
  runs.workerLost = true;
  return runs;
}

std::optional<nlohmann::json> IsolatedMeasurer::exchange(const std::string& json, double timeoutSeconds,
                                                         Measurement& failed) {
  auto aborted = [&] { return abort_ && abort_->cancelled(); };
  auto abortNow = [&] {
    stopWorker(true);
    throw MeasurementAborted("measurement aborted: the measurement worker was killed");
  };
  if (aborted()) abortNow();
  if (pid_ < 0) {
    try {
      startWorker();
    } catch (const Error& e) {
      failed.status = MeasurementStatus::Failed;
      failed.message = e.what();
      return std::nullopt;
    }
  }
  // The worker runs kernels for this thread: it counts as running them.
  KernelActivity::Scope running;
  std::string line = json + "\n";
  auto start = Clock::now();
  auto silentSince = start;  // the last word from the worker (see "ran" below)
  // What the machine's other processes used while this request ran: a
  // timeout while they held the cores is no verdict on the kernel.
  double othersAtStart = loadProbe_(pid_);
  bool waitingForLock = false;
  // The worker died: reap it and say how (its signal or exit status).
  auto workerDied = [&]() -> std::optional<nlohmann::json> {
    describeExit(reapWorker(), failed);
    failed.measureSeconds = secondsSince(start);
    return std::nullopt;
  };
  if (write(toWorker_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    return workerDied();  // gone already (e.g. it could not load the model)
  while (true) {
    auto nl = readBuffer_.find('\n');
    if (nl != std::string::npos) {
      std::string reply = readBuffer_.substr(0, nl);
      readBuffer_.erase(0, nl + 1);
      try {
        nlohmann::json j = nlohmann::json::parse(reply);
        // The worker waits for the machine's timing lock (machine_timing_lock.h):
        // the deadline counts from when it has it, not while it waits.
        if (j.is_object() && j.contains("waiting")) {
          waitingForLock = true;
          // Told once per holder, not once per kernel: two runs that share
          // the machine take turns at every request.
          const std::string holder = j["waiting"].get<std::string>();
          const std::string who = holder.substr(0, holder.find(", since"));
          if (waiting_ && who != lastHolder_) waiting_(holder);
          lastHolder_ = who;
          continue;
        }
        if (j.is_object() && j.contains("acquired")) {
          waitingForLock = false;
          start = Clock::now();
          silentSince = start;
          othersAtStart = loadProbe_(pid_);
          continue;
        }
        // A run of a slow kernel is done: the worker is not hung, and the
        // deadline is for silence.
        if (j.is_object() && j.contains("ran")) {
          if (!waitingForLock) silentSince = Clock::now();
          continue;
        }
        return j;
      } catch (const std::exception& e) {
        failed.status = MeasurementStatus::Failed;
        failed.message = "garbled reply from the measurement worker: " + reply.substr(0, 200);
        stopWorker(true);
        return std::nullopt;
      }
    }
    double left = waitingForLock ? timeoutSeconds : timeoutSeconds - secondsSince(silentSince);
    if (left <= 0) {
      const double wall = secondsSince(start);
      const double othersCores = (loadProbe_(pid_) - othersAtStart) / std::max(wall, 1e-3);
      stopWorker(true);
      failed.status = MeasurementStatus::TimedOut;
      failed.message = "no result within " + std::to_string(static_cast<int>(timeoutSeconds)) +
                       " s: the worker was killed";
      if (othersCores >= kBusyCores) {
        char busy[160];
        std::snprintf(busy, sizeof busy,
                      " while other processes kept %.1f cores busy (a busy machine: measured "
                      "again on the next run)",
                      othersCores);
        failed.message += busy;
        failed.cause = FailureCause::Busy;
      }
      failed.measureSeconds = wall;
      return std::nullopt;
    }
    if (aborted()) abortNow();
    // Short waits while an abort switch is set, so that it acts promptly.
    pollfd pfd{fromWorker_, POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(std::min(left, abort_ ? 0.05 : 1.0) * 1000) + 1);
    if (ready <= 0) continue;
    char buf[4096];
    ssize_t got = read(fromWorker_, buf, sizeof buf);
    if (got > 0) {
      readBuffer_.append(buf, static_cast<size_t>(got));
      continue;
    }
    return workerDied();  // EOF: it died mid-measurement
  }
}

}  // namespace collage
