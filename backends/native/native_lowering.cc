// The native lowering's driver (native_lowering_impl.h shows the split):
// which values get buffers, the passes and steps that compute them, and the
// instantiation of a value at coordinates that instNode's handlers
// (native_lowering_ops.cc) recurse through.
#include "backends/native/native_lowering.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "backends/native/native_lowering_impl.h"
#include "backends/native/native_steps.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_helpers.h"
#include "core/ops/runtime_inputs.h"

namespace collage::native::lowering {

namespace {

bool computeType(ElementType t) { return t == ElementType::Float32 || t == ElementType::Bool; }

bool loadableType(ElementType t) {
  switch (t) {
    case ElementType::Float32: case ElementType::Float64: case ElementType::Int8:
    case ElementType::Int16: case ElementType::Int32: case ElementType::Int64:
    case ElementType::UInt8: case ElementType::UInt16: case ElementType::UInt32:
    case ElementType::UInt64: case ElementType::Bool:
      return true;
    default:
      return false;
  }
}

// ---- Keys that memoise program nodes, leaves and instantiations.

void putInt(std::string& k, int64_t v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); }

void putAffine(std::string& k, const Affine& a) {
  Affine t = a;
  t.trim();
  putInt(k, t.c);
  putInt(k, static_cast<int64_t>(t.a.size()));
  for (int64_t v : t.a) putInt(k, v);
}

void putCoord(std::string& k, const Coord& c) {
  putAffine(k, c.aff);
  putInt(k, c.ind);
  if (c.ind) {
    putInt(k, c.idxBuffer);
    putAffine(k, c.idxOff);
    putInt(k, c.idxDim);
    putInt(k, c.idxMul);
  }
}

}  // namespace

std::string label(const Node& node) { return "node '" + node.name + "' (" + node.op + ")"; }

const std::map<std::string, Op>& unaryOps() {
  static const std::map<std::string, Op> m = {
      {"Relu", Op::Relu},       {"Neg", Op::Neg},           {"Abs", Op::Abs},
      {"Sign", Op::Sign},       {"Sigmoid", Op::Sigmoid},   {"Tanh", Op::Tanh},
      {"Exp", Op::Exp},         {"Log", Op::Log},           {"Sqrt", Op::Sqrt},
      {"Reciprocal", Op::Reciprocal}, {"Erf", Op::Erf},     {"Floor", Op::Floor},
      {"Ceil", Op::Ceil},       {"Sin", Op::Sin},           {"Cos", Op::Cos},
      {"Softplus", Op::Softplus}, {"Softsign", Op::Softsign}, {"HardSwish", Op::HardSwish},
      {"Not", Op::Not},         {"LeakyRelu", Op::LeakyRelu}, {"Elu", Op::Elu},
      {"Selu", Op::Selu},       {"HardSigmoid", Op::HardSigmoid}, {"Gelu", Op::Gelu},
      {"Clip", Op::Clip},
  };
  return m;
}

const std::map<std::string, Op>& binaryOps() {
  static const std::map<std::string, Op> m = {
      {"Add", Op::Add},          {"Sub", Op::Sub},     {"Mul", Op::Mul},
      {"Div", Op::Div},          {"Mod", Op::Mod},     {"Pow", Op::Pow},
      {"Equal", Op::Equal},      {"Less", Op::Less},   {"Greater", Op::Greater},
      {"LessOrEqual", Op::LessEq}, {"GreaterOrEqual", Op::GreaterEq},
      {"And", Op::And},          {"Or", Op::Or},       {"Xor", Op::Xor},
      {"PRelu", Op::PRelu},
  };
  return m;
}

const std::set<std::string>& variadicOps() {
  static const std::set<std::string> s = {"Sum", "Mean", "Max", "Min"};
  return s;
}
const std::set<std::string>& viewOps() {
  static const std::set<std::string> s = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
                                          "Slice",   "Expand",  "Split",   "Gather",    "Concat",
                                          "Identity", "Dropout", "Pad"};
  return s;
}
const std::set<std::string>& reductionOps() {
  static const std::set<std::string> s = {
      "ReduceSum",  "ReduceMean",      "ReduceMax",       "ReduceMin",        "ReduceProd",
      "ReduceL1",   "ReduceL2",        "ReduceSumSquare", "ReduceLogSumExp",  "Softmax",
      "LogSoftmax", "LayerNormalization", "BatchNormalization", "InstanceNormalization",
      "GlobalAveragePool", "GlobalMaxPool"};
  return s;
}

// ---------------------------------------------------------------------------
// PassBuilder

int32_t PassBuilder::add(const IrNode& n) {
  std::string key;
  putInt(key, static_cast<int64_t>(n.op));
  for (int32_t i : n.in) putInt(key, i);
  int32_t b0, b1;
  std::memcpy(&b0, &n.p0, 4);
  std::memcpy(&b1, &n.p1, 4);
  putInt(key, b0);
  putInt(key, b1);
  putInt(key, n.leaf);
  int64_t d;
  std::memcpy(&d, &n.divisor, 8);
  putInt(key, d);
  auto it = nodeIds.find(key);
  if (it != nodeIds.end()) return it->second;
  const int32_t id = static_cast<int32_t>(prog.nodes.size());
  prog.nodes.push_back(n);
  nodeIds.emplace(std::move(key), id);
  return id;
}

