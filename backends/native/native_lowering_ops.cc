// GroupCompiler::instNode: the program node that computes one output of a
// node at given coordinates, by a handler per op family found by op name.
//
//   elementwise   program nodes over the inputs at the same coordinates
//   layout ops    the coordinates rewritten (Transpose permutes them, Slice
//                 scales and shifts them, Split shifts one, Gather makes one
//                 an indirect read), the input instantiated there; a
//                 constant Pad shifts them where the pass reads its input
//                 and is its constant where it reads padding
//   reductions    levels of the pass (GroupCompiler::reduce); Softmax and
//                 the normalisations are written as them
//
// What the layout ops' attributes mean comes from core/ops/layout_attrs.h,
// as for the reference kernels.
#include <algorithm>
#include <limits>
#include <optional>

#include "backends/native/native_lowering_impl.h"
#include "core/ops/layout_attrs.h"
#include "core/ops/op_helpers.h"
#include "core/ops/requantize.h"

namespace collage::native::lowering {

const std::unordered_map<std::string, GroupCompiler::Handler>& GroupCompiler::handlers() {
  static const std::unordered_map<std::string, Handler> table = [] {
    std::unordered_map<std::string, Handler> t;
    for (const auto& [name, op] : unaryOps()) t[name] = &GroupCompiler::instUnary;
    for (const auto& [name, op] : binaryOps()) t[name] = &GroupCompiler::instBinary;
    for (const std::string& name : variadicOps()) t[name] = &GroupCompiler::instVariadic;
    t["Where"] = &GroupCompiler::instWhere;
    t["Cast"] = &GroupCompiler::instCast;
    t["Identity"] = &GroupCompiler::instIdentity;
    t["Dropout"] = &GroupCompiler::instDropout;
    t["QuantizeLinear"] = &GroupCompiler::instQuantize;
    t["DequantizeLinear"] = &GroupCompiler::instDequantize;
    t["Transpose"] = &GroupCompiler::instTranspose;
    for (const char* name : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
      t[name] = &GroupCompiler::instReshape;
    t["Slice"] = &GroupCompiler::instSlice;
    t["Expand"] = &GroupCompiler::instExpand;
    t["Split"] = &GroupCompiler::instSplit;
    t["Gather"] = &GroupCompiler::instGather;
    t["Concat"] = &GroupCompiler::instConcat;
    t["Pad"] = &GroupCompiler::instPad;
    for (const std::string& name : reductionOps())
      if (name.rfind("Reduce", 0) == 0) t[name] = &GroupCompiler::instReduce;
    t["Softmax"] = t["LogSoftmax"] = &GroupCompiler::instSoftmax;
    t["LayerNormalization"] = t["InstanceNormalization"] = &GroupCompiler::instNormalization;
    t["BatchNormalization"] = &GroupCompiler::instBatchNorm;
    t["GlobalAveragePool"] = t["GlobalMaxPool"] = &GroupCompiler::instGlobalPool;
    return t;
  }();
  return table;
}

int32_t GroupCompiler::instNode(PassBuilder& pb, NodeId n, size_t k, const CoordMap& m, ValueId v) {
  const Node& node = g_.node(n);
  const auto it = handlers().find(node.op);
  if (it == handlers().end()) throw Refusal{label(node) + ": internal: no fused form"};
  return (this->*(it->second))(pb, NodeAt{node, k, m, v});
}

CoordMap GroupCompiler::broadcastInput(const NodeAt& at, size_t i) const {
  return broadcastMap(at.m, shapeOf(at.v), shapeOf(at.node.inputs[i]));
}

int32_t GroupCompiler::arg(PassBuilder& pb, const NodeAt& at, size_t i) {
  return inst(pb, at.node.inputs[i], broadcastInput(at, i));
}

// ---- Elementwise.

int32_t GroupCompiler::instUnary(PassBuilder& pb, const NodeAt& at) {
  const Node& node = at.node;
  const std::string& op = node.op;
  const int32_t a = arg(pb, at, 0);
  float p0 = 0, p1 = 0;
  Op o = unaryOps().at(op);
  if (op == "LeakyRelu") p0 = node.attrs.getFloat("alpha", 0.01f);
  if (op == "Elu") p0 = node.attrs.getFloat("alpha", 1.0f);
  if (op == "Selu") {
    p0 = node.attrs.getFloat("alpha", 1.67326319217681884765625f);
    p1 = node.attrs.getFloat("gamma", 1.05070102214813232421875f);
  }
  if (op == "HardSigmoid") {
    p0 = node.attrs.getFloat("alpha", 0.2f);
    p1 = node.attrs.getFloat("beta", 0.5f);
  }
  if (op == "Gelu" && node.attrs.getString("approximate", "none") == "tanh") o = Op::GeluTanh;
  if (op == "Clip") {
    const float inf = std::numeric_limits<float>::infinity();
    p0 = node.attrs.getFloat("min", -inf);
    p1 = node.attrs.getFloat("max", inf);
  }
  return pb.op(o, a, -1, -1, p0, p1);
}

int32_t GroupCompiler::instBinary(PassBuilder& pb, const NodeAt& at) {
  const std::string& op = at.node.op;
  const int32_t a = arg(pb, at, 0), b = arg(pb, at, 1);
  Op o = binaryOps().at(op);
  if (op == "Mod" && at.node.attrs.getInt("fmod", 0) != 0) o = Op::FMod;
  if (op == "Pow") {
    if (pb.isConst(b, 2.0f)) return pb.op(Op::Square, a);
    if (pb.isConst(b, 1.0f)) return a;
  }
  return pb.op(o, a, b);
}

int32_t GroupCompiler::instVariadic(PassBuilder& pb, const NodeAt& at) {
  const std::string& op = at.node.op;
  int32_t acc = arg(pb, at, 0);
  const Op o = op == "Max" ? Op::Max : op == "Min" ? Op::Min : Op::Add;
  for (size_t i = 1; i < at.node.inputs.size(); ++i) acc = pb.op(o, acc, arg(pb, at, i));
  if (op == "Mean") acc = pb.op(Op::Div, acc, pb.constant(static_cast<float>(at.node.inputs.size())));
  return acc;
}

int32_t GroupCompiler::instWhere(PassBuilder& pb, const NodeAt& at) {
  return pb.op(Op::Where, arg(pb, at, 0), arg(pb, at, 1), arg(pb, at, 2));
}

int32_t GroupCompiler::instCast(PassBuilder& pb, const NodeAt& at) {
  const int32_t a = inst(pb, at.node.inputs[0], at.m);
  const ElementType from = typeOf(at.node.inputs[0]);
  if (typeOf(at.v) == ElementType::Bool && from != ElementType::Bool) return pb.op(Op::ToBool, a);
  return a;
}

int32_t GroupCompiler::instIdentity(PassBuilder& pb, const NodeAt& at) {
  return inst(pb, at.node.inputs[0], at.m);
}

int32_t GroupCompiler::instDropout(PassBuilder& pb, const NodeAt& at) {
  return at.k == 0 ? inst(pb, at.node.inputs[0], at.m) : pb.constant(1.0f);
}

// ---- Quantizers: the reference's arithmetic (core/ops/quantize_ops.cc) in
// float32, exactly. Integers up to 2^24 are floats without loss, so
//   QuantizeLinear    clamp(nearbyint(x / scale) + zero_point, type's range)
//                     (x * (1 / scale) where that reciprocal is exact)
//   DequantizeLinear  (x - zero_point) * scale
// give the reference's values bit for bit; the store converts the clamped
// integral floats to u8/s8.

// Scale or zero point (input i): one value, or one per channel of `axis` of
// the data, read at the output's coordinate along it.
int32_t GroupCompiler::quantParam(PassBuilder& pb, const NodeAt& at, size_t i, const Shape& data) {
  const ValueId v = at.node.inputs[i];
  if (g_.value(v).type.numElements() == 1) return inst(pb, v, CoordMap(shapeOf(v).size()));
  const int64_t axis = normalizeAxis(at.node, at.node.attrs.getInt("axis", 1), static_cast<int64_t>(data.size()));
  return inst(pb, v, CoordMap{at.m[static_cast<size_t>(axis)]});
}

int32_t GroupCompiler::instQuantize(PassBuilder& pb, const NodeAt& at) {
  const Shape& data = shapeOf(at.node.inputs[0]);
  // x / scale, or x times the scale's reciprocal where that is exact (a
  // constant power of two: the same floats for every x, core/ops/requantize.h).
  const Value& scale = g_.value(at.node.inputs[1]);
  float inv = 0.0f;
  const bool multiply = scale.isConstant() && scale.type.numElements() == 1 &&
                        exactReciprocal(scale.constant->toFloats()[0], inv);
  int32_t q = pb.op(Op::Round, multiply ? pb.op(Op::Mul, arg(pb, at, 0), pb.constant(inv))
                                        : pb.op(Op::Div, arg(pb, at, 0), quantParam(pb, at, 1, data)));
  if (at.node.inputs.size() > 2 && at.node.inputs[2] != kNoValue)
    q = pb.op(Op::Add, q, quantParam(pb, at, 2, data));
  const bool u8 = typeOf(at.v) == ElementType::UInt8;
  return pb.op(Op::Clip, q, -1, -1, u8 ? 0.0f : -128.0f, u8 ? 255.0f : 127.0f);
}

int32_t GroupCompiler::instDequantize(PassBuilder& pb, const NodeAt& at) {
  const Shape& data = shapeOf(at.node.inputs[0]);
  int32_t x = arg(pb, at, 0);
  if (at.node.inputs.size() > 2 && at.node.inputs[2] != kNoValue)
    x = pb.op(Op::Sub, x, quantParam(pb, at, 2, data));
  return pb.op(Op::Mul, x, quantParam(pb, at, 1, data));
}

// ---- Layout ops.

int32_t GroupCompiler::instTranspose(PassBuilder& pb, const NodeAt& at) {
  const Shape& in = shapeOf(at.node.inputs[0]);
  const std::vector<int64_t> perm = transposePerm(at.node, static_cast<int64_t>(in.size()));
  CoordMap mi(in.size());
  for (size_t j = 0; j < perm.size(); ++j) mi[static_cast<size_t>(perm[j])] = at.m[j];
  return inst(pb, at.node.inputs[0], mi);
}

int32_t GroupCompiler::instReshape(PassBuilder& pb, const NodeAt& at) {
  const ValueId x = at.node.inputs[0];
  const Shape& outShape = shapeOf(at.v);
  if (x != pb.defining && bufferOf_.count(x))
    return leafFromMap(pb, x, at.m, outShape);  // same linear layout as the output
  return inst(pb, x, reshapeMap(pb, at.m, outShape, shapeOf(x), x));
}

int32_t GroupCompiler::instSlice(PassBuilder& pb, const NodeAt& at) {
  const std::vector<SliceRange> ranges = sliceRanges(at.node, shapeOf(at.node.inputs[0]));
  CoordMap mi = at.m;
  for (size_t d = 0; d < mi.size(); ++d) {
    Coord& c = mi[d];
    Affine a;
    a.addScaled(c.aff, ranges[d].step);
    a.c += ranges[d].start;
    c.aff = a;
    if (c.ind) c.idxMul *= ranges[d].step;
  }
  return inst(pb, at.node.inputs[0], mi);
}

int32_t GroupCompiler::instExpand(PassBuilder& pb, const NodeAt& at) {
  return inst(pb, at.node.inputs[0], broadcastInput(at, 0));
}

int32_t GroupCompiler::instSplit(PassBuilder& pb, const NodeAt& at) {
  const Shape& in = shapeOf(at.node.inputs[0]);
  const int64_t axis = normalizeAxis(at.node, at.node.attrs.getInt("axis", 0), static_cast<int64_t>(in.size()));
  const std::vector<int64_t> sizes = splitSizes(at.node, in, axis);
  CoordMap mi = at.m;
  for (size_t i = 0; i < at.k; ++i) mi[static_cast<size_t>(axis)].aff.c += sizes[i];
  return inst(pb, at.node.inputs[0], mi);
}

int32_t GroupCompiler::instGather(PassBuilder& pb, const NodeAt& at) {
  const Node& node = at.node;
  const CoordMap& m = at.m;
  const ValueId data = node.inputs[0], indices = node.inputs[1];
  const Shape& ds = shapeOf(data);
  const Shape& is = shapeOf(indices);
  const size_t axis = static_cast<size_t>(
      normalizeAxis(node, node.attrs.getInt("axis", 0), static_cast<int64_t>(ds.size())));
  const size_t q = is.size();
  CoordMap dm(ds.size());
  for (size_t j = 0; j < axis; ++j) dm[j] = m[j];
  for (size_t j = axis + 1; j < ds.size(); ++j) dm[j] = m[j + q - 1];
  for (size_t t = 0; t < q; ++t)
    if (m[axis + t].ind) throw MaterializeRequest{at.v};
  const Value& iv = g_.value(indices);
  if (iv.isConstant() && iv.type.numElements() == 1) {
    int64_t idx = iv.constant->toInts()[0];
    if (idx < -ds[axis] || idx >= ds[axis])
      throw Refusal{label(node) + ": index " + std::to_string(idx) + " is out of range for dimension " +
                    std::to_string(ds[axis])};
    dm[axis].aff.c = idx < 0 ? idx + ds[axis] : idx;
  } else {
    Coord c;
    c.ind = true;
    c.idxBuffer = bufferOf_.at(indices);
    c.idxType = iv.type.elementType;
    const std::vector<int64_t> st = stridesOf(is);
    for (size_t t = 0; t < q; ++t) c.idxOff.addScaled(m[axis + t].aff, st[t]);
    c.idxDim = ds[axis];
    c.idxCount = iv.type.numElements();
    dm[axis] = c;
  }
  return inst(pb, data, dm);
}

// A Concat inside a pass is materialised: buildRoot writes it with one pass per input.
int32_t GroupCompiler::instConcat(PassBuilder&, const NodeAt& at) { throw MaterializeRequest{at.v}; }

namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); }

