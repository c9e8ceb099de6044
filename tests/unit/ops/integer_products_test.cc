// The integer products (core/ops/integer_products.h) against the
// straightforward loops they replaced, in int64: bit-identical on random
// shapes with groups, strides, dilations, pads, per-channel zero points,
// batches, 1-D to 3-D convolutions, both accumulators, and sums past int32.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "core/ops/conv_geometry.h"
#include "core/ops/integer_products.h"

namespace collage {
namespace {

using Ints = std::vector<int64_t>;

Tensor randomQuantized(ElementType type, const Shape& shape, std::mt19937& rng) {
  Tensor t(type, shape);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (type == ElementType::UInt8)
      t.data<uint8_t>()[i] = static_cast<uint8_t>(byte(rng));
    else
      t.data<int8_t>()[i] = static_cast<int8_t>(byte(rng) - 128);
  }
  return t;
}

Ints randomZeroPoints(ElementType type, int64_t count, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  Ints zp;
  for (int64_t i = 0; i < count; ++i) zp.push_back(type == ElementType::UInt8 ? byte(rng) : byte(rng) - 128);
  return zp;
}

// The 7-deep loop in int64 that the reference ran before.
Ints naiveConv(const ConvGeometry& geometry, const Tensor& xt, const Tensor& wt, const Ints& xzp, const Ints& wzp) {
  const ConvGeometry g = geometry.expandedTo(3);
  const Ints x = xt.toInts(), w = wt.toInts();
  const int64_t cg = g.inChannels / g.group, mg = g.outChannels / g.group;
  const int64_t ID = g.inputSpatial[0], IH = g.inputSpatial[1], IW = g.inputSpatial[2];
  const int64_t OD = g.outputSpatial[0], OH = g.outputSpatial[1], OW = g.outputSpatial[2];
  const int64_t KD = g.kernel[0], KH = g.kernel[1], KW = g.kernel[2];
  const int64_t xzero = xzp.empty() ? 0 : xzp[0];
  Ints acc(static_cast<size_t>(g.batch * g.outChannels * OD * OH * OW), 0);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t m = 0; m < g.outChannels; ++m) {
      const int64_t c0 = (m / mg) * cg;
      const int64_t wzero = wzp.empty() ? 0 : wzp[wzp.size() > 1 ? static_cast<size_t>(m) : 0];
      for (int64_t od = 0; od < OD; ++od)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t sum = 0;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t kd = 0; kd < KD; ++kd) {
                const int64_t id = od * g.strides[0] - g.padsBegin[0] + kd * g.dilations[0];
                if (id < 0 || id >= ID) continue;
                for (int64_t kh = 0; kh < KH; ++kh) {
                  const int64_t ih = oh * g.strides[1] - g.padsBegin[1] + kh * g.dilations[1];
                  if (ih < 0 || ih >= IH) continue;
                  for (int64_t kw = 0; kw < KW; ++kw) {
                    const int64_t iw = ow * g.strides[2] - g.padsBegin[2] + kw * g.dilations[2];
                    if (iw < 0 || iw >= IW) continue;
                    const int64_t xv = x[(((n * g.inChannels + c0 + c) * ID + id) * IH + ih) * IW + iw];
                    const int64_t wv = w[(((m * cg + c) * KD + kd) * KH + kh) * KW + kw];
                    sum += (xv - xzero) * (wv - wzero);
                  }
                }
              }
            acc[static_cast<size_t>((((n * g.outChannels + m) * OD + od) * OH + oh) * OW + ow)] = sum;
          }
    }
  return acc;
}

Node convNode(const Ints& kernel, const Ints& strides, const Ints& dilations, const Ints& pads, int64_t group) {
  Node n;
  n.name = "conv";
  n.op = "ConvInteger";
  n.attrs.set("kernel_shape", Attribute(kernel));
  n.attrs.set("strides", Attribute(strides));
  n.attrs.set("dilations", Attribute(dilations));
  n.attrs.set("pads", Attribute(pads));
  n.attrs.set("group", Attribute(group));
  return n;
}

TEST(IntegerProducts, ConvMatchesTheNaiveLoopOnRandomShapes) {
  std::mt19937 rng(30);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const ElementType types[] = {ElementType::UInt8, ElementType::Int8};
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t rank = pick(1, 3);
    const int64_t group = pick(1, 3), cg = pick(1, 4), mg = pick(1, 6), batch = pick(1, 2);
    Ints kernel, strides, dilations, padsB, padsE;
    Shape xs = {batch, group * cg}, ws = {group * mg, cg};
    for (int64_t d = 0; d < rank; ++d) {
      kernel.push_back(pick(1, 3));
      strides.push_back(pick(1, 2));
      dilations.push_back(pick(1, 2));
      padsB.push_back(pick(0, 2));
      padsE.push_back(pick(0, 2));
      const int64_t extent = (kernel.back() - 1) * dilations.back() + 1;
      xs.push_back(pick(std::max<int64_t>(1, extent - padsB.back() - padsE.back()), rank == 3 ? 6 : 11));
      ws.push_back(kernel.back());
    }
    Ints pads = padsB;
    pads.insert(pads.end(), padsE.begin(), padsE.end());
    const Node node = convNode(kernel, strides, dilations, pads, group);
    const ConvGeometry g = ConvGeometry::conv(node, xs, ws);
    const ElementType xt = types[pick(0, 1)], wt = types[pick(0, 1)];
    const Tensor x = randomQuantized(xt, xs, rng), w = randomQuantized(wt, ws, rng);
    const Ints xzp = pick(0, 3) ? randomZeroPoints(xt, 1, rng) : Ints{};
    const Ints wzp = randomZeroPoints(wt, pick(0, 1) ? group * mg : pick(0, 1), rng);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + g.toString() + " group " + std::to_string(group));
    const Ints expected = naiveConv(g, x, w, xzp, wzp);
    EXPECT_EQ(convIntegerAcc(g, x, w, xzp, wzp), expected);
    EXPECT_EQ(convIntegerAcc(g, x, w, xzp, wzp, IntegerAccumulator::Int64), expected);
  }
}