int32_t PassBuilder::op(Op o, int32_t a, int32_t b, int32_t c, float p0, float p1) {
  IrNode n;
  n.op = o;
  n.in[0] = a;
  n.in[1] = b;
  n.in[2] = c;
  n.p0 = p0;
  n.p1 = p1;
  return add(n);
}

int32_t PassBuilder::constant(float v) {
  IrNode n;
  n.op = Op::Const;
  n.p0 = v;
  return add(n);
}

int32_t PassBuilder::leaf(Leaf l) {
  l.off.trim();
  for (Indirect& i : l.ind) i.off.trim();
  std::string key;
  putInt(key, l.buffer);
  putInt(key, static_cast<int64_t>(l.type));
  putAffine(key, l.off);
  for (const Indirect& i : l.ind) {
    putInt(key, i.buffer);
    putAffine(key, i.off);
    putInt(key, i.dim);
    putInt(key, i.mul);
  }
  auto it = leafIds.find(key);
  int32_t leafId;
  if (it != leafIds.end()) {
    leafId = it->second;
  } else {
    leafId = static_cast<int32_t>(prog.leaves.size());
    prog.leaves.push_back(std::move(l));
    leafIds.emplace(std::move(key), leafId);
  }
  IrNode n;
  n.op = Op::Leaf;
  n.leaf = leafId;
  return add(n);
}

std::vector<bool> PassBuilder::dependence(const CoordMap& m) const {
  std::vector<bool> dep(dims.size(), false);
  for (const Coord& c : m)
    for (size_t d = 0; d < dims.size(); ++d)
      if (c.aff.dependsOn(d) || (c.ind && c.idxOff.dependsOn(d))) dep[d] = true;
  return dep;
}

// ---------------------------------------------------------------------------
// NativeKernel

namespace {
// Each image's [channels x spatial] matrix transposed into [spatial x
// channels] (to channels last) or back, in square tiles that stay in the L1
// cache, so that both sides are read and written a cache line at a time.
void transposeChannels(const unsigned char* from, unsigned char* to, const NativeKernel::LayoutConversion& c,
                       int threads) {
  constexpr int64_t kTile = 32;
  const int64_t rows = c.toChannelsLast ? c.channels : c.spatial;  // of the source matrix
  const int64_t cols = c.toChannelsLast ? c.spatial : c.channels;
  const size_t e = c.elementBytes;
  const int64_t rowTiles = (rows + kTile - 1) / kTile, colTiles = (cols + kTile - 1) / kTile;
  const int64_t tiles = c.images * rowTiles * colTiles;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t image = t / (rowTiles * colTiles);
    const int64_t r0 = (t / colTiles) % rowTiles * kTile, c0 = t % colTiles * kTile;
    const unsigned char* src = from + static_cast<size_t>(image * rows * cols) * e;
    unsigned char* dst = to + static_cast<size_t>(image * rows * cols) * e;
    const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
    if (e == 4) {
      const auto* s = reinterpret_cast<const float*>(src);
      auto* d = reinterpret_cast<float*>(dst);
      for (int64_t j = c0; j < c1; ++j)
        for (int64_t i = r0; i < r1; ++i) d[j * rows + i] = s[i * cols + j];
    } else {
      for (int64_t j = c0; j < c1; ++j)
        for (int64_t i = r0; i < r1; ++i) std::memcpy(dst + (j * rows + i) * e, src + (i * cols + j) * e, e);
    }
  }
}
}  // namespace

void NativeKernel::run(const std::vector<const DLTensor*>& inputs,
                       const std::vector<DLTensor*>& outputs) {
  if (inputs.size() != inputCount_ || outputs.size() != outputCount_)
    throw Error("native kernel " + label_ + ": expected " + std::to_string(inputCount_) +
                " inputs and " + std::to_string(outputCount_) + " outputs, got " +
                std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const BufferDesc& d = buffers_[b];
    switch (d.kind) {
      case BufferDesc::Input:
        table_.ptr[b] = static_cast<char*>(inputs[d.index]->data) + inputs[d.index]->byte_offset;
        break;
      case BufferDesc::Output:
        table_.ptr[b] = static_cast<char*>(outputs[d.index]->data) + outputs[d.index]->byte_offset;
        break;
      default:
        break;
    }
  }
  for (LayoutConversion& c : conversions_) {
    const DLTensor* in = inputs[c.input];
    c.scratch.resize(static_cast<size_t>(c.images * c.channels * c.spatial) * c.elementBytes);
    transposeChannels(static_cast<const unsigned char*>(in->data) + in->byte_offset, c.scratch.data(), c,
                      threads_);
    for (size_t b = 0; b < buffers_.size(); ++b)
      if (buffers_[b].kind == BufferDesc::Input && static_cast<size_t>(buffers_[b].index) == c.input)
        table_.ptr[b] = c.scratch.data();
  }
  for (auto& step : steps_) step->run(table_);
}