// Where padded output coordinate q = c + k * t (t the offset into the
// region along one root dim) enters and leaves [begin, end): the cuts that
// leave each piece wholly inside or wholly outside. No cut exists when q
// mixes several root dims, runs backwards or depends on a dim a reduction
// sweeps (cutting it would cut the sum).
std::optional<NeedCut> cutFor(const PassBuilder& pb, const Affine& q, int64_t begin, int64_t end,
                              ValueId pad) {
  int origin = -1;
  int64_t k = 0;
  for (size_t d = 0; d < pb.dims.size(); ++d) {
    const int64_t coef = q.coef(d);
    if (coef == 0) continue;
    const PDim& dim = pb.dims[d];
    // A dim a reduction sweeps must stay whole.
    if (std::find(pb.inner.begin(), pb.inner.end(), static_cast<int>(d)) != pb.inner.end())
      return std::nullopt;
    if (dim.origin < 0 || dim.weight <= 0 || coef % dim.weight != 0 || coef / dim.weight <= 0)
      return std::nullopt;
    if (origin < 0) origin = dim.origin, k = coef / dim.weight;
    if (dim.origin != origin || coef / dim.weight != k) return std::nullopt;
  }
  if (origin < 0) return std::nullopt;
  for (size_t d = 0; d < pb.dims.size(); ++d)
    if (pb.dims[d].origin == origin && q.coef(d) != k * pb.dims[d].weight) return std::nullopt;
  return NeedCut{origin, {ceilDiv(begin - q.c, k), ceilDiv(end - q.c, k)}, pad};
}

}  // namespace