// More output positions than one unfolded block holds, and more output
// channels than one tile: the blocks' seams must not show.
TEST(IntegerProducts, ConvMatchesAcrossBlocksAndTiles) {
  std::mt19937 rng(31);
  const Node node = convNode({3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1);
  const Shape xs = {1, 70, 40, 45}, ws = {9, 70, 3, 3};  // K = 630: blocks of 128 positions, 1800 positions
  const ConvGeometry g = ConvGeometry::conv(node, xs, ws);
  const Tensor x = randomQuantized(ElementType::UInt8, xs, rng), w = randomQuantized(ElementType::Int8, ws, rng);
  const Ints xzp = {131}, wzp = randomZeroPoints(ElementType::Int8, 9, rng);
  EXPECT_EQ(convIntegerAcc(g, x, w, xzp, wzp), naiveConv(g, x, w, xzp, wzp));
}

// K * 255 * 255 past INT32_MAX: the sum is taken in int64, and is exact
// where an int32 sum would have wrapped.
TEST(IntegerProducts, ConvFallsBackToInt64WhenInt32CouldOverflow) {
  const int64_t channels = 3700;  // K = 3700 * 9 = 33300 > 2^31 / 255^2
  EXPECT_FALSE(sumFitsInt32(channels * 9, 255, 255));
  EXPECT_TRUE(sumFitsInt32(channels * 9, 255, 128));
  const Node node = convNode({3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 1);
  Tensor x(ElementType::UInt8, {1, channels, 3, 4}), w(ElementType::UInt8, {2, channels, 3, 3});
  for (int64_t i = 0; i < x.numElements(); ++i) x.data<uint8_t>()[i] = 255;
  for (int64_t i = 0; i < w.numElements(); ++i) w.data<uint8_t>()[i] = 255;
  const ConvGeometry g = ConvGeometry::conv(node, x.shape(), w.shape());
  const Ints wzp = {0, 255};  // channel 0 sums 33300 * 255 * 255 > INT32_MAX, channel 1 zeros
  const Ints acc = convIntegerAcc(g, x, w, {0}, wzp);
  EXPECT_EQ(acc, naiveConv(g, x, w, {0}, wzp));
  EXPECT_GT(acc[0], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(acc.back(), 0);
}

TEST(IntegerProducts, CentredBoundFollowsTheTypeAndZeroPoints) {
  EXPECT_EQ(centredBound(ElementType::UInt8, {}), 255);
  EXPECT_EQ(centredBound(ElementType::UInt8, {128}), 128);
  EXPECT_EQ(centredBound(ElementType::UInt8, {3, 255}), 255);
  EXPECT_EQ(centredBound(ElementType::Int8, {}), 128);
  EXPECT_EQ(centredBound(ElementType::Int8, {-128}), 255);
  EXPECT_TRUE(sumFitsInt32(33025, 255, 255));
  EXPECT_FALSE(sumFitsInt32(33026, 255, 255));
}

Ints naiveMatMul(const Tensor& at, const Tensor& bt, const Ints& azp, const Ints& bzp, int64_t batchA,
                 int64_t batchB, int64_t M, int64_t K, int64_t N) {
  const Ints a = at.toInts(), b = bt.toInts();
  const int64_t batches = std::max(batchA, batchB);
  Ints acc;
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        int64_t sum = 0;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t av = a[((batchA == 1 ? 0 : bi) * M + i) * K + k];
          const int64_t bv = b[((batchB == 1 ? 0 : bi) * K + k) * N + j];
          sum += (av - (azp.empty() ? 0 : azp[azp.size() > 1 ? i : 0])) *
                 (bv - (bzp.empty() ? 0 : bzp[bzp.size() > 1 ? j : 0]));
        }
        acc.push_back(sum);
      }
  return acc;
}

TEST(IntegerProducts, MatMulMatchesTheNaiveLoop) {
  std::mt19937 rng(32);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const ElementType types[] = {ElementType::UInt8, ElementType::Int8};
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t M = pick(1, 9), K = pick(1, 300), N = pick(1, 300);
    const int64_t batchA = pick(0, 1) ? 3 : 1, batchB = batchA == 1 ? 3 : pick(0, 1) ? 3 : 1;
    const ElementType at = types[pick(0, 1)], bt = types[pick(0, 1)];
    const Tensor a = randomQuantized(at, {batchA, M, K}, rng), b = randomQuantized(bt, {batchB, K, N}, rng);
    const Ints azp = randomZeroPoints(at, pick(0, 1) ? M : pick(0, 1), rng);
    const Ints bzp = randomZeroPoints(bt, pick(0, 1) ? N : pick(0, 1), rng);
    const Shape ys = {3, M, N};
    SCOPED_TRACE("trial " + std::to_string(trial));
    const Ints expected = naiveMatMul(a, b, azp, bzp, batchA, batchB, M, K, N);
    EXPECT_EQ(matMulIntegerAcc(a, b, azp, bzp, ys), expected);
    EXPECT_EQ(matMulIntegerAcc(a, b, azp, bzp, ys, IntegerAccumulator::Int64), expected);
  }
}

}  // namespace
}  // namespace collage
