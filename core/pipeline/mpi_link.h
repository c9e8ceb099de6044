// The link between two MPI ranks, measured: ranks 0 and 1 ping-pong messages
// of linkMessageSizes() (link_measurement.h), with the non-blocking calls
// the MPI runtime sends activations with (MPI_Isend / MPI_Irecv, then wait).
// Other ranks only wait. Part of the collage_mpi library (core/CMakeLists.txt).
#pragma once

#include <string>
#include <vector>

#include "core/pipeline/link_measurement.h"

namespace collage {

struct MpiLinkMeasurement {
  std::vector<LinkSample> samples;  // rank 0's; empty on other ranks
  // "mpi" when both ranks run on one host, "mpi-nodes" otherwise.
  std::string transport;
  std::string endpoints;  // "host|host" (MPI_Get_processor_name)
};

// Collective over MPI_COMM_WORLD (MPI initialised: MpiScope). Error unless
// the run has at least two ranks.
MpiLinkMeasurement pingPongMpi(int rounds);

}  // namespace collage
