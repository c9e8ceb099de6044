// Cost: nanoseconds as a double, tri-state as in TVM's Collage: a finite
// time, +inf for "cannot run" (invalid), NaN for "not known yet". Sums
// propagate both: anything + inf = inf, anything + NaN = NaN.
#pragma once

#include <cmath>
#include <limits>
#include <string>

namespace collage {

using Cost = double;

inline constexpr Cost kInvalidCost = std::numeric_limits<double>::infinity();
inline constexpr Cost kUnknownCost = std::numeric_limits<double>::quiet_NaN();

inline bool isInvalid(Cost c) { return std::isinf(c) && c > 0; }
inline bool isUnknown(Cost c) { return std::isnan(c); }
inline bool isKnown(Cost c) { return std::isfinite(c); }

// "1.234 ms", "56.0 us", "invalid", "unknown".
std::string costToString(Cost c);

}  // namespace collage
