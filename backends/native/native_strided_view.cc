#include "backends/native/native_strided_view.h"

#include <sstream>

namespace collage::native {

std::string StridedView::toString() const {
  std::ostringstream s;
  for (size_t i = 0; i < dims.size(); ++i) s << (i ? "," : "[") << dims[i] << ":" << strides[i];
  s << "]";
  return s.str();
}

StridedView contiguous(const Shape& shape) {
  StridedView v{shape, std::vector<int64_t>(shape.size(), 1)};
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    v.strides[i] = v.strides[i + 1] * shape[i + 1];
  return v;
}

std::optional<StridedView> reshapeView(const StridedView& in, const Shape& dims) {
  std::vector<int64_t> od, os;
  for (size_t i = 0; i < in.dims.size(); ++i)
    if (in.dims[i] != 1) od.push_back(in.dims[i]), os.push_back(in.strides[i]);
  StridedView out{dims, std::vector<int64_t>(dims.size(), 0)};
  const size_t ond = od.size(), nnd = dims.size();
  size_t oi = 0, oj = 1, ni = 0, nj = 1;
  while (ni < nnd && oi < ond) {
    int64_t np = dims[ni], op = od[oi];
    while (np != op) {
      if (np < op) {
        if (nj >= nnd) return std::nullopt;
        np *= dims[nj++];
      } else {
        if (oj >= ond) return std::nullopt;
        op *= od[oj++];
      }
    }
    for (size_t ok = oi; ok + 1 < oj; ++ok)
      if (os[ok] != od[ok + 1] * os[ok + 1]) return std::nullopt;
    out.strides[nj - 1] = os[oj - 1];
    for (size_t nk = nj - 1; nk > ni; --nk) out.strides[nk - 1] = out.strides[nk] * dims[nk];
    ni = nj++;
    oi = oj++;
  }
  // Leftover new dims are 1s (their stride is never used).
  for (; ni < nnd; ++ni)
    if (dims[ni] != 1) return std::nullopt;
  if (oi < ond) return std::nullopt;
  return out;
}

StridedView transposeView(const StridedView& in, const std::vector<int64_t>& perm) {
  StridedView out{in.dims, in.strides};
  for (size_t i = 0; i < perm.size(); ++i) {
    out.dims[i] = in.dims[static_cast<size_t>(perm[i])];
    out.strides[i] = in.strides[static_cast<size_t>(perm[i])];
  }
  return out;
}

std::optional<StridedView> asBatched4d(StridedView v, const int64_t batch[2]) {
  if (v.dims.size() > 4) return std::nullopt;
  while (v.dims.size() < 4) v.dims.insert(v.dims.begin(), 1), v.strides.insert(v.strides.begin(), 0);
  for (int i = 0; i < 2; ++i) {
    if (v.dims[i] == batch[i]) continue;
    if (v.dims[i] != 1) return std::nullopt;
    v.dims[i] = batch[i];
    v.strides[i] = 0;
  }
  return v;
}

std::optional<StridedView> broadcastTo(StridedView v, const std::vector<int64_t>& dims4) {
  if (v.dims.size() > 4) return std::nullopt;
  while (v.dims.size() < 4) v.dims.insert(v.dims.begin(), 1), v.strides.insert(v.strides.begin(), 0);
  for (size_t i = 0; i < 4; ++i) {
    if (v.dims[i] == dims4[i]) {
      if (v.dims[i] == 1) v.strides[i] = 0;
      continue;
    }
    if (v.dims[i] != 1) return std::nullopt;
    v.dims[i] = dims4[i];
    v.strides[i] = 0;
  }
  return v;
}

}  // namespace collage::native
