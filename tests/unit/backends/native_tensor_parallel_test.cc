// Tensor parallelism's structural split (native_tensor_parallel.h) on the
// tiny GPT-2- and LLaMA-style decoders: which weight MatMuls are sharded by
// columns and by rows, in which blocks, and what each rank owns; and the
// sharded MatMul kernel (native_sharded_matmul.h) against the whole product.
#include "backends/native/native_tensor_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>

#include "backends/native/native_sharded_matmul.h"
#include "core/decode/decoder.h"
#include "core/plan/plan.h"

namespace collage::native {
namespace {

const std::string kDir = std::string(COLLAGE_SOURCE_DIR) + "/tests/models/decoder/";

// What the split says of each weight MatMul, keyed by its weight's name
// (the test may read names; the finder never does): "cols 0+64/4 64+64/4",
// "rows 0+64/4", or "whole".
std::map<std::string, std::string> describe(const Graph& g, const TensorParallelSplit& split) {
  std::map<std::string, std::string> out;
  auto weight = [&](NodeId n) {
    std::string name = g.value(g.node(n).inputs[1]).name;
    return name.substr(0, name.rfind('_'));  // the importer's "_NN" suffix off
  };
  for (const TensorParallelMatMul& m : split.matmuls) {
    std::string text = m.rows ? "rows" : "cols";
    for (const TensorParallelBlock& b : m.blocks)
      text += " " + std::to_string(b.offset) + "+" + std::to_string(b.width) + "/" +
              std::to_string(b.units);
    std::string& slot = out[weight(m.node)];
    slot += (slot.empty() ? "" : "; ") + text;
  }
  return out;
}

TEST(TensorParallelSplit, GptStyleFusedQkvSplitsEachPieceByHeads) {
  const DecodeModel model = importDecodeModel(kDir + "gpt2_style_tiny.onnx", 8);
  const TensorParallelSplit split = findTensorParallelSplit(model.graph);
  ASSERT_EQ(split.attentions.size(), 2u);
  EXPECT_EQ(split.attentions[0].heads, 4);
  EXPECT_EQ(split.attentions[0].kvHeads, 4);
  const auto d = describe(model.graph, split);
  // Both layers: c_attn by its Q, K, V pieces' heads (each of the two
  // layers' weights, so "; " joins them), the attention's c_proj by the
  // query heads' rows, the MLP's c_fc by columns and its c_proj by rows.
  EXPECT_EQ(d.at("c_attn.weight"), "cols 0+64/4 64+64/4 128+64/4; cols 0+64/4 64+64/4 128+64/4");
  EXPECT_EQ(d.at("c_proj.weight"), "rows 0+64/4; rows 0+64/4");
  EXPECT_EQ(d.at("c_fc.weight"), "cols 0+256/256; cols 0+256/256");
  EXPECT_EQ(d.at("mlp.c_proj.weight"), "rows 0+256/256; rows 0+256/256");
  EXPECT_EQ(split.matmuls.size(), 8u);
  // The LM head (the tied embedding) runs whole.
  ASSERT_EQ(split.replicated.size(), 1u) << split.replicated[0].why;
  EXPECT_NE(split.replicated[0].why.find("reaches no decode attention"), std::string::npos)
      << split.replicated[0].why;
  // Rank 1 of 2: heads 2 and 3 of each piece; the upper half of the MLP.
  for (const TensorParallelMatMul& m : split.matmuls) {
    const auto r = ownedRanges(model.graph, m, 1, 2);
    if (m.blocks.size() == 3) {
      EXPECT_EQ(r, (std::vector<std::pair<int64_t, int64_t>>{{32, 64}, {96, 128}, {160, 192}}));
    } else if (m.blocks[0].units == 4) {
      EXPECT_EQ(r, (std::vector<std::pair<int64_t, int64_t>>{{32, 64}}));
    } else {
      EXPECT_EQ(r, (std::vector<std::pair<int64_t, int64_t>>{{128, 256}}));
    }
  }
}

TEST(TensorParallelSplit, LlamaStyleSplitsQueryAndKvHeadsAndTheGatedMlp) {
  const DecodeModel model = importDecodeModel(kDir + "llama_style_tiny.onnx", 8);
  const TensorParallelSplit split = findTensorParallelSplit(model.graph);
  ASSERT_EQ(split.attentions.size(), 2u);
  EXPECT_EQ(split.attentions[1].heads, 4);
  EXPECT_EQ(split.attentions[1].kvHeads, 2);
  const auto d = describe(model.graph, split);
  // Q through its rotary embedding, K through its rotary and the Concat
  // with the past, V through the Concat: by heads (4 query, 2 KV heads).
  EXPECT_EQ(d.at("q_proj.weight"), "cols 0+64/4; cols 0+64/4");
  EXPECT_EQ(d.at("k_proj.weight"), "cols 0+32/2; cols 0+32/2");
  EXPECT_EQ(d.at("v_proj.weight"), "cols 0+32/2; cols 0+32/2");
  EXPECT_EQ(d.at("o_proj.weight"), "rows 0+64/4; rows 0+64/4");
  EXPECT_EQ(d.at("gate_proj.weight"), "cols 0+176/176; cols 0+176/176");
  EXPECT_EQ(d.at("up_proj.weight"), "cols 0+176/176; cols 0+176/176");
  EXPECT_EQ(d.at("down_proj.weight"), "rows 0+176/176; rows 0+176/176");
  EXPECT_EQ(split.matmuls.size(), 14u);
  ASSERT_EQ(split.replicated.size(), 1u);  // the LM head
  // The weights TP divides: per layer Q 64x64, K and V 64x32, O 64x64, gate
  // and up 64x176, down 176x64 floats; the one it leaves whole: the LM
  // head's [64, vocabulary].
  const TensorParallelWeights w = tensorParallelWeights(model.graph, split);
  EXPECT_EQ(w.sharded, 2.0 * (64 * 64 * 2 + 64 * 32 * 2 + 64 * 176 * 3) * 4);
  const Node& head = model.graph.node(split.replicated[0].node);
  ASSERT_TRUE(model.graph.value(head.inputs.at(1)).isConstant());
  const Shape& headShape = model.graph.value(head.inputs[1]).type.shape;
  EXPECT_EQ(headShape.at(0), 64);
  EXPECT_EQ(w.replicated, static_cast<double>(headShape.at(0) * headShape.at(1) * 4));
  // Rank 1 of 2 owns KV head 1 and the query heads 2 and 3 that read it.
  for (const TensorParallelMatMul& m : split.matmuls) {
    const auto r = ownedRanges(model.graph, m, 1, 2);
    const TensorParallelBlock& b = m.blocks[0];
    using Ranges = std::vector<std::pair<int64_t, int64_t>>;
    const Ranges want = b.units == 2   ? Ranges{{16, 32}}
                        : b.units == 4 ? Ranges{{32, 64}}
                                       : Ranges{{88, 176}};
    EXPECT_EQ(r, want) << b.units;
  }
}

// A user's plan: its groups holding a sharded MatMul or an attention's node
// are split (the MatMul on tensor_parallel, the rest native nodes, the
// attention one group), the others kept as they are.
TEST(TensorParallelSplit, APlanKeepsItsGroupsThatHoldNoSplitNode) {
  const DecodeModel model = importDecodeModel(kDir + "gpt2_style_tiny.onnx", 8);
  const Graph& g = model.graph;
  const TensorParallelSplit split = findTensorParallelSplit(g);
  Plan plan = singleNodePlan(g, "native");
  // Fuse the first sharded MatMul with its bias Add, and the LM head (left
  // whole) with the norm before it.
  const std::string matmul = g.node(split.matmuls[0].node).name;
  const std::string bias =
      g.node(g.value(g.node(split.matmuls[0].node).outputs[0]).consumers[0]).name;
  auto groupOf = [&](const std::string& n) {
    for (size_t i = 0; i < plan.groups.size(); ++i)
      if (plan.groups[i].nodes == std::vector<std::string>{n}) return i;
    return plan.groups.size();
  };
  const size_t a = groupOf(matmul), b = groupOf(bias);
  ASSERT_LT(a, plan.groups.size());
  ASSERT_LT(b, plan.groups.size());
  plan.groups[a].nodes.push_back(bias);
  plan.groups.erase(plan.groups.begin() + static_cast<std::ptrdiff_t>(b));
  const NodeId head = g.value(*g.findValue("logits")).producer;
  ASSERT_EQ(g.node(head).op, "MatMul");
  const std::string norm = g.node(g.value(g.node(head).inputs[0]).producer).name;
  const size_t c = groupOf(norm), d = groupOf(g.node(head).name);
  ASSERT_LT(c, plan.groups.size());
  ASSERT_LT(d, plan.groups.size());
  plan.groups[c].nodes.push_back(g.node(head).name);
  plan.groups.erase(plan.groups.begin() + static_cast<std::ptrdiff_t>(d));
  size_t kept = 0;
  const Plan out = tensorParallelPlan(g, split, plan, &kept);
  const Plan own = tensorParallelPlan(g, split);
  // Every node single or in its attention's group, as in the split's own plan.
  EXPECT_EQ(out.groups.size(), own.groups.size() - 1);
  EXPECT_TRUE(std::any_of(out.groups.begin(), out.groups.end(), [&](const PlanGroup& x) {
    return x.nodes == std::vector<std::string>{norm, g.node(head).name};
  }));
  std::map<std::string, std::string> backendOf;
  for (const PlanGroup& group : out.groups)
    for (const std::string& n : group.nodes) backendOf[n] = group.backend;
  EXPECT_EQ(backendOf.at(matmul), "tensor_parallel");
  EXPECT_EQ(backendOf.at(bias), "native");
  // Kept: the plan's groups with no sharded MatMul and no attention node.
  size_t attentionNodes = 0;
  for (const TensorParallelAttention& t : split.attentions) attentionNodes += t.nodes.count();
  EXPECT_EQ(kept, plan.groups.size() - 1 - (split.matmuls.size() - 1) - attentionNodes);
}

// Column shards give the whole product's columns (the rest NaN); row
// shards summed give the whole product.
// At 2 rows (the gemv) and 6 (the blocked loop).
TEST(ShardedMatMul, ColumnAndRowShardsMakeTheWholeProduct) {
  for (const int64_t M : {int64_t{2}, int64_t{6}}) {
    SCOPED_TRACE("M = " + std::to_string(M));
    const int64_t K = 37, N = 300;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> a(M * K), bw(K * N);
    for (float& x : a) x = u(rng);
    for (float& x : bw) x = u(rng);
    auto make = [&](std::shared_ptr<MatMulShard> shard) {
      ShardedMatMulKernel k;
      k.M = M;
      k.K = K;
      k.N = N;
      k.b = Tensor::fromFloats({K, N}, bw);
      k.threads = 2;
      k.shard = std::move(shard);
      Tensor ta = Tensor::fromFloats({M, K}, a);
      Tensor out(ElementType::Float32, {M, N});
      DLTensor in = ta.toDLTensor(), o = out.toDLTensor();
      k.run({&in}, {&o});
      return out.toFloats();
    };
    const std::vector<float> whole = make(nullptr);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; n += 37) {
        double ref = 0;
        for (int64_t k = 0; k < K; ++k) ref += double(a[m * K + k]) * bw[k * N + n];
        EXPECT_NEAR(whole[m * N + n], ref, 1e-4);
      }
    auto cols = std::make_shared<MatMulShard>();
    cols->ranges = {{10, 20}, {260, 300}};
    const std::vector<float> c = make(cols);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const bool owned = (n >= 10 && n < 20) || n >= 260;
        if (owned)
          EXPECT_EQ(c[m * N + n], whole[m * N + n]) << n;
        else
          EXPECT_TRUE(std::isnan(c[m * N + n])) << n;
      }
    std::vector<float> sum(M * N, 0.0f);
    for (auto range : {std::pair<int64_t, int64_t>{0, 20}, {20, K}}) {
      auto rows = std::make_shared<MatMulShard>();
      rows->rows = true;
      rows->ranges = {range};
      int calls = 0;
      rows->allReduce = [&](float* out, int64_t count) {
        ++calls;
        ASSERT_EQ(count, M * N);
        for (int64_t i = 0; i < count; ++i) sum[i] += out[i];
      };
      make(rows);
      EXPECT_EQ(calls, 1);
    }
    for (int64_t i = 0; i < M * N; ++i) EXPECT_NEAR(sum[i], whole[i], 1e-5) << i;
  }
}

}  // namespace
}  // namespace collage::native