// A constant Pad (inlineRefusal admits only zero) as a view: where every
// coordinate the pass reads lies in the input, the input shifted by the
// begin pads; where one lies wholly in the padding, the constant; where
// the pass straddles a border, its region is cut there first (NeedCut).
int32_t GroupCompiler::instPad(PassBuilder& pb, const NodeAt& at) {
  const Shape& in = shapeOf(at.node.inputs[0]);
  const PadAmounts pads = padAmounts(at.node, static_cast<int64_t>(in.size()));
  // The range each padded coordinate takes over the pass.
  std::vector<std::pair<int64_t, int64_t>> range(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    if (pads.begin[d] == 0 && pads.end[d] == 0) continue;
    if (at.m[d].ind) throw MaterializeRequest{at.v};
    const Affine& q = at.m[d].aff;
    range[d] = {q.c, q.c};
    for (size_t p = 0; p < pb.dims.size(); ++p) {
      const int64_t span = q.coef(p) * (pb.dims[p].size - 1);
      (span < 0 ? range[d].first : range[d].second) += span;
    }
    if (range[d].second < pads.begin[d] || range[d].first >= pads.begin[d] + in[d])
      return pb.constant(at.node.attrs.getFloat("constant_value", 0.0f));
  }
  CoordMap mi = at.m;
  for (size_t d = 0; d < in.size(); ++d) {
    if (pads.begin[d] == 0 && pads.end[d] == 0) continue;
    const int64_t begin = pads.begin[d], end = begin + in[d];
    if (range[d].first < begin || range[d].second >= end) {
      if (std::optional<NeedCut> cut = cutFor(pb, at.m[d].aff, begin, end, at.v)) throw *cut;
      throw MaterializeRequest{at.v};
    }
    mi[d].aff.c -= begin;
  }
  return inst(pb, at.node.inputs[0], mi);
}

