// Plan JSON (core/plan/plan): any text either parses as a plan or is refused
// with an Error naming the field; a plan that parses is then checked
// against a model (a small committed one) the way `collage run --plan` does,
// which refuses or accepts it with a message, never crashes. A parsed plan
// also survives a round trip through its own JSON.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/onnx/onnx_import.h"
#include "core/plan/plan.h"
#include "tests/fuzz/fuzz_support.h"

namespace {
const collage::Graph& model() {
  static const collage::Graph graph =
      collage::importOnnx(COLLAGE_SOURCE_DIR "/resources/models/dcgan_small.onnx");
  return graph;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Plan plan;
  try {
    plan = planFromJson(text, "fuzz.plan.json");
  } catch (const Error&) {
    return 0;
  }
  const std::string json = planToJson(plan);
  try {
    COLLAGE_FUZZ_ASSERT(planToJson(planFromJson(json, "fuzz.plan.json")) == json,
                        "a parsed plan survives a round trip through its JSON");
  } catch (const Error&) {
    COLLAGE_FUZZ_ASSERT(false, "a parsed plan's own JSON parses");
  }
  try {
    checkPlanAgainst(plan, model(), "dcgan_small.onnx",
                     {{"onednn", ""}, {"openblas", ""}, {"native", ""}});
  } catch (const Error&) {
  }
  return 0;
}
