// Wide graphs for the op-level search's scale tests: stages of parallel
// branches joined by a Concat, each branch a chain of convolutions in the
// form a dynamic int8 quantizer writes them (DynamicQuantizeLinear,
// ConvInteger, Cast, the scales' Mul, Mul, bias Add, then SiLU as
// x * Sigmoid(x)). Eight nodes per convolution, so 4 stages of 8 branches of
// 8 convolutions are 2,052 nodes. The branches can be written one after the
// other, or interleaved op by op across branches, as some exporters do;
// the second order is the one that made the search's states multiply.
//
// A second family has the shape of a YOLO-style detector's dynamic int8
// form: cross-stage partial blocks (a convolution, Split in halves, a chain
// of residual bottlenecks whose every output is kept, Concat of them all, a
// convolution) and a head where one DynamicQuantizeLinear feeds two
// convolution branches. Its wide points are not parallel branches written
// interleaved but values read far apart: each kept output waits at the
// block's Concat while the chain goes on.
#pragma once

#include <algorithm>
#include <array>
#include <functional>
#include <string>
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

struct CspGraphShape {
  int blocks = 9;
  int depth = 12;     // residual bottlenecks (two convolutions each) per block
  int channels = 4;   // of each half
  int size = 8;       // spatial
};

inline Graph cspQuantizedGraph(const CspGraphShape& s) {
  GraphBuilder b(13);
  b.endGroup();
  int count = 0;
  auto zerosU8 = [&](const Shape& shape) {
    return b.graph().addConstant("u8_" + std::to_string(count++), Tensor(ElementType::UInt8, shape));
  };
  // The epilogue of a dynamically quantized convolution reading quantized
  // `q` with scale `scale` and zero point `zp`: ConvInteger, Cast, the
  // scales' Mul, Mul, bias Add, SiLU as x * Sigmoid(x).
  auto convFrom = [&](ValueId q, ValueId scale, ValueId zp, int64_t cin, int64_t cout) {
    const ValueId conv = b.op("ConvInteger", {q, zerosU8({cout, cin, 3, 3}), zp, zerosU8({})},
                              attrs({{"pads", Ints{1, 1, 1, 1}}}));
    const ValueId cast = b.op("Cast", {conv}, attrs({{"to", int64_t{1}}}));
    const ValueId scales = b.op("Mul", {scale, b.scalar(0.01f)});
    const ValueId biased = b.op("Add", {b.op("Mul", {cast, scales}), b.constant({cout, 1, 1})});
    return b.op("Mul", {biased, b.op("Sigmoid", {biased})});
  };
  auto quantize = [&](ValueId x) {
    const ValueId q = b.op("DynamicQuantizeLinear", {x}, {}, 3);
    const Node& dq = b.graph().nodes().back();
    return std::array<ValueId, 3>{q, dq.outputs[1], dq.outputs[2]};
  };
  auto unit = [&](ValueId x, int64_t cin, int64_t cout) {
    const auto [q, scale, zp] = quantize(x);
    return convFrom(q, scale, zp, cin, cout);
  };
  const int64_t c = s.channels;
  ValueId x = b.input({1, 2 * c, s.size, s.size});
  for (int block = 0; block < s.blocks; ++block) {
    b.op("Split", {unit(x, 2 * c, 2 * c)}, attrs({{"axis", int64_t{1}}}), 2);
    const Node& split = b.graph().nodes().back();
    std::vector<ValueId> kept{split.outputs[0], split.outputs[1]};
    ValueId at = split.outputs[1];
    for (int d = 0; d < s.depth; ++d) {
      at = b.op("Add", {at, unit(unit(at, c, c), c, c)});
      kept.push_back(at);
    }
    x = unit(b.op("Concat", kept, attrs({{"axis", int64_t{1}}})), c * static_cast<int64_t>(kept.size()), 2 * c);
  }
  // The head: two convolution branches read one quantized map.
  const auto [q, scale, zp] = quantize(x);
  const ValueId box = unit(convFrom(q, scale, zp, 2 * c, c), c, c);
  const ValueId cls = unit(convFrom(q, scale, zp, 2 * c, c), c, c);
  b.finish(b.op("Concat", {box, cls}, attrs({{"axis", int64_t{1}}})));
  return std::move(b.graph());
}

