#include "core/pipeline/mpi_pipeline_runtime.h"

#include <mpi.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <deque>
#include <functional>
#include <thread>

#include "core/ir/error.h"
#include "core/pipeline/mpi_call.h"
#include "core/ir/threading.h"
#include "core/runtime/polling_wait.h"

namespace collage {
namespace {

// The CPUs this process may run on (what the launcher bound it to).
std::vector<int> allowedCpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}


int tagUpperBound() {
  void* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
  return found && value ? *static_cast<int*>(value) : 32767;  // the least MPI allows
}

// The tag of tensor `slot` of `slots` on one edge, for micro-batch m.
int tagOf(size_t m, size_t slot, size_t slots, int upperBound) {
  const size_t window = std::max<size_t>(1, (static_cast<size_t>(upperBound) + 1) / slots);
  return static_cast<int>((m % window) * slots + slot);
}

int byteCount(const Tensor& t, const std::string& name) {
  if (t.isSequence())
    throw Error("tensor '" + name + "' is a sequence; the MPI runtime sends tensors only, so far");
  if (t.byteSize() > static_cast<size_t>(INT_MAX))
    throw Error("tensor '" + name + "' has " + std::to_string(t.byteSize()) +
                " bytes, more than one MPI message carries (so far)");
  return static_cast<int>(t.byteSize());
}

// A buffer pointer MPI accepts for a tensor (an empty one has none).
void* bufferOf(Tensor& t) {
  static char none = 0;
  return t.raw() ? t.raw() : &none;
}

// Requests with a description each; wait() polls them until all complete or
// the deadline passes (then an Error naming the first one still pending).
class Pending {
 public:
  void add(MPI_Request request, std::string what, int expectedBytes) {
    requests_.push_back(request);
    what_.push_back(std::move(what));
    bytes_.push_back(expectedBytes);
  }
  bool empty() const { return requests_.empty(); }
  // Completes what has completed; true when nothing is pending.
  bool test() {
    bool all = true;
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (requests_[i] == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Status status;
      checkMpi(MPI_Test(&requests_[i], &done, &status), what_[i]);
      if (!done) {
        all = false;
        continue;
      }
      if (bytes_[i] >= 0) {  // a receive: the size must be the declared one
        int got = 0;
        MPI_Get_count(&status, MPI_BYTE, &got);
        if (got != bytes_[i])
          throw Error(what_[i] + ": got " + std::to_string(got) + " bytes, expected " +
                      std::to_string(bytes_[i]));
      }
    }
    if (all) clear();
    return all;
  }
  void wait(std::chrono::steady_clock::time_point deadline, double timeoutSeconds) {
    // Spin, then nap (polling_wait.h): the naps leave the cores to the
    // stages computing. The simulator models this wait (mpiWaitPolling()).
    if (pollUntil([this] { return test(); }, deadline, mpiWaitPolling())) return;
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (requests_[i] == MPI_REQUEST_NULL) continue;
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeoutSeconds);
      throw Error(what_[i] + ": nothing within " + seconds + " s (--mpi-timeout)");
    }
  }

 private:
  void clear() {
    requests_.clear();
    what_.clear();
    bytes_.clear();
  }
  std::vector<MPI_Request> requests_;
  std::vector<std::string> what_;
  std::vector<int> bytes_;  // expected bytes of a receive, -1 for a send
};

// A communicator of the run's own (so its tags meet no one else's) whose
// errors come back as codes, not as an abort with MPI's own message. Made
// with MPI_Comm_idup, so a rank that never comes fails the wait, not hangs it.
class Comm {
 public:
  Comm(std::chrono::steady_clock::time_point deadline, double timeoutSeconds,
       const std::string& who) {
    MPI_Request r;
    checkMpi(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &r), "MPI_Comm_idup");
    Pending p;
    p.add(r, who + ": waiting for every rank to start the run", -1);
    p.wait(deadline, timeoutSeconds);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~Comm() { MPI_Comm_free(&comm_); }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace

MpiScope::MpiScope() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiScope::~MpiScope() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Finalize();
}

