#include "core/onnx/tensor_proto.h"

#include <onnx/onnx_pb.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/half_float.h"
#include "core/ops/op_registry.h"

namespace collage {
namespace {

std::string tensorLabel(const onnx::TensorProto& proto) {
  return "tensor '" + proto.name() + "'";
}

// Copies `count` values of a repeated field into the tensor, converting each
// to the tensor's element type.
template <class Field>
void copyField(const Field& field, Tensor& t, const onnx::TensorProto& proto,
               const char* fieldName) {
  const int64_t n = t.numElements();
  if (static_cast<int64_t>(field.size()) != n)
    throw Error(tensorLabel(proto) + ": " + fieldName + " holds " + std::to_string(field.size()) +
                " values, its shape " + shapeToString(t.shape()) + " needs " + std::to_string(n));
  switch (t.elementType()) {
#define COLLAGE_CASE(ET, CT)                                                     \
  case ElementType::ET:                                                          \
    for (int64_t i = 0; i < n; ++i) t.data<CT>()[i] = static_cast<CT>(field[i]); \
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
    // float16 / bfloat16 travel as their 16-bit patterns in int32_data.
    COLLAGE_CASE(Float16, uint16_t)
    COLLAGE_CASE(BFloat16, uint16_t)
#undef COLLAGE_CASE
    case ElementType::Bool:
      for (int64_t i = 0; i < n; ++i) t.data<bool>()[i] = field[i] != 0;
      break;
    default:
      throw Unsupported(tensorLabel(proto) + ": element type " +
                        std::string(elementTypeName(t.elementType())) + " is not supported");
  }
}

void copyBytes(const std::string& bytes, Tensor& t, const onnx::TensorProto& proto,
               const char* where) {
  if (bytes.size() != t.byteSize())
    throw Error(tensorLabel(proto) + ": " + where + " holds " + std::to_string(bytes.size()) +
                " bytes, its type " + t.type().toString() + " needs " +
                std::to_string(t.byteSize()));
  if (!bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
  if (t.elementType() == ElementType::Bool) {
    // Normalise to 0/1 so that a stray byte never makes an invalid C++ bool.
    auto* p = static_cast<uint8_t*>(t.raw());
    for (int64_t i = 0; i < t.numElements(); ++i) p[i] = p[i] != 0;
  }
}

std::string readExternal(const onnx::TensorProto& proto, const std::string& baseDir) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& entry : proto.external_data()) {
    try {
      if (entry.key() == "location")
        location = entry.value();
      else if (entry.key() == "offset")
        offset = std::stoll(entry.value());
      else if (entry.key() == "length")
        length = std::stoll(entry.value());
    } catch (const std::exception&) {
      throw Error(tensorLabel(proto) + ": bad external_data entry " + entry.key() + "='" +
                  entry.value() + "'");
    }
  }
  if (location.empty())
    throw Error(tensorLabel(proto) + ": external data without a 'location'");
  std::filesystem::path rel(location);
  if (rel.is_absolute())
    throw Error(tensorLabel(proto) + ": external data location '" + location +
                "' must be relative to the model's directory");
  std::filesystem::path file = baseDir.empty() ? rel : std::filesystem::path(baseDir) / rel;
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw Error(tensorLabel(proto) + ": cannot open external data file '" + file.string() + "'");
  in.seekg(0, std::ios::end);
  const int64_t fileSize = static_cast<int64_t>(in.tellg());
  if (offset < 0 || offset > fileSize)
    throw Error(tensorLabel(proto) + ": external data offset " + std::to_string(offset) +
                " is beyond the end of '" + file.string() + "' (" + std::to_string(fileSize) +
                " bytes)");
  if (length < 0) length = fileSize - offset;
  if (offset + length > fileSize)
    throw Error(tensorLabel(proto) + ": external data '" + file.string() + "' has " +
                std::to_string(fileSize) + " bytes, offset " + std::to_string(offset) +
                " + length " + std::to_string(length) + " reads past its end");
  std::string bytes(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (!in) throw Error(tensorLabel(proto) + ": cannot read external data '" + file.string() + "'");
  return bytes;
}

}  // namespace

std::vector<double> tensorToDoubles(const Tensor& t) {
  const int64_t n = t.numElements();
  std::vector<double> out;
  switch (t.elementType()) {
    case ElementType::Float16:
      out.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) out[i] = halfToFloat(t.data<uint16_t>()[i]);
      return out;
    case ElementType::BFloat16:
      out.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) out[i] = bfloat16ToFloat(t.data<uint16_t>()[i]);
      return out;
    case ElementType::String:
    case ElementType::Undefined:
      throw Unsupported("cannot read " + t.type().toString() + " as numbers");
    default:
      return t.toDoubles();  // every plain numeric type and bool
  }
}

