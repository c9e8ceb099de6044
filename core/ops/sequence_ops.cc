// The Sequence ops exporters emit around loops: SequenceEmpty,
// SequenceConstruct, SequenceInsert, SequenceAt, SequenceLength,
// SequenceErase, ConcatFromSequence and SplitToSequence. A sequence is a
// Tensor of sequence type (tensor.h): its static type has one element type
// and shape, and a length that may be known only at run time. The ops that
// make a tensor whose shape depends on the length (ConcatFromSequence) need
// it known at import.
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/ir/element_type.h"
#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

// What the Sequence ops share: opaque to the backends (a sequence never
// crosses a kernel boundary), and sequences allowed.
OpSchema sequenceOpSchema(const char* name, int minInputs, int maxInputs) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Opaque;
  s.takesSequences = true;
  s.minInputs = minInputs;
  s.maxInputs = maxInputs;
  return s;
}

const TensorType& requireSequence(const Node& node, const Types& in, size_t i) {
  if (i >= in.size() || !in[i].isSequence())
    throw Error(nodeLabel(node) + "input " + std::to_string(i) + " must be a sequence, got " +
                (i < in.size() ? in[i].toString() : std::string("nothing")));
  return in[i];
}

const TensorType& requireTensor(const Node& node, const Types& in, size_t i) {
  if (i >= in.size() || in[i].isSequence() || in[i].elementType == ElementType::Undefined)
    throw Error(nodeLabel(node) + "input " + std::to_string(i) + " must be a tensor, got " +
                (i < in.size() ? in[i].toString() : std::string("nothing")));
  return in[i];
}

// A position input: one integer (int32 or int64), checked against [-n, n)
// (or [-n, n] where inserting at the end is allowed); returns it in [0, n].
int64_t positionOf(const Node& node, const Tensor& pos, int64_t n, bool endAllowed) {
  if (pos.isSequence() || pos.numElements() != 1 ||
      (pos.elementType() != ElementType::Int64 && pos.elementType() != ElementType::Int32))
    throw Error(nodeLabel(node) + "the position must be one int32 or int64 value, got " +
                pos.type().toString());
  int64_t p = pos.toInts()[0];
  const int64_t hi = endAllowed ? n : n - 1;
  if (p < -n || p > hi)
    throw Error(nodeLabel(node) + "position " + std::to_string(p) +
                " is out of range for a sequence of " + std::to_string(n) +
                (n == 1 ? " tensor" : " tensors"));
  return p < 0 ? p + n : p;
}

void checkPositionType(const Node& node, const Types& in, size_t i) {
  if (i >= in.size() || in[i].elementType == ElementType::Undefined) return;
  if (in[i].isSequence() || in[i].numElements() != 1 ||
      (in[i].elementType != ElementType::Int64 && in[i].elementType != ElementType::Int32))
    throw Error(nodeLabel(node) + "the position must be one int32 or int64 value, got " +
                in[i].toString());
}

int64_t grown(int64_t length, int64_t by) {
  return length == kUnknownLength ? length : length + by;
}

