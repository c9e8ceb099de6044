// Ops driven by index tensors or by the data's values: TopK, OneHot,
// ScatterElements (and its deprecated alias Scatter), ScatterND, GatherND,
// Compress, NonZero, Unique, EyeLike, ReverseSequence.
//
// Indices arrive as int32 or int64 tensors (read with Tensor::toInts). An
// index outside its dimension is an Error naming the node and the input,
// never an out-of-bounds access; only OneHot, whose spec defines an
// out-of-range index as "all off", accepts one.
//
// Static shapes. TopK's k, OneHot's depth and Compress's condition decide the
// output shape, so the importer makes them attributes when they are constant
// (the static shape is then known). A node may also keep them as run-time
// inputs: infer then returns a placeholder of the right rank with a zero-sized
// axis (as Range does) and the kernel, which reads the run-time tensor, gives
// its outputs their real shape. NonZero and Unique depend on their whole
// input: those inputs are value-shaped (OpSchema::valueShapedInputs) and the
// node is folded.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

bool present(const Inputs& in, size_t i) { return i < in.size() && in[i] != nullptr; }

// Whether input i is a run-time tensor (a kept input, not an attribute).
bool runtimeInput(const Types& in, size_t i) {
  return i < in.size() && in[i].elementType != ElementType::Undefined;
}

// Gives an output the shape the kernel computed, replacing the placeholder
// that infer returned for a run-time shape input.
void reshapeOutput(Tensor* out, ElementType type, const Shape& shape) {
  if (out && (out->shape() != shape || out->elementType() != type)) *out = Tensor(type, shape);
}

void requireSized(const Node& node, ElementType t) {
  if (elementSize(t) == 0) throw unsupportedType(node, t);
}

// ---- TopK ----

int64_t topKCount(const Node& node, const Inputs* in) {
  if (in && present(*in, 1)) return scalarInt(node, *(*in)[1], "k");
  if (!node.attrs.has("k"))
    throw Error(nodeLabel(node) + "k decides the output shape and must be known at import");
  return node.attrs.getInt("k");
}

void addTopK(OpRegistry& r) {
  OpSchema s;
  s.name = "TopK";
  s.kind = OpKind::Opaque;
  s.minInputs = 1;
  s.maxInputs = 2;  // k as a run-time tensor, once the importer keeps it
  s.maxOutputs = 2;
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{-1})},
                  {"largest", AttributeType::Int, Attribute(int64_t{1})},
                  {"sorted", AttributeType::Int, Attribute(int64_t{1})},
                  {"k", AttributeType::Int, std::nullopt}};
  s.constInputs = {{1, "k", AttributeType::Int}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kNumeric, in[0].elementType);
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", -1), in[0].rank());
    if (runtimeInput(in, 1)) {
      requireIndexType(node, in[1], "k");
      Shape placeholder = in[0].shape;
      placeholder[axis] = 0;
      return Types{{in[0].elementType, placeholder}, {ElementType::Int64, placeholder}};
    }
    const int64_t k = topKCount(node, nullptr);
    if (k < 0 || k > in[0].shape[axis])
      throw Error(nodeLabel(node) + "k = " + std::to_string(k) + " is out of range for axis " +
                  std::to_string(axis) + " of " + in[0].toString());
    Shape shape = in[0].shape;
    shape[axis] = k;
    return Types{{in[0].elementType, shape}, {ElementType::Int64, shape}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& shape = in[0]->shape();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", -1), in[0]->rank());
    const int64_t k = topKCount(node, &in);
    const int64_t n = shape[axis];
    if (k < 0 || k > n)
      throw Error(nodeLabel(node) + "k = " + std::to_string(k) + " is out of range for axis " +
                  std::to_string(axis) + " of " + in[0]->type().toString());
    const bool largest = node.attrs.getInt("largest", 1) != 0;
    Shape oshape = shape;
    oshape[axis] = k;
    reshapeOutput(out[0], in[0]->elementType(), oshape);
    if (out.size() > 1) reshapeOutput(out[1], ElementType::Int64, oshape);
    const int64_t outer = shapeProduct(shape, 0, axis);
    const int64_t inner = shapeProduct(shape, axis + 1, in[0]->rank());
    // Results are always sorted: ONNX leaves the order free when sorted=0,
    // and sorted is a valid order.
    visitType<kNumeric>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = in[0]->data<T>();
      T* values = out[0] ? out[0]->data<T>() : nullptr;
      int64_t* indices = out.size() > 1 && out[1] ? out[1]->data<int64_t>() : nullptr;
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T* row = x + o * n * inner + i;
          std::iota(order.begin(), order.end(), 0);
          // Ties go to the lower index, as the spec asks.
          std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            return largest ? row[a * inner] > row[b * inner] : row[a * inner] < row[b * inner];
          });
          for (int64_t j = 0; j < k; ++j) {
            const int64_t at = (o * k + j) * inner + i;
            if (values) values[at] = row[order[j] * inner];
            if (indices) indices[at] = order[j];
          }
        }
    });
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---- OneHot ----

