// Comparing tensors as ONNX's test suite does: |actual - expected| <=
// atol + rtol * |expected| element by element (NaN equals NaN), exact for
// integers and bools. Used by the conformance runner, `collage run --expect`
// and every backend-vs-reference check.
//
// compareScaled is the plan check's rule (core/measure/plan_check.h,
// docs/measurement.md "The tolerance rule"): an output's largest error as a
// fraction of its largest |expected value|.
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
  // compareScaled only: the output's largest finite |expected value|, and
  // maxAbsError over it (maxAbsError itself where that is 0).
  double scale = 0;
  double scaledError = 0;
};

CompareResult compareTensors(const Tensor& actual, const Tensor& expected,
                             Tolerance tolerance = {});

// Floats: ok when max_i |actual_i - expected_i| <= bound * max_i |expected_i|
// (NaN equals NaN, an infinity only itself, a NaN or infinity against a
// finite value is an infinite error); mismatches counts the elements beyond
// that. Integers and bools: exact.
CompareResult compareScaled(const Tensor& actual, const Tensor& expected, double bound);

}  // namespace collage
