// The MPI pipeline runtime: each stage of a StageGraph in its own MPI rank
// (one process per device; rank r runs stage r), micro-batches streamed
// through them as messages. Built only where CMake finds MPI
// (core/CMakeLists.txt: the collage_mpi library, COLLAGE_HAVE_MPI).
//
//   rank 0: [stage 0] ─Isend─▶ rank 2: [stage 2] ─▶ outputs ─▶ rank 0
//       └─────────────Isend─▶ rank 1: [stage 1] ─┘
//
// How (and why this way):
//  - Every rank wires the whole pipeline the same way (wireStages, as the
//    in-process runtime does), so both ends of an edge agree on its tensors
//    and their order with no handshake; a rank compiles only its own stage's
//    Session.
//  - One message per (micro-batch, tensor): tag = micro-batch * tensors on
//    the edge + slot, taken modulo what MPI_TAG_UB allows (MPI keeps the
//    messages between two ranks in order, so a tag reused much later still
//    pairs with the right receive). Shapes are static, so a receiver knows
//    each tensor's size and receives straight into a fresh tensor.
//  - Non-blocking (MPI_Isend / MPI_Irecv): a stage posts the receives of its
//    next in-flight micro-batches (MicroBatchSchedule's count) before it
//    computes, and its sends complete while it computes the next; a sender
//    keeps at most its consumer's in-flight count of micro-batches unsent.
//    The micro-batches go in order through every stage, as in process.
//  - The model's outputs are sent to rank 0 (on a communicator of their
//    own), which returns them; every rank is given the model's inputs
//    (the CLI makes them from the seed on every rank) and reads those its
//    stage needs.
//  - Every wait has a deadline (`timeoutSeconds`): a peer that sends nothing
//    fails the run with an Error naming the stage, the micro-batch and the
//    tensor waited for, never a hang. A rank that fails calls abortMpiRun
//    (MPI_Abort): the launcher then stops the other ranks.
//  - The rank's thread count is its stage's cores; binding the process to
//    cores is the launcher's (mpirun --bind-to core, srun --cpu-bind).
#pragma once

#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"
#include "core/pipeline/pipeline_runtime.h"
#include "core/pipeline/stage_partitioner.h"
#include "core/pipeline/stage_wiring.h"
#include "core/pipeline/topology.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage {

// MPI_Init_thread (funneled: only the calling thread talks MPI) for a scope,
// MPI_Finalize at its end (unless the run was aborted).
class MpiScope {
 public:
  MpiScope();
  ~MpiScope();
  MpiScope(const MpiScope&) = delete;
  MpiScope& operator=(const MpiScope&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

// Prints `message` on stderr and stops every rank of the run (MPI_Abort with
// `code`): what a rank does when it fails, so that no other rank waits on it.
[[noreturn]] void abortMpiRun(const std::string& message, int code);

// Error unless the run has one rank per stage ("p.json has 2 stage(s), one
// per MPI rank, but the run has 3 rank(s): start it with mpirun -n 2").
void checkRankCount(size_t stages, int ranks, const std::string& pipelineName);

struct MpiPipelineOptions {
  // As PipelineRuntimeOptions: the model's plan or one backend for every
  // stage, and each stage's in-flight count (missing or < 1: 2).
  const Plan* plan = nullptr;
  std::string backend;
  std::vector<int> inFlight;
  // The longest any wait for a peer may take, in seconds.
  double timeoutSeconds = 120;
};

class MpiPipelineRuntime {
 public:
  // Called on every rank with the same arguments (the same `graph` at the
  // micro-batch's shapes, outliving the runtime). Wires every stage, builds
  // this rank's stage's Session (with its devices' cores as threads).
  // Error from checkRankCount, or naming the stage as PipelineRuntime's.
  MpiPipelineRuntime(const Graph& graph, const StageGraph& stages, const Topology& topology,
                     const StageBackendsFactory& backends, MpiPipelineOptions options);
  ~MpiPipelineRuntime();
  MpiPipelineRuntime(const MpiPipelineRuntime&) = delete;
  MpiPipelineRuntime& operator=(const MpiPipelineRuntime&) = delete;

  // Called on every rank with the same micro-batches (each: the graph's
  // inputs in graph.inputs() order). On rank 0 returns each micro-batch's
  // outputs (graph.outputs() order) and fills `report` (optional) with every
  // stage's figures; elsewhere returns nothing. Error naming the stage, its
  // rank, the micro-batch and the tensor when a stage fails or a wait runs
  // past the deadline; the caller then calls abortMpiRun.
  std::vector<std::vector<Tensor>> run(const std::vector<std::vector<Tensor>>& microBatches,
                                       PipelineRunReport* report = nullptr);

  int rank() const { return rank_; }
  size_t stageCount() const { return wired_.size(); }
  // "stage 1 [cpu1] (rank 1)".
  std::string stageName(size_t stage) const;

 private:
  const Graph& graph_;
  int rank_ = 0;
  int microBatch_ = 1;
  int threads_ = 1;
  std::vector<WiredStage> wired_;
  BackendLookup backends_;
  std::unique_ptr<Session> session_;
  MpiPipelineOptions options_;
};

}  // namespace collage
