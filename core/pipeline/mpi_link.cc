#include "core/pipeline/mpi_link.h"

#include <mpi.h>

#include <algorithm>
#include <vector>

#include "core/ir/error.h"
#include "core/pipeline/mpi_call.h"

namespace collage {
namespace {

void check(int rc, const char* what) { checkMpi(rc, std::string("link measurement: ") + what); }

// One message from `from` to `to` (tag 7), each side waiting as the runtime does.
void exchange(std::vector<char>& buffer, int self, int from, int to) {
  MPI_Request request;
  const int count = static_cast<int>(buffer.size());
  if (self == from) {
    check(MPI_Isend(buffer.data(), count, MPI_BYTE, to, 7, MPI_COMM_WORLD, &request), "MPI_Isend");
  } else {
    check(MPI_Irecv(buffer.data(), count, MPI_BYTE, from, 7, MPI_COMM_WORLD, &request), "MPI_Irecv");
  }
  check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
}

}  // namespace

MpiLinkMeasurement pingPongMpi(int rounds) {
  rounds = std::max(1, rounds);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2)
    throw Error("link measurement: --mpi needs two ranks (mpirun -n 2), the run has " +
                std::to_string(size));
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME, 0);
  check(MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                   MPI_CHAR, 0, MPI_COMM_WORLD),
        "MPI_Gather");
  MpiLinkMeasurement out;
  for (size_t bytes : linkMessageSizes()) {
    std::vector<char> buffer(bytes, static_cast<char>(rank));
    std::vector<double> trips;
    for (int r = -1; r < rounds; ++r) {  // r = -1: warm-up
      if (rank > 1) continue;
      const double t0 = MPI_Wtime();
      exchange(buffer, rank, 0, 1);
      exchange(buffer, rank, 1, 0);
      if (r >= 0) trips.push_back(MPI_Wtime() - t0);
    }
    if (rank == 0) {
      std::sort(trips.begin(), trips.end());
      out.samples.push_back({static_cast<double>(bytes), trips[trips.size() / 2] / 2});
    }
  }
  check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  if (rank == 0) {
    const std::string a(names.data()), b(names.data() + MPI_MAX_PROCESSOR_NAME);
    out.transport = a == b ? "mpi" : "mpi-nodes";
    out.endpoints = a + "|" + b;
  }
  return out;
}

}  // namespace collage