// ---- Reductions and the ops written as them.

int32_t GroupCompiler::instReduce(PassBuilder& pb, const NodeAt& at) {
  const Node& node = at.node;
  const std::string& op = node.op;
  const CoordMap& m = at.m;
  const ValueId v = at.v;
  const ValueId x = node.inputs[0];
  const Shape& in = shapeOf(x);
  const std::vector<int64_t> axes = node.attrs.getInts("axes", {});
  const bool keep = node.attrs.getInt("keepdims", 1) != 0;
  if (axes.empty() && node.attrs.getInt("noop_with_empty_axes", 0) != 0) return inst(pb, x, m);
  std::vector<bool> reduced(in.size(), axes.empty());
  for (int64_t a : axes) reduced[normalizeAxis(node, a, static_cast<int64_t>(in.size()))] = true;
  CoordMap kept;
  if (keep) {
    kept = m;
  } else {
    size_t next = 0;
    for (size_t d = 0; d < in.size(); ++d) kept.push_back(reduced[d] ? Coord{} : m[next++]);
  }
  auto plain = [&](const CoordMap& p) { return inst(pb, x, p); };
  auto square = [&](const CoordMap& p) { return pb.op(Op::Square, inst(pb, x, p)); };
  auto absolute = [&](const CoordMap& p) { return pb.op(Op::Abs, inst(pb, x, p)); };
  auto expo = [&](const CoordMap& p) { return pb.op(Op::Exp, inst(pb, x, p)); };
  if (op == "ReduceSum") return reduce(pb, Op::ReduceSum, in, reduced, kept, plain, v, false);
  if (op == "ReduceMean") return reduce(pb, Op::ReduceSum, in, reduced, kept, plain, v, true);
  if (op == "ReduceMax") return reduce(pb, Op::ReduceMax, in, reduced, kept, plain, v, false);
  if (op == "ReduceMin") return reduce(pb, Op::ReduceMin, in, reduced, kept, plain, v, false);
  if (op == "ReduceProd") return reduce(pb, Op::ReduceProd, in, reduced, kept, plain, v, false);
  if (op == "ReduceL1") return reduce(pb, Op::ReduceSum, in, reduced, kept, absolute, v, false);
  if (op == "ReduceSumSquare") return reduce(pb, Op::ReduceSum, in, reduced, kept, square, v, false);
  if (op == "ReduceL2")
    return pb.op(Op::Sqrt, reduce(pb, Op::ReduceSum, in, reduced, kept, square, v, false));
  if (op == "ReduceLogSumExp")
    return pb.op(Op::Log, reduce(pb, Op::ReduceSum, in, reduced, kept, expo, v, false));
  throw Refusal{label(node) + ": internal: no fused form"};
}