void abortMpiRun(const std::string& message, int code) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

void checkRankCount(size_t stages, int ranks, const std::string& pipelineName) {
  if (static_cast<size_t>(ranks) == stages) return;
  throw Error(pipelineName + " has " + std::to_string(stages) +
              " stage(s), one per MPI rank, but the run has " + std::to_string(ranks) +
              " rank(s): start it with mpirun -n " + std::to_string(stages));
}

std::string MpiPipelineRuntime::stageName(size_t stage) const {
  return stageDisplayName(stage, wired_.at(stage).devices) + " (rank " + std::to_string(stage) +
         ")";
}

MpiPipelineRuntime::MpiPipelineRuntime(const Graph& graph, const StageGraph& stages,
                                       const Topology& topology,
                                       const StageBackendsFactory& backends,
                                       MpiPipelineOptions options)
    : graph_(graph), microBatch_(std::max(1, stages.microBatch)), options_(std::move(options)) {
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  checkRankCount(stages.stages.size(), size, "the pipeline");
  wired_ = wireStages(graph, stages, options_.plan, options_.backend);
  const WiredStage& mine = wired_[static_cast<size_t>(rank_)];
  threads_ = 0;
  for (const std::string& d : mine.devices) {
    const PipeDevice* device = topology.find(d);
    if (!device)
      throw Error("pipeline: stage " + std::to_string(rank_) + " runs on device \"" + d +
                  "\", which the topology does not list");
    if (device->kind != DeviceKind::Cpu)
      throw Error("pipeline: device \"" + d + "\" is a " + deviceKindName(device->kind) +
                  "; the MPI runtime runs CPU devices only, so far");
    threads_ += device->cores;
  }
  threads_ = std::max(1, threads_);
  // The whole process is this stage: its thread count and OpenMP team are
  // the stage's cores, before its kernels are compiled for them.
  setThisThreadCount(threads_);
  omp_set_num_threads(threads_);
  try {
    backends_ = backends();
    session_ = std::make_unique<Session>(*mine.graph, mine.plan, backends_);
  } catch (const Error& e) {
    throw Error("pipeline: " + stageName(static_cast<size_t>(rank_)) + ": " + e.what());
  }
}

MpiPipelineRuntime::~MpiPipelineRuntime() = default;

