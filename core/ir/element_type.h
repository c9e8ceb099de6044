// Element types of tensors. Float32 is what the kernels compute in today; the
// type is carried everywhere so that other types can follow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace collage {

enum class ElementType : uint8_t {
  Undefined,
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  UInt16,
  UInt32,
  UInt64,
  Bool,
  String,
};

// Bytes per element (0 for Undefined and String).
size_t elementSize(ElementType type);
// Lower-case short name as the pattern language spells it: "float32", "int64", "bool".
std::string_view elementTypeName(ElementType type);
// Inverse of elementTypeName; Undefined if unknown. Also accepts "float" and "double".
ElementType elementTypeFromName(std::string_view name);
// ONNX TensorProto::DataType codes.
ElementType elementTypeFromOnnx(int32_t onnxDataType);
int32_t elementTypeToOnnx(ElementType type);
bool isFloatingPoint(ElementType type);

}  // namespace collage
