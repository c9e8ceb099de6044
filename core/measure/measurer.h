// The Measurer: compiles a candidate's kernel, runs it on random inputs of
// the graph's shapes, and times it until the timing is stable.
//
// Isolation. A kernel that crashes or hangs must not take the tool down, and
// a half-finished measurement must never reach the database. So the product
// measures in a separate worker process (`collage measure-worker`, started
// with posix_spawn, fresh OpenMP state, talking JSON lines over pipes). The
// parent waits with a deadline: a worker that dies is recorded as Failed
// with its signal, one that passes the deadline is killed and recorded as
// TimedOut, and a new worker is started for the next candidate. The worker
// times each request alone on the machine (machine_timing_lock.h).
#pragma once

#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ir/error.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/ir/search_events.h"
#include "core/measure/paired_plan_runs.h"
#include "core/runtime/backend.h"
#include "core/measure/measurement.h"
#include "core/onnx/onnx_import.h"

namespace collage {

struct MeasurerOptions {
  // Untimed runs first (at least one), then timed runs that add up to at
  // least minTotalSeconds. Measured on resnet50_small (369 kernels, each
  // optimisation under chrt -f 10, nothing else running): at 5 ms and 10 ms
  // the costs were 0.979x those taken at 20 ms and 50 ms (median; p10-p90
  // 0.94-1.01; 0.989x for kernels over 5 us), the same plan was chosen, and
  // measuring took 5.1 s instead of 21.8 s (median samples 1,505 against
  // 6,800: a 2 us kernel still runs thousands of times).
  double warmupSeconds = 0.005;
  double minTotalSeconds = 0.01;
  int minSamples = 7;
  double targetSpread = 0.05;  // keep going while (p75 - p25) / median is above this...
  int maxSamples = 300;        // ...up to this many samples
  double maxSeconds = 2.0;     // ...or this much time
  double timeoutSeconds = 60;  // a worker silent this long is killed (TimedOut)
  // Bytes written before each timed run, so that the kernel starts with cold
  // caches as it does inside a run of the whole model, where the other
  // kernels' weights and tensors have displaced its own (0: hot caches, every
  // run finding the last one's data). Costs measured hot added up to 1.42x
  // less than MobileNetV3's plan then ran; measured cold, to 1.14x less.
  // Each timed run then costs an eviction, so fewer are taken. The kernel's
  // inputs are read again after the eviction: in a run their producer has
  // just written them, so they are in the cache.
  size_t evictBytes = 0;
  int coldMaxSamples = 15;

  // What the measurement worker uses for `graph`: the cache state a kernel
  // meets in a run of that model (measurementProtocol).
  static MeasurerOptions forModel(const Graph& graph);
};

// This machine's last-level cache (from sysfs; 32 MiB if unknown). On a
// virtual machine this is the host socket's, shared with other tenants (480
// MiB on this project's machine), so it says nothing of what stays cached.
size_t lastLevelCacheBytes();
// The caches of the cores a kernel runs on (their level-2 caches, at this
// process's thread count): the data that stays there from one run to the next
// is as fast as a kernel timed alone sees it.
size_t privateCacheBytes();
// The writes that displace what a run of a model with `workingSetBytes`
// displaces between two runs of one kernel: that working set, to the next
// power of two (so models of a size share measurements), at least twice the
// private caches and at most twice the last-level cache (256 MiB at most).
size_t cacheEvictionBytes(size_t workingSetBytes);

// The bytes a run of `graph` keeps in the caches: its constants (weights)
// and the most bytes of values alive at once over a run in node order (what
// an ideal allocator holds; the Session reuses buffers as values die).
// Summing every value instead made MobileNetV3-Large's 26 MiB 49 MiB, and its
// kernels measured after 64 MiB of writes added up to 1.17x its run.
size_t modelWorkingSetBytes(const Graph& graph);

// How kernels of `graph` are measured, part of the fingerprint so that
// measurements taken another way are not reused. A model whose working set
// fits the private caches of the cores that run it finds its data there run
// after run: "hot". A larger one has the rest of the model pass through the
// caches between two runs of a kernel, so before each timed run as many bytes
// are written (cacheEvictionBytes) and the kernel's inputs read again:
// "cold-32MiB-inputs-hot". The size is the model's, not the machine's last
// cache: where the shared cache holds the rest of the model, it holds it in
// the measurement too. Deciding by the last-level cache instead measured
// every zoo model hot on a virtual machine whose sysfs lists its host's 480
// MiB, and plans ran 1.27-1.69x their predicted time there.
std::string measurementProtocol(const Graph& graph);

// The one key measurements are stored and shared under: this machine, each
// backend's version ((name, version), in the backend set's order) and the
// measurement protocol (measurementProtocol of the model). The app, the API and the CLI all key by it, so
// they share their measurements by construction.
HardwareFingerprint measurementFingerprint(const std::vector<std::pair<std::string, std::string>>& versions,
                                           const std::string& protocol);

// The argv that starts a measurement worker (`collage measure-worker`) for a
// model with its input-shape bindings ("name=1x3x224x224"), from the
// `collage` executable, at this process's thread count.
std::vector<std::string> measurementWorkerCommand(const std::string& collageExecutable,
                                                  const std::string& modelPath,
                                                  const std::vector<std::string>& inputShapes);

// Times one compiled kernel in this process (the worker's core; tests use it
// directly with a well-behaved backend). With `nativeLayouts`, every boundary
// where the kernel offers its own layout (Kernel::nativeOutputLayout) is
// switched to it first: the kernel as it runs between kernels of its library,
// which the op-level DP charges (core/search/layout_charges.h).
Measurement measureKernel(Backend& backend, const KernelRequest& request,
                          const MeasurerOptions& options, bool nativeLayouts = false);

// A backend name with this suffix asks the worker for measureKernel's
// nativeLayouts ("onednn@native-layouts"); the database keeps those
// measurements under that name.
inline const std::string kNativeLayoutsSuffix = "@native-layouts";

// The switching cost between two kernels run back to back: the median of
// (A then B) minus the medians of A and of B, interleaved, floored at 0.
Measurement measureSwitch(Backend& first, const KernelRequest& firstRequest, Backend& second,
                          const KernelRequest& secondRequest, const MeasurerOptions& options);

// Median and relative inter-quartile spread of samples (ns); sorts them.
void summarizeSamples(std::vector<double>& samplesNs, Measurement& m);

// The worker's loop: reads one JSON request per line from `in`
//   {"backend": "onednn", "nodes": [3, 4, 5]}
// (with "then": {"backend": ..., "nodes": [...]} for a switching-cost pair)
// and writes one JSON reply per line to `out`
//   {"status": "ok", "median_ns": ..., "spread": ..., "min_ns": ..., "samples": ..., "message": ...}
// `backendFor` returns the backend of a name (nullptr if unknown).
void runMeasurementWorker(const Graph& graph, const std::function<Backend*(const std::string&)>& backendFor,
                          const MeasurerOptions& options, std::istream& in, std::ostream& out);

// The CPU time in seconds, all cores together, that the machine's processes
// other than `pid` have used since it booted (/proc/stat less /proc/<pid>/stat;
// 0 where /proc cannot be read). The difference over a request that timed
// out says whether other processes held the cores meanwhile.
double othersCpuSeconds(int pid);

// Other processes using this many cores on average during a request that
// timed out make its timeout the machine's (FailureCause::Busy), not the
// kernel's: the kernel's threads waited for cores.
inline constexpr double kBusyCores = 0.5;

// Thrown by an IsolatedMeasurer whose abort switch is on: the worker was
// killed mid-request. There is no measurement, and a caller must store none
// (a Failed entry would mark a good kernel bad for good), so this is thrown
// rather than returned as a status.
class MeasurementAborted : public Error {
 public:
  using Error::Error;
};

// The parent side: one worker process at a time, restarted after a crash or
// a timeout. Not thread-safe: one caller at a time.
class IsolatedMeasurer {
 public:
  // `workerCommand` is the argv that starts a worker for this model, e.g.
  // {"/path/to/collage", "measure-worker", "model.onnx", "--input-shape", ...}.
  IsolatedMeasurer(std::vector<std::string> workerCommand, MeasurerOptions options);
  ~IsolatedMeasurer();

