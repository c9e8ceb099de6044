// Injective ops that only move elements: Reshape, Flatten, Squeeze,
// Unsqueeze, Transpose, Concat, Split, Slice, Gather, Expand, Tile. They work
// on any element type with a size (elements are moved as raw bytes).
// Parameters that newer opsets pass as constant inputs (Reshape's shape,
// Slice's starts/ends/axes/steps, ...) arrive as attributes.
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/ops/op_registry.h"
#include "core/ops/broadcast.h"
#include "core/ops/layout_attrs.h"
#include "core/ops/op_helpers.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

constexpr int kVariadic = std::numeric_limits<int>::max();

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

void requireMovable(const Node& node, ElementType t) {
  if (elementSize(t) == 0) throw unsupportedType(node, t);
}

void copyBytes(const Tensor& in, Tensor& out) {
  if (in.byteSize()) std::memcpy(out.raw(), in.raw(), in.byteSize());
}

// The product of shape[from, to).
int64_t dimProduct(const Shape& shape, int64_t from, int64_t to) {
  int64_t p = 1;
  for (int64_t d = from; d < to; ++d) p *= shape[d];
  return p;
}

// An op whose output is its input with another shape (Reshape, Flatten, Squeeze, Unsqueeze).
void addReshapeLike(OpRegistry& r, const std::string& name, std::vector<AttributeSpec> attrs,
                    std::vector<ConstInput> constInputs,
                    std::function<Shape(const Node&, const Shape&)> outShape) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Injective;
  s.attributes = std::move(attrs);
  s.constInputs = std::move(constInputs);
  s.infer = [outShape](const Node& node, const Types& in) {
    requireMovable(node, in[0].elementType);
    Shape shape = outShape(node, in[0].shape);
    if (numElements(shape) != in[0].numElements())
      throw Error(nodeLabel(node) + "cannot reshape " + shapeToString(in[0].shape) + " to " +
                  shapeToString(shape));
    return Types{{in[0].elementType, shape}};
  };
  s.reference = [](const Node&, const Inputs& in, const Outputs& out) {
    copyBytes(*in[0], *out[0]);
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

Shape reshapeShape(const Node& node, const Shape& in) {
  const std::vector<int64_t> shape = node.attrs.getInts("shape");
  const bool allowZero = node.attrs.getInt("allowzero", 0) != 0;
  Shape out;
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (d == -1) {
      if (inferred >= 0)
        throw Error(nodeLabel(node) + "shape " + intsToString(shape) + " has more than one -1");
      inferred = static_cast<int64_t>(i);
      d = 1;
    } else if (d == 0 && !allowZero) {
      if (i >= in.size())
        throw Error(nodeLabel(node) + "shape " + intsToString(shape) + " copies dimension " +
                    std::to_string(i) + " of a rank-" + std::to_string(in.size()) + " input");
      d = in[i];
    } else if (d < 0) {
      throw Error(nodeLabel(node) + "shape " + intsToString(shape) + " has a negative dimension");
    }
    out.push_back(d);
    // A model may claim any sizes: a product past int64 is refused, not wrapped.
    if (__builtin_mul_overflow(known, d, &known))
      throw Error(nodeLabel(node) + "shape " + intsToString(shape) +
                  " has more elements than a tensor can hold");
  }
  if (inferred >= 0) {
    const int64_t total = numElements(in);
    if (known == 0 || total % known != 0)
      throw Error(nodeLabel(node) + "cannot reshape " + shapeToString(in) + " to " +
                  intsToString(shape));
    out[inferred] = total / known;
  }
  return out;
}

