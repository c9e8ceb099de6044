// Groups that pass sequences between their nodes (SequenceEmpty -> Loop ->
// ConcatFromSequence): a sequence has no DLPack form and never crosses a
// kernel boundary, so the nodes that make, carry and consume one run as one
// kernel that evaluates them in order on the registry's reference kernels.
#pragma once

#include <string>
#include <vector>

#include "core/runtime/backend.h"

namespace collage::native {

// True if node n reads or writes a sequence value.
bool touchesSequence(const Graph& graph, NodeId n);

// The nodes linked by sequence values, one set per connected part, each
// closed under paths (a node on a path between two members is a member), so
// that it is a convex group with no sequence crossing its boundary.
std::vector<NodeSet> sequenceGroups(const Graph& graph);

// Why the request cannot be a kernel at all because a sequence would cross
// its boundary; empty when none does.
std::string sequenceBoundaryRefusal(const KernelRequest& request);

// A kernel running every node of the request on the reference kernels.
CompileResult compileReferenceGroup(const KernelRequest& request);

}  // namespace collage::native
