// The options of `collage generate` and the report every generate prints:
// shared by the command on one device (cli_generate.cc) and its runs on MPI
// ranks (cli_generate_ranks.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/decode/decoder.h"
#include "core/decode/tokenizer.h"
#include "core/measure/measurement_db.h"

namespace collage::cli {

struct GenerateCommandOptions {
  std::string modelPath;
  std::string plan;
  std::string prefillPlan;
  std::vector<int64_t> promptIds;
  std::string promptText;  // --prompt: encoded with `tokenizer`
  std::string tokenizerPath;
  std::shared_ptr<Tokenizer> tokenizer;  // the model's, when there is one
  int64_t maxLength = 0;
  GenerateOptions generate;
  int64_t eos = -1;
  bool printBindings = false;
  bool printPrefillBindings = false;
  std::string logitsOut;
  bool cacheParallel = false;
  bool dataParallel = false;  // every rank the whole generation, on its own
  bool tensorParallel = false;
  double mpiTimeout = 120;
  // A run on ranks is stored here by rank 0 (core/decode/decode_runs.h).
  std::string db = MeasurementDb::defaultPath();
  bool noDb = false;
  // No prompt's pass: the cache's rows filled directly, seeded (--fill-rows)
  // or from a past tensor per input (--cache-in), then the steps from there.
  int64_t fillRows = -1;
  uint64_t fillSeed = 1;
  std::vector<std::string> cacheIn;
  std::string fillWhat;  // how they were filled, for the report
  double fillMs = 0;
};

// The generation's report (what every generate prints).
void printGeneration(const GenerateCommandOptions& o, const Decoder& decoder, const Generation& g,
                     const std::string& runner, const std::string& prefillRunner = "");

}  // namespace collage::cli