int32_t GroupCompiler::instSoftmax(PassBuilder& pb, const NodeAt& at) {
  const Node& node = at.node;
  const ValueId v = at.v;
  const ValueId x = node.inputs[0];
  const Shape& in = shapeOf(x);
  const size_t axis = static_cast<size_t>(
      normalizeAxis(node, node.attrs.getInt("axis", -1), static_cast<int64_t>(in.size())));
  std::vector<bool> reduced(in.size(), false);
  reduced[axis] = true;
  auto keptOf = [&](CoordMap p) {
    p[axis] = Coord{};
    return p;
  };
  auto maxOf = [&](const CoordMap& p) {
    return reduce(pb, Op::ReduceMax, in, reduced, keptOf(p),
                  [&](const CoordMap& q) { return inst(pb, x, q); }, v, false);
  };
  auto shifted = [&](const CoordMap& p) { return pb.op(Op::Sub, inst(pb, x, p), maxOf(p)); };
  auto expOf = [&](const CoordMap& p) { return pb.op(Op::Exp, shifted(p)); };
  const int32_t sum = reduce(pb, Op::ReduceSum, in, reduced, keptOf(at.m), expOf, v, false);
  if (node.op == "Softmax") return pb.op(Op::Div, expOf(at.m), sum);
  return pb.op(Op::Sub, shifted(at.m), pb.op(Op::Log, sum));
}

