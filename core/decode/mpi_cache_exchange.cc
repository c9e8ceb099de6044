// MpiCacheExchange (mpi_cache_exchange.h): an all-gather of point-to-point
// messages, each wait against a deadline.
#include "core/decode/mpi_cache_exchange.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/ir/error.h"
#include "core/pipeline/mpi_call.h"
#include "core/runtime/polling_wait.h"

namespace collage {

namespace {


std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

}  // namespace

MpiCacheExchange::MpiCacheExchange(double timeoutSeconds, std::string label)
    : timeoutSeconds_(timeoutSeconds), label_(std::move(label)) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  void* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
  if (found && value) tagUpperBound_ = *static_cast<int*>(value);
  // A word from every rank on the world first, so that a rank that never
  // starts is named; then a communicator of the exchange's own (its tags
  // meet no one else's), by MPI_Comm_idup, under the same deadline.
  comm_ = MPI_COMM_WORLD;
  allGather({static_cast<float>(rank_)}, "waiting for every rank to start");
  comm_ = MPI_COMM_NULL;
  std::vector<MPI_Request> r(1);
  checkMpi(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &r[0]), "MPI_Comm_idup");
  wait(r, {-1}, {false}, "waiting for every rank to start");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  exchanges_ = 0;
}

MpiCacheExchange::~MpiCacheExchange() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCacheExchange::wait(std::vector<MPI_Request>& requests, const std::vector<int>& peers,
                            const std::vector<bool>& receives, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeoutSeconds_));
  // Spin, then nap (polling_wait.h): the peers' answer is a link's latency
  // away once they reach the exchange.
  auto test = [&] {
    bool all = true;
    for (MPI_Request& r : requests) {
      if (r == MPI_REQUEST_NULL) continue;
      int done = 0;
      checkMpi(MPI_Test(&r, &done, MPI_STATUS_IGNORE),
            label_ + ": rank " + std::to_string(rank_) + ": " + what);
      if (!done) all = false;
    }
    return all;
  };
  if (pollUntil(test, deadline, mpiWaitPolling())) return;
  std::string who;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    who = peers[i] < 0 ? "the other ranks"
                       : (receives[i] ? "nothing from rank " : "rank ") +
                             std::to_string(peers[i]) + (receives[i] ? "" : " took nothing");
    break;
  }
  throw Error(label_ + ": rank " + std::to_string(rank_) + ": " + what + ": " + who +
              " within " + seconds(timeoutSeconds_) + " s (--mpi-timeout)");
}

std::vector<float> MpiCacheExchange::allGather(const std::vector<float>& mine,
                                               const std::string& what) {
  const size_t n = mine.size();
  std::vector<float> all(n * static_cast<size_t>(size_));
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(n) * rank_);
  if (size_ == 1) return all;
  const int tag = static_cast<int>(exchanges_++ % (static_cast<uint64_t>(tagUpperBound_) + 1));
  if (n > static_cast<size_t>(INT32_MAX))
    throw Error(label_ + ": " + what + ": too many floats for one MPI message");
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  std::vector<bool> receives;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    MPI_Request r;
    checkMpi(MPI_Irecv(all.data() + n * static_cast<size_t>(p), static_cast<int>(n), MPI_FLOAT, p, tag,
                    comm_, &r),
          "MPI_Irecv");
    requests.push_back(r);
    peers.push_back(p);
    receives.push_back(true);
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    MPI_Request r;
    checkMpi(MPI_Isend(mine.data(), static_cast<int>(n), MPI_FLOAT, p, tag, comm_, &r), "MPI_Isend");
    requests.push_back(r);
    peers.push_back(p);
    receives.push_back(false);
  }
  wait(requests, peers, receives, what);
  return all;
}

void MpiCacheExchange::requireSame(const std::vector<int64_t>& values, const std::string& what) {
  // Lengths first (as floats would lose bits: the values travel as two
  // 32-bit halves each, reinterpreted).
  std::vector<float> mine(values.size() * 2 + 1);
  mine[0] = static_cast<float>(values.size());
  std::memcpy(mine.data() + 1, values.data(), values.size() * sizeof(int64_t));
  std::vector<float> lengths = allGather({mine[0]}, "comparing the ranks' " + what);
  for (int p = 0; p < size_; ++p)
    if (lengths[static_cast<size_t>(p)] != mine[0])
      throw Error(label_ + ": the ranks were given different " + what + ": rank " +
                  std::to_string(p) + "'s differ from rank " + std::to_string(rank_) + "'s");
  const std::vector<float> all = allGather(mine, "comparing the ranks' " + what);
  for (int p = 0; p < size_; ++p)
    if (std::memcmp(all.data() + mine.size() * static_cast<size_t>(p), mine.data(),
                    mine.size() * sizeof(float)) != 0)
      throw Error(label_ + ": the ranks were given different " + what + ": rank " +
                  std::to_string(p) + "'s differ from rank " + std::to_string(rank_) + "'s");
}

}  // namespace collage
