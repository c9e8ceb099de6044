// `collage generate` on the ranks mpirun starts (docs/decoding.md): with
// --cache-parallel the cache split along the sequence (each rank attends
// over its rows, the ranks merge the partials), with --data-parallel each
// rank the whole generation on its own, with --tensor-parallel the step
// split by heads (two all-reduces a layer). Rank 0 prints the generation
// and the step's attention part, and stores the run (core/decode/
// decode_runs.h). A rank that fails stops the run, naming itself.
#pragma once

#ifdef COLLAGE_HAVE_MPI

#include "app/cli_generate_options.h"

namespace collage::cli {

// --cache-parallel, or --data-parallel (o.dataParallel).
int generateCacheParallel(const GenerateCommandOptions& o);
// --tensor-parallel.
int generateTensorParallel(const GenerateCommandOptions& o);

}  // namespace collage::cli

#endif  // COLLAGE_HAVE_MPI