Tensor tensorFromProto(const onnx::TensorProto& proto, const std::string& baseDir) {
  const ElementType et = elementTypeFromOnnx(proto.data_type());
  if (et == ElementType::String)
    throw Unsupported(tensorLabel(proto) + ": string tensors are not supported");
  if (et == ElementType::Undefined)
    throw Unsupported(tensorLabel(proto) + ": element type code " +
                      std::to_string(proto.data_type()) + " is not supported");
  Shape shape;
  for (int64_t d : proto.dims()) {
    if (d < 0)
      throw Error(tensorLabel(proto) + ": negative dimension " + std::to_string(d));
    shape.push_back(d);
  }
  if (proto.has_segment())
    throw Unsupported(tensorLabel(proto) + ": segmented tensors are not supported");
  // Check the size before allocating: a corrupt file must not make us ask
  // for terabytes.
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d != 0 && count > (int64_t{1} << 40) / d)
      throw Error(tensorLabel(proto) + ": shape " + shapeToString(shape) + " is too large");
    count *= d;
  }
  const size_t bytes = static_cast<size_t>(count) * elementSize(et);
  auto expectBytes = [&](size_t have, const char* where) {
    if (have != bytes)
      throw Error(tensorLabel(proto) + ": " + where + " holds " + std::to_string(have) +
                  " bytes, its type " + TensorType{et, shape}.toString() + " needs " +
                  std::to_string(bytes));
  };
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string data = readExternal(proto, baseDir);
    expectBytes(data.size(), "its external data");
    Tensor t(et, shape);
    copyBytes(data, t, proto, "its external data");
    return t;
  }
  if (proto.has_raw_data()) {
    expectBytes(proto.raw_data().size(), "raw_data");
    Tensor t(et, shape);
    copyBytes(proto.raw_data(), t, proto, "raw_data");
    return t;
  }
  int64_t have = 0;
  const char* field = "int32_data";
  switch (et) {
    case ElementType::Float32: have = proto.float_data_size(); field = "float_data"; break;
    case ElementType::Float64: have = proto.double_data_size(); field = "double_data"; break;
    case ElementType::Int64: have = proto.int64_data_size(); field = "int64_data"; break;
    case ElementType::UInt32:
    case ElementType::UInt64: have = proto.uint64_data_size(); field = "uint64_data"; break;
    default: have = proto.int32_data_size(); break;
  }
  if (have != count)
    throw Error(tensorLabel(proto) + ": " + field + " holds " + std::to_string(have) +
                " values, its shape " + shapeToString(shape) + " needs " + std::to_string(count));
  Tensor t(et, shape);
  switch (et) {
    case ElementType::Float32:
      copyField(proto.float_data(), t, proto, "float_data");
      break;
    case ElementType::Float64:
      copyField(proto.double_data(), t, proto, "double_data");
      break;
    case ElementType::Int64:
      copyField(proto.int64_data(), t, proto, "int64_data");
      break;
    case ElementType::UInt32:
    case ElementType::UInt64:
      copyField(proto.uint64_data(), t, proto, "uint64_data");
      break;
    default:  // int32, int16, int8, uint16, uint8, bool, float16, bfloat16
      copyField(proto.int32_data(), t, proto, "int32_data");
      break;
  }
  return t;
}

void tensorToProto(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto) {
  if (tensor.elementType() == ElementType::String || tensor.elementType() == ElementType::Undefined)
    throw Unsupported("tensor '" + name + "': cannot write element type " +
                      std::string(elementTypeName(tensor.elementType())));
  proto->Clear();
  proto->set_name(name);
  proto->set_data_type(elementTypeToOnnx(tensor.elementType()));
  for (int64_t d : tensor.shape()) proto->add_dims(d);
  if (tensor.byteSize()) {
    COLLAGE_CHECK(tensor.raw() != nullptr, "writing a tensor with no storage");
    proto->set_raw_data(tensor.raw(), tensor.byteSize());
  } else {
    proto->set_raw_data(std::string());
  }
}

Tensor readTensorProtoFile(const std::string& path, std::string* name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open tensor file");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes))
    throw Error(path + ": not a valid serialized onnx.TensorProto");
  if (name) *name = proto.name();
  const std::string dir = std::filesystem::path(path).parent_path().string();
  try {
    return tensorFromProto(proto, dir);
  } catch (const Unsupported& e) {
    throw Unsupported(path + ": " + e.what());
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

void writeTensorProtoFile(const std::string& path, const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto;
  tensorToProto(tensor, name, &proto);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path + ": cannot open for writing");
  if (!proto.SerializeToOstream(&out)) throw Error(path + ": cannot write");
  out.close();
  if (!out) throw Error(path + ": cannot write");
}

}  // namespace collage
