// Wide graphs for the op-level search's scale tests: stages of parallel
// branches joined by a Concat, each branch a chain of convolutions in the
// form a dynamic int8 quantizer writes them (DynamicQuantizeLinear,
// ConvInteger, Cast, the scales' Mul, Mul, bias Add, then SiLU as
// x * Sigmoid(x)). Eight nodes per convolution, so 4 stages of 8 branches of
// 8 convolutions are 2,052 nodes. The branches can be written one after the
// other, or interleaved op by op across branches, as some exporters do;
// the second order is the one that made the search's states multiply.
#pragma once

#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"
#include "tests/unit/graph_builder.h"

namespace collage {

struct WideGraphShape {
  int stages = 4;
  int branches = 8;
  int depth = 8;             // convolutions per branch
  int channels = 4;          // per branch
  int size = 8;              // spatial
  bool interleaved = true;   // nodes written op by op across the branches
};

inline Graph wideQuantizedGraph(const WideGraphShape& s) {
  GraphBuilder b(11);
  b.endGroup();
  auto zerosU8 = [&](const Shape& shape) {
    static int count = 0;
    return b.graph().addConstant("u8_" + std::to_string(count++), Tensor(ElementType::UInt8, shape));
  };
  ValueId x = b.input({1, s.channels, s.size, s.size});
  int64_t cin = s.channels;
  for (int stage = 0; stage < s.stages; ++stage) {
    // Per branch: the value it reads next and its input channels.
    std::vector<ValueId> at(static_cast<size_t>(s.branches), x);
    std::vector<int64_t> ch(static_cast<size_t>(s.branches), cin);
    // One convolution, op by op: step k of branch j. Eight steps.
    struct Unit {
      ValueId q = kNoValue, scale = kNoValue, zp = kNoValue, conv = kNoValue, cast = kNoValue,
              scales = kNoValue, scaled = kNoValue, biased = kNoValue, sig = kNoValue;
    };
    std::vector<Unit> u(static_cast<size_t>(s.branches));
    auto step = [&](int j, int k) {
      Unit& w = u[static_cast<size_t>(j)];
      ValueId& in = at[static_cast<size_t>(j)];
      const int64_t c = ch[static_cast<size_t>(j)];
      switch (k) {
        case 0: {
          w.q = b.op("DynamicQuantizeLinear", {in}, {}, 3);
          const Node& dq = b.graph().nodes().back();
          w.scale = dq.outputs[1];
          w.zp = dq.outputs[2];
          break;
        }
        case 1:
          w.conv = b.op("ConvInteger", {w.q, zerosU8({s.channels, c, 3, 3}), w.zp, zerosU8({})},
                        attrs({{"pads", Ints{1, 1, 1, 1}}}));
          break;
        case 2: w.cast = b.op("Cast", {w.conv}, attrs({{"to", int64_t{1}}})); break;
        case 3: w.scales = b.op("Mul", {w.scale, b.scalar(0.01f)}); break;
        case 4: w.scaled = b.op("Mul", {w.cast, w.scales}); break;
        case 5: w.biased = b.op("Add", {w.scaled, b.constant({s.channels, 1, 1})}); break;
        case 6: w.sig = b.op("Sigmoid", {w.biased}); break;
        case 7:
          in = b.op("Mul", {w.biased, w.sig});
          ch[static_cast<size_t>(j)] = s.channels;
          break;
      }
    };
    for (int d = 0; d < s.depth; ++d) {
      if (s.interleaved) {
        for (int k = 0; k < 8; ++k)
          for (int j = 0; j < s.branches; ++j) step(j, k);
      }
    }
    if (!s.interleaved)
      for (int j = 0; j < s.branches; ++j)
        for (int d = 0; d < s.depth; ++d)
          for (int k = 0; k < 8; ++k) step(j, k);
    x = b.op("Concat", at, attrs({{"axis", int64_t{1}}}));
    cin = static_cast<int64_t>(s.channels) * s.branches;
  }
  b.finish(x);
  return std::move(b.graph());
}

}  // namespace collage
