// The exchange cache parallelism needs between MPI ranks (docs/decoding.md):
// every rank's block of floats to every rank, with a deadline on each wait.
// Built only where CMake finds MPI (the collage_mpi library).
//
// Why point-to-point messages and not MPI_Allgather: a collective that a
// rank never joins cannot be timed out, nor say who is missing; one receive
// per peer polled against a deadline names the rank that sent nothing
// ("cache parallel: rank 0: nothing from rank 1 within 2 s"). MPI keeps the
// messages between two ranks in order, so one tag per exchange, modulo what
// MPI_TAG_UB allows, pairs them.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace collage {

class MpiCacheExchange {
 public:
  // Called on every rank of MPI_COMM_WORLD (MPI initialised, MpiScope):
  // a communicator of its own, made within the deadline. `label` starts its
  // messages ("cache parallel: rank 0: ..."; tensor parallelism's all-reduce
  // says "tensor parallel").
  explicit MpiCacheExchange(double timeoutSeconds, std::string label = "cache parallel");
  ~MpiCacheExchange();
  MpiCacheExchange(const MpiCacheExchange&) = delete;
  MpiCacheExchange& operator=(const MpiCacheExchange&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Every rank's `mine` (each the same length), in rank order. Error naming
  // this rank, `what` and the first peer that sent nothing (or a block of
  // another length) within the deadline.
  std::vector<float> allGather(const std::vector<float>& mine, const std::string& what);
  // Error naming the ranks whose `values` differ from rank 0's ("the ranks
  // were given different WHAT: rank 1's differ from rank 0's").
  void requireSame(const std::vector<int64_t>& values, const std::string& what);

 private:
  // Waits for `requests` (peers[i] the rank of request i) until the deadline.
  void wait(std::vector<MPI_Request>& requests, const std::vector<int>& peers,
            const std::vector<bool>& receives, const std::string& what);
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeoutSeconds_ = 120;
  std::string label_;
  int tagUpperBound_ = 32767;
  uint64_t exchanges_ = 0;
};

}  // namespace collage