void addSequenceEmpty(OpRegistry& r) {
  OpSchema s = sequenceOpSchema("SequenceEmpty", 0, 0);
  // ONNX's default element type is float (TensorProto FLOAT = 1).
  s.attributes = {{"dtype", AttributeType::Int, Attribute(int64_t{1})}};
  s.infer = [](const Node& node, const Types&) {
    const ElementType et = elementTypeFromOnnx(static_cast<int>(node.attrs.getInt("dtype")));
    if (et == ElementType::Undefined)
      throw Unsupported(nodeLabel(node) + "dtype " + std::to_string(node.attrs.getInt("dtype")) +
                        " is not supported");
    return Types{TensorType::sequenceOf(TensorType{et, {}}, 0)};
  };
  s.reference = [](const Node&, const Inputs&, const Outputs& out) {
    if (out[0]) *out[0] = Tensor::sequence(out[0]->type(), {});
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addSequenceConstruct(OpRegistry& r) {
  OpSchema s = sequenceOpSchema("SequenceConstruct", 1, std::numeric_limits<int>::max());
  s.infer = [](const Node& node, const Types& in) {
    const TensorType& first = requireTensor(node, in, 0);
    for (size_t i = 1; i < in.size(); ++i) {
      const TensorType& t = requireTensor(node, in, i);
      if (t.elementType != first.elementType)
        throw Error(nodeLabel(node) + "input " + std::to_string(i) + " is " + t.toString() +
                    ", input 0 is " + first.toString() + ": a sequence has one element type");
      if (t.shape != first.shape)
        throw Unsupported(nodeLabel(node) + "input " + std::to_string(i) + " is " + t.toString() +
                          ", input 0 is " + first.toString() +
                          ": sequences of tensors of different shapes are not supported");
    }
    return Types{TensorType::sequenceOf(first, static_cast<int64_t>(in.size()))};
  };
  s.reference = [](const Node&, const Inputs& in, const Outputs& out) {
    std::vector<Tensor> items;
    for (const Tensor* t : in) items.push_back(t->clone());
    *out[0] = Tensor::sequence(out[0]->type(), std::move(items));
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addSequenceInsert(OpRegistry& r) {
  OpSchema s = sequenceOpSchema("SequenceInsert", 2, 3);
  s.infer = [](const Node& node, const Types& in) {
    const TensorType& seq = requireSequence(node, in, 0);
    const TensorType& t = requireTensor(node, in, 1);
    checkPositionType(node, in, 2);
    if (t.elementType != seq.elementType)
      throw Error(nodeLabel(node) + "cannot insert a " + t.toString() + " into a " +
                  seq.toString());
    if (seq.sequenceLength != 0 && t.shape != seq.shape)
      throw Unsupported(nodeLabel(node) + "inserting a " + t.toString() + " into a " +
                        seq.toString() +
                        ": sequences of tensors of different shapes are not supported");
    return Types{TensorType::sequenceOf(t, grown(seq.sequenceLength, 1))};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    std::vector<Tensor> items = in[0]->items();
    const int64_t n = static_cast<int64_t>(items.size());
    const int64_t at = in.size() > 2 && in[2] ? positionOf(node, *in[2], n, true) : n;
    items.insert(items.begin() + at, in[1]->clone());
    *out[0] = Tensor::sequence(in[1]->type(), std::move(items));
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addSequenceAt(OpRegistry& r) {
  OpSchema s = sequenceOpSchema("SequenceAt", 2, 2);
  s.infer = [](const Node& node, const Types& in) {
    const TensorType& seq = requireSequence(node, in, 0);
    checkPositionType(node, in, 1);
    if (seq.sequenceLength == 0)
      throw Error(nodeLabel(node) + "reads from a sequence that is always empty");
    return Types{seq.elementTensorType()};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const auto& items = in[0]->items();
    const int64_t at = positionOf(node, *in[1], static_cast<int64_t>(items.size()), false);
    const Tensor& item = items[static_cast<size_t>(at)];
    if (item.type() != out[0]->type())
      throw Error(nodeLabel(node) + "element " + std::to_string(at) + " is " +
                  item.type().toString() + ", " + out[0]->type().toString() + " at import");
    *out[0] = item.clone();
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addSequenceLength(OpRegistry& r) {
  OpSchema s;
  s.name = "SequenceLength";
  s.kind = OpKind::Opaque;
  s.takesSequences = true;
  s.infer = [](const Node& node, const Types& in) {
    requireSequence(node, in, 0);
    return Types{{ElementType::Int64, {}}};
  };
  s.reference = [](const Node&, const Inputs& in, const Outputs& out) {
    out[0]->data<int64_t>()[0] = static_cast<int64_t>(in[0]->items().size());
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addSequenceErase(OpRegistry& r) {
  OpSchema s = sequenceOpSchema("SequenceErase", 1, 2);
  s.infer = [](const Node& node, const Types& in) {
    const TensorType& seq = requireSequence(node, in, 0);
    checkPositionType(node, in, 1);
    if (seq.sequenceLength == 0)
      throw Error(nodeLabel(node) + "erases from a sequence that is always empty");
    return Types{TensorType::sequenceOf(seq, grown(seq.sequenceLength, -1))};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    std::vector<Tensor> items = in[0]->items();
    const int64_t n = static_cast<int64_t>(items.size());
    if (n == 0) throw Error(nodeLabel(node) + "erases from an empty sequence");
    const int64_t at = in.size() > 1 && in[1] ? positionOf(node, *in[1], n, false) : n - 1;
    items.erase(items.begin() + at);
    *out[0] = Tensor::sequence(in[0]->type().elementTensorType(), std::move(items));
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// Joins tensors of one shape along `axis` (new_axis = 0) or stacks them on a
// new axis inserted there (new_axis = 1).
Tensor joinTensors(const std::vector<Tensor>& items, const TensorType& type, int64_t axis,
                   bool newAxis) {
  const Shape& s = type.shape;
  const int64_t n = static_cast<int64_t>(items.size());
  Shape out = s;
  if (newAxis)
    out.insert(out.begin() + axis, n);
  else
    out[static_cast<size_t>(axis)] *= n;
  Tensor result(type.elementType, out);
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[static_cast<size_t>(i)];
  // Bytes of one item per outer index: from `axis` on (the joined axis included when not new).
  const size_t block = static_cast<size_t>(numElements(Shape(s.begin() + axis, s.end()))) *
                       elementSize(type.elementType);
  char* dst = static_cast<char*>(result.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      if (block)
        std::memcpy(dst + (o * n + k) * block,
                    static_cast<const char*>(items[static_cast<size_t>(k)].raw()) + o * block,
                    block);
  return result;
}

void addConcatFromSequence(OpRegistry& r) {
  OpSchema s;
  s.name = "ConcatFromSequence";
  s.kind = OpKind::Opaque;
  s.takesSequences = true;
  s.attributes = {{"axis", AttributeType::Int, std::nullopt, true},
                  {"new_axis", AttributeType::Int, Attribute(int64_t{0})}};
  s.infer = [](const Node& node, const Types& in) {
    const TensorType& seq = requireSequence(node, in, 0);
    if (seq.sequenceLength == kUnknownLength)
      throw Error(nodeLabel(node) +
                  "the length of the input sequence is known only at run time, "
                  "and the output's shape depends on it; Collage needs static shapes (a Loop's "
                  "scan output gives the same stacked tensor with a static shape when the trip "
                  "count is constant)");
    if (seq.sequenceLength == 0)
      throw Error(nodeLabel(node) + "the input sequence is always empty: nothing to concatenate");
    const bool newAxis = node.attrs.getInt("new_axis") != 0;
    const int64_t axis =
        normalizeAxis(node, node.attrs.getInt("axis"), seq.rank() + (newAxis ? 1 : 0));
    Shape out = seq.shape;
    if (newAxis)
      out.insert(out.begin() + axis, seq.sequenceLength);
    else
      out[static_cast<size_t>(axis)] *= seq.sequenceLength;
    return Types{{seq.elementType, out}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const auto& items = in[0]->items();
    if (items.empty()) throw Error(nodeLabel(node) + "the input sequence is empty");
    const TensorType type = items.front().type();
    for (const Tensor& t : items)
      if (t.type() != type)
        throw Unsupported(nodeLabel(node) + "the sequence holds " + type.toString() + " and " +
                          t.type().toString() + ": tensors of different shapes are not supported");
    const bool newAxis = node.attrs.getInt("new_axis") != 0;
    const int64_t axis =
        normalizeAxis(node, node.attrs.getInt("axis"), type.rank() + (newAxis ? 1 : 0));
    *out[0] = joinTensors(items, type, axis, newAxis);
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// SplitToSequence's piece sizes along the axis: from the `split` attribute
// (the canonical form of the constant input: a scalar is a piece length, a
// 1-D tensor the lengths), else pieces of 1.
std::vector<int64_t> splitSizes(const Node& node, int64_t dim) {
  std::vector<int64_t> sizes;
  if (const Attribute* a = node.attrs.find("split")) {
    const Tensor& t = std::get<Tensor>(*a);
    std::vector<int64_t> v = t.toInts();
    if (t.rank() == 0) {
      if (v[0] <= 0)
        throw Error(nodeLabel(node) + "split must be positive, got " + std::to_string(v[0]));
      for (int64_t at = 0; at < dim; at += v[0]) sizes.push_back(std::min(v[0], dim - at));
    } else {
      int64_t sum = 0;
      for (int64_t x : v) {
        if (x < 0)
          throw Error(nodeLabel(node) + "split has a negative length " + std::to_string(x));
        sum += x;
      }
      if (sum != dim)
        throw Error(nodeLabel(node) + "split lengths sum to " + std::to_string(sum) +
                    ", the axis has " + std::to_string(dim));
      sizes = v;
    }
  } else {
    sizes.assign(static_cast<size_t>(dim), 1);
  }
  return sizes;
}

// Whether the pieces lose the split axis (keepdims = 0). The spec ignores
// keepdims when `split` is given, but ONNX Runtime honours it for a scalar
// split, and PyTorch's exporter writes `x.unbind(0)` as SplitToSequence with
// split = 1 and keepdims = 0, relying on that: pieces of 1 then drop the axis.
bool dropsSplitAxis(const Node& node) {
  if (node.attrs.getInt("keepdims") != 0) return false;
  const Attribute* split = node.attrs.find("split");
  if (!split) return true;
  const Tensor& t = std::get<Tensor>(*split);
  return t.rank() == 0 && t.toInts()[0] == 1;
}

void addSplitToSequence(OpRegistry& r) {
  OpSchema s = sequenceOpSchema("SplitToSequence", 1, 1);  // `split` becomes an attribute
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{0})},
                  {"keepdims", AttributeType::Int, Attribute(int64_t{1})}};
  // The piece lengths decide the elements' shapes: a constant, kept whole
  // (its rank matters) as a tensor attribute.
  s.constInputs = {{1, "split", AttributeType::Tensor}};
  s.infer = [](const Node& node, const Types& in) {
    const TensorType& x = requireTensor(node, in, 0);
    if (x.rank() == 0)
      throw Error(nodeLabel(node) + "input is a scalar; SplitToSequence splits a tensor of rank 1 or more");
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis"), x.rank());
    const int64_t dim = x.shape[static_cast<size_t>(axis)];
    const std::vector<int64_t> sizes = splitSizes(node, dim);
    Shape piece = x.shape;
    if (dropsSplitAxis(node)) {
      piece.erase(piece.begin() + axis);
    } else {
      for (int64_t len : sizes)
        if (len != sizes.front())
          throw Unsupported(nodeLabel(node) + "pieces of different lengths along axis " +
                            std::to_string(axis) +
                            ": sequences of tensors of different shapes are not supported");
      piece[static_cast<size_t>(axis)] = sizes.empty() ? 0 : sizes.front();
    }
    return Types{TensorType::sequenceOf(TensorType{x.elementType, piece},
                                        static_cast<int64_t>(sizes.size()))};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Tensor& x = *in[0];
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis"), x.rank());
    const Shape& shape = x.shape();
    const int64_t dim = shape[static_cast<size_t>(axis)];
    const std::vector<int64_t> sizes = splitSizes(node, dim);
    const bool dropAxis = dropsSplitAxis(node);
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= shape[static_cast<size_t>(i)];
    const size_t row =
        static_cast<size_t>(numElements(Shape(shape.begin() + axis + 1, shape.end()))) *
        elementSize(x.elementType());
    std::vector<Tensor> items;
    int64_t start = 0;
    for (int64_t len : sizes) {
      Shape piece = shape;
      piece[static_cast<size_t>(axis)] = len;
      Tensor t(x.elementType(), piece);
      for (int64_t o = 0; o < outer; ++o)
        if (row != 0 && len != 0)
          std::memcpy(static_cast<char*>(t.raw()) + o * len * row,
                      static_cast<const char*>(x.raw()) + (o * dim + start) * row, row * len);
      if (dropAxis) piece.erase(piece.begin() + axis);
      items.push_back(t.reshaped(piece));
      start += len;
    }
    *out[0] = Tensor::sequence(out[0]->type(), std::move(items));
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

}  // namespace

void registerSequenceOps(OpRegistry& r) {
  addSequenceEmpty(r);
  addSequenceConstruct(r);
  addSequenceInsert(r);
  addSequenceAt(r);
  addSequenceLength(r);
  addSequenceErase(r);
  addConcatFromSequence(r);
  addSplitToSequence(r);
}

}  // namespace collage
