// The inspector's text for one node: op, attributes, input and output types
// and shapes, FLOPs, and, when a plan places it, its backend, group, pattern,
// cost and where the choice came from.
#pragma once

#include <QString>

#include "core/graph.h"
#include "core/plan.h"

namespace collage {

// HTML for a QTextBrowser. `plan` may be null.
QString describeNodeHtml(const Graph& graph, NodeId node, const Plan* plan);

}  // namespace collage
