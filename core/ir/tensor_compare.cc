#include "core/ir/tensor_compare.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace collage {

CompareResult compareTensors(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  CompareResult r;
  if (actual.type() != expected.type()) {
    r.ok = false;
    r.message = "type " + actual.type().toString() + " differs from expected " +
                expected.type().toString();
    return r;
  }
  const int64_t n = actual.numElements();
  if (isFloatingPoint(actual.elementType()) && actual.elementType() != ElementType::Float16 &&
      actual.elementType() != ElementType::BFloat16) {
    const bool f32 = actual.elementType() == ElementType::Float32;
    for (int64_t i = 0; i < n; ++i) {
      double a = f32 ? actual.data<float>()[i] : actual.data<double>()[i];
      double e = f32 ? expected.data<float>()[i] : expected.data<double>()[i];
      if (std::isnan(a) && std::isnan(e)) continue;
      if (std::isinf(e) && a == e) continue;
      double diff = std::fabs(a - e);
      if (std::isnan(diff)) diff = INFINITY;
      r.maxAbsError = std::max(r.maxAbsError, diff);
      if (e != 0) r.maxRelError = std::max(r.maxRelError, diff / std::fabs(e));
      if (!(diff <= tol.atol + tol.rtol * std::fabs(e))) {
        if (r.firstBadIndex < 0) {
          r.firstBadIndex = i;
          std::ostringstream os;
          os << "element " << i << ": got " << a << ", expected " << e;
          r.message = os.str();
        }
        ++r.mismatches;
      }
    }
  } else {
    std::vector<int64_t> a = actual.toInts(), e = expected.toInts();
    for (int64_t i = 0; i < n; ++i) {
      if (a[i] == e[i]) continue;
      if (r.firstBadIndex < 0) {
        r.firstBadIndex = i;
        r.message = "element " + std::to_string(i) + ": got " + std::to_string(a[i]) +
                    ", expected " + std::to_string(e[i]);
      }
      ++r.mismatches;
    }
  }
  if (r.mismatches) {
    r.ok = false;
    std::ostringstream os;
    os << r.mismatches << " of " << n << " elements differ (max abs error " << r.maxAbsError
       << ", max rel error " << r.maxRelError << "); first: " << r.message;
    r.message = os.str();
  }
  return r;
}

CompareResult compareScaled(const Tensor& actual, const Tensor& expected, double bound) {
  if (actual.type() != expected.type() || !isFloatingPoint(expected.elementType()))
    return compareTensors(actual, expected, Tolerance{0, 0});
  const std::vector<double> a = actual.toDoubles(), e = expected.toDoubles();
  CompareResult r;
  for (double x : e)
    if (std::isfinite(x)) r.scale = std::max(r.scale, std::fabs(x));
  std::vector<double> diff(a.size(), 0);
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(e[i])) continue;
    if (std::isinf(e[i]) && a[i] == e[i]) continue;
    diff[i] = std::fabs(a[i] - e[i]);
    if (std::isnan(diff[i]) || !std::isfinite(e[i])) diff[i] = INFINITY;
    r.maxAbsError = std::max(r.maxAbsError, diff[i]);
    if (e[i] != 0) r.maxRelError = std::max(r.maxRelError, diff[i] / std::fabs(e[i]));
  }
  r.scaledError = r.scale > 0 ? r.maxAbsError / r.scale : r.maxAbsError;
  const double allowed = bound * r.scale;
  for (size_t i = 0; i < diff.size(); ++i) {
    if (diff[i] <= allowed) continue;
    if (r.firstBadIndex < 0) r.firstBadIndex = static_cast<int64_t>(i);
    ++r.mismatches;
  }
  if (r.mismatches) {
    r.ok = false;
    const size_t i = static_cast<size_t>(r.firstBadIndex);
    std::ostringstream os;
    os << r.mismatches << " of " << a.size() << " elements differ by more than " << bound
       << " of the largest |expected value| (" << r.scale << "): max abs error " << r.maxAbsError
       << ", " << r.scaledError << " of that; first: element " << i << ": got " << a[i]
       << ", expected " << e[i];
    r.message = os.str();
  }
  return r;
}

}  // namespace collage