// LayerNormalization (its three outputs) and InstanceNormalization.
int32_t GroupCompiler::instNormalization(PassBuilder& pb, const NodeAt& at) {
  const Node& node = at.node;
  const CoordMap& m = at.m;
  const ValueId v = at.v;
  const bool layer = node.op == "LayerNormalization";
  const ValueId x = node.inputs[0];
  const Shape& in = shapeOf(x);
  const int64_t rank = static_cast<int64_t>(in.size());
  const size_t axis =
      layer ? static_cast<size_t>(normalizeAxis(node, node.attrs.getInt("axis", -1), rank)) : 2;
  const float eps = node.attrs.getFloat("epsilon", 1e-5f);
  std::vector<bool> reduced(in.size(), false);
  for (size_t d = axis; d < in.size(); ++d) reduced[d] = true;
  auto keptOf = [&](CoordMap p) {
    for (size_t d = axis; d < p.size(); ++d) p[d] = Coord{};
    return p;
  };
  auto meanOf = [&](const CoordMap& p) {
    return reduce(pb, Op::ReduceSum, in, reduced, keptOf(p),
                  [&](const CoordMap& q) { return inst(pb, x, q); }, v, true);
  };
  auto centered = [&](const CoordMap& p) { return pb.op(Op::Sub, inst(pb, x, p), meanOf(p)); };
  auto varOf = [&](const CoordMap& p) {
    return reduce(pb, Op::ReduceSum, in, reduced, keptOf(p),
                  [&](const CoordMap& q) { return pb.op(Op::Square, centered(q)); }, v, true);
  };
  auto stdOf = [&](const CoordMap& p) {
    return pb.op(Op::Sqrt, pb.op(Op::Add, varOf(p), pb.constant(eps)));
  };
  if (layer) {
    if (at.k == 1) return meanOf(m);
    auto invStd = [&](const CoordMap& p) { return pb.op(Op::Div, pb.constant(1.0f), stdOf(p)); };
    if (at.k == 2) return invStd(m);
    const CoordMap& xm = m;
    int32_t y = pb.op(Op::Mul, pb.op(Op::Mul, centered(xm), invStd(xm)),
                      inst(pb, node.inputs[1], broadcastMap(m, in, shapeOf(node.inputs[1]))));
    if (node.inputs.size() > 2 && node.inputs[2] != kNoValue)
      y = pb.op(Op::Add, y, inst(pb, node.inputs[2], broadcastMap(m, in, shapeOf(node.inputs[2]))));
    return y;
  }
  const CoordMap channel{m[1]};
  const int32_t a = pb.op(Op::Div, inst(pb, node.inputs[1], channel), stdOf(m));
  return pb.op(Op::Add, pb.op(Op::Mul, centered(m), a), inst(pb, node.inputs[2], channel));
}

int32_t GroupCompiler::instBatchNorm(PassBuilder& pb, const NodeAt& at) {
  const Node& node = at.node;
  const float eps = node.attrs.getFloat("epsilon", 1e-5f);
  const CoordMap channel{at.m[1]};
  const int32_t a = pb.op(Op::Div, inst(pb, node.inputs[1], channel),
                          pb.op(Op::Sqrt, pb.op(Op::Add, inst(pb, node.inputs[4], channel),
                                                pb.constant(eps))));
  const int32_t b =
      pb.op(Op::Sub, inst(pb, node.inputs[2], channel), pb.op(Op::Mul, inst(pb, node.inputs[3], channel), a));
  return pb.op(Op::Add, pb.op(Op::Mul, inst(pb, node.inputs[0], at.m), a), b);
}

int32_t GroupCompiler::instGlobalPool(PassBuilder& pb, const NodeAt& at) {
  const ValueId x = at.node.inputs[0];
  const Shape& in = shapeOf(x);
  std::vector<bool> reduced(in.size(), false);
  for (size_t d = 2; d < in.size(); ++d) reduced[d] = true;
  const bool avg = at.node.op == "GlobalAveragePool";
  return reduce(pb, avg ? Op::ReduceSum : Op::ReduceMax, in, reduced, at.m,
                [&](const CoordMap& q) { return inst(pb, x, q); }, at.v, avg);
}

}  // namespace collage::native::lowering
