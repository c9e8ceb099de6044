// The merged decoder form (an If on a use-cache flag, as Hugging Face
// Optimum's decoder_model_merged.onnx): found by structure, specialised per
// phase by inlining the branch the constant flag takes, and generating as
// the separate form does. gpt2_style_tiny_merged.onnx is gpt2_style_tiny.onnx
// at the same weights, merged (bench/models/export_decoders.py --merged).
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "../test_support.h"
#include "backends/backend_list.h"
#include "core/decode/cache_plan.h"
#include "core/decode/decoder.h"
#include "core/decode/decoder_signature.h"
#include "core/onnx/onnx_import.h"
#include "core/plan/plan.h"
#include "core/ir/tensor_compare.h"
#include "core/ops/reference_executor.h"

namespace collage {
namespace {

using test_support::expectError;

const std::string kDir = std::string(COLLAGE_SOURCE_DIR) + "/tests/models/decoder/";
const std::string kSeparate = kDir + "gpt2_style_tiny.onnx";
const std::string kMerged = kDir + "gpt2_style_tiny_merged.onnx";

int countOp(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

// The graph's inputs, each filled with seeded values in its role's range:
// ids and positions small, the mask ones, the past normal.
std::vector<Tensor> inputsOf(const Graph& g) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<Tensor> in;
  for (ValueId v : g.inputs()) {
    Tensor t(g.value(v).type);
    if (t.elementType() == ElementType::Int64) {
      const bool mask = g.value(v).name == "attention_mask";
      for (int64_t i = 0; i < t.numElements(); ++i)
        t.data<int64_t>()[i] = mask ? 1 : (i * 7 + 3) % 64;
    } else {
      for (int64_t i = 0; i < t.numElements(); ++i) t.data<float>()[i] = normal(rng);
    }
    in.push_back(std::move(t));
  }
  return in;
}

TEST(MergedDecoder, IsFoundByItsFlagWithTheSeparateFormsRoles) {
  const DecoderSignature merged = probeDecoderSignature(kMerged);
  const DecoderSignature separate = probeDecoderSignature(kSeparate);
  EXPECT_EQ(merged.useCacheFlag, "use_cache_branch");
  EXPECT_EQ(separate.useCacheFlag, "");
  EXPECT_EQ(merged.inputIds, separate.inputIds);
  EXPECT_EQ(merged.attentionMask, separate.attentionMask);
  EXPECT_EQ(merged.positionIds, separate.positionIds);
  EXPECT_EQ(merged.logits, separate.logits);
  ASSERT_EQ(merged.cache.size(), separate.cache.size());
  for (size_t i = 0; i < merged.cache.size(); ++i) {
    EXPECT_EQ(merged.cache[i].past, separate.cache[i].past);
    EXPECT_EQ(merged.cache[i].present, separate.cache[i].present);
    EXPECT_EQ(merged.cache[i].sequenceAxis, separate.cache[i].sequenceAxis);
  }
}

// The step graph is the then-branch inlined: no If, no flag input, and the
// same outputs as the separate model's step graph at the same inputs (the
// same nodes on the same weights: bit for bit).
TEST(MergedDecoder, TheStepGraphIsTheCacheBranchInlined) {
  const DecodeModel merged = importDecodeModel(kMerged, 9);
  const DecodeModel separate = importDecodeModel(kSeparate, 9);
  EXPECT_EQ(countOp(merged.graph, "If"), 0);
  EXPECT_FALSE(merged.graph.findValue("use_cache_branch").has_value());
  EXPECT_EQ(merged.bindings, separate.bindings);
  ASSERT_EQ(merged.graph.inputs().size(), separate.graph.inputs().size());
  const std::vector<Tensor> in = inputsOf(separate.graph);
  const std::vector<Tensor> got = ReferenceExecutor(merged.graph).run(in);
  const std::vector<Tensor> want = ReferenceExecutor(separate.graph).run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), want[i].shape()) << i;
    EXPECT_EQ(got[i].toFloats(), want[i].toFloats()) << "output " << i;
  }
}