// A third family, float and inception-like, as tf2onnx writes a mobile
// detector: stages where one value fans out to many branches of different
// forms, written interleaved op by op, and joined by a Concat and a 1x1
// reduction. The branch forms cycle: a 1x1 convolution; 1x1 then an explicit
// spatial Pad and a 3x3; an explicit Pad, a depthwise 3x3 and a pointwise
// convolution; a MaxPool and a 1x1; each convolution followed by a Relu, and
// each branch repeated `depth` times. The last stage is a many-head output:
// its branches are graph outputs, no Concat. Every branch's output waits at
// a join while the others go on, and the fanned-out value is pending for all
// its readers at once: the frontier the op-level search must keep small.
struct InceptionGraphShape {
  int stages = 17;
  int branches = 16;
  int depth = 2;     // each branch's form, repeated
  int channels = 4;  // per branch
  int size = 8;      // spatial
};

inline Graph inceptionGraph(const InceptionGraphShape& s) {
  GraphBuilder b(17);
  b.endGroup();
  const int64_t c = s.channels;
  const Ints noPads{0, 0, 0, 0}, spatialPad{0, 0, 1, 1, 0, 0, 1, 1};
  auto conv = [&](ValueId x, int64_t cin, int64_t k, const Ints& pads, int64_t group = 1) {
    const ValueId y = b.op("Conv", {x, b.constant({c, cin / group, k, k}), b.constant({c})},
                           attrs({{"pads", pads}, {"group", group}}));
    return b.op("Relu", {y});
  };
  // Every stage reads c channels (the reduction's), so the depthwise
  // convolution reads as many channels as it writes.
  ValueId x = b.input({1, c, s.size, s.size});
  const int64_t cin = c;
  for (int stage = 0; stage < s.stages; ++stage) {
    const bool heads = stage == s.stages - 1;
    // Each branch as a list of steps; step k of every branch is written
    // before step k + 1 of any, as an exporter interleaves them.
    struct Branch {
      ValueId at;
      int64_t ch;
      std::vector<std::function<void(Branch&)>> steps;
    };
    std::vector<Branch> branches(static_cast<size_t>(s.branches));
    for (int j = 0; j < s.branches; ++j) {
      Branch& br = branches[static_cast<size_t>(j)];
      br.at = x;
      br.ch = cin;
      for (int d = 0; d < s.depth; ++d) {
        switch (j % 4) {
          case 0:
            br.steps.push_back([&](Branch& w) { w.at = conv(w.at, w.ch, 1, noPads); w.ch = c; });
            break;
          case 1:
            br.steps.push_back([&](Branch& w) { w.at = conv(w.at, w.ch, 1, noPads); w.ch = c; });
            br.steps.push_back([&](Branch& w) { w.at = b.op("Pad", {w.at}, attrs({{"pads", spatialPad}})); });
            br.steps.push_back([&](Branch& w) { w.at = conv(w.at, w.ch, 3, noPads); });
            break;
          case 2:
            br.steps.push_back([&](Branch& w) { w.at = b.op("Pad", {w.at}, attrs({{"pads", spatialPad}})); });
            br.steps.push_back([&](Branch& w) { w.at = conv(w.at, c, 3, noPads, c); });
            br.steps.push_back([&](Branch& w) { w.at = conv(w.at, c, 1, noPads); });
            break;
          default:
            br.steps.push_back([&](Branch& w) {
              w.at = b.op("MaxPool", {w.at}, attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}));
            });
            br.steps.push_back([&](Branch& w) { w.at = conv(w.at, w.ch, 1, noPads); w.ch = c; });
            break;
        }
      }
    }
    size_t longest = 0;
    for (const Branch& br : branches) longest = std::max(longest, br.steps.size());
    for (size_t k = 0; k < longest; ++k)
      for (Branch& br : branches)
        if (k < br.steps.size()) br.steps[k](br);
    std::vector<ValueId> outs;
    for (const Branch& br : branches) outs.push_back(br.at);
    if (heads) {
      for (size_t j = 1; j < outs.size(); ++j) b.graph().markOutput(outs[j]);
      x = outs[0];
      break;
    }
    x = conv(b.op("Concat", outs, attrs({{"axis", int64_t{1}}})), c * s.branches, 1, noPads);
  }
  b.finish(x);
  return std::move(b.graph());
}

}  // namespace collage
