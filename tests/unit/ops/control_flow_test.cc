// If, Loop, Scan and the Sequence ops: import (bodies, outer values, the
// constant If inlined), the reference executor against numpy's results
// (tests/models/control_flow/make_models.py wrote the expected outputs), a
// Session with the native backend running them as opaque kernels, and the
// messages for bad models.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/ir/tensor_compare.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/control_flow_ops.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"
#include "core/patterns/candidate.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using test_support::expectError;

std::string modelPath(const std::string& name) {
  return std::string(COLLAGE_SOURCE_DIR) + "/tests/models/control_flow/" + name + ".onnx";
}

// The test data of one data set: inputs and numpy's outputs.
struct DataSet {
  std::vector<Tensor> inputs, outputs;
};

DataSet dataSet(const std::string& name, const std::string& set = "") {
  const std::string base = std::string(COLLAGE_SOURCE_DIR) + "/tests/models/control_flow/" + name +
                           (set.empty() ? "" : "." + set);
  DataSet d;
  for (int k = 0; fs::exists(base + ".input_" + std::to_string(k) + ".pb"); ++k)
    d.inputs.push_back(readTensorProtoFile(base + ".input_" + std::to_string(k) + ".pb"));
  for (int k = 0; fs::exists(base + ".output_" + std::to_string(k) + ".pb"); ++k)
    d.outputs.push_back(readTensorProtoFile(base + ".output_" + std::to_string(k) + ".pb"));
  return d;
}

int countOp(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

void expectOutputsMatch(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CompareResult r = compareTensors(got[i], want[i], Tolerance{1e-5, 1e-6});
    EXPECT_TRUE(r.ok) << "output " << i << ": " << r.message;
  }
}

void expectReferenceMatches(const std::string& name, const std::string& set = "") {
  Graph g = importOnnx(modelPath(name));
  DataSet d = dataSet(name, set);
  ASSERT_FALSE(d.outputs.empty());
  expectOutputsMatch(ReferenceExecutor(g).run(d.inputs), d.outputs);
}

// A plan with every node on native: the sequence groups whole (the native
// rule names them), every other node alone. What `collage optimize` may
// choose differs; that every node of these models runs on native is the point.
PlanGroup nativeGroup(std::vector<std::string> nodes, const std::string& origin) {
  PlanGroup group;
  group.nodes = std::move(nodes);
  group.backend = "native";
  group.pattern = origin;
  return group;
}

Plan nativePlan(const Graph& g, const BackendSet& set) {
  CandidateSet cands = enumerateCandidates(g, set.capabilities());
  NodeSet covered(g.numNodes());
  Plan plan;
  for (const Candidate& c : cands.all()) {
    if (c.backend != "native" || c.origin != "rule:sequence_group") continue;
    std::vector<std::string> names;
    c.nodes.forEach([&](NodeId n) { names.push_back(g.node(n).name); });
    covered |= c.nodes;
    plan.groups.push_back(nativeGroup(names, c.origin));
  }
  for (NodeId n = 0; n < g.numNodes(); ++n)
    if (!covered.contains(n)) plan.groups.push_back(nativeGroup({g.node(n).name}, "rule:op"));
  return plan;
}

void expectNativeSessionMatches(const std::string& name, const std::string& set = "") {
  Graph g = importOnnx(modelPath(name));
  BackendSet backends = loadBackendSet({"native"});
  Session session(g, nativePlan(g, backends), [&](const std::string& n) { return backends.find(n); });
  DataSet d = dataSet(name, set);
  expectOutputsMatch(session.run(d.inputs), d.outputs);
}

TEST(ControlFlow, ConstantIfIsInlinedAtImport) {
  Graph g = importOnnx(modelPath("if_const"));
  EXPECT_EQ(countOp(g, "If"), 0) << g.toString();
  // The then branch (Relu, Mul) is in the graph; the else branch (Neg) is not.
  EXPECT_EQ(countOp(g, "Relu"), 1);
  EXPECT_EQ(countOp(g, "Neg"), 0);
  expectReferenceMatches("if_const");
}

