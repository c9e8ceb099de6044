#include "core/ops/broadcast.h"

#include "core/ir/error.h"

namespace collage {

StridedPlan makeStridedPlan(const Shape& out, std::vector<std::vector<int64_t>> strides) {
  StridedPlan plan;
  plan.total = numElements(out);
  const size_t k = strides.size();
  plan.strides.assign(k, {});
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;  // contributes nothing to any offset
    const bool mergeable = !plan.dims.empty() && [&] {
      for (size_t i = 0; i < k; ++i)
        if (plan.strides[i].back() != strides[i][d] * out[d]) return false;
      return true;
    }();
    if (mergeable) {
      plan.dims.back() *= out[d];
      for (size_t i = 0; i < k; ++i) plan.strides[i].back() = strides[i][d];
    } else {
      plan.dims.push_back(out[d]);
      for (size_t i = 0; i < k; ++i) plan.strides[i].push_back(strides[i][d]);
    }
  }
  if (plan.dims.empty()) {
    plan.dims.push_back(1);
    for (auto& s : plan.strides) s.push_back(0);
  }
  return plan;
}

std::vector<int64_t> broadcastStrides(const Shape& in, const Shape& out) {
  COLLAGE_CHECK(in.size() <= out.size(), "broadcast input has a higher rank than its output");
  std::vector<int64_t> strides(out.size(), 0);
  const size_t offset = out.size() - in.size();
  int64_t s = 1;
  for (size_t i = in.size(); i-- > 0;) {
    COLLAGE_CHECK(in[i] == out[offset + i] || in[i] == 1, "shapes do not broadcast");
    strides[offset + i] = in[i] == 1 ? 0 : s;
    s *= in[i];
  }
  return strides;
}

StridedPlan makeBroadcastPlan(const Shape& out, const std::vector<Shape>& inputs) {
  std::vector<std::vector<int64_t>> strides;
  strides.reserve(inputs.size());
  for (const Shape& in : inputs) strides.push_back(broadcastStrides(in, out));
  return makeStridedPlan(out, std::move(strides));
}

namespace {
template <class T>
void copyStridedTyped(const StridedPlan& plan, const T* src, T* dst) {
  const int64_t s = plan.innerStride(0);
  forEachRow(plan, [&](int64_t o, const int64_t* in, int64_t n) {
    const T* x = src + in[0];
    T* y = dst + o;
    if (s == 1) {
      std::memcpy(y, x, static_cast<size_t>(n) * sizeof(T));
    } else if (s == 0) {
      const T v = *x;
      for (int64_t j = 0; j < n; ++j) y[j] = v;
    } else {
      for (int64_t j = 0; j < n; ++j) y[j] = x[j * s];
    }
  });
}
}  // namespace

void copyStrided(const StridedPlan& plan, const void* src, int64_t srcBase, void* dst,
                 size_t elemSize) {
  switch (elemSize) {
    case 1:
      copyStridedTyped(plan, static_cast<const uint8_t*>(src) + srcBase,
                       static_cast<uint8_t*>(dst));
      break;
    case 2:
      copyStridedTyped(plan, static_cast<const uint16_t*>(src) + srcBase,
                       static_cast<uint16_t*>(dst));
      break;
    case 4:
      copyStridedTyped(plan, static_cast<const uint32_t*>(src) + srcBase,
                       static_cast<uint32_t*>(dst));
      break;
    case 8:
      copyStridedTyped(plan, static_cast<const uint64_t*>(src) + srcBase,
                       static_cast<uint64_t*>(dst));
      break;
    default:
      COLLAGE_CHECK(false, "copyStrided: unsupported element size " + std::to_string(elemSize));
  }
}

}  // namespace collage
