// ONNX requires a graph's nodes in topological order, and the ONNX checker
// refuses a model whose nodes are not. ONNX Runtime sorts them instead, and
// exporters and conversion tools rely on that (a float16/Cast conversion
// tool appends the Casts it adds at the end of the node list). So the
// importer sorts first, every body too, and refuses only a real cycle.
#pragma once

#include <onnx/onnx_pb.h>

namespace collage {

// Reorders `graph`'s nodes, and those of every graph attribute inside it,
// so that each node comes after the producers of its inputs. Stable: nodes
// already in order keep their order. A node's body may read values of the
// enclosing graphs; those reads order the node after their producers too.
// Throws Error naming a node on the cycle if there is one.
void sortNodesTopologically(onnx::GraphProto& graph);

}  // namespace collage
