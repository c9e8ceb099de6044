// Exports of a plan for tools people already use (docs/plan-format.md shows
// how to open each):
//  - the model as ONNX with each node's placement written into it, for Netron;
//  - per-kernel timings of a Session as Chrome trace JSON, for Perfetto or
//    chrome://tracing (the format ONNX Runtime's profiler writes);
//  - per-node values in Google Model Explorer's node-data JSON, to colour the
//    graph by backend or by latency.
// Every problem (unreadable model, unwritable file) is an Error naming the file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/patterns/backend_spec.h"  // backendColor
#include "core/plan/plan.h"

namespace collage {

// Copies the ONNX model at `modelPath` to `outPath`, adding to every node the
// plan places (matched by name; a node without a unique name gets the name the
// importer gives it, e.g. op + "_" + index, written into the copy):
//  - metadata_props entries collage.backend, collage.group (index into the
//    plan's groups), collage.pattern, collage.origin, collage.cost_us (the
//    group's measured cost; absent when unknown) and collage.group_nodes.
//    NodeProto.metadata_props is field 9 since ONNX 1.16 (IR 10); it is
//    written in that wire format, so newer ONNX, Netron and Model Explorer
//    read it, and older ONNX keeps it as an unknown field;
//  - a line "collage: backend <b>, group <g>, pattern <p>, cost <c>" added to the
//    node's doc_string, which every ONNX version and Netron show.
// Earlier collage.* entries and doc lines are replaced, so exporting an
// exported model again is safe. Model-level metadata_props get
// collage.plan_format, collage.model_sha256, collage.predicted_us and
// collage.fingerprint.
// Nodes the importer adds (e.g. 'x/reshape_2d') are not in the file; their
// original node carries its own group. External data: the tensors keep
// their relative locations, so `outPath` must be in the model's directory
// when the model has external data (Error otherwise).
void exportAnnotatedOnnx(const std::string& modelPath, const Plan& plan, const std::string& outPath);

// The plan exportAnnotatedOnnx wrote into a model, read back from the nodes'
// collage.* metadata (group, backend, pattern, origin, cost_us, group_nodes,
// which also lists the nodes the importer adds) and the model's
// collage.predicted_us. The plan is pinned to the annotated file itself (its
// sha256), since that is the model it will run; it records no input shapes,
// backend versions or machine, which the annotated model does not keep.
// Error naming the file when it cannot be read or carries no placement.
Plan planFromAnnotatedOnnx(const std::string& path);

// Chrome trace event JSON ({"traceEvents": [...]}): one complete event
// ("ph": "X", microseconds) per kernel run, named after its group's first node
// ("conv1 +2" when it has more), category = backend, args = group index,
// backend, pattern, origin, nodes, predicted_us; plus one "run N" event per run
// enclosing its kernels, and process/thread name metadata. Timings come from
// Session::lastTimings() (concatenate several runs' timings for a longer trace).
void exportChromeTrace(const Plan& plan, const std::vector<KernelTiming>& timings,
                       const std::string& path);

// What to put on each node in the Model Explorer export.
enum class NodeDataKind {
  Backend,       // string value: the backend, with a fixed colour per backend
  Latency,       // number: the group's cost in microseconds divided evenly over its nodes,
                 // so a layer's sum in Model Explorer's stats is the layer's time
  GroupLatency,  // number: the whole group's cost in microseconds on each of its nodes
};
std::string_view nodeDataKindName(NodeDataKind kind);  // "backend", "latency", "group-latency"
NodeDataKind nodeDataKindFromName(std::string_view name);  // Error for other text

// Google Model Explorer's node data JSON for one graph (the form without a
// graph id, which Model Explorer applies to the graph on screen):
//   {"name": "...", "results": {"<node name>": {"value": ..., "bgColor": "#rrggbb"}},
//    "gradient": [{"stop": 0, "bgColor": ...}, ...]}
// Keys are node names, which is what the ONNX adapter (model-explorer-onnx)
// uses as node ids. Latency comes from the plan's measured costs, or, when
// `timings` is given and non-empty, from the mean measured duration of each
// group's kernel over those timings. Nodes of groups with unknown cost get no
// entry in the latency kinds.
void exportModelExplorerNodeData(const Plan& plan, const std::string& path, NodeDataKind kind,
                                 const std::vector<KernelTiming>* timings = nullptr);

}  // namespace collage