TEST(ControlFlow, DataDependentIfRunsEitherBranch) {
  Graph g = importOnnx(modelPath("if_data"));
  ASSERT_EQ(countOp(g, "If"), 1);
  ASSERT_TRUE(g.findNode("if_data").has_value());
  const Node& node = g.node(*g.findNode("if_data"));
  // The condition, then h (the outer value both branches read) as a node input.
  ASSERT_EQ(node.inputs.size(), 2u);
  EXPECT_EQ(g.value(node.inputs[1]).name, "h");
  // The else branch's outer constant is copied in, not passed.
  const Graph& elseBranch = node.attrs.getGraph("else_branch");
  EXPECT_EQ(elseBranch.outerInputSlots, std::vector<int32_t>{1});
  expectReferenceMatches("if_data");          // sum > 0: then
  expectReferenceMatches("if_data", "set1");  // sum < 0: else
}

TEST(ControlFlow, LoopWithTripCountHasStaticScanOutputs) {
  Graph g = importOnnx(modelPath("loop_trip"));
  const Node& node = g.node(*g.findNode("loop_trip"));
  EXPECT_EQ(g.value(node.outputs[1]).type.toString(), "float32[5x3]");
  expectReferenceMatches("loop_trip");
}

TEST(ControlFlow, LoopWithConditionOnly) { expectReferenceMatches("loop_cond"); }

TEST(ControlFlow, LoopWithTripCountAndCondition) { expectReferenceMatches("loop_both"); }

TEST(ControlFlow, ScanWithAxesAndDirections) { expectReferenceMatches("scan"); }

TEST(ControlFlow, SequencesAroundALoop) {
  Graph g = importOnnx(modelPath("sequence_loop"));
  const Node& loop = g.node(*g.findNode("loop_list"));
  // The list grows by one per iteration, and the trip count is the length
  // of a sequence known at import: the loop's list has a static length.
  EXPECT_EQ(g.value(loop.outputs[1]).type.toString(), "seq(float32[3], length 4)");
  EXPECT_EQ(g.value(g.node(*g.findNode("erase")).outputs[0]).type.sequenceLength, 2);
  expectReferenceMatches("sequence_loop");
}

TEST(ControlFlow, ListsAppendedInALoopThenStackedHaveStaticLengths) {
  Graph g = importOnnx(modelPath("loop_append_stack"));
  const Node& loop = g.node(*g.findNode("steps_loop"));
  EXPECT_EQ(g.value(loop.outputs[1]).type.toString(), "seq(float32[1x3], length 4)");
  EXPECT_EQ(g.value(loop.outputs[2]).type.toString(), "seq(float32[1x3], length 4)");
  const Graph& body = loop.attrs.getGraph("body");
  EXPECT_EQ(loopSequenceGrowth(body, 0), std::nullopt);  // h: a tensor made by Tanh
  EXPECT_EQ(loopSequenceGrowth(body, 1), 1);             // ys: SequenceInsert
  EXPECT_EQ(loopSequenceGrowth(body, 2), 1);             // zs: SequenceInsert, then Identity
  EXPECT_EQ(loopSequenceGrowth(body, 3), std::nullopt);  // no such carried value
  expectReferenceMatches("loop_append_stack");
}

TEST(ControlFlow, NestedBodiesReadTheModelsGraph) {
  Graph g = importOnnx(modelPath("loop_nested_if"));
  ASSERT_TRUE(g.findNode("outer_loop").has_value());
  const Node& loop = g.node(*g.findNode("outer_loop"));
  // trip, (no condition), acc0, then x: read by the If inside the body.
  ASSERT_EQ(loop.inputs.size(), 4u);
  EXPECT_EQ(loop.inputs[1], kNoValue);
  EXPECT_EQ(g.value(loop.inputs[3]).name, "x");
  const Graph& body = loop.attrs.getGraph("body");
  EXPECT_EQ(body.outerInputSlots, std::vector<int32_t>{3});
  // The If in the body reads x as an input of its own (the body's value).
  const auto inner = body.findNode("inner_if");
  ASSERT_TRUE(inner.has_value());
  EXPECT_EQ(body.value(body.node(*inner).inputs.back()).name, "x");
  expectReferenceMatches("loop_nested_if");
}

