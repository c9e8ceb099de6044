// Control flow: If, Loop and Scan, and SequenceMap (a body run once per
// element of a sequence). Their bodies are graph attributes
// (then_branch / else_branch, body), imported as Graphs that read the values
// of the enclosing graph through extra node inputs (graph.h, "Subgraphs").
// The reference kernels run the bodies on the ReferenceExecutor; a backend
// runs such a node as one opaque kernel (the native backend does, on these
// reference kernels), so a plan places everything around it as usual.
//
// Static shapes. Every value has a static type, so:
//  - If's branches must give outputs of the same type (an If whose condition
//    is constant after folding is inlined at import instead, so only a
//    data-dependent If needs this). A branch that cannot be typed at the
//    bound input sizes is marked unrunnable (the attributes below) and the
//    other stands in for its types; a run that takes it fails with the reason;
//  - a loop-carried value keeps its type across iterations (a sequence may
//    change its length, which its type then leaves unknown);
//  - a Loop's scan outputs have one row per iteration, so the importer
//    needs the iteration count: staticLoopIterations() below. Their inferred
//    shape has a placeholder 0 rows, as ConstantOfShape's does (misc_ops.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"

namespace collage {

// String attributes of an If whose branch (its attribute name) cannot run at
// the bound input sizes, and why (set by the importer).
inline constexpr const char* kUnrunnableBranch = "collage_unrunnable_branch";
inline constexpr const char* kUnrunnableReason = "collage_unrunnable_reason";

// The ops with a body (a graph attribute): If, Loop, Scan, SequenceMap.
bool hasBody(const std::string& op);

// The most iterations a Loop runs before it stops with an Error. A Loop with
// no trip count whose condition never turns false would otherwise never
// end; 2^20 iterations of even a one-node body take seconds on the
// reference executor, far beyond any loop of a real model we know
// (exporters' loops run over sequence steps or detections).
inline constexpr int64_t kDefaultMaxLoopIterations = int64_t{1} << 20;
// The bound in force (process-wide; tests lower it).
int64_t maxLoopIterations();
void setMaxLoopIterations(int64_t iterations);

// The number of iterations a Loop runs whatever its data, if that can be
// told without running it: a constant trip count (`tripCount`, null when
// absent or not constant) and a condition that is absent, a constant
// (`condition`), or kept true by the body (its condition output is a
// constant true or the body's condition input passed through). A constant
// false condition gives 0. nullopt otherwise.
std::optional<int64_t> staticLoopIterations(const Node& loop, const Tensor* tripCount,
                                            const Tensor* condition, bool hasTripCount,
                                            bool hasCondition);

// How many elements one iteration of the Loop adds to loop-carried value #j
// when it is a sequence: the body's result for it is its formal input
// passed through SequenceInsert (+1), SequenceErase (-1) and Identity only,
// as exporters write `outs.append(y)` in a loop. nullopt otherwise (the
// growth then depends on the data, and the length is known only at run time).
std::optional<int64_t> loopSequenceGrowth(const Graph& body, size_t carried);

// The type that covers both a and b: equal types; or sequences of one
// element type whose lengths may differ (the join's length is then
// unknown) and whose element shapes agree, an empty sequence agreeing with
// any. nullopt if there is none.
std::optional<TensorType> joinTypes(const TensorType& a, const TensorType& b);

}  // namespace collage
