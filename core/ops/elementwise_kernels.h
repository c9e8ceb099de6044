// Generic loops behind the elementwise and broadcast reference kernels. They
// are templates over the element types and the scalar function so that the
// float32 paths compile to simple, vectorisable loops.
#pragma once

#include <cstdint>

#include "core/ops/broadcast.h"
#include "core/ir/tensor.h"

namespace collage {

// out = f(a, b) with numpy broadcasting; out is allocated with the broadcast
// shape. `a` may alias `out` (same shape), which lets variadic ops fold in place.
template <class A, class B, class O, class F>
void broadcastBinary(const Tensor& a, const Tensor& b, Tensor& out, F&& f) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  O* po = out.data<O>();
  if (a.shape() == out.shape() && b.shape() == out.shape()) {
    const int64_t n = out.numElements();
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    return;
  }
  const StridedPlan plan = makeBroadcastPlan(out.shape(), {a.shape(), b.shape()});
  const int64_t sa = plan.innerStride(0), sb = plan.innerStride(1);
  forEachRow(plan, [&](int64_t o, const int64_t* in, int64_t n) {
    const A* x = pa + in[0];
    const B* y = pb + in[1];
    O* z = po + o;
    if (sa != 0 && sb != 0) {
      for (int64_t j = 0; j < n; ++j) z[j] = f(x[j], y[j]);
    } else if (sa != 0) {
      const B yv = *y;
      for (int64_t j = 0; j < n; ++j) z[j] = f(x[j], yv);
    } else if (sb != 0) {
      const A xv = *x;
      for (int64_t j = 0; j < n; ++j) z[j] = f(xv, y[j]);
    } else {
      const O v = f(*x, *y);
      for (int64_t j = 0; j < n; ++j) z[j] = v;
    }
  });
}

// out = f(x) elementwise over equal shapes.
template <class T, class O, class F>
void mapUnary(const Tensor& in, Tensor& out, F&& f) {
  const T* x = in.data<T>();
  O* y = out.data<O>();
  const int64_t n = in.numElements();
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<O>(f(x[i]));
}

}  // namespace collage
