#include "core/ir/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/ir/error.h"
#include "core/ir/tensor_size.h"

namespace collage {

int64_t numElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shapeToString(const Shape& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

Shape parseShape(const std::string& text) {
  Shape shape;
  if (text == "scalar" || text.empty()) return shape;
  std::string cur;
  auto flush = [&]() {
    if (cur.empty()) throw Error("bad shape '" + text + "': expected dimensions like 1x3x224x224");
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(cur, &used);
    } catch (...) {
      used = 0;
    }
    if (used != cur.size() || v < 0)
      throw Error("bad shape '" + text + "': '" + cur + "' is not a non-negative integer");
    shape.push_back(v);
    cur.clear();
  };
  for (char c : text) {
    if (c == 'x' || c == 'X' || c == ',')
      flush();
    else if (c != ' ')
      cur += c;
  }
  flush();
  return shape;
}

std::vector<int64_t> stridesOf(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

size_t TensorType::byteSize() const {
  return static_cast<size_t>(numElements()) * elementSize(elementType);
}

std::string TensorType::toString() const {
  std::string t = std::string(elementTypeName(elementType)) + "[" + shapeToString(shape) + "]";
  if (!isSequence()) return t;
  return "seq(" + t + ", length " +
         (sequenceLength == kUnknownLength ? std::string("?") : std::to_string(sequenceLength)) + ")";
}

bool acceptsType(const TensorType& declared, const TensorType& actual) {
  if (declared == actual) return true;
  if (!declared.isSequence() || !actual.isSequence()) return false;
  if (declared.elementType != actual.elementType) return false;
  if (declared.sequenceLength != kUnknownLength && declared.sequenceLength != actual.sequenceLength)
    return false;
  return actual.sequenceLength == 0 || declared.shape == actual.shape;
}

Tensor Tensor::sequence(const TensorType& element, std::vector<Tensor> items) {
  Tensor t;
  TensorType elem = element.elementTensorType();
  for (const Tensor& item : items) {
    if (item.isSequence()) throw Error("a sequence cannot hold a sequence");
    if (item.elementType() != elem.elementType)
      throw Error("a sequence of " + std::string(elementTypeName(elem.elementType)) +
                  " cannot hold a " + item.type().toString());
    // The type has one element shape (static shapes): the Sequence ops
    // refuse at import what would break this.
    if (item.shape() != items.front().shape())
      throw Error("a sequence of tensors of different shapes (" + items.front().type().toString() +
                  ", " + item.type().toString() + ") is not supported");
  }
  if (!items.empty()) elem.shape = items.front().shape();
  t.type_ = TensorType::sequenceOf(elem, static_cast<int64_t>(items.size()));
  t.items_ = std::make_shared<const std::vector<Tensor>>(std::move(items));
  return t;
}

const std::vector<Tensor>& Tensor::items() const {
  static const std::vector<Tensor> none;
  return items_ ? *items_ : none;
}

Tensor::Tensor(TensorType type) : type_(std::move(type)) {
  if (type_.isSequence()) {
    *this = sequence(type_.elementTensorType(), {});
    return;
  }
  const auto checked = checkedByteSize(type_.shape, type_.elementType);
  if (!checked)
    throw Error("a tensor of " + type_.toString() +
                ": a negative dim or more bytes than 64 bits count");
  const size_t bytes = static_cast<size_t>(*checked);
  if (bytes > allocationLimit())
    throw AllocationLimitExceeded("a tensor of " + type_.toString() + " (" +
                                  std::to_string(bytes >> 20) + " MiB) is over the limit of " +
                                  std::to_string(allocationLimit() >> 20) + " MiB here");
  size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded == 0) rounded = kTensorAlignment;
  void* p = std::aligned_alloc(kTensorAlignment, rounded);
  if (!p) throw Error("out of memory allocating " + type_.toString());
  std::memset(p, 0, rounded);
  storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  data_ = p;
}

Tensor Tensor::view(TensorType type, void* data) {
  Tensor t;
  t.type_ = std::move(type);
  t.data_ = data;
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  COLLAGE_CHECK(collage::numElements(shape) == numElements(), "reshape changes element count");
  Tensor t = *this;
  t.type_.shape = std::move(shape);
  return t;
}

Tensor Tensor::fromFloats(Shape shape, const std::vector<float>& values) {
  Tensor t(ElementType::Float32, std::move(shape));
  COLLAGE_CHECK(static_cast<int64_t>(values.size()) == t.numElements(), "value count != shape");
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::fromInts(Shape shape, const std::vector<int64_t>& values) {
  Tensor t(ElementType::Int64, std::move(shape));
  COLLAGE_CHECK(static_cast<int64_t>(values.size()) == t.numElements(), "value count != shape");
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

Tensor Tensor::clone() const {
  if (isSequence()) {
    std::vector<Tensor> items;
    for (const Tensor& item : this->items()) items.push_back(item.clone());
    Tensor t = sequence(type_.elementTensorType(), std::move(items));
    t.type_ = type_;
    return t;
  }
  Tensor t(type_);
  if (byteSize()) std::memcpy(t.raw(), data_, byteSize());
  return t;
}

namespace {
template <class Out>
std::vector<Out> convertAll(const Tensor& t) {
  if (t.isSequence()) throw Error("cannot convert " + t.type().toString() + " to numbers");
  std::vector<Out> out(t.numElements());
  const int64_t n = t.numElements();
  switch (t.elementType()) {
#define COLLAGE_CASE(ET, CT) \
  case ElementType::ET:      \
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(t.data<CT>()[i]); \
    break;
    COLLAGE_CASE(Float32, float)
    COLLAGE_CASE(Float64, double)
    COLLAGE_CASE(Int8, int8_t)
    COLLAGE_CASE(Int16, int16_t)
    COLLAGE_CASE(Int32, int32_t)
    COLLAGE_CASE(Int64, int64_t)
    COLLAGE_CASE(UInt8, uint8_t)
    COLLAGE_CASE(UInt16, uint16_t)
    COLLAGE_CASE(UInt32, uint32_t)
    COLLAGE_CASE(UInt64, uint64_t)
    COLLAGE_CASE(Bool, bool)
#undef COLLAGE_CASE
    default:
      throw Error("cannot convert " + t.type().toString() + " to numbers");
  }
  return out;
}
}  // namespace

std::vector<int64_t> Tensor::toInts() const { return convertAll<int64_t>(*this); }
std::vector<float> Tensor::toFloats() const { return convertAll<float>(*this); }
std::vector<double> Tensor::toDoubles() const { return convertAll<double>(*this); }

DLDataType toDLDataType(ElementType type) {
  DLDataType dt{};
  dt.lanes = 1;
  dt.bits = static_cast<uint8_t>(elementSize(type) * 8);
  switch (type) {
    case ElementType::Float32:
    case ElementType::Float64:
    case ElementType::Float16:
      dt.code = kDLFloat;
      break;
    case ElementType::BFloat16:
      dt.code = kDLBfloat;
      break;
    case ElementType::UInt8:
    case ElementType::UInt16:
    case ElementType::UInt32:
    case ElementType::UInt64:
    case ElementType::Bool:
      dt.code = kDLUInt;
      break;
    default:
      dt.code = kDLInt;
  }
  return dt;
}

DLTensor Tensor::toDLTensor() {
  if (isSequence())
    throw Error("a sequence (" + type_.toString() + ") has no DLPack view: it cannot cross a kernel boundary");
  DLTensor t{};
  t.data = data_;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(type_.shape.size());
  t.dtype = toDLDataType(type_.elementType);
  t.shape = type_.shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  return t;
}

std::string Tensor::toString() const {
  std::ostringstream os;
  os << type_.toString();
  if (isSequence()) {
    os << " {";
    for (size_t i = 0; i < items().size() && i < 3; ++i) os << (i ? ", " : "") << items()[i].toString();
    if (items().size() > 3) os << ", ...";
    return os.str() + "}";
  }
  if (!data_) return os.str() + " {null}";
  os << " {";
  const int64_t n = std::min<int64_t>(numElements(), 6);
  if (elementType() == ElementType::Float32) {
    for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << data<float>()[i];
  } else if (elementType() != ElementType::String) {
    auto v = toInts();
    for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << v[i];
  }
  if (numElements() > n) os << ", ...";
  os << "}";
  return os.str();
}

}  // namespace collage