std::vector<std::vector<Tensor>> MpiPipelineRuntime::run(
    const std::vector<std::vector<Tensor>>& microBatches, PipelineRunReport* report) {
  using Clock = std::chrono::steady_clock;
  const size_t me = static_cast<size_t>(rank_);
  const WiredStage& stage = wired_[me];
  const size_t count = microBatches.size();
  const size_t numStages = wired_.size();
  const std::string myName = stageName(me);
  for (size_t m = 0; m < count; ++m)
    if (microBatches[m].size() != graph_.inputs().size())
      throw Error("pipeline: micro-batch " + std::to_string(m) + " has " +
                  std::to_string(microBatches[m].size()) + " inputs; " + graph_.name + " takes " +
                  std::to_string(graph_.inputs().size()));
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.timeoutSeconds));
  auto deadline = [&] { return Clock::now() + timeout; };
  auto inFlightOf = [&](size_t s) {
    return s < options_.inFlight.size() && options_.inFlight[s] > 0
               ? static_cast<size_t>(options_.inFlight[s])
               : size_t{2};
  };

  const std::string who = "pipeline: " + myName;
  Comm edges(deadline(), options_.timeoutSeconds, who),
      outputs(deadline(), options_.timeoutSeconds, who),
      control(deadline(), options_.timeoutSeconds, who);
  const int tagUb = tagUpperBound();

  // Every rank must stream the same number of micro-batches (a rank given
  // another --batch would otherwise wait on inputs no one sends).
  {
    long mine[2] = {static_cast<long>(count), -static_cast<long>(count)}, most[2] = {0, 0};
    MPI_Request r;
    checkMpi(MPI_Iallreduce(mine, most, 2, MPI_LONG, MPI_MAX, control.get(), &r), "MPI_Iallreduce");
    Pending p;
    p.add(r, "pipeline: " + myName + ": agreeing on the micro-batch count with the other ranks",
          -1);
    p.wait(deadline(), options_.timeoutSeconds);
    if (most[0] != -most[1])
      throw Error("pipeline: the ranks were given different numbers of micro-batches (" +
                  std::to_string(-most[1]) + " to " + std::to_string(most[0]) +
                  "): start every rank with the same --batch");
  }

  // What comes in on each edge: per slot, the stage input it fills.
  std::vector<std::vector<size_t>> slotInput(stage.inEdges.size());
  for (size_t i = 0; i < stage.inputs.size(); ++i) {
    const StageInputSource& src = stage.inputs[i];
    if (src.graphInput >= 0) continue;
    auto& slots = slotInput[src.edge];
    if (slots.size() <= src.slot) slots.resize(src.slot + 1);
    slots[src.slot] = i;
  }
  struct Incoming {
    std::vector<Tensor> tensors;  // per stage input (the edges' slots)
    Pending requests;
  };
  std::deque<Incoming> incoming;  // micro-batches next..next+inFlight-1
  size_t posted = 0;
  auto postReceives = [&](size_t m) {
    Incoming in;
    in.tensors.resize(stage.inputs.size());
    for (size_t e = 0; e < stage.inEdges.size(); ++e) {
      const size_t from = stage.inEdges[e];
      for (size_t slot = 0; slot < slotInput[e].size(); ++slot) {
        const size_t i = slotInput[e][slot];
        const Value& value = stage.graph->value(stage.graph->inputs()[i]);
        Tensor& t = in.tensors[i];
        t = Tensor(value.type);
        const int bytes = byteCount(t, value.name);
        MPI_Request r;
        checkMpi(MPI_Irecv(bufferOf(t), bytes, MPI_BYTE, static_cast<int>(from),
                        tagOf(m, slot, slotInput[e].size(), tagUb), edges.get(), &r),
              "MPI_Irecv");
        in.requests.add(r,
                        "pipeline: " + myName + " waiting for micro-batch " + std::to_string(m) +
                            "'s '" + value.name + "' from " + stageName(from),
                        bytes);
      }
    }
    incoming.push_back(std::move(in));
  };

  // The model's outputs, gathered on rank 0.
  const size_t numOutputs = graph_.outputs().size();
  std::vector<std::vector<Tensor>> results;
  Pending outputReceives;
  if (me == 0) {
    results.assign(count, std::vector<Tensor>(numOutputs));
    for (size_t s = 1; s < numStages; ++s)
      for (const auto& [position, index] : wired_[s].modelOutputs) {
        const Value& value = graph_.value(graph_.outputs()[index]);
        for (size_t m = 0; m < count; ++m) {
          Tensor& t = results[m][index];
          t = Tensor(value.type);
          const int bytes = byteCount(t, value.name);
          MPI_Request r;
          checkMpi(MPI_Irecv(bufferOf(t), bytes, MPI_BYTE, static_cast<int>(s),
                          tagOf(m, index, numOutputs, tagUb), outputs.get(), &r),
                "MPI_Irecv");
          outputReceives.add(r,
                             "pipeline: rank 0 waiting for micro-batch " + std::to_string(m) +
                                 "'s output '" + value.name + "' from " + stageName(s),
                             bytes);
        }
      }
  }

  // Sends in flight, oldest first, per out-edge (and to rank 0), with the
  // tensors they read kept alive until they complete.
  struct Outgoing {
    std::vector<Tensor> tensors;
    Pending requests;
  };
  std::vector<std::deque<Outgoing>> outgoing(stage.outEdges.size() + 1);

  // Start together, so each rank's clock starts at the same moment.
  {
    MPI_Request r;
    checkMpi(MPI_Ibarrier(control.get(), &r), "MPI_Ibarrier");
    Pending p;
    p.add(r, "pipeline: " + myName + ": waiting for every rank to be ready", -1);
    p.wait(deadline(), options_.timeoutSeconds);
  }
  const double t0 = MPI_Wtime();
  std::vector<double> starts(count, 0), finishes(count, 0);
  double busy = 0;
  // Blocked on another rank (a receive not yet in, a consumer's window full);
  // the rest outside Session::run is this rank's own hand-over work.
  double waiting = 0;
  auto timedWait = [&](Pending& p) {
    const double w0 = MPI_Wtime();
    p.wait(deadline(), options_.timeoutSeconds);
    waiting += MPI_Wtime() - w0;
  };

  const size_t window = inFlightOf(me);
  while (posted < count && posted < window) postReceives(posted++);
  std::vector<Tensor> inputs(stage.inputs.size());
  for (size_t m = 0; m < count; ++m) {
    Incoming in = std::move(incoming.front());
    incoming.pop_front();
    timedWait(in.requests);
    if (posted < count) postReceives(posted++);
    for (size_t i = 0; i < stage.inputs.size(); ++i) {
      const StageInputSource& src = stage.inputs[i];
      inputs[i] = src.graphInput >= 0 ? microBatches[m][static_cast<size_t>(src.graphInput)]
                                      : std::move(in.tensors[i]);
    }
    starts[m] = MPI_Wtime() - t0;
    std::vector<Tensor> out;
    try {
      out = session_->run(inputs);
    } catch (const std::exception& e) {
      throw Error("pipeline: " + myName + " failed on micro-batch " + std::to_string(m) + ": " +
                  e.what());
    }
    finishes[m] = MPI_Wtime() - t0;
    busy += finishes[m] - starts[m];

    auto send = [&](size_t lane, int to, MPI_Comm comm, const std::vector<size_t>& positions,
                    const std::vector<int>& tags, const std::string& toName) {
      Outgoing o;
      for (size_t k = 0; k < positions.size(); ++k) {
        Tensor t = out[positions[k]];
        const Value& value = stage.graph->value(stage.graph->outputs()[positions[k]]);
        if (!(t.type() == value.type))
          throw Error("pipeline: " + myName + " made '" + value.name + "' as " +
                      t.type().toString() + ", declared " + value.type.toString());
        const int bytes = byteCount(t, value.name);
        MPI_Request r;
        checkMpi(MPI_Isend(bufferOf(t), bytes, MPI_BYTE, to, tags[k], comm, &r), "MPI_Isend");
        o.tensors.push_back(std::move(t));
        o.requests.add(r,
                       "pipeline: " + myName + " sending micro-batch " + std::to_string(m) +
                           "'s '" + value.name + "' to " + toName,
                       -1);
      }
      outgoing[lane].push_back(std::move(o));
    };
    for (size_t e = 0; e < stage.outEdges.size(); ++e) {
      const StageSend& oe = stage.outEdges[e];
      // Back-pressure: at most the consumer's in-flight count unsent.
      while (outgoing[e].size() >= inFlightOf(oe.consumer)) {
        timedWait(outgoing[e].front().requests);
        outgoing[e].pop_front();
      }
      std::vector<int> tags;
      for (size_t k = 0; k < oe.outputs.size(); ++k)
        tags.push_back(tagOf(m, k, oe.outputs.size(), tagUb));
      send(e, static_cast<int>(oe.consumer), edges.get(), oe.outputs, tags,
           stageName(oe.consumer));
    }
    if (me == 0) {
      for (const auto& [position, index] : stage.modelOutputs)
        results[m][index] = out[position];
    } else if (!stage.modelOutputs.empty()) {
      std::vector<size_t> positions;
      std::vector<int> tags;
      for (const auto& [position, index] : stage.modelOutputs) {
        positions.push_back(position);
        tags.push_back(tagOf(m, index, numOutputs, tagUb));
      }
      send(stage.outEdges.size(), 0, outputs.get(), positions, tags, "rank 0");
    }
    // Let MPI move what it can, and free the sends that are done.
    for (auto& lane : outgoing)
      while (!lane.empty() && lane.front().requests.test()) lane.pop_front();
    outputReceives.test();
  }
  for (auto& lane : outgoing)
    for (auto& o : lane) timedWait(o.requests);
  timedWait(outputReceives);
  const double wallMine = MPI_Wtime() - t0;

  // Every stage's figures, on rank 0: busy time, micro-batches, threads, the
  // CPUs it may run on, the end of its run, then each micro-batch's start and
  // finish, its Session's peak bytes (for its memory), its time waiting.
  constexpr size_t kCpus = 64;
  const std::vector<int> cpus = allowedCpus();
  std::vector<double> mine;
  mine.push_back(busy);
  mine.push_back(static_cast<double>(count));
  mine.push_back(threads_);
  mine.push_back(wallMine);
  mine.push_back(static_cast<double>(std::min(cpus.size(), kCpus)));
  for (size_t c = 0; c < kCpus; ++c) mine.push_back(c < cpus.size() ? cpus[c] : -1);
  mine.insert(mine.end(), starts.begin(), starts.end());
  mine.insert(mine.end(), finishes.begin(), finishes.end());
  mine.push_back(static_cast<double>(session_->peakBytes()));
  mine.push_back(waiting);
  std::vector<double> all(me == 0 ? mine.size() * numStages : 0);
  {
    MPI_Request r;
    checkMpi(MPI_Igather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                      static_cast<int>(mine.size()), MPI_DOUBLE, 0, control.get(), &r),
          "MPI_Igather");
    Pending p;
    p.add(r, "pipeline: " + myName + ": gathering the stages' figures", -1);
    p.wait(deadline(), options_.timeoutSeconds);
  }
  if (me != 0 || !report) return results;

  PipelineRunReport rep;
  rep.microBatches = static_cast<int>(count);
  rep.microBatch = microBatch_;
  const size_t stride = mine.size(), head = 5 + kCpus;
  double wall = 0;
  for (size_t s = 0; s < numStages; ++s) wall = std::max(wall, all[s * stride + 3]);
  rep.wallSeconds = wall;
  rep.samplesPerSecond = wall > 0 ? static_cast<double>(count) * microBatch_ / wall : 0;
  std::vector<double> latencies;
  for (size_t m = 0; m < count; ++m) {
    double first = all[head + m], last = all[head + count + m];
    for (size_t s = 1; s < numStages; ++s) {
      first = std::min(first, all[s * stride + head + m]);
      last = std::max(last, all[s * stride + head + count + m]);
    }
    latencies.push_back(last - first);
  }
  std::sort(latencies.begin(), latencies.end());
  if (!latencies.empty()) {
    rep.medianLatencySeconds = latencies[latencies.size() / 2];
    rep.maxLatencySeconds = latencies.back();
  }
  for (size_t s = 0; s < numStages; ++s) {
    const double* f = &all[s * stride];
    StageRunReport sr;
    sr.devices = wired_[s].devices;
    for (size_t c = 0; c < static_cast<size_t>(f[4]); ++c)
      sr.cpus.push_back(static_cast<int>(f[5 + c]));
    sr.threads = static_cast<int>(f[2]);
    sr.groups = static_cast<int>(wired_[s].plan.groups.size());
    sr.busySeconds = f[0];
    sr.busyShare = wall > 0 ? f[0] / wall : 0;
    sr.microBatches = static_cast<int64_t>(f[1]);
    sr.waitSeconds = f[stride - 1];
    for (size_t m = 0; m < static_cast<size_t>(f[1]); ++m)
      sr.microBatchSeconds.push_back(f[head + count + m] - f[head + m]);
    sr.handOverSeconds = std::max(0.0, f[3] - f[0] - f[stride - 1]);
    const StageMemory memory = stageMemoryOf(wired_[s], static_cast<size_t>(f[stride - 2]),
                                             static_cast<int>(inFlightOf(s)));
    sr.weightBytes = memory.weightBytes;
    sr.activationBytes = memory.activationBytes;
    rep.stages.push_back(std::move(sr));
  }
  *report = std::move(rep);
  return results;
}

}  // namespace collage