std::optional<NativeLayout> NativeKernel::channelsLastOffer(ValueId v) const {
  if (!elementwise_ || request_.outputs.empty()) return std::nullopt;
  const Graph& g = *request_.graph;
  const TensorType& t = g.value(v).type;
  const Shape& full = g.value(request_.outputs[0]).type.shape;
  for (ValueId o : request_.outputs)
    if (g.value(o).type.shape != full) return std::nullopt;
  const bool typed = t.elementType == ElementType::Float32 || t.elementType == ElementType::UInt8 ||
                     t.elementType == ElementType::Int8;
  if (!typed || t.shape != full || full.size() < 3 || full.size() > 5 || full[1] <= 1 ||
      numElements(full) == full[0] * full[1])
    return std::nullopt;
  return channelsLastLayout(full, t.elementType);
}

std::optional<NativeLayout> NativeKernel::nativeOutputLayout(size_t output) const {
  return output < request_.outputs.size() ? channelsLastOffer(request_.outputs[output]) : std::nullopt;
}

std::optional<NativeLayout> NativeKernel::nativeInputLayout(size_t input) const {
  return input < request_.inputs.size() ? channelsLastOffer(request_.inputs[input]) : std::nullopt;
}

void NativeKernel::useNativeOutputLayout(size_t output) {
  COLLAGE_CHECK(nativeOutputLayout(output).has_value(), "no native output to hand over");
  switchToChannelsLast(request_.outputs[output]);
}

void NativeKernel::useNativeInputLayout(size_t input) {
  COLLAGE_CHECK(nativeInputLayout(input).has_value(), "no native input to hand over");
  switchToChannelsLast(request_.inputs[input]);
}

void NativeKernel::switchToChannelsLast(ValueId v) {
  std::set<ValueId> layout = channelsLast_;
  layout.insert(v);
  // The pass iterates in its outputs' layout; an input handed over in the
  // other is converted before each run (LayoutConversion), unless the
  // outputs themselves differ.
  std::set<ValueId> compiled = layout;
  std::vector<LayoutConversion> conversions;
  const Graph& g = *request_.graph;
  const auto last = [&](ValueId o) { return layout.count(o) > 0; };
  const bool outputsLast = std::all_of(request_.outputs.begin(), request_.outputs.end(), last);
  const bool outputsPlain = std::none_of(request_.outputs.begin(), request_.outputs.end(), last);
  if (outputsLast || outputsPlain) {
    for (size_t i = 0; i < request_.inputs.size(); ++i) {
      const ValueId x = request_.inputs[i];
      if (!channelsLastOffer(x) || last(x) == outputsLast) continue;
      const TensorType& t = g.value(x).type;
      LayoutConversion c;
      c.input = i;
      c.toChannelsLast = outputsLast;
      c.images = t.shape[0];
      c.channels = t.shape[1];
      c.spatial = numElements(t.shape) / (c.images * c.channels);
      c.elementBytes = elementSize(t.elementType);
      conversions.push_back(std::move(c));
      if (outputsLast) compiled.insert(x);
      else compiled.erase(x);
    }
  }
  GroupCompiler compiler(request_, threads_, compiled);
  std::unique_ptr<NativeKernel> again;
  try {
    again = compiler.compile();
  } catch (const Refusal& r) {
    throw Error("native kernel " + label_ + ": cannot run with '" + request_.graph->value(v).name +
                "' channels last: " + r.reason);
  }
  buffers_ = std::move(again->buffers_);
  table_ = std::move(again->table_);
  steps_ = std::move(again->steps_);
  channelsLast_ = std::move(layout);
  conversions_ = std::move(conversions);
}

std::string NativeKernel::describe() const {
  std::string s;
  for (const LayoutConversion& c : conversions_)
    s += "input " + std::to_string(c.input) + " converted " +
         (c.toChannelsLast ? "to channels last" : "from channels last") + " before the pass\n";
  int scratch = 0;
  for (const BufferDesc& b : buffers_) scratch += b.kind == BufferDesc::Scratch;
  s += std::to_string(steps_.size()) + " step(s), " + std::to_string(scratch) + " scratch buffer(s)";
  for (const auto& step : steps_) s += "\n  " + step->describe();
  return s;
}

// ---------------------------------------------------------------------------
// GroupCompiler: instantiation (instNode's handlers: native_lowering_ops.cc)

CoordMap broadcastMap(const CoordMap& m, const Shape& out, const Shape& in) {
  CoordMap r(in.size());
  const size_t shift = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != 1) r[i] = m[i + shift];
  return r;
}

void normalize(CoordMap& m, const Shape& shape) {
  COLLAGE_CHECK(m.size() == shape.size(), "coordinate map rank");
  for (size_t k = 0; k < shape.size(); ++k)
    if (shape[k] == 1) m[k] = Coord{};
}