int64_t oneHotDepth(const Node& node, const Inputs* in) {
  double depth;
  if (in && in->size() > 1 && present(*in, 1))
    depth = scalarDouble(node, *(*in)[1], "depth");
  else if (node.attrs.has("depth"))
    depth = node.attrs.getFloat("depth");
  else
    throw Error(nodeLabel(node) + "depth decides the output shape and must be known at import");
  if (!(depth >= 1))
    throw Error(nodeLabel(node) + "depth must be at least 1, not " + std::to_string(depth));
  return static_cast<int64_t>(depth);
}

void addOneHot(OpRegistry& r) {
  OpSchema s;
  s.name = "OneHot";
  s.kind = OpKind::Opaque;
  s.minInputs = 1;
  s.maxInputs = 3;
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{-1})},
                  {"depth", AttributeType::Float, std::nullopt},
                  {"values", AttributeType::Tensor, std::nullopt}};
  // Depth decides the shape; values sits after it, and constant inputs are
  // the trailing ones, so it becomes an attribute too (a tensor, keeping its type).
  s.constInputs = {{1, "depth", AttributeType::Float}, {2, "values", AttributeType::Tensor}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kNumeric, in[0].elementType);
    ElementType valueType;
    if (in.size() > 2) {
      valueType = in[2].elementType;
    } else if (node.attrs.has("values")) {
      valueType = node.attrs.getTensor("values").elementType();
      if (node.attrs.getTensor("values").numElements() != 2)
        throw Error(nodeLabel(node) + "values must hold [off_value, on_value], not " +
                    node.attrs.getTensor("values").type().toString());
    } else {
      throw Error(nodeLabel(node) + "missing values [off_value, on_value]");
    }
    requireSized(node, valueType);
    const int64_t rank = in[0].rank() + 1;
    int64_t axis = node.attrs.getInt("axis", -1);
    axis = normalizeAxis(node, axis, rank);
    Shape shape = in[0].shape;
    shape.insert(shape.begin() + axis, runtimeInput(in, 1) ? 0 : oneHotDepth(node, nullptr));
    return Types{{valueType, shape}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Tensor& values = present(in, 2) ? *in[2] : node.attrs.getTensor("values");
    if (values.numElements() != 2)
      throw Error(nodeLabel(node) + "values must hold [off_value, on_value], not " +
                  values.type().toString());
    const int64_t depth = oneHotDepth(node, &in);
    const Shape& ishape = in[0]->shape();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", -1), in[0]->rank() + 1);
    Shape oshape = ishape;
    oshape.insert(oshape.begin() + axis, depth);
    reshapeOutput(out[0], values.elementType(), oshape);
    const int64_t outer = shapeProduct(ishape, 0, axis);
    const int64_t inner = shapeProduct(ishape, axis, in[0]->rank());
    // Indices may be floats: their integer part is the index.
    const std::vector<double> indices = in[0]->toDoubles();
    const size_t elem = elementSize(values.elementType());
    const auto* off = static_cast<const char*>(values.raw());
    const char* on = off + elem;
    auto* y = static_cast<char*>(out[0]->raw());
    for (int64_t i = 0; i < out[0]->numElements(); ++i) std::memcpy(y + i * elem, off, elem);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t index = static_cast<int64_t>(indices[o * inner + i]);
        if (index < 0) index += depth;
        if (index < 0 || index >= depth) continue;  // out of range: all off (the spec)
        std::memcpy(y + ((o * depth + index) * inner + i) * elem, on, elem);
      }
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---- ScatterElements / Scatter / ScatterND ----

enum class Reduction { None, Add, Mul, Max, Min };

