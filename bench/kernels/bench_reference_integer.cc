// bench_reference_integer: the reference executor's integer convolution
// (core/ops/integer_products.h) on one ConvInteger, against the int64
// 7-deep loop it replaced (--naive; that one takes ~20 s at the default size).
//
//   bench_reference_integer [--naive] [channels] [size]     (default 64 256: 1x64x256x256, 3x3, pads 1)
//
// Prints each time and its GOP/s (a multiply-add = 2 ops, as kernel_estimate.h counts).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "core/ops/conv_geometry.h"
#include "core/ops/integer_products.h"

using namespace collage;

namespace {

std::vector<int64_t> naiveConv(const ConvGeometry& geometry, const Tensor& xt, const Tensor& wt, int64_t xzero) {
  const ConvGeometry g = geometry.expandedTo(3);
  const std::vector<int64_t> x = xt.toInts(), w = wt.toInts();
  const int64_t cg = g.inChannels / g.group, mg = g.outChannels / g.group;
  const int64_t IH = g.inputSpatial[1], IW = g.inputSpatial[2];
  const int64_t OH = g.outputSpatial[1], OW = g.outputSpatial[2];
  const int64_t KH = g.kernel[1], KW = g.kernel[2];
  std::vector<int64_t> acc(static_cast<size_t>(g.batch * g.outChannels * OH * OW), 0);
  for (int64_t m = 0; m < g.outChannels; ++m) {
    const int64_t c0 = (m / mg) * cg;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t sum = 0;
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t ih = oh * g.strides[1] - g.padsBegin[1] + kh * g.dilations[1];
            if (ih < 0 || ih >= IH) continue;
            for (int64_t kw = 0; kw < KW; ++kw) {
              const int64_t iw = ow * g.strides[2] - g.padsBegin[2] + kw * g.dilations[2];
              if (iw < 0 || iw >= IW) continue;
              sum += (x[((c0 + c) * IH + ih) * IW + iw] - xzero) * w[((m * cg + c) * KH + kh) * KW + kw];
            }
          }
        acc[static_cast<size_t>((m * OH + oh) * OW + ow)] = sum;
      }
  }
  return acc;
}

double secondsOf(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  bool naive = false;
  std::vector<int64_t> sizes;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--naive") == 0)
      naive = true;
    else
      sizes.push_back(std::stoll(argv[i]));
  }
  const int64_t C = sizes.size() > 0 ? sizes[0] : 64, H = sizes.size() > 1 ? sizes[1] : 256;
  Node node;
  node.name = "conv";
  node.op = "ConvInteger";
  node.attrs.set("kernel_shape", Attribute(std::vector<int64_t>{3, 3}));
  node.attrs.set("pads", Attribute(std::vector<int64_t>{1, 1, 1, 1}));
  Tensor x(ElementType::UInt8, {1, C, H, H}), w(ElementType::Int8, {C, C, 3, 3});
  std::mt19937 rng(1);
  for (int64_t i = 0; i < x.numElements(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < w.numElements(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(rng());
  const ConvGeometry g = ConvGeometry::conv(node, x.shape(), w.shape());
  const double ops = 2.0 * static_cast<double>(C * 9) * static_cast<double>(C * H * H);
  std::vector<int64_t> fast;
  for (int run = 0; run < 3; ++run) {
    const double s = secondsOf([&] { fast = convIntegerAcc(g, x, w, {128}, {}); });
    std::printf("integer_products 1x%lldx%lldx%lld 3x3: %.3f s, %.2f GOP/s\n", static_cast<long long>(C),
                static_cast<long long>(H), static_cast<long long>(H), s, ops / s / 1e9);
  }
  if (naive) {
    std::vector<int64_t> slow;
    const double s = secondsOf([&] { slow = naiveConv(g, x, w, 128); });
    std::printf("naive int64 loop: %.3f s, %.2f GOP/s (%s)\n", s, ops / s / 1e9,
                slow == fast ? "identical" : "DIFFERENT");
  }
  return 0;
}
