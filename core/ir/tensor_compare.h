// Comparing tensors as ONNX's test suite does: |actual - expected| <=
// atol + rtol * |expected| element by element (NaN equals NaN), exact for
// integers and bools. Used by the conformance runner, `collage run --expect`
// and every backend-vs-reference check.
#pragma once

#include <string>

#include "core/ir/tensor.h"

namespace collage {

struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-7;
};

struct CompareResult {
  bool ok = true;
  double maxAbsError = 0;
  double maxRelError = 0;
  int64_t mismatches = 0;
  int64_t firstBadIndex = -1;
  std::string message;  // empty when ok; else why, with the first bad element
};

CompareResult compareTensors(const Tensor& actual, const Tensor& expected,
                             Tolerance tolerance = {});

}  // namespace collage