Reduction reductionOf(const Node& node) {
  const std::string r = node.attrs.getString("reduction", "none");
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  throw Error(nodeLabel(node) + "unknown reduction '" + r + "'");
}

template <class T>
void combine(T& dst, T v, Reduction r) {
  switch (r) {
    case Reduction::None: dst = v; break;
    case Reduction::Add: dst = static_cast<T>(dst + v); break;
    case Reduction::Mul: dst = static_cast<T>(dst * v); break;
    case Reduction::Max: dst = std::max(dst, v); break;
    case Reduction::Min: dst = std::min(dst, v); break;
  }
}

// Calls f with the C++ type: bytes-only for reduction none (any type), the
// numeric types otherwise.
template <class F>
void visitScatterType(const Node& node, ElementType t, Reduction red, F&& f) {
  if (red == Reduction::None)
    visitBySize(node, t, f);
  else
    visitType<kNumeric>(node, t, f);
}

void addScatterElements(OpRegistry& r, const std::string& name) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Opaque;
  s.minInputs = s.maxInputs = 3;
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{0})},
                  {"reduction", AttributeType::String, Attribute(std::string("none"))}};
  s.infer = [](const Node& node, const Types& in) {
    requireSized(node, in[0].elementType);
    requireIndexType(node, in[1], "indices");
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 0), in[0].rank());
    bool ok = in[1].shape == in[2].shape && in[1].rank() == in[0].rank() &&
              in[2].elementType == in[0].elementType;
    for (int64_t d = 0; ok && d < in[0].rank(); ++d)
      ok = d == axis || in[1].shape[d] <= in[0].shape[d];
    if (!ok)
      throw Error(nodeLabel(node) + "indices " + in[1].toString() + " and updates " +
                  in[2].toString() + " must have one shape that fits data " + in[0].toString() +
                  " outside axis " + std::to_string(axis));
    reductionOf(node);
    return Types{in[0]};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Reduction red = reductionOf(node);
    const int64_t rank = in[0]->rank();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 0), rank);
    const Shape& dshape = in[0]->shape();
    const Shape& ishape = in[1]->shape();
    const std::vector<int64_t> indices = in[1]->toInts();
    const std::vector<int64_t> dstrides = stridesOf(dshape);
    std::memcpy(out[0]->raw(), in[0]->raw(), in[0]->byteSize());
    visitScatterType(node, in[0]->elementType(), red, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* upd = in[2]->data<T>();
      T* y = out[0]->data<T>();
      std::vector<int64_t> pos(static_cast<size_t>(rank), 0);
      for (size_t i = 0; i < indices.size(); ++i) {
        int64_t at = 0;
        for (int64_t d = 0; d < rank; ++d) {
          const int64_t c = d == axis ? normalizeIndex(node, indices[i], dshape[d], "indices")
                                      : pos[d];
          at += c * dstrides[d];
        }
        if constexpr (std::is_same_v<T, bool>) {
          y[at] = upd[i];
        } else {
          combine(y[at], upd[i], red);
        }
        for (int64_t d = rank - 1; d >= 0; --d) {  // next position in the indices
          if (++pos[d] < ishape[d]) break;
          pos[d] = 0;
        }
      }
    });
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addScatterND(OpRegistry& r) {
  OpSchema s;
  s.name = "ScatterND";
  s.kind = OpKind::Opaque;
  s.minInputs = s.maxInputs = 3;
  s.attributes = {{"reduction", AttributeType::String, Attribute(std::string("none"))}};
  s.infer = [](const Node& node, const Types& in) {
    requireSized(node, in[0].elementType);
    requireIndexType(node, in[1], "indices");
    const int64_t q = in[1].rank();
    const int64_t k = q ? in[1].shape.back() : -1;
    if (q < 1 || k > in[0].rank())
      throw Error(nodeLabel(node) + "indices " + in[1].toString() + " do not index data " +
                  in[0].toString());
    // updates: indices.shape[:-1] + data.shape[k:]
    Shape want(in[1].shape.begin(), in[1].shape.end() - 1);
    want.insert(want.end(), in[0].shape.begin() + k, in[0].shape.end());
    if (in[2].shape != want || in[2].elementType != in[0].elementType)
      throw Error(nodeLabel(node) + "updates must be " +
                  TensorType{in[0].elementType, want}.toString() + ", not " + in[2].toString());
    reductionOf(node);
    return Types{in[0]};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Reduction red = reductionOf(node);
    const Shape& dshape = in[0]->shape();
    const int64_t k = in[1]->shape().back();
    const int64_t slice = shapeProduct(dshape, k, in[0]->rank());
    const int64_t count = k ? in[1]->numElements() / k : 0;
    const std::vector<int64_t> indices = in[1]->toInts();
    const std::vector<int64_t> strides = stridesOf(dshape);
    std::memcpy(out[0]->raw(), in[0]->raw(), in[0]->byteSize());
    visitScatterType(node, in[0]->elementType(), red, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* upd = in[2]->data<T>();
      T* y = out[0]->data<T>();
      for (int64_t i = 0; i < count; ++i) {
        int64_t base = 0;
        for (int64_t d = 0; d < k; ++d)
          base += normalizeIndex(node, indices[i * k + d], dshape[d], "indices") * strides[d];
        for (int64_t j = 0; j < slice; ++j) {
          if constexpr (std::is_same_v<T, bool>) {
            y[base + j] = upd[i * slice + j];
          } else {
            combine(y[base + j], upd[i * slice + j], red);
          }
        }
      }
    });
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---- GatherND ----

void addGatherND(OpRegistry& r) {
  OpSchema s;
  s.name = "GatherND";
  s.kind = OpKind::Injective;
  s.minInputs = s.maxInputs = 2;
  s.attributes = {{"batch_dims", AttributeType::Int, Attribute(int64_t{0})}};
  s.infer = [](const Node& node, const Types& in) {
    requireSized(node, in[0].elementType);
    requireIndexType(node, in[1], "indices");
    const int64_t b = node.attrs.getInt("batch_dims", 0);
    const int64_t q = in[1].rank(), rank = in[0].rank();
    const int64_t k = q ? in[1].shape.back() : -1;
    bool ok = q >= 1 && b >= 0 && b < q && b < rank && k >= 0 && b + k <= rank;
    for (int64_t d = 0; ok && d < b; ++d) ok = in[0].shape[d] == in[1].shape[d];
    if (!ok)
      throw Error(nodeLabel(node) + "indices " + in[1].toString() + " do not index data " +
                  in[0].toString() + " with batch_dims " + std::to_string(b));
    // indices.shape[:-1] + data.shape[b + k:]
    Shape shape(in[1].shape.begin(), in[1].shape.end() - 1);
    shape.insert(shape.end(), in[0].shape.begin() + b + k, in[0].shape.end());
    return Types{{in[0].elementType, shape}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const int64_t b = node.attrs.getInt("batch_dims", 0);
    const Shape& dshape = in[0]->shape();
    const Shape& ishape = in[1]->shape();
    const int64_t k = ishape.back();
    const int64_t batches = shapeProduct(dshape, 0, b);
    // Per batch: `per` index tuples, each selecting a slice of `slice` elements.
    const int64_t per = shapeProduct(ishape, b, static_cast<int64_t>(ishape.size()) - 1);
    const int64_t slice = shapeProduct(dshape, b + k, in[0]->rank());
    const int64_t batchSize = shapeProduct(dshape, b, in[0]->rank());
    const std::vector<int64_t> strides = stridesOf(dshape);
    const std::vector<int64_t> indices = in[1]->toInts();
    const size_t elem = elementSize(in[0]->elementType());
    const auto* x = static_cast<const char*>(in[0]->raw());
    auto* y = static_cast<char*>(out[0]->raw());
    for (int64_t bi = 0; bi < batches; ++bi)
      for (int64_t t = 0; t < per; ++t) {
        const int64_t* tuple = indices.data() + (bi * per + t) * k;
        int64_t at = bi * batchSize;
        for (int64_t d = 0; d < k; ++d)
          at += normalizeIndex(node, tuple[d], dshape[b + d], "indices") * strides[b + d];
        std::memcpy(y + (bi * per + t) * slice * elem, x + at * elem,
                    static_cast<size_t>(slice) * elem);
      }
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---- Compress ----

std::vector<int64_t> compressCondition(const Node& node, const Inputs* in) {
  if (in && present(*in, 1)) return (*in)[1]->toInts();
  if (!node.attrs.has("condition"))
    throw Error(nodeLabel(node) + "condition decides the output shape and must be known at import");
  return node.attrs.getInts("condition");
}

// Selected positions along the axis (of the flattened input without one).
std::vector<int64_t> compressSelection(const Node& node, const std::vector<int64_t>& cond,
                                       int64_t len) {
  if (static_cast<int64_t>(cond.size()) > len)
    throw Error(nodeLabel(node) + "condition has " + std::to_string(cond.size()) +
                " values for a dimension of size " + std::to_string(len));
  std::vector<int64_t> picked;
  for (size_t i = 0; i < cond.size(); ++i)
    if (cond[i]) picked.push_back(static_cast<int64_t>(i));
  return picked;
}

void addCompress(OpRegistry& r) {
  OpSchema s;
  s.name = "Compress";
  s.kind = OpKind::Opaque;
  s.minInputs = 1;
  s.maxInputs = 2;
  s.attributes = {{"axis", AttributeType::Int, std::nullopt},
                  {"condition", AttributeType::Ints, std::nullopt}};
  s.constInputs = {{1, "condition", AttributeType::Ints}};
  s.infer = [](const Node& node, const Types& in) {
    requireSized(node, in[0].elementType);
    if (runtimeInput(in, 1)) {
      Shape placeholder = {0};
      if (node.attrs.has("axis")) {
        placeholder = in[0].shape;
        placeholder[normalizeAxis(node, node.attrs.getInt("axis"), in[0].rank())] = 0;
      }
      return Types{{in[0].elementType, placeholder}};
    }
    const std::vector<int64_t> cond = compressCondition(node, nullptr);
    if (!node.attrs.has("axis")) {
      const auto picked = compressSelection(node, cond, in[0].numElements());
      return Types{{in[0].elementType, {static_cast<int64_t>(picked.size())}}};
    }
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis"), in[0].rank());
    Shape shape = in[0].shape;
    shape[axis] = static_cast<int64_t>(compressSelection(node, cond, shape[axis]).size());
    return Types{{in[0].elementType, shape}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const std::vector<int64_t> cond = compressCondition(node, &in);
    const Shape& shape = in[0]->shape();
    const bool flat = !node.attrs.has("axis");
    const int64_t axis = flat ? 0 : normalizeAxis(node, node.attrs.getInt("axis"), in[0]->rank());
    const int64_t len = flat ? in[0]->numElements() : shape[axis];
    const int64_t outer = flat ? 1 : shapeProduct(shape, 0, axis);
    const int64_t inner = flat ? 1 : shapeProduct(shape, axis + 1, in[0]->rank());
    const auto picked = compressSelection(node, cond, len);
    Shape oshape = flat ? Shape{static_cast<int64_t>(picked.size())} : shape;
    if (!flat) oshape[axis] = static_cast<int64_t>(picked.size());
    Tensor result(in[0]->elementType(), oshape);
    const size_t elem = elementSize(in[0]->elementType());
    const auto* x = static_cast<const char*>(in[0]->raw());
    auto* y = static_cast<char*>(result.raw());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t p : picked) {
        std::memcpy(y, x + (o * len + p) * inner * elem, static_cast<size_t>(inner) * elem);
        y += inner * elem;
      }
    *out[0] = std::move(result);
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---- NonZero ----

void addNonZero(OpRegistry& r) {
  OpSchema s;
  s.name = "NonZero";
  s.kind = OpKind::Opaque;
  s.valueShapedInputs = {0};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kAllTypes, in[0].elementType);
    return Types{{ElementType::Int64, {std::max<int64_t>(in[0].rank(), 1), 0}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    // A scalar is treated as a 1-element vector (as numpy's nonzero does).
    const std::vector<double> x = in[0]->toDoubles();
    const Shape shape = in[0]->rank() ? in[0]->shape() : Shape{1};
    const int64_t rank = static_cast<int64_t>(shape.size());
    std::vector<int64_t> hits;
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i)
      if (x[i] != 0) hits.push_back(i);
    const int64_t n = static_cast<int64_t>(hits.size());
    Tensor result(ElementType::Int64, {rank, n});
    int64_t* y = result.data<int64_t>();
    for (int64_t j = 0; j < n; ++j) {
      int64_t rest = hits[j];
      for (int64_t d = rank - 1; d >= 0; --d) {
        y[d * n + j] = rest % shape[d];
        rest /= shape[d];
      }
    }
    (void)node;
    *out[0] = std::move(result);
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---- Unique ----

void addUnique(OpRegistry& r) {
  OpSchema s;
  s.name = "Unique";
  s.kind = OpKind::Opaque;
  s.maxOutputs = 4;
  s.valueShapedInputs = {0};
  s.attributes = {{"axis", AttributeType::Int, std::nullopt},
                  {"sorted", AttributeType::Int, Attribute(int64_t{1})}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kNumeric, in[0].elementType);
    Shape y = {0};
    if (node.attrs.has("axis")) {
      const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis"), in[0].rank());
      y = in[0].shape;
      y[axis] = 0;
    }
    return Types{{in[0].elementType, y}, {ElementType::Int64, {0}}, {ElementType::Int64, {0}},
                 {ElementType::Int64, {0}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    // Unique slices along the axis (single elements without one), compared
    // element by element, lexicographically when sorting.
    const bool hasAxis = node.attrs.has("axis");
    const Shape& shape = in[0]->shape();
    const int64_t axis = hasAxis ? normalizeAxis(node, node.attrs.getInt("axis"), in[0]->rank()) : 0;
    const int64_t len = hasAxis ? shape[axis] : in[0]->numElements();
    const int64_t outer = hasAxis ? shapeProduct(shape, 0, axis) : 1;
    const int64_t inner = hasAxis ? shapeProduct(shape, axis + 1, in[0]->rank()) : 1;
    const bool sorted = node.attrs.getInt("sorted", 1) != 0;
    visitType<kNumeric>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = in[0]->data<T>();
      auto slice = [&](int64_t i) {
        std::vector<T> v;
        v.reserve(static_cast<size_t>(outer * inner));
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j) v.push_back(x[(o * len + i) * inner + j]);
        return v;
      };
      std::vector<std::vector<T>> slices;
      for (int64_t i = 0; i < len; ++i) slices.push_back(slice(i));
      // First occurrences in input order.
      std::vector<int64_t> firsts;
      std::vector<int64_t> groupOf(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i) {
        int64_t g = -1;
        for (size_t f = 0; f < firsts.size(); ++f)
          if (slices[firsts[f]] == slices[i]) {
            g = static_cast<int64_t>(f);
            break;
          }
        if (g < 0) {
          g = static_cast<int64_t>(firsts.size());
          firsts.push_back(i);
        }
        groupOf[i] = g;
      }
      std::vector<int64_t> order(firsts.size());  // output position -> group
      std::iota(order.begin(), order.end(), 0);
      if (sorted)
        std::sort(order.begin(), order.end(),
                  [&](int64_t a, int64_t b) { return slices[firsts[a]] < slices[firsts[b]]; });
      std::vector<int64_t> rankOf(order.size());  // group -> output position
      for (size_t p = 0; p < order.size(); ++p) rankOf[order[p]] = static_cast<int64_t>(p);
      const int64_t u = static_cast<int64_t>(order.size());
      Shape yshape = hasAxis ? shape : Shape{u};
      if (hasAxis) yshape[axis] = u;
      Tensor y(in[0]->elementType(), yshape);
      Tensor indices(ElementType::Int64, {u}), inverse(ElementType::Int64, {len}),
          counts(ElementType::Int64, {u});
      T* yd = y.data<T>();
      for (int64_t p = 0; p < u; ++p) {
        const int64_t first = firsts[order[p]];
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j)
            yd[(o * u + p) * inner + j] = x[(o * len + first) * inner + j];
        indices.data<int64_t>()[p] = first;
      }
      for (int64_t i = 0; i < len; ++i) {
        inverse.data<int64_t>()[i] = rankOf[groupOf[i]];
        ++counts.data<int64_t>()[rankOf[groupOf[i]]];
      }
      Tensor* outs[] = {out[0], out.size() > 1 ? out[1] : nullptr,
                        out.size() > 2 ? out[2] : nullptr, out.size() > 3 ? out[3] : nullptr};
      Tensor results[] = {std::move(y), std::move(indices), std::move(inverse), std::move(counts)};
      for (int i = 0; i < 4; ++i)
        if (outs[i]) *outs[i] = std::move(results[i]);
    });
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---- EyeLike ----

ElementType eyeLikeType(const Node& node, ElementType input) {
  if (!node.attrs.has("dtype")) return input;
  const ElementType t = elementTypeFromOnnx(static_cast<int32_t>(node.attrs.getInt("dtype")));
  if (t == ElementType::Undefined) throw unsupportedType(node, t);
  return t;
}

void addEyeLike(OpRegistry& r) {
  OpSchema s;
  s.name = "EyeLike";
  s.kind = OpKind::Opaque;
  s.attributes = {{"dtype", AttributeType::Int, std::nullopt},
                  {"k", AttributeType::Int, Attribute(int64_t{0})}};
  s.infer = [](const Node& node, const Types& in) {
    if (in[0].rank() != 2)
      throw Error(nodeLabel(node) + "the input must be 2-D, not " + in[0].toString());
    const ElementType t = eyeLikeType(node, in[0].elementType);
    requireTypeIn(node, kAllTypes, t);
    return Types{{t, in[0].shape}};
  };
  s.reference = [](const Node& node, const Inputs&, const Outputs& out) {
    const int64_t rows = out[0]->shape()[0], cols = out[0]->shape()[1];
    const int64_t k = node.attrs.getInt("k", 0);
    visitType<kAllTypes>(node, out[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* y = out[0]->data<T>();
      std::fill(y, y + rows * cols, T(0));
      for (int64_t i = 0; i < rows; ++i)
        if (i + k >= 0 && i + k < cols) y[i * cols + i + k] = T(1);
    });
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

// ---- ReverseSequence ----

void addReverseSequence(OpRegistry& r) {
  OpSchema s;
  s.name = "ReverseSequence";
  s.kind = OpKind::Opaque;
  s.minInputs = s.maxInputs = 2;
  s.attributes = {{"batch_axis", AttributeType::Int, Attribute(int64_t{1})},
                  {"time_axis", AttributeType::Int, Attribute(int64_t{0})}};
  s.infer = [](const Node& node, const Types& in) {
    requireSized(node, in[0].elementType);
    requireIndexType(node, in[1], "sequence_lens");
    const int64_t b = node.attrs.getInt("batch_axis", 1), t = node.attrs.getInt("time_axis", 0);
    if (in[0].rank() < 2 || (b != 0 && b != 1) || (t != 0 && t != 1) || b == t)
      throw Error(nodeLabel(node) + "batch_axis and time_axis must be 0 and 1 (in either order) "
                  "of an input of rank 2 or more, not " + std::to_string(b) + ", " +
                  std::to_string(t) + " of " + in[0].toString());
    if (in[1].rank() != 1 || in[1].shape[0] != in[0].shape[b])
      throw Error(nodeLabel(node) + "sequence_lens must hold one length per batch, not " +
                  in[1].toString());
    return Types{in[0]};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const int64_t b = node.attrs.getInt("batch_axis", 1), t = node.attrs.getInt("time_axis", 0);
    const Shape& shape = in[0]->shape();
    const int64_t batches = shape[b], steps = shape[t];
    const int64_t inner = shapeProduct(shape, 2, in[0]->rank());
    const std::vector<int64_t> lens = in[1]->toInts();
    const std::vector<int64_t> strides = stridesOf(shape);
    const size_t elem = elementSize(in[0]->elementType());
    const auto* x = static_cast<const char*>(in[0]->raw());
    auto* y = static_cast<char*>(out[0]->raw());
    for (int64_t bi = 0; bi < batches; ++bi) {
      const int64_t n = lens[bi];
      if (n < 0 || n > steps)
        throw Error(nodeLabel(node) + "sequence_lens[" + std::to_string(bi) + "] = " +
                    std::to_string(n) + " is out of range for " + std::to_string(steps) + " steps");
      for (int64_t ti = 0; ti < steps; ++ti) {
        const int64_t src = ti < n ? n - 1 - ti : ti;
        std::memcpy(y + (bi * strides[b] + ti * strides[t]) * elem,
                    x + (bi * strides[b] + src * strides[t]) * elem,
                    static_cast<size_t>(inner) * elem);
      }
    }
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

}  // namespace

void registerIndexOps(OpRegistry& r) {
  addTopK(r);
  addOneHot(r);
  addScatterElements(r, "ScatterElements");
  addScatterElements(r, "Scatter");  // deprecated at opset 11; same semantics, no reduction
  addScatterND(r);
  addGatherND(r);
  addCompress(r);
  addNonZero(r);
  addUnique(r);
  addEyeLike(r);
  addReverseSequence(r);
}

}  // namespace collage
