// Element-type dispatch for the reference kernels: turns a runtime
// ElementType into a C++ type for a generic lambda. The set of types an op
// accepts is a compile-time mask, so a kernel body is only instantiated for
// the types it makes sense for (no std::exp over bool), and every other type
// is reported as Unsupported (the conformance runner counts it as skipped).
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/element_type.h"
#include "core/ir/graph.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_helpers.h"

namespace collage {

template <class T>
struct TypeTag {
  using type = T;
};

// Type-set bits.
inline constexpr unsigned kFloatTypes = 1;     // float, double
inline constexpr unsigned kSignedTypes = 2;    // int8, int16, int32, int64
inline constexpr unsigned kUnsignedTypes = 4;  // uint8, uint16, uint32, uint64
inline constexpr unsigned kBoolType = 8;
inline constexpr unsigned kHalfTypes = 16;  // float16 (never visited: see half_float.h)
inline constexpr unsigned kSignedNumeric = kFloatTypes | kSignedTypes;
inline constexpr unsigned kNumeric = kFloatTypes | kSignedTypes | kUnsignedTypes;
inline constexpr unsigned kAllTypes = kNumeric | kBoolType;

inline bool typeInSet(unsigned set, ElementType t) {
  switch (t) {
    case ElementType::Float32:
    case ElementType::Float64:
      return set & kFloatTypes;
    case ElementType::Int8:
    case ElementType::Int16:
    case ElementType::Int32:
    case ElementType::Int64:
      return set & kSignedTypes;
    case ElementType::UInt8:
    case ElementType::UInt16:
    case ElementType::UInt32:
    case ElementType::UInt64:
      return set & kUnsignedTypes;
    case ElementType::Bool:
      return set & kBoolType;
    case ElementType::Float16:
      return set & kHalfTypes;
    default:
      return false;
  }
}

inline Unsupported unsupportedType(const Node& node, ElementType t) {
  return Unsupported(nodeLabel(node) + "element type " + std::string(elementTypeName(t)) +
                     " is not supported");
}

// Throws Unsupported unless t is in the set.
inline void requireTypeIn(const Node& node, unsigned set, ElementType t) {
  if (!typeInSet(set, t)) throw unsupportedType(node, t);
}

// Calls f(TypeTag<T>{}) for the C++ type T of t if t is in Set; else throws Unsupported.
template <unsigned Set, class F>
void visitType(const Node& node, ElementType t, F&& f) {
  switch (t) {
#define COLLAGE_VISIT(ET, CT, BIT)      \
  case ElementType::ET:                 \
    if constexpr ((Set & (BIT)) != 0) { \
      f(TypeTag<CT>{});                 \
      return;                           \
    }                                   \
    break;
    COLLAGE_VISIT(Float32, float, kFloatTypes)
    COLLAGE_VISIT(Float64, double, kFloatTypes)
    COLLAGE_VISIT(Int8, int8_t, kSignedTypes)
    COLLAGE_VISIT(Int16, int16_t, kSignedTypes)
    COLLAGE_VISIT(Int32, int32_t, kSignedTypes)
    COLLAGE_VISIT(Int64, int64_t, kSignedTypes)
    COLLAGE_VISIT(UInt8, uint8_t, kUnsignedTypes)
    COLLAGE_VISIT(UInt16, uint16_t, kUnsignedTypes)
    COLLAGE_VISIT(UInt32, uint32_t, kUnsignedTypes)
    COLLAGE_VISIT(UInt64, uint64_t, kUnsignedTypes)
    COLLAGE_VISIT(Bool, bool, kBoolType)
#undef COLLAGE_VISIT
    default:
      break;
  }
  throw unsupportedType(node, t);
}

// Calls f(TypeTag<U>{}) with an unsigned integer type of the element's size,
// for kernels that only move elements (Transpose, Gather, Where, ...).
template <class F>
void visitBySize(const Node& node, ElementType t, F&& f) {
  switch (elementSize(t)) {
    case 1:
      f(TypeTag<uint8_t>{});
      return;
    case 2:
      f(TypeTag<uint16_t>{});
      return;
    case 4:
      f(TypeTag<uint32_t>{});
      return;
    case 8:
      f(TypeTag<uint64_t>{});
      return;
    default:
      throw unsupportedType(node, t);
  }
}

}  // namespace collage