int32_t GroupCompiler::leafFromMap(PassBuilder& pb, ValueId v, const CoordMap& m, const Shape& layout) {
  const Value& val = g_.value(v);
  if (val.isConstant() && val.type.numElements() == 1) {
    std::vector<float> f = val.constant->toFloats();
    return pb.constant(val.type.elementType == ElementType::Bool ? (f[0] != 0.0f ? 1.0f : 0.0f) : f[0]);
  }
  const std::vector<int64_t> strides = bufferStrides(v, layout);
  Leaf l;
  l.buffer = bufferOf_.at(v);
  l.type = val.type.elementType;
  for (size_t k = 0; k < m.size(); ++k) {
    l.off.addScaled(m[k].aff, strides[k]);
    if (m[k].ind)
      l.ind.push_back(Indirect{m[k].idxBuffer, m[k].idxType, m[k].idxOff, m[k].idxDim,
                               m[k].idxMul * strides[k], m[k].idxCount});
  }
  return pb.leaf(std::move(l));
}

int32_t GroupCompiler::inst(PassBuilder& pb, ValueId v, CoordMap m) {
  const Value& val = g_.value(v);
  normalize(m, val.type.shape);
  if (v != pb.defining && bufferOf_.count(v)) return leafFromMap(pb, v, m, val.type.shape);
  std::string key;
  putInt(key, v);
  for (const Coord& c : m) putCoord(key, c);
  auto it = pb.memo.find(key);
  if (it != pb.memo.end()) return it->second;
  COLLAGE_CHECK(isMember(val.producer), "value '" + val.name + "' has no buffer");
  const Node& node = g_.node(val.producer);
  size_t k = 0;
  while (node.outputs[k] != v) ++k;
  const int32_t id = instNode(pb, val.producer, k, m, v);
  pb.memo.emplace(std::move(key), id);
  return id;
}

CoordMap GroupCompiler::reshapeMap(PassBuilder& pb, const CoordMap& m, const Shape& out,
                                   const Shape& in, ValueId input) {
  for (const Coord& c : m)
    if (c.ind) throw MaterializeRequest{input};
  const std::vector<int64_t> stOut = stridesOf(out), stIn = stridesOf(in);
  Affine lin;
  for (size_t k = 0; k < m.size(); ++k) lin.addScaled(m[k].aff, stOut[k]);
  const int64_t count = numElements(in);
  if (lin.c < 0 || (count > 0 && lin.c >= count)) throw MaterializeRequest{input};
  // Digits of the constant part, then each iteration dim's term in the
  // digit whose stride divides its coefficient.
  CoordMap r(in.size());
  int64_t rest = lin.c;
  for (size_t k = 0; k < in.size(); ++k) {
    r[k].aff.c = stIn[k] ? rest / stIn[k] : 0;
    rest -= r[k].aff.c * stIn[k];
  }
  std::vector<std::vector<std::pair<int, int64_t>>> terms(in.size());
  for (size_t d = 0; d < pb.dims.size(); ++d) {
    const int64_t coef = lin.coef(d);
    if (coef == 0 || pb.dims[d].size <= 1) continue;
    if (coef < 0) throw MaterializeRequest{input};
    size_t k = 0;
    while (k < in.size() && !(in[k] > 1 && coef % stIn[k] == 0)) ++k;
    if (k == in.size()) throw MaterializeRequest{input};
    terms[k].emplace_back(static_cast<int>(d), coef / stIn[k]);
  }
  for (size_t k = 0; k < in.size(); ++k) {
    int64_t top = r[k].aff.c;
    for (auto [d, mult] : terms[k]) top += mult * (pb.dims[d].size - 1);
    if (top <= in[k] - 1) {
      for (auto [d, mult] : terms[k]) r[k].aff.addCoef(d, mult);
      continue;
    }
    // A term runs across digit boundaries: split its dim at the boundary.
    auto widest = std::max_element(terms[k].begin(), terms[k].end(), [&](auto a, auto b) {
      return a.second * (pb.dims[a.first].size - 1) < b.second * (pb.dims[b.first].size - 1);
    });
    if (widest != terms[k].end() && in[k] % widest->second == 0) {
      const int64_t f = in[k] / widest->second;
      const int64_t size = pb.dims[widest->first].size;
      if (f > 1 && f < size && size % f == 0) throw NeedSplit{widest->first, f, input};
    }
    throw MaterializeRequest{input};
  }
  return r;
}

