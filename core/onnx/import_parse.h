// Parse: the model file into the Importer's values. The protobuf is read
// straight from the file (no copy of the weights), checked by ONNX's
// checker, scanned for ops Collage cannot take (all reported at once), then
// the graph inputs are bound to static shapes, initializers and Constant
// nodes become constant values and attributes are converted.
//
// Invariant: every graph input that is not bound to a constant leaves here
// with a static TensorType (dynamic dims bound from ImportOptions or
// defaultDim, each such binding recorded as a DynamicInputBinding), and
// nothing here interprets an op: that starts in import_canonicalise.
// Also here: reading the declared inputs without the weights
// (readDeclaredInputs), for front ends that ask for shapes before importing.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "core/onnx/onnx_import.h"

namespace collage::onnx_import {

// Throws Error for a file that cannot be read or is not an ONNX model.
onnx::ModelProto loadModel(const std::string& path);
DeclaredInput declaredInputOf(const onnx::ValueInfoProto& info);
// "1x3xNx?" ("scalar" for rank 0, "?" for an unknown rank).
std::string declaredShapeToString(const onnx::TypeProto_Tensor& t);
// "float32[1x3xN]" ("?" for an element type not given).
std::string declaredTypeToString(const onnx::TypeProto_Tensor& t);

}  // namespace collage::onnx_import