Shape flattenShape(const Node& node, const Shape& in) {
  const int64_t rank = static_cast<int64_t>(in.size());
  int64_t axis = node.attrs.getInt("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank)
    throw Error(nodeLabel(node) + "axis " + std::to_string(node.attrs.getInt("axis", 1)) +
                " is out of range for rank " + std::to_string(rank));
  return {dimProduct(in, 0, axis), dimProduct(in, axis, rank)};
}

Shape squeezeShape(const Node& node, const Shape& in) {
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<bool> drop(in.size(), false);
  const std::vector<int64_t> axes = node.attrs.getInts("axes", {});
  if (!axes.empty()) {
    for (int64_t axis : axes) {
      const int64_t d = normalizeAxis(node, axis, rank);
      if (in[d] != 1)
        throw Error(nodeLabel(node) + "cannot squeeze axis " + std::to_string(axis) + " of size " +
                    std::to_string(in[d]) + " in " + shapeToString(in));
      drop[d] = true;
    }
  } else {
    for (size_t d = 0; d < in.size(); ++d) drop[d] = in[d] == 1;
  }
  Shape out;
  for (size_t d = 0; d < in.size(); ++d)
    if (!drop[d]) out.push_back(in[d]);
  return out;
}

Shape unsqueezeShape(const Node& node, const Shape& in) {
  const std::vector<int64_t> axes = node.attrs.getInts("axes");
  const int64_t outRank = static_cast<int64_t>(in.size() + axes.size());
  std::vector<bool> inserted(outRank, false);
  for (int64_t axis : axes) {
    const int64_t d = normalizeAxis(node, axis, outRank);
    if (inserted[d]) throw Error(nodeLabel(node) + "axis " + std::to_string(axis) + " is repeated");
    inserted[d] = true;
  }
  Shape out;
  size_t next = 0;
  for (int64_t d = 0; d < outRank; ++d) out.push_back(inserted[d] ? 1 : in[next++]);
  return out;
}

// ---------------------------------------------------------------------------

void addTranspose(OpRegistry& r) {
  OpSchema s;
  s.name = "Transpose";
  s.kind = OpKind::Injective;
  s.attributes = {{"perm", AttributeType::Ints, std::nullopt}};
  s.infer = [](const Node& node, const Types& in) {
    requireMovable(node, in[0].elementType);
    Shape out;
    for (int64_t p : transposePerm(node, in[0].rank())) out.push_back(in[0].shape[p]);
    return Types{{in[0].elementType, out}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const std::vector<int64_t> perm = transposePerm(node, in[0]->rank());
    const std::vector<int64_t> inStrides = stridesOf(in[0]->shape());
    std::vector<int64_t> strides;
    for (int64_t p : perm) strides.push_back(inStrides[p]);
    copyStrided(makeStridedPlan(out[0]->shape(), {strides}), in[0]->raw(), 0, out[0]->raw(),
                elementSize(in[0]->elementType()));
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// Copies `rows` rows of `rowBytes` from src (pitch srcPitch) to dst (pitch dstPitch).
void copyRows(const void* src, size_t srcPitch, void* dst, size_t dstPitch, size_t rowBytes,
              int64_t rows) {
  if (rowBytes == 0) return;
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  for (int64_t i = 0; i < rows; ++i) std::memcpy(d + i * dstPitch, s + i * srcPitch, rowBytes);
}

void addConcat(OpRegistry& r) {
  OpSchema s;
  s.name = "Concat";
  s.kind = OpKind::Injective;
  s.maxInputs = kVariadic;
  s.attributes = {{"axis", AttributeType::Int, std::nullopt, true}};
  s.infer = [](const Node& node, const Types& in) {
    requireMovable(node, in[0].elementType);
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis"), in[0].rank());
    Shape out = in[0].shape;
    for (size_t i = 1; i < in.size(); ++i) {
      bool ok = in[i].elementType == in[0].elementType && in[i].rank() == in[0].rank();
      for (int64_t d = 0; ok && d < in[0].rank(); ++d) ok = d == axis || in[i].shape[d] == out[d];
      if (!ok)
        throw Error(nodeLabel(node) + "cannot concatenate " + in[0].toString() + " and " +
                    in[i].toString() + " along axis " + std::to_string(axis));
      out[axis] += in[i].shape[axis];
    }
    return Types{{in[0].elementType, out}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& outShape = out[0]->shape();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis"), out[0]->rank());
    const size_t elem = elementSize(out[0]->elementType());
    const int64_t rows = dimProduct(outShape, 0, axis);
    const size_t outPitch = static_cast<size_t>(dimProduct(outShape, axis, out[0]->rank())) * elem;
    size_t offset = 0;
    for (const Tensor* t : in) {
      const size_t pitch = static_cast<size_t>(dimProduct(t->shape(), axis, t->rank())) * elem;
      copyRows(t->raw(), pitch, static_cast<char*>(out[0]->raw()) + offset, outPitch, pitch, rows);
      offset += pitch;
    }
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addSplit(OpRegistry& r) {
  OpSchema s;
  s.name = "Split";
  s.kind = OpKind::Injective;
  s.maxOutputs = kVariadic;
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{0})},
                  {"split", AttributeType::Ints, std::nullopt},
                  {"num_outputs", AttributeType::Int, std::nullopt}};
  s.constInputs = {{1, "split", AttributeType::Ints}};
  s.infer = [](const Node& node, const Types& in) {
    requireMovable(node, in[0].elementType);
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 0), in[0].rank());
    Types out;
    for (int64_t size : splitSizes(node, in[0].shape, axis)) {
      Shape shape = in[0].shape;
      shape[axis] = size;
      out.push_back({in[0].elementType, shape});
    }
    return out;
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& shape = in[0]->shape();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 0), in[0]->rank());
    const size_t elem = elementSize(in[0]->elementType());
    const int64_t rows = dimProduct(shape, 0, axis);
    const size_t inner = static_cast<size_t>(dimProduct(shape, axis + 1, in[0]->rank())) * elem;
    const size_t inPitch = static_cast<size_t>(shape[axis]) * inner;
    const std::vector<int64_t> sizes = splitSizes(node, shape, axis);
    size_t offset = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t pitch = static_cast<size_t>(sizes[k]) * inner;
      if (k < out.size() && out[k])
        copyRows(static_cast<const char*>(in[0]->raw()) + offset, inPitch, out[k]->raw(), pitch,
                 pitch, rows);
      offset += pitch;
    }
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---------------------------------------------------------------------------
// Slice (opset 13 semantics: clamping, negative steps).

void addSlice(OpRegistry& r) {
  OpSchema s;
  s.name = "Slice";
  s.kind = OpKind::Injective;
  s.attributes = {{"starts", AttributeType::Ints, std::nullopt, true},
                  {"ends", AttributeType::Ints, std::nullopt, true},
                  {"axes", AttributeType::Ints, std::nullopt},
                  {"steps", AttributeType::Ints, std::nullopt}};
  s.constInputs = {{1, "starts", AttributeType::Ints},
                   {2, "ends", AttributeType::Ints},
                   {3, "axes", AttributeType::Ints},
                   {4, "steps", AttributeType::Ints}};
  s.infer = [](const Node& node, const Types& in) {
    requireMovable(node, in[0].elementType);
    Shape out;
    for (const SliceRange& range : sliceRanges(node, in[0].shape)) out.push_back(range.count);
    return Types{{in[0].elementType, out}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const std::vector<SliceRange> ranges = sliceRanges(node, in[0]->shape());
    const std::vector<int64_t> inStrides = stridesOf(in[0]->shape());
    std::vector<int64_t> strides;
    int64_t base = 0;
    for (size_t d = 0; d < ranges.size(); ++d) {
      base += ranges[d].start * inStrides[d];
      strides.push_back(ranges[d].step * inStrides[d]);
    }
    if (out[0]->numElements() == 0) return;
    copyStrided(makeStridedPlan(out[0]->shape(), {strides}), in[0]->raw(), base, out[0]->raw(),
                elementSize(in[0]->elementType()));
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---------------------------------------------------------------------------

void addGather(OpRegistry& r) {
  OpSchema s;
  s.name = "Gather";
  s.kind = OpKind::Injective;
  s.minInputs = s.maxInputs = 2;
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{0})}};
  s.infer = [](const Node& node, const Types& in) {
    requireMovable(node, in[0].elementType);
    if (in[1].elementType != ElementType::Int64 && in[1].elementType != ElementType::Int32)
      throw Error(nodeLabel(node) + "indices must be int32 or int64, not " + in[1].toString());
    if (in[0].rank() == 0)
      throw Error(nodeLabel(node) + "data is a scalar; Gather takes data of rank 1 or more");
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 0), in[0].rank());
    Shape out(in[0].shape.begin(), in[0].shape.begin() + axis);
    out.insert(out.end(), in[1].shape.begin(), in[1].shape.end());
    out.insert(out.end(), in[0].shape.begin() + axis + 1, in[0].shape.end());
    return Types{{in[0].elementType, out}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& shape = in[0]->shape();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 0), in[0]->rank());
    std::vector<int64_t> indices = in[1]->toInts();
    const int64_t dim = shape[axis];
    const size_t elem = elementSize(in[0]->elementType());
    const int64_t outer = dimProduct(shape, 0, axis);
    const size_t inner = static_cast<size_t>(dimProduct(shape, axis + 1, in[0]->rank())) * elem;
    const auto* src = static_cast<const char*>(in[0]->raw());
    auto* dst = static_cast<char*>(out[0]->raw());
    for (int64_t& index : indices) {
      if (index < -dim || index >= dim)
        throw Error(nodeLabel(node) + "index " + std::to_string(index) +
                    " is out of range for dimension " + std::to_string(dim));
      if (index < 0) index += dim;
    }
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t index : indices) {
        std::memcpy(dst, src + (o * dim + index) * inner, inner);
        dst += inner;
      }
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addExpand(OpRegistry& r) {
  OpSchema s;
  s.name = "Expand";
  s.kind = OpKind::Injective;
  s.attributes = {{"shape", AttributeType::Ints, std::nullopt, true}};
  s.constInputs = {{1, "shape", AttributeType::Ints}};
  s.infer = [](const Node& node, const Types& in) {
    requireMovable(node, in[0].elementType);
    const std::vector<int64_t> shape = node.attrs.getInts("shape");
    for (int64_t d : shape)
      if (d < 0) throw Error(nodeLabel(node) + "shape " + intsToString(shape) + " is negative");
    return Types{{in[0].elementType, broadcastShapes(node, {in[0].shape, shape})}};
  };
  s.reference = [](const Node&, const Inputs& in, const Outputs& out) {
    const Shape& shape = out[0]->shape();
    copyStrided(makeStridedPlan(shape, {broadcastStrides(in[0]->shape(), shape)}), in[0]->raw(), 0,
                out[0]->raw(), elementSize(in[0]->elementType()));
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

std::vector<int64_t> tileRepeats(const Node& node, const Shape& in) {
  const std::vector<int64_t> repeats = node.attrs.getInts("repeats");
  bool ok = repeats.size() == in.size();
  for (int64_t v : repeats) ok = ok && v >= 0;
  if (!ok)
    throw Error(nodeLabel(node) + "repeats " + intsToString(repeats) +
                " must be one non-negative count per dimension of " + shapeToString(in));
  return repeats;
}

void addTile(OpRegistry& r) {
  OpSchema s;
  s.name = "Tile";
  s.kind = OpKind::Injective;
  s.attributes = {{"repeats", AttributeType::Ints, std::nullopt, true}};
  s.constInputs = {{1, "repeats", AttributeType::Ints}};
  s.infer = [](const Node& node, const Types& in) {
    requireMovable(node, in[0].elementType);
    const std::vector<int64_t> repeats = tileRepeats(node, in[0].shape);
    Shape out = in[0].shape;
    for (size_t d = 0; d < out.size(); ++d) out[d] *= repeats[d];
    return Types{{in[0].elementType, out}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    // The output [r0*d0, r1*d1, ...] in row-major order is [r0, d0, r1, d1, ...]:
    // a strided copy that reads the input with stride 0 along each repeat.
    const Shape& shape = in[0]->shape();
    const std::vector<int64_t> repeats = tileRepeats(node, shape);
    const std::vector<int64_t> inStrides = stridesOf(shape);
    Shape dims;
    std::vector<int64_t> strides;
    for (size_t d = 0; d < shape.size(); ++d) {
      dims.insert(dims.end(), {repeats[d], shape[d]});
      strides.insert(strides.end(), {0, inStrides[d]});
    }
    copyStrided(makeStridedPlan(dims, {strides}), in[0]->raw(), 0, out[0]->raw(),
                elementSize(in[0]->elementType()));
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// GatherElements: out[i][j][k] = data[index[i][j][k]][j][k] for axis 0 (and
// likewise along other axes); the output has the indices' shape.
void addGatherElements(OpRegistry& r) {
  OpSchema s;
  s.name = "GatherElements";
  s.kind = OpKind::Injective;
  s.minInputs = s.maxInputs = 2;
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{0})}};
  s.infer = [](const Node& node, const Types& in) {
    requireMovable(node, in[0].elementType);
    if (in[1].elementType != ElementType::Int64 && in[1].elementType != ElementType::Int32)
      throw Error(nodeLabel(node) + "indices must be int32 or int64, not " + in[1].toString());
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 0), in[0].rank());
    bool ok = in[1].rank() == in[0].rank();
    for (int64_t d = 0; ok && d < in[0].rank(); ++d)
      ok = d == axis || in[1].shape[d] <= in[0].shape[d];
    if (!ok)
      throw Error(nodeLabel(node) + "indices " + in[1].toString() + " do not fit data " +
                  in[0].toString() + " along axis " + std::to_string(axis));
    return Types{{in[0].elementType, in[1].shape}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 0), in[0]->rank());
    const int64_t dim = in[0]->shape()[axis];
    std::vector<int64_t> indices = in[1]->toInts();
    for (int64_t& index : indices) {
      if (index < -dim || index >= dim)
        throw Error(nodeLabel(node) + "index " + std::to_string(index) +
                    " is out of range for dimension " + std::to_string(dim));
      if (index < 0) index += dim;
    }
    // Walk the output; operand 0 is the data offset without the axis term.
    std::vector<int64_t> strides = stridesOf(in[0]->shape());
    const int64_t axisStride = strides.empty() ? 0 : strides[axis];
    if (!strides.empty()) strides[axis] = 0;
    const StridedPlan plan = makeStridedPlan(out[0]->shape(), {strides});
    const int64_t s0 = plan.innerStride(0);
    visitBySize(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = in[0]->data<T>();
      T* y = out[0]->data<T>();
      forEachRow(plan, [&](int64_t o, const int64_t* off, int64_t n) {
        for (int64_t j = 0; j < n; ++j) y[o + j] = x[off[0] + j * s0 + indices[o + j] * axisStride];
      });
    });
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// Trilu: keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the
// last two dimensions and zeroes the rest.
void addTrilu(OpRegistry& r) {
  OpSchema s;
  s.name = "Trilu";
  s.kind = OpKind::Injective;
  s.attributes = {{"upper", AttributeType::Int, Attribute(int64_t{1})},
                  {"k", AttributeType::Int, Attribute(int64_t{0})}};
  s.constInputs = {{1, "k", AttributeType::Int}};
  s.infer = [](const Node& node, const Types& in) {
    requireMovable(node, in[0].elementType);
    if (in[0].rank() < 2)
      throw Error(nodeLabel(node) + "the input must have rank 2 or more, not " + in[0].toString());
    return Types{in[0]};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& shape = in[0]->shape();
    const int64_t rows = shape[shape.size() - 2], cols = shape.back();
    const int64_t batch = rows * cols != 0 ? in[0]->numElements() / (rows * cols) : 0;
    const bool upper = node.attrs.getInt("upper", 1) != 0;
    const int64_t k = node.attrs.getInt("k", 0);
    visitBySize(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = in[0]->data<T>();
      T* y = out[0]->data<T>();
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t at = (b * rows + i) * cols + j;
            const bool keep = upper ? j - i >= k : j - i <= k;
            y[at] = keep ? x[at] : T(0);
          }
    });
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

}  // namespace

void registerShapeOps(OpRegistry& r) {
  addReshapeLike(r, "Reshape",
                 {{"shape", AttributeType::Ints, std::nullopt, true},
                  {"allowzero", AttributeType::Int, Attribute(int64_t{0})}},
                 {{1, "shape", AttributeType::Ints}}, reshapeShape);
  addReshapeLike(r, "Flatten", {{"axis", AttributeType::Int, Attribute(int64_t{1})}}, {},
                 flattenShape);
  addReshapeLike(r, "Squeeze", {{"axes", AttributeType::Ints, std::nullopt}},
                 {{1, "axes", AttributeType::Ints}}, squeezeShape);
  addReshapeLike(r, "Unsqueeze", {{"axes", AttributeType::Ints, std::nullopt, true}},
                 {{1, "axes", AttributeType::Ints}}, unsqueezeShape);
  addTranspose(r);
  addConcat(r);
  addSplit(r);
  addSlice(r);
  addGather(r);
  addExpand(r);
  addTile(r);
  addGatherElements(r);
  addTrilu(r);
}

}  // namespace collage
