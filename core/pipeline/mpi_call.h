// An MPI call's status as an Error that says which call failed and MPI's own
// words for why, shared by every file that talks MPI (the pipeline's
// runtime, the link measurement, the decode cache exchange).
#pragma once

#include <mpi.h>

#include <string>

#include "core/ir/error.h"

namespace collage {

inline void checkMpi(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(what + ": " + std::string(text, static_cast<size_t>(length)));
}

}  // namespace collage