int32_t GroupCompiler::reduce(PassBuilder& pb, Op kind, const Shape& inShape,
                              const std::vector<bool>& reduced, CoordMap kept,
                              const std::function<int32_t(const CoordMap&)>& child, ValueId owner,
                              bool mean) {
  normalize(kept, inShape);
  std::vector<size_t> axes;
  double count = 1;
  for (size_t d = 0; d < inShape.size(); ++d) {
    if (!reduced[d]) continue;
    count *= static_cast<double>(inShape[d]);
    if (inShape[d] > 1) axes.push_back(d);
  }
  if (axes.empty()) {
    // Nothing to reduce (size-1 axes): the value itself.
    return child(kept);
  }
  for (size_t a : axes)
    if (!kept[a].aff.isConstant() || kept[a].aff.c != 0 || kept[a].ind) throw MaterializeRequest{owner};
  const std::vector<bool> dep = pb.dependence(kept);
  std::vector<int64_t> sizes;
  for (size_t a : axes) sizes.push_back(inShape[a]);
  if (pb.inner.empty()) {
    // Reuse iteration dims the rest of the row does not depend on (the
    // consumer broadcasts the result over them), else add new ones.
    std::vector<int> chosen(axes.size(), -1);
    std::vector<bool> taken(pb.dims.size(), false);
    bool all = true;
    for (size_t j = axes.size(); j-- > 0;) {
      for (size_t d = pb.dims.size(); d-- > 0;)
        if (!taken[d] && !dep[d] && pb.dims[d].size == sizes[j]) {
          chosen[j] = static_cast<int>(d);
          taken[d] = true;
          break;
        }
      all = all && chosen[j] >= 0;
    }
    if (!all) {
      for (size_t j = 0; j < axes.size(); ++j) {
        chosen[j] = static_cast<int>(pb.dims.size());
        pb.dims.push_back(PDim{sizes[j], -1, 0});
      }
    }
    pb.inner = chosen;
    pb.innerSizes = sizes;
  } else {
    if (sizes != pb.innerSizes) throw MaterializeRequest{owner};
    for (int d : pb.inner)
      if (static_cast<size_t>(d) < dep.size() && dep[d]) throw MaterializeRequest{owner};
  }
  CoordMap psi = kept;
  for (size_t j = 0; j < axes.size(); ++j) psi[axes[j]].aff.addCoef(static_cast<size_t>(pb.inner[j]), 1);
  const int32_t c = child(psi);
  IrNode r;
  r.op = kind;
  r.in[0] = c;
  r.divisor = mean ? count : 1.0;
  return pb.add(r);
}

// ---------------------------------------------------------------------------
// GroupCompiler: the driver

void GroupCompiler::materialize(ValueId v) {
  if (!materialized_.insert(v).second) return;
  if (bufferOf_.count(v)) return;
  BufferDesc d{BufferDesc::Scratch, 0, Tensor(), g_.value(v).type};
  bufferOf_[v] = addBuffer(std::move(d));
}

// The root's index space is computed region by region: one region (the
// whole root) unless a constant Pad inside the pass reads partly its input
// and partly its padding, in which case the region is cut where the Pad's
// input starts and ends (NeedCut). Each region is a pass of its own with no
// per-element test, and every element is still written once: a channel Pad
// on a residual path costs no copy, only a loop nest per region.
void GroupCompiler::buildPass(ValueId root, ValueId defining, ValueId storeValue, int axis,
                              int64_t offset) {
  // Three regions per padded dim (before, input, after): 64 covers a Pad of
  // three dims of the root; more is a Pad that runs as a pass of its own.
  constexpr int kMaxRegions = 64;
  const Shape& rs = shapeOf(root);
  Region whole;
  for (int64_t size : rs) whole.emplace_back(0, size);
  std::vector<Region> work{whole};
  int regions = 1;
  while (!work.empty()) {
    const Region region = work.back();
    work.pop_back();
    try {
      buildRegion(root, defining, storeValue, axis, offset, region);
    } catch (const NeedCut& c) {
      const auto [begin, end] = region.at(static_cast<size_t>(c.origin));
      std::vector<int64_t> at{begin};
      for (int64_t cut : c.cuts)
        if (begin + cut > at.back() && begin + cut < end) at.push_back(begin + cut);
      at.push_back(end);
      regions += static_cast<int>(at.size()) - 2;
      if (at.size() < 3 || regions > kMaxRegions) {
        if (c.pad == defining)
          throw Refusal{"the padding of '" + g_.value(c.pad).name + "' needs too many passes"};
        throw MaterializeRequest{c.pad};
      }
      for (size_t i = at.size() - 1; i-- > 0;) {  // pushed last first: built in order
        Region piece = region;
        piece[static_cast<size_t>(c.origin)] = {at[i], at[i + 1]};
        work.push_back(std::move(piece));
      }
    }
  }
}

