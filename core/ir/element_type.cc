#include "core/ir/element_type.h"

#include <array>

namespace collage {
namespace {

struct TypeInfo {
  ElementType type;
  std::string_view name;
  size_t size;
  int32_t onnx;
};

// ONNX codes: FLOAT=1 UINT8=2 INT8=3 UINT16=4 INT16=5 INT32=6 INT64=7 STRING=8
// BOOL=9 FLOAT16=10 DOUBLE=11 UINT32=12 UINT64=13 BFLOAT16=16.
constexpr std::array<TypeInfo, 15> kTypes = {{
    {ElementType::Undefined, "undefined", 0, 0},
    {ElementType::Float32, "float32", 4, 1},
    {ElementType::Float64, "float64", 8, 11},
    {ElementType::Float16, "float16", 2, 10},
    {ElementType::BFloat16, "bfloat16", 2, 16},
    {ElementType::Int8, "int8", 1, 3},
    {ElementType::Int16, "int16", 2, 5},
    {ElementType::Int32, "int32", 4, 6},
    {ElementType::Int64, "int64", 8, 7},
    {ElementType::UInt8, "uint8", 1, 2},
    {ElementType::UInt16, "uint16", 2, 4},
    {ElementType::UInt32, "uint32", 4, 12},
    {ElementType::UInt64, "uint64", 8, 13},
    {ElementType::Bool, "bool", 1, 9},
    {ElementType::String, "string", 0, 8},
}};

const TypeInfo& info(ElementType type) { return kTypes[static_cast<size_t>(type)]; }

}  // namespace

size_t elementSize(ElementType type) { return info(type).size; }
std::string_view elementTypeName(ElementType type) { return info(type).name; }

ElementType elementTypeFromName(std::string_view name) {
  if (name == "float") return ElementType::Float32;
  if (name == "double") return ElementType::Float64;
  for (const auto& t : kTypes)
    if (t.name == name) return t.type;
  return ElementType::Undefined;
}

ElementType elementTypeFromOnnx(int32_t code) {
  for (const auto& t : kTypes)
    if (t.onnx == code) return t.type;
  return ElementType::Undefined;
}

int32_t elementTypeToOnnx(ElementType type) { return info(type).onnx; }

bool isFloatingPoint(ElementType type) {
  return type == ElementType::Float32 || type == ElementType::Float64 ||
         type == ElementType::Float16 || type == ElementType::BFloat16;
}

}  // namespace collage
