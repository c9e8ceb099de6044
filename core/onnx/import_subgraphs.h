// Subgraphs: the bodies of If, Loop, Scan and SequenceMap (graph
// attributes), each imported by a child Importer whose scope encloses the
// parent's; the branch of an If with a constant condition inlined into the
// parent instead.
//
// Invariant: a body reads outer values only through its captured inputs,
// which follow its formal inputs; Graph::outerInputSlots says which node
// input feeds each (the node's ONNX inputs keep their positions, captures
// shared between bodies come after them). A constant outer value is copied
// into the body instead, so that the body folds with it.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>

#include "core/ir/graph.h"

namespace collage::onnx_import {

// The graph attributes of a node, by attribute name.
std::map<std::string, const onnx::GraphProto*> graphAttributes(const onnx::NodeProto& proto);

// Throws unless a body's declared input `in` (of `owner`'s attribute
// `attr`) takes `formal`, the type the node passes.
void checkBodyInput(const Node& owner, const std::string& attr, const onnx::ValueInfoProto& in,
                    const TensorType& formal);

}  // namespace collage::onnx_import