void GroupCompiler::buildRegion(ValueId root, ValueId defining, ValueId storeValue, int axis,
                                int64_t offset, const Region& region) {
  struct SplitRecord {
    int origin;
    int64_t weight, factor;
  };
  std::vector<SplitRecord> splits;
  const Shape& rs = shapeOf(root);
  for (int attempt = 0; attempt < 32; ++attempt) {
    PassBuilder pb;
    pb.defining = defining;
    // Channels last is iterated in its own order (channels innermost), so
    // that the store and the reads in that layout are contiguous.
    std::vector<size_t> order(rs.size());
    for (size_t k = 0; k < rs.size(); ++k) order[k] = k;
    if (channelsLast_.count(storeValue) && rs == shapeOf(storeValue) && rs.size() >= 3)
      std::rotate(order.begin() + 1, order.begin() + 2, order.end());
    for (size_t k : order) {
      const int64_t size = region[k].second - region[k].first;
      if (size > 1) pb.dims.push_back(PDim{size, static_cast<int>(k), 1});
    }
    for (const SplitRecord& s : splits)
      for (size_t d = 0; d < pb.dims.size(); ++d)
        if (pb.dims[d].origin == s.origin && pb.dims[d].weight == s.weight) {
          const PDim old = pb.dims[d];
          pb.dims[d] = PDim{old.size / s.factor, old.origin, old.weight * s.factor};
          pb.dims.insert(pb.dims.begin() + static_cast<std::ptrdiff_t>(d) + 1,
                         PDim{s.factor, old.origin, old.weight});
          break;
        }
    CoordMap rm(rs.size());
    for (size_t k = 0; k < rs.size(); ++k) rm[k].aff.c = region[k].first;
    for (size_t d = 0; d < pb.dims.size(); ++d)
      rm[static_cast<size_t>(pb.dims[d].origin)].aff.addCoef(d, pb.dims[d].weight);
    try {
      const int32_t node = inst(pb, root, rm);
      CoordMap sm = rm;
      if (axis >= 0) sm[static_cast<size_t>(axis)].aff.c += offset;
      const std::vector<int64_t> st = bufferStrides(storeValue, shapeOf(storeValue));
      Store store;
      store.node = node;
      store.buffer = bufferOf_.at(storeValue);
      store.type = typeOf(storeValue);
      for (size_t k = 0; k < sm.size(); ++k) store.off.addScaled(sm[k].aff, st[k]);
      store.off.trim();
      pb.prog.stores.push_back(store);
      for (const PDim& d : pb.dims) pb.prog.dims.push_back(d.size);
      pb.prog.inner = pb.inner;
      pb.prog.label = "'" + g_.value(storeValue).name + "'";
      steps_.push_back(std::make_unique<PassStep>(std::move(pb.prog), threads_));
      return;
    } catch (const NeedSplit& s) {
      const PDim& d = pb.dims.at(static_cast<size_t>(s.dim));
      if (d.origin < 0) throw MaterializeRequest{s.fallback};
      splits.push_back({d.origin, d.weight, s.factor});
    }
  }
  throw Refusal{"the iteration space for '" + g_.value(root).name + "' needs too many refinements"};
}

void GroupCompiler::buildRoot(ValueId v) {
  const NodeId n = g_.value(v).producer;
  const Node& node = g_.node(n);
  if (!inline_.at(n)) {
    if (!stepped_.insert(n).second) return;
    NodeBinding b;
    b.node = node;
    for (ValueId in : node.inputs) {
      b.inputs.push_back(in == kNoValue ? -1 : bufferOf_.at(in));
      b.inputTypes.push_back(in == kNoValue ? TensorType{} : g_.value(in).type);
    }
    for (ValueId out : node.outputs) {
      if (out != kNoValue && !bufferOf_.count(out)) materialize(out);
      b.outputs.push_back(out == kNoValue ? -1 : bufferOf_.at(out));
      b.outputTypes.push_back(out == kNoValue ? TensorType{} : g_.value(out).type);
    }
    steps_.push_back(makeNodeStep(std::move(b), threads_));
    return;
  }
  if (node.op == "Concat") {
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis"),
                                       static_cast<int64_t>(shapeOf(v).size()));
    int64_t offset = 0;
    for (ValueId in : node.inputs) {
      if (numElements(shapeOf(in)) > 0) buildPass(in, v, v, static_cast<int>(axis), offset);
      offset += shapeOf(in)[static_cast<size_t>(axis)];
    }
    return;
  }
  buildPass(v, v, v, -1, 0);
}

void GroupCompiler::build() {
  steps_.clear();
  stepped_.clear();
  std::vector<ValueId> roots;
  for (ValueId v : materialized_)
    if (isMember(g_.value(v).producer)) roots.push_back(v);
  std::sort(roots.begin(), roots.end(), [&](ValueId a, ValueId b) {
    const NodeId pa = g_.value(a).producer, pb = g_.value(b).producer;
    return pa != pb ? pa < pb : a < b;
  });
  for (ValueId v : roots) buildRoot(v);
}

// Every member's types as the registry infers them, and whether it is
// inlined into passes or runs as a step of its own.
void GroupCompiler::checkMembers() {
  // The registry must accept every node's types (its reference kernel is
  // the fallback, and an Unsupported type must be a refusal, not a throw at run time).
  for (NodeId n : members_) {
    const Node& node = g_.node(n);
    std::vector<TensorType> in;
    for (ValueId v : node.inputs) in.push_back(v == kNoValue ? TensorType{} : g_.value(v).type);
    std::vector<TensorType> out;
    // An output shape decided by a run-time input is the model's
    // declaration: the reference kernel checks the values against it.
    const bool declaredShape = shapeDecidingRuntimeInput(node) != nullptr;
    try {
      if (!declaredShape) out = inferNode(node, in);
    } catch (const Error& e) {
      throw Refusal{e.what()};
    }
    for (size_t i = 0; i < node.outputs.size() && i < out.size(); ++i) {
      const ValueId v = node.outputs[i];
      if (v == kNoValue) continue;
      const TensorType& declared = g_.value(v).type;
      // Value-dependent shapes (ConstantOfShape, Range) infer a placeholder.
      const bool placeholder = numElements(out[i].shape) == 0 && numElements(declared.shape) != 0;
      if (out[i].elementType != declared.elementType || (out[i].shape != declared.shape && !placeholder))
        throw Refusal{label(node) + ": output '" + g_.value(v).name + "' is declared " +
                      declared.toString() + " but the op gives " + out[i].toString()};
    }
    const std::string why = inlineRefusal(g_, n);
    // Alone, a quantizer runs its own vectorised step (native_quantize.h);
    // the pass form is for fusing it with its neighbours.
    const bool quantizerAlone = members_.size() == 1 && (node.op == "QuantizeLinear" || node.op == "DequantizeLinear");
    inline_[n] = why.empty() && !quantizerAlone;
    if (!why.empty() && members_.size() > 1 && opKindOf(node.op) != OpKind::Anchor)
      throw Refusal{why + "; the native backend fuses it with nothing"};
  }
}