// The prompt's graph is the else-branch inlined: the prompt alone (its mask
// and presents have the prompt's rows, no past's), with the logits of the
// separate model's pass over an empty (masked) past.
TEST(MergedDecoder, ThePromptGraphIsTheNoCacheBranchInlined) {
  const DecodeModel merged = importDecodeModel(kMerged, 9);
  const DecodeModel separate = importDecodeModel(kSeparate, 9);
  std::string why;
  const std::optional<Graph> prompt = importPrefillGraph(merged, 5, &why);
  ASSERT_TRUE(prompt.has_value()) << why;
  EXPECT_EQ(countOp(*prompt, "If"), 0);
  EXPECT_EQ(prompt->value(*prompt->findValue("attention_mask")).type.shape, (Shape{1, 5}));
  EXPECT_EQ(prompt->value(*prompt->findValue("present.1.value")).type.shape, (Shape{1, 4, 5, 16}));
  // Both through the Decoder (the mask and the cache rows as it feeds them):
  // the same first token and the same cache rows.
  Decoder a(merged), b(separate);
  GenerateOptions options;
  options.maxNewTokens = 1;
  options.keepLogits = true;
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5};
  const Generation ga = a.generate(ids, options), gb = b.generate(ids, options);
  EXPECT_EQ(a.promptRuns(), 1) << a.promptOneTokenAStepWhy();
  EXPECT_EQ(b.promptRuns(), 1) << b.promptOneTokenAStepWhy();
  EXPECT_EQ(ga.tokens, gb.tokens);
  EXPECT_TRUE(
      compareTensors(Tensor::fromFloats({static_cast<int64_t>(ga.logits[0].size())}, ga.logits[0]),
                     Tensor::fromFloats({static_cast<int64_t>(gb.logits[0].size())}, gb.logits[0]),
                     Tolerance{1e-5, 1e-6})
          .ok);
  for (size_t i = 0; i < merged.signature.cache.size(); ++i)
    EXPECT_TRUE(compareTensors(a.cache(i), b.cache(i), Tolerance{1e-5, 1e-6}).ok)
        << merged.signature.cache[i].past;
}

TEST(MergedDecoder, GeneratesTheSeparateFormsTokens) {
  const DecodeModel merged = importDecodeModel(kMerged, 24);
  const DecodeModel separate = importDecodeModel(kSeparate, 24);
  Decoder a(merged), b(separate);
  GenerateOptions options;
  options.maxNewTokens = 16;
  const std::vector<int64_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  const Generation ga = a.generate(prompt, options);
  EXPECT_EQ(a.promptRuns(), 1) << a.promptOneTokenAStepWhy();
  EXPECT_EQ(ga.tokens, b.generate(prompt, options).tokens);
  EXPECT_EQ(ga.tokens.size(), 16u);
}

// A plan for the step graph (the cache branch inlined, the flag fixed) runs
// the steps in place on its Session and gives the separate form's tokens.
TEST(MergedDecoder, APlanForTheStepGraphRunsInPlaceWithTheSeparateFormsTokens) {
  const DecodeModel merged = importDecodeModel(kMerged, 24);
  const DecodeModel separate = importDecodeModel(kSeparate, 24);
  std::unique_ptr<Backend> native = createBackend("native");
  const BackendLookup lookup = [&](const std::string& n) {
    return n == "native" ? native.get() : nullptr;
  };
  const Plan plan = singleNodePlan(merged.graph, "native");
  EXPECT_NO_THROW(checkMergedDecoderPlan(plan, merged.signature, kMerged, false));
  PlannedDecoder planned = plannedDecoder(merged, plan, lookup);
  ASSERT_EQ(planned.fallback, "");
  EXPECT_TRUE(planned.decoder->inPlace());
  GenerateOptions options;
  options.maxNewTokens = 12;
  const std::vector<int64_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  Decoder reference(separate);
  EXPECT_EQ(planned.decoder->generate(prompt, options).tokens,
            reference.generate(prompt, options).tokens);
}