// A speech model's shape: an If on a scalar input (the rate) whose else
// branch, at the bound signal size, computes shapes its declarations do not
// hold (nested Ifs that squeeze and unsqueeze) and that its 2-D cell cannot
// take. ONNX Runtime runs it while that branch is not taken; so does
// Collage, with notes, and a run that takes it fails naming the branch.
TEST(ControlFlow, IfWithABranchThatDoesNotFitTheBoundSizes) {
  ImportOptions options;
  options.inputShapes["x"] = {1, 8};
  std::vector<std::string> notes;
  options.notes = &notes;
  Graph g = importOnnx(modelPath("if_nested_rate"), options);
  auto noted = [&](const std::string& text) {
    return std::any_of(notes.begin(), notes.end(),
                       [&](const std::string& n) { return n.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(noted("tensor '/dec/rnn/Unsqueeze_out': the model declares")) << notes.size();
  EXPECT_TRUE(noted("node '/dec/rnn/Gemm' (Gemm)")) << notes.size();
  EXPECT_TRUE(noted("so else_branch cannot run at the bound input sizes")) << notes.size();

  DataSet d = dataSet("if_nested_rate");
  expectOutputsMatch(ReferenceExecutor(g).run(d.inputs), d.outputs);
  std::vector<Tensor> otherRate = d.inputs;
  otherRate[1] = Tensor::fromInts({}, {1});  // rate 1: the else branch
  expectError([&] { ReferenceExecutor(g).run(otherRate); },
              {"node '/If' (If): else_branch cannot run at the input sizes bound at import",
               "'/dec/rnn/Gemm'"});
}

TEST(ControlFlow, NativeRunsControlFlowAndSequenceGroups) {
  for (const char* name : {"if_data", "loop_trip", "loop_cond", "loop_both", "scan", "sequence_loop",
                           "loop_nested_if", "loop_append_stack"}) {
    SCOPED_TRACE(name);
    expectNativeSessionMatches(name);
  }
  expectNativeSessionMatches("if_data", "set1");
}

TEST(ControlFlow, NativeRefusesASequenceAtAKernelBoundary) {
  Graph g = importOnnx(modelPath("sequence_loop"));
  BackendSet backends = loadBackendSet({"native"});
  Backend* native = backends.find("native");
  const auto split = g.findNode("split");  // SplitToSequence: its output is a sequence
  ASSERT_TRUE(split.has_value());
  NodeSet alone(g.numNodes());
  alone.insert(*split);
  CompileResult r = native->compile(KernelRequest::of(g, alone));
  EXPECT_FALSE(r);
  EXPECT_NE(r.refusal.find("sequence 'rows'"), std::string::npos) << r.refusal;
}

// A sequence never crosses a kernel boundary, so no candidate of any
// backend may pass one in or out: every such group would be measured only to
// be refused. The nodes a sequence links are a candidate together.
TEST(ControlFlow, NoCandidatePassesASequenceAcrossItsBoundary) {
  BackendSet backends = loadBackendSet({"native", "onednn", "openblas"});
  for (const char* name : {"sequence_loop", "loop_append_stack"}) {
    SCOPED_TRACE(name);
    Graph g = importOnnx(modelPath(name));
    CandidateSet cands = enumerateCandidates(g, backends.capabilities());
    int sequenceGroups = 0;
    for (const Candidate& c : cands.all()) {
      const KernelRequest request = KernelRequest::of(g, c.nodes);
      for (const auto* list : {&request.inputs, &request.outputs})
        for (ValueId v : *list)
          EXPECT_FALSE(g.value(v).type.isSequence())
              << c.toString(g) << " passes sequence '" << g.value(v).name << "'";
      sequenceGroups += c.origin == "rule:sequence_group";
    }
    EXPECT_GE(sequenceGroups, 1);
    EXPECT_TRUE(cands.uncovered().empty());
  }
}

TEST(ControlFlow, OtherBackendsDoNotClaimControlFlow) {
  Graph g = importOnnx(modelPath("if_data"));
  BackendSet backends = loadBackendSet({"native", "onednn", "openblas"});
  CandidateSet cands = enumerateCandidates(g, backends.capabilities());
  const NodeId ifNode = *g.findNode("if_data");
  for (int32_t i : cands.covering(ifNode)) {
    EXPECT_EQ(cands[static_cast<size_t>(i)].backend, "native");
    EXPECT_EQ(cands[static_cast<size_t>(i)].nodes.count(), 1);  // one opaque node
  }
  EXPECT_FALSE(cands.covering(ifNode).empty());
}

// ---- Bad models: Errors naming the node and the tensor.

TEST(ControlFlowErrors, BodyReadsAMissingValue) {
  // ONNX's checker finds it first and names the three.
  expectError([] { importOnnx(modelPath("bad_if_missing_value")); },
              {"if_missing", "then_relu", "'missing_value'"});
  // Where the checker does not run to the end (opset 18), the importer says it.
  expectError([] { importOnnx(modelPath("bad_if_missing_value_opset18")); },
              {"node 'if_missing' (If): then_branch: node 'then_relu' (Relu): reads tensor "
               "'missing_value', which no node, input or initializer of the body or an enclosing "
               "graph defines"});
}

TEST(ControlFlowErrors, LoopCarriedShapeChanges) {
  expectError([] { importOnnx(modelPath("bad_loop_carried_shape")); },
              {"node 'loop_grows' (Loop)", "'v0'", "'v_out'", "float32[2]", "float32[4]"});
}

TEST(ControlFlowErrors, LoopCarriedTypeChanges) {
  expectError([] { importOnnx(modelPath("bad_loop_carried_type")); },
              {"node 'loop_casts' (Loop)", "'v0'", "'v_out'", "int64[2]"});
}

TEST(ControlFlowErrors, LoopCarriedCountDiffers) {
  expectError([] { importOnnx(modelPath("bad_loop_carried_count")); },
              {"node 'loop_count' (Loop)", "body takes 3 inputs", "gives it 4"});
}

TEST(ControlFlowErrors, ScanOutputsOfALoopOfUnknownLength) {
  expectError([] { importOnnx(modelPath("bad_loop_dynamic_rows")); },
              {"node 'loop_rows' (Loop)", "scan output 'rows'", "trip count 'trip' is not a constant"});
}

TEST(ControlFlowErrors, ListGrownInALoopThatMayStopEarlyCannotBeConcatenated) {
  expectError([] { importOnnx(modelPath("bad_loop_grown_concat")); },
              {"node 'join' (ConcatFromSequence)", "length of the input sequence is known only at run time"});
}

TEST(ControlFlowErrors, EndlessLoopStopsAtTheBound) {
  Graph g = importOnnx(modelPath("loop_forever"));
  const int64_t saved = maxLoopIterations();
  setMaxLoopIterations(1000);
  Tensor go(ElementType::Bool, {});
  go.data<bool>()[0] = true;
  expectError([&] { ReferenceExecutor(g).run(std::vector<Tensor>{go, Tensor::fromFloats({2}, {1e-30f, 0.f})}); },
              {"node 'loop_forever' (Loop)", "stopped after 1000 iterations", "no trip count",
               "condition is still true"});
  setMaxLoopIterations(saved);
  // A false condition runs no iteration: the initial value comes out.
  go.data<bool>()[0] = false;
  std::vector<Tensor> out = ReferenceExecutor(g).run(std::vector<Tensor>{go, Tensor::fromFloats({2}, {3.f, 4.f})});
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{3.f, 4.f}));
}

// ---- Sequence ops on their own (evaluateNode), beyond the model above.

Tensor seqOf(std::vector<Tensor> items) {
  const TensorType element = items.front().type();
  return Tensor::sequence(element, std::move(items));
}

TEST(SequenceOps, InsertAtAPositionAndErase) {
  Node insert{"ins", "SequenceInsert", {}, {0, 1, 2}, {3}};
  Tensor s = seqOf({Tensor::fromFloats({2}, {1, 2}), Tensor::fromFloats({2}, {3, 4})});
  Tensor x = Tensor::fromFloats({2}, {9, 9});
  Tensor pos = Tensor::fromInts({}, {-1});  // before the last
  std::vector<Tensor> r = evaluateNode(insert, {&s, &x, &pos});
  ASSERT_EQ(r[0].items().size(), 3u);
  EXPECT_EQ(r[0].items()[1].toFloats(), (std::vector<float>{9, 9}));
  EXPECT_EQ(r[0].items()[2].toFloats(), (std::vector<float>{3, 4}));
  // The input sequence is unchanged (sequences are values).
  EXPECT_EQ(s.items().size(), 2u);

  Node erase{"er", "SequenceErase", {}, {0, 1}, {2}};
  Tensor first = Tensor::fromInts({}, {0});
  r = evaluateNode(erase, {&r[0], &first});
  ASSERT_EQ(r[0].items().size(), 2u);
  EXPECT_EQ(r[0].items()[0].toFloats(), (std::vector<float>{9, 9}));

  Tensor far = Tensor::fromInts({}, {5});
  expectError([&] { evaluateNode(erase, {&r[0], &far}); },
              {"node 'er' (SequenceErase)", "position 5 is out of range"});
}

TEST(SequenceOps, SplitToSequenceAndConcatFromSequence) {
  Node split{"split", "SplitToSequence", {}, {0}, {1}};
  split.attrs.set("axis", int64_t{1});
  split.attrs.set("keepdims", int64_t{1});
  split.attrs.set("split", Tensor::fromInts({}, {2}));  // pieces of 2 columns
  Tensor x = Tensor::fromFloats({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  std::vector<Tensor> r = evaluateNode(split, {&x});
  ASSERT_EQ(r[0].items().size(), 2u);
  EXPECT_EQ(r[0].items()[1].shape(), (Shape{2, 2}));
  EXPECT_EQ(r[0].items()[1].toFloats(), (std::vector<float>{2, 3, 6, 7}));

  Node concat{"cat", "ConcatFromSequence", {}, {0}, {1}};
  concat.attrs.set("axis", int64_t{0});
  concat.attrs.set("new_axis", int64_t{0});
  std::vector<Tensor> c = evaluateNode(concat, {&r[0]});
  EXPECT_EQ(c[0].shape(), (Shape{4, 2}));
  EXPECT_EQ(c[0].toFloats(), (std::vector<float>{0, 1, 4, 5, 2, 3, 6, 7}));
}

// keepdims = 0 drops the split axis with no split input, and, as ONNX
// Runtime reads it (PyTorch's `unbind` relies on that), with a scalar split
// of 1; with other splits the spec ignores keepdims.
TEST(SequenceOps, SplitToSequenceKeepdimsAsOnnxRuntimeReadsIt) {
  Tensor x = Tensor::fromFloats({2, 3}, {0, 1, 2, 3, 4, 5});
  auto firstPieceShape = [&](std::optional<Tensor> splitValue) {
    Node split{"split", "SplitToSequence", {}, {0}, {1}};
    split.attrs.set("axis", int64_t{0});
    split.attrs.set("keepdims", int64_t{0});
    if (splitValue) split.attrs.set("split", *splitValue);
    const TensorType inferred =
        OpRegistry::instance().get("SplitToSequence").infer(split, {x.type()})[0];
    std::vector<Tensor> r = evaluateNode(split, {&x});
    EXPECT_EQ(r[0].items().front().shape(), inferred.shape);
    return r[0].items().front().shape();
  };
  EXPECT_EQ(firstPieceShape(std::nullopt), (Shape{3}));
  EXPECT_EQ(firstPieceShape(Tensor::fromInts({}, {1})), (Shape{3}));
  EXPECT_EQ(firstPieceShape(Tensor::fromInts({}, {2})), (Shape{2, 3}));
  EXPECT_EQ(firstPieceShape(Tensor::fromInts({2}, {1, 1})), (Shape{1, 3}));
  // A scalar has no axis to split.
  Node split{"split", "SplitToSequence", {}, {0}, {1}};
  split.attrs.set("axis", int64_t{0});
  split.attrs.set("keepdims", int64_t{1});
  EXPECT_THROW(OpRegistry::instance().get("SplitToSequence").infer(split, {TensorType{ElementType::Float32, {}}}),
               Error);
}

TEST(SequenceOps, AtReadsAndLengthCounts) {
  Tensor s = seqOf({Tensor::fromInts({1}, {10}), Tensor::fromInts({1}, {20}), Tensor::fromInts({1}, {30})});
  Node at{"at", "SequenceAt", {}, {0, 1}, {2}};
  Tensor pos = Tensor::fromInts({}, {-3});
  EXPECT_EQ(evaluateNode(at, {&s, &pos})[0].toInts(), (std::vector<int64_t>{10}));
  Node length{"len", "SequenceLength", {}, {0}, {1}};
  EXPECT_EQ(evaluateNode(length, {&s})[0].toInts(), (std::vector<int64_t>{3}));
  Node empty{"empty", "SequenceEmpty", {}, {}, {0}};
  empty.attrs.set("dtype", int64_t{7});  // int64
  Tensor e = evaluateNode(empty, {})[0];
  EXPECT_TRUE(e.isSequence());
  EXPECT_EQ(e.type().toString(), "seq(int64[scalar], length 0)");
  expectError([&] { evaluateNode(at, {&e, &pos}); }, {"node 'at' (SequenceAt)", "always empty"});
}

}  // namespace
}  // namespace collage