// Buffers for the kernel's inputs, outputs and constants; the values that
// non-fused nodes read and write are materialised.
void GroupCompiler::bindBuffers() {
  for (size_t i = 0; i < req_.inputs.size(); ++i)
    bufferOf_[req_.inputs[i]] = addBuffer({BufferDesc::Input, static_cast<int>(i), Tensor(),
                                           g_.value(req_.inputs[i]).type});
  for (size_t i = 0; i < req_.outputs.size(); ++i) {
    const ValueId v = req_.outputs[i];
    if (!isMember(g_.value(v).producer))
      throw Refusal{"output '" + g_.value(v).name + "' is not produced by the group"};
    bufferOf_[v] = addBuffer({BufferDesc::Output, static_cast<int>(i), Tensor(), g_.value(v).type});
    materialized_.insert(v);
  }
  for (NodeId n : members_)
    for (ValueId v : g_.node(n).inputs) {
      if (v == kNoValue || bufferOf_.count(v) || isMember(g_.value(v).producer)) continue;
      const Value& val = g_.value(v);
      if (!val.isConstant())
        throw Refusal{"value '" + val.name + "' read by " + label(g_.node(n)) +
                      " is neither a kernel input nor a constant"};
      bufferOf_[v] = addBuffer({BufferDesc::Constant, 0, *val.constant, val.type});
    }
  // Non-fused nodes work on buffers: their inputs and outputs are materialised.
  for (NodeId n : members_) {
    if (inline_[n]) continue;
    for (ValueId v : g_.node(n).inputs)
      if (v != kNoValue && isMember(g_.value(v).producer)) materialize(v);
    for (ValueId v : g_.node(n).outputs)
      if (v != kNoValue) materialize(v);
  }
}

std::vector<int64_t> channelsLastStrides(const Shape& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  if (shape.size() < 3) return stridesOf(shape);
  int64_t step = shape[1];  // channels innermost, then the spatial dims, then the batch
  for (size_t k = shape.size(); k-- > 2;) {
    st[k] = step;
    step *= shape[k];
  }
  st[0] = step;
  return st;
}

std::vector<int64_t> GroupCompiler::bufferStrides(ValueId v, const Shape& layout) const {
  return channelsLast_.count(v) && layout == shapeOf(v) ? channelsLastStrides(layout) : stridesOf(layout);
}

std::unique_ptr<NativeKernel> GroupCompiler::compile() {
  members_ = req_.members();
  if (members_.empty()) throw Refusal{"the group is empty"};
  if (req_.outputs.empty()) throw Refusal{"the group " + req_.toString() + " has no outputs"};

  checkMembers();
  bindBuffers();

  for (int attempt = 0; attempt < 64; ++attempt) {
    try {
      build();
      auto kernel = std::make_unique<NativeKernel>();
      for (BufferDesc& d : buffers_)
        if (d.kind == BufferDesc::Scratch) d.tensor = Tensor(d.type);
      kernel->table_.ptr.assign(buffers_.size(), nullptr);
      for (size_t b = 0; b < buffers_.size(); ++b)
        if (buffers_[b].kind == BufferDesc::Constant || buffers_[b].kind == BufferDesc::Scratch)
          kernel->table_.ptr[b] = buffers_[b].tensor.raw();
      kernel->buffers_ = std::move(buffers_);
      kernel->steps_ = std::move(steps_);
      kernel->inputCount_ = req_.inputs.size();
      kernel->outputCount_ = req_.outputs.size();
      kernel->label_ = req_.toString();
      kernel->request_ = req_;
      kernel->threads_ = threads_;
      kernel->channelsLast_ = channelsLast_;
      kernel->elementwise_ = true;
      for (NodeId n : members_) {
        const std::string& op = g_.node(n).op;
        kernel->elementwise_ = kernel->elementwise_ && inline_[n] &&
                               (unaryOps().count(op) || binaryOps().count(op) || variadicOps().count(op) ||
                                op == "Where" || op == "Cast" || op == "Identity" ||
                                op == "QuantizeLinear" || op == "DequantizeLinear");
      }
      return kernel;
    } catch (const MaterializeRequest& r) {
      if (materialized_.count(r.value))
        throw Refusal{"cannot express '" + g_.value(r.value).name + "' in one pass"};
      materialize(r.value);
    }
  }
  throw Refusal{"the group needs too many intermediate buffers"};
}

}  // namespace collage::native::lowering