  Measurement measure(const std::string& backend, const NodeSet& nodes);
  // measureSwitch() in the worker.
  Measurement measureSwitch(const std::string& first, const NodeSet& firstNodes,
                            const std::string& second, const NodeSet& secondNodes);
  // Two whole plans timed against each other in the worker
  // (core/measure/paired_plan_runs.h). A crash or a request longer than
  // `timeoutSeconds` is reported as Failed / TimedOut and the worker restarts.
  PairedPlanRuns timePlans(const Plan& a, const Plan& b, const PairedRunOptions& options,
                           double timeoutSeconds);
  int workersStarted() const { return workersStarted_; }
  // Once `abort` is cancelled (from any thread), the worker is killed within
  // ~50 ms and this request and every later one throw MeasurementAborted:
  // for work whose result nobody wants any more (an app closing or starting
  // over), which must not wait for a 60 s kernel or a 120 s plan comparison.
  void setAbortSwitch(std::shared_ptr<const CancellationToken> abort) { abort_ = std::move(abort); }
  // Called (on the calling thread) when the worker must wait for the
  // machine's timing lock, with who holds it (machine_timing_lock.h), once
  // per holder. The request's deadline does not run while it waits.
  void setWaitingReporter(std::function<void(const std::string& holder)> waiting) {
    waiting_ = std::move(waiting);
  }
  // Replaces othersCpuSeconds (tests: a machine busy or quiet on demand).
  void setLoadProbe(std::function<double(int pid)> probe) { loadProbe_ = std::move(probe); }

 private:
  Measurement request(const std::string& json);
  // Sends one request line and reads one reply line; on a crash, a timeout
  // or a garbled reply fills `failed` and returns nothing.
  std::optional<nlohmann::json> exchange(const std::string& json, double timeoutSeconds,
                                         Measurement& failed);
  void startWorker();
  void stopWorker(bool kill);
  int reapWorker();  // closes the pipes, waits; returns the wait status
  // Fills `failed` with how the worker ended: its message and whose
  // failure it is (FailureCause::Killed for a kill from outside).
  void describeExit(int status, Measurement& failed) const;

  std::vector<std::string> command_;
  MeasurerOptions options_;
  int pid_ = -1;
  int toWorker_ = -1;
  int fromWorker_ = -1;
  std::string readBuffer_;
  int workersStarted_ = 0;
  std::shared_ptr<const CancellationToken> abort_;
  std::function<void(const std::string&)> waiting_;
  std::string lastHolder_;  // the last holder of the timing lock reported
  std::function<double(int)> loadProbe_;
};

}  // namespace collage