// `collage optimize --input-value use_cache_branch=true` with the step's
// bindings imports the graph the loop runs (useCacheBinding names it); a
// plan made with the flag unbound lists it among its inputs and is refused,
// naming the plan, the model, the flag and the binding to optimize with.
TEST(MergedDecoder, APlanMadeWithTheFlagUnboundIsRefusedNamingIt) {
  const DecodeModel merged = importDecodeModel(kMerged, 9);
  const DecodeModel separate = importDecodeModel(kSeparate, 9);
  EXPECT_EQ(useCacheBinding(merged.signature, true), "use_cache_branch=true");
  EXPECT_EQ(useCacheBinding(merged.signature, false), "use_cache_branch=false");
  EXPECT_EQ(useCacheBinding(separate.signature, true), "");
  // As `optimize` imports it with the bindings generate prints: the step graph.
  ImportOptions options;
  for (const std::string& b : merged.bindings) {
    auto [name, shape] = parseInputShapeBinding(b);
    options.inputShapes[name] = shape;
  }
  Tensor flag(TensorType{ElementType::Bool, {1}});
  *static_cast<bool*>(flag.raw()) = true;
  options.constantInputs["use_cache_branch"] = flag;
  Plan plan = singleNodePlan(importOnnx(kMerged, options), "native");
  EXPECT_EQ(plan.inputShapes, graphInputShapes(merged.graph));
  EXPECT_NO_THROW(checkPlanAgainst(plan, merged.graph, "", {{"native", ""}}));
  // With the flag an input (the If kept).
  plan.inputShapes["use_cache_branch"] = {1};
  plan.sourcePath = "if.json";
  expectError([&] { checkMergedDecoderPlan(plan, merged.signature, kMerged, false); },
              {"if.json was made for " + kMerged, "input 'use_cache_branch' unbound",
               "the If on it kept", "--input-value use_cache_branch=true", "--print-bindings"});
  expectError([&] { checkMergedDecoderPlan(plan, merged.signature, kMerged, true); },
              {"if.json", "no-cache branch", "--input-value use_cache_branch=false",
               "--print-prefill-bindings"});
  EXPECT_NO_THROW(checkMergedDecoderPlan(plan, separate.signature, kSeparate, false));
}

// A constant bound to the flag must be of its type (a graph built for a
// boolean must not read an integer): an Error naming the input and both.
TEST(MergedDecoder, AConstantOfAnotherTypeThanTheInputIsRefused) {
  ImportOptions options;
  options.constantInputs["use_cache_branch"] = Tensor::fromInts({1}, {1});
  expectError([&] { importOnnx(kMerged, options); },
              {kMerged, "input 'use_cache_branch'", "int64", "bool"});
}

// A graph with one If on `cond`, whose branches return `thenOutputs` and
// `elseOutputs` float values [1, 2] (a Relu of a constant each).
Graph graphWithIf(bool condIsInput, int thenOutputs, int elseOutputs) {
  auto branch = [](int outputs) {
    auto b = std::make_shared<Graph>();
    ValueId c = b->addConstant("c", Tensor::fromFloats({1, 2}, {1, 2}));
    for (int i = 0; i < outputs; ++i) {
      ValueId out = b->addValue("out" + std::to_string(i), {ElementType::Float32, {1, 2}});
      b->addNode(Node{"relu" + std::to_string(i), "Relu", {}, {c}, {out}});
      b->markOutput(out);
    }
    b->finalize();
    return std::shared_ptr<const Graph>(b);
  };
  Graph g;
  ValueId ids = g.addInput("input_ids", {ElementType::Int64, {1, 1}});
  ValueId cond;
  if (condIsInput) {
    cond = g.addInput("use_cache", {ElementType::Bool, {1}});
  } else {
    ValueId zero = g.addConstant("zero", Tensor::fromInts({1, 1}, {0}));
    cond = g.addValue("ids_positive", {ElementType::Bool, {1, 1}});
    g.addNode(Node{"greater", "Greater", {}, {ids, zero}, {cond}});
  }
  AttributeMap attrs;
  attrs.set("then_branch", branch(thenOutputs));
  attrs.set("else_branch", branch(elseOutputs));
  std::vector<ValueId> outs;
  for (int i = 0; i < thenOutputs; ++i)
    outs.push_back(g.addValue("y" + std::to_string(i), {ElementType::Float32, {1, 2}}));
  g.addNode(Node{"pick", "If", attrs, {cond}, outs});
  for (ValueId o : outs) g.markOutput(o);
  g.finalize();
  return g;
}

TEST(MergedDecoder, AcceptsAnIfOnABooleanInputWithMatchingBranches) {
  EXPECT_EQ(mergedDecoderFlag(graphWithIf(true, 2, 2), "m.onnx"), "use_cache");
}

TEST(MergedDecoder, RefusesAnIfOnAComputedConditionNamingIt) {
  expectError([] { mergedDecoderFlag(graphWithIf(false, 1, 1), "m.onnx"); },
              {"m.onnx", "node 'pick' (If)", "'ids_positive'", "which the graph computes",
               "boolean graph input"});
}

TEST(MergedDecoder, RefusesBranchesWhoseOutputsDiffer) {
  expectError([] { mergedDecoderFlag(graphWithIf(true, 2, 1), "m.onnx"); },
              {"m.onnx", "node 'pick' (If)", "'use_cache'", "do not return the same outputs",
               "then_branch returns 2 output(s)", "else_branch 1 output(s)"});
}

}  // namespace
}  // namespace collage