namespace collage::native {

using namespace lowering;

namespace {

// QuantizeLinear and DequantizeLinear fuse as float arithmetic that is exact
// against the reference's (lowering's instQuantize / instDequantize): their
// integers are held as floats in the pass, loaded from and stored to u8/s8.
// The scale and zero point must be constants, one value or one per channel
// of `axis`.
std::string quantizerInlineRefusal(const Graph& graph, const Node& node) {
  const std::string who = label(node);
  auto type = [&](ValueId v) { return graph.value(v).type.elementType; };
  auto eightBit = [](ElementType t) { return t == ElementType::UInt8 || t == ElementType::Int8; };
  if (node.attrs.getInt("block_size", 0) != 0) return who + ": blocked quantization runs as a kernel of its own";
  const ValueId x = node.inputs[0], y = node.outputs[0];
  if (node.op == "QuantizeLinear" ? type(x) != ElementType::Float32 || !eightBit(type(y)) : !eightBit(type(x)))
    return who + ": fused passes quantize float32 to uint8 or int8 only";
  const Shape& xs = graph.value(x).type.shape;
  for (size_t i = 1; i < node.inputs.size(); ++i) {
    const ValueId v = node.inputs[i];
    if (v == kNoValue) continue;
    const Value& value = graph.value(v);
    if (!value.isConstant())
      return who + ": its " + (i == 1 ? "scale" : "zero point") + " '" + value.name +
             "' is a run-time tensor, so it runs as a kernel of its own";
    const Shape& ps = value.type.shape;
    if (value.type.numElements() != 1 && (ps.size() != 1 || xs.size() < 2))
      return who + ": blocked quantization runs as a kernel of its own";
  }
  return {};
}

// A Pad fuses as a view with zeros (instPad): only constant-zero padding
// is that. Reflect, edge and wrap read the input where the pass reads
// padding, and a non-zero constant is not the zero a consumer's padding
// (a Conv's, oneDNN's) would give, so they run as kernels of their own.
std::string padInlineRefusal(const Graph& graph, const Node& node) {
  const std::string who = label(node);
  const std::string mode = node.attrs.getString("mode", "constant");
  if (mode != "constant")
    return who + ": a '" + mode + "' Pad is not zero padding; it runs as a kernel of its own";
  const float value = node.attrs.getFloat("constant_value", 0.0f);
  if (value != 0.0f)
    return who + ": a Pad with constant value " + std::to_string(value) +
           " is not zero padding; it runs as a kernel of its own";
  for (size_t i = 1; i < node.inputs.size(); ++i)
    if (node.inputs[i] != kNoValue)
      return who + ": its pads, value or axes are inputs, not attributes; it runs as a kernel of its own";
  try {
    padAmounts(node, static_cast<int64_t>(graph.value(node.inputs[0]).type.shape.size()));
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

std::string inlineRefusal(const Graph& graph, NodeId n) {
  const Node& node = graph.node(n);
  const std::string& op = node.op;
  const std::string who = label(node);
  if (op == "QuantizeLinear" || op == "DequantizeLinear") return quantizerInlineRefusal(graph, node);
  const bool known = unaryOps().count(op) || binaryOps().count(op) || variadicOps().count(op) ||
                     viewOps().count(op) || reductionOps().count(op) || op == "Where" ||
                     op == "Cast";
  if (!known) return who + ": " + op + " runs as a kernel of its own";
  // A fused pass is built with the parameters (Clip's bounds, Slice's
  // starts) as constants; the reference kernel reads run-time ones.
  for (const ConstInput* slot : runtimeInputsOf(node)) {
    const Value& value = graph.value(node.inputs[static_cast<size_t>(slot->index)]);
    if (!value.isConstant())
      return who + ": input '" + slot->attribute + "' ('" + value.name +
             "') is a run-time tensor, so it runs as a kernel of its own";
  }
  if (op == "Pad")
    if (std::string why = padInlineRefusal(graph, node); !why.empty()) return why;
  auto type = [&](ValueId v) { return graph.value(v).type.elementType; };
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const ValueId v = node.inputs[i];
    if (v == kNoValue) continue;
    const ElementType t = type(v);
    if (op == "Gather" && i == 1) {
      if (t != ElementType::Int64 && t != ElementType::Int32)
        return who + ": indices of type " + std::string(elementTypeName(t));
      continue;
    }
    if (op == "Cast" ? !loadableType(t) : !computeType(t))
      return who + ": input '" + graph.value(v).name + "' is " + std::string(elementTypeName(t)) +
             " (fused passes compute in float32 and bool)";
  }
  for (ValueId v : node.outputs)
    if (v != kNoValue && !computeType(type(v)))
      return who + ": output '" + graph.value(v).name + "' is " +
             std::string(elementTypeName(type(v))) + " (fused passes compute in float32 and bool)";
  if (reductionOps().count(op))
    for (ValueId v : node.inputs)
      if (v != kNoValue && type(v) != ElementType::Float32)
        return who + ": reductions are fused for float32 only";
  return {};
}

CompileResult compileGroup(const KernelRequest& request, int threads) {
  try {
    GroupCompiler compiler(request, threads);
    return CompileResult::ok(compiler.compile());
  } catch (const Refusal& r) {
    return CompileResult::refuse(r.reason);
  } catch (const Error& e) {
    return CompileResult::refuse(std::string("native: ") + e.what());
  }
}

std::string describeKernel(const Kernel& kernel) {
  if (const auto* k = dynamic_cast<const NativeKernel*>(&kernel)) return k->describe();
  return {};
}

}  // namespace collage::native
