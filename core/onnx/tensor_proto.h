// Conversion between onnx.TensorProto and collage::Tensor: every storage form
// ONNX allows (raw_data, the typed repeated fields, external data files).
#pragma once

#include <string>
#include <vector>

#include "core/ir/tensor.h"

namespace onnx {
class TensorProto;
}

namespace collage {

// Decodes a TensorProto. External data is read relative to `baseDir` (the
// model's directory). Throws Error naming the tensor for a size mismatch or an
// unreadable external file, Unsupported for string (and other uncovered)
// element types.
Tensor tensorFromProto(const onnx::TensorProto& proto, const std::string& baseDir = "");

// Encodes a tensor as raw_data.
void tensorToProto(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto);

// Values of any numeric tensor as double (float16/bfloat16 included).
std::vector<double> tensorToDoubles(const Tensor& tensor);

}  // namespace collage
