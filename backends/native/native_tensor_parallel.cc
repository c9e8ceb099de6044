// The structural split of tensor parallelism (native_tensor_parallel.h).
#include "backends/native/native_tensor_parallel.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "backends/native/native_attention.h"
#include "backends/native/native_cache_parallel.h"
#include "core/ir/error.h"

namespace collage::native {

namespace {

bool isWeightMatMul(const Graph& g, const Node& n) {
  if (n.op != "MatMul" || n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  const Value& a = g.value(n.inputs[0]);
  const Value& b = g.value(n.inputs[1]);
  return !a.isConstant() && b.isConstant() && b.type.rank() == 2 && a.type.rank() >= 1 &&
         a.type.elementType == ElementType::Float32 && b.type.elementType == ElementType::Float32 &&
         a.type.shape.back() == b.type.shape[0];
}

// Ops that compute each output element from the inputs' elements at the same
// position (after broadcasting): they keep which columns and heads a value holds.
bool isElementwise(const std::string& op) {
  static const std::set<std::string> ops = {
      "Add",     "Sub",  "Mul",  "Div",     "Pow",  "Max",      "Min",   "Where", "Neg",
      "Sigmoid", "Tanh", "Erf",  "Relu",    "Gelu", "Exp",      "Sqrt",  "Abs",   "Reciprocal",
      "Cast",    "Identity", "Softplus", "HardSigmoid", "LeakyRelu", "Elu", "Clip", "Sin", "Cos"};
  return ops.count(op) != 0;
}

int64_t normalisedAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// What a value derived from a weight MatMul's output holds, as far as the
// split is concerned: its last axis is the MatMul's columns [offset, offset
// + width) (columns), or those columns split into `units` heads along `axis`
// (heads).
struct Holding {
  bool heads = false;
  int64_t offset = 0, width = 0, units = 0, axis = 0;
};

const Shape& shapeOf(const Graph& g, ValueId v) { return g.value(v).type.shape; }

struct AttentionShape {
  int64_t heads = 0, kvHeads = 0, d = 0, dv = 0;
};

// How `h` (held by value `v`) is held by node `c`'s output `o`; false with the
// reason when `c` mixes the columns or heads, or is not understood.
bool through(const Graph& g, const Node& c, ValueId v, size_t o, Holding& h, std::string& why) {
  const Shape& in = shapeOf(g, v);
  const Shape& out = shapeOf(g, c.outputs[o]);
  const auto rin = static_cast<int64_t>(in.size()), rout = static_cast<int64_t>(out.size());
  const int64_t kept = h.heads ? h.axis : rin - 1;  // the axis that must not be mixed
  auto refuse = [&](const std::string& what) {
    why = c.name + " (" + c.op + ") " + what;
    return false;
  };
  if (isElementwise(c.op)) {
    if (out != in) return refuse("broadcasts it");
    return true;
  }
  if (c.op == "Reshape") {
    if (c.inputs[0] != v) return refuse("reads it as a shape");
    if (h.heads) return refuse("reshapes it after its head split");
    if (rout >= 1 && rin >= 1 && out.back() == in.back()) return true;
    if (rout == rin + 1 && std::equal(in.begin(), in.end() - 1, out.begin()) &&
        out[static_cast<size_t>(rout - 2)] * out.back() == in.back()) {
      h.heads = true;
      h.units = out[static_cast<size_t>(rout - 2)];
      h.axis = rout - 2;
      return true;
    }
    return refuse("reshapes its columns other than into heads");
  }
  if (c.op == "Transpose") {
    std::vector<int64_t> perm = c.attrs.getInts("perm", {});
    if (perm.empty())
      for (int64_t i = rin - 1; i >= 0; --i) perm.push_back(i);
    const auto at = std::find(perm.begin(), perm.end(), kept);
    if (at == perm.end()) return refuse("has a bad perm");
    const int64_t moved = at - perm.begin();
    if (!h.heads && moved != rout - 1) return refuse("moves its columns off the last axis");
    if (h.heads) h.axis = moved;
    return true;
  }
  if (c.op == "Split") {
    if (c.inputs[0] != v) return refuse("reads it as split sizes");
    const int64_t axis = normalisedAxis(c.attrs.getInt("axis", 0), rin);
    if (axis != kept) return true;
    if (h.heads) return refuse("splits its heads");
    int64_t offset = h.offset;
    for (size_t i = 0; i < o; ++i) offset += shapeOf(g, c.outputs[i]).back();
    h.offset = offset;
    h.width = out.back();
    return true;
  }
  if (c.op == "Slice") {
    if (c.inputs[0] != v) return refuse("reads it as slice bounds");
    if (rout != rin || out[static_cast<size_t>(kept)] != in[static_cast<size_t>(kept)])
      return refuse(h.heads ? "slices its heads" : "slices its columns");
    return true;
  }
  if (c.op == "Concat") {
    const int64_t axis = normalisedAxis(c.attrs.getInt("axis", 0), rin);
    if (axis == kept) return refuse(h.heads ? "concatenates along its heads" : "concatenates along its columns");
    return true;
  }
  return refuse("reads it");
}

// Where a weight MatMul's output goes, walked forward through the ops that
// keep its columns or heads apart.
struct Walk {
  NodeId matmul = kNoNode;
  std::string why;  // empty: it can be column-sharded
  std::set<int> attentions;
  NodeId into = kNoNode;  // the MLP MatMul it feeds
  std::vector<TensorParallelBlock> blocks;
  std::set<ValueId> touched;
};

void addBlock(Walk& w, TensorParallelBlock b) {
  for (const TensorParallelBlock& x : w.blocks)
    if (x.offset == b.offset) {
      if (x.width != b.width || x.units != b.units)
        w.why = "its columns from " + std::to_string(b.offset) + " reach two places as different heads";
      return;
    }
  w.blocks.push_back(b);
}

Walk walkFrom(const Graph& g, NodeId m, const std::vector<int>& attentionOf,
              const std::vector<AttentionShape>& shapes) {
  Walk w;
  w.matmul = m;
  const ValueId out = g.node(m).outputs[0];
  std::deque<std::pair<ValueId, Holding>> queue;
  Holding start;
  start.width = shapeOf(g, out).back();
  start.axis = static_cast<int64_t>(shapeOf(g, out).size()) - 1;
  queue.emplace_back(out, start);
  while (!queue.empty() && w.why.empty()) {
    auto [v, h] = queue.front();
    queue.pop_front();
    // A value reached again (rotary's two products meet in an Add): once.
    if (!w.touched.insert(v).second) continue;
    for (NodeId cid : g.value(v).consumers) {
      const Node& c = g.node(cid);
      const int a = attentionOf[static_cast<size_t>(cid)];
      if (a >= 0) {
        // Into decode attention a: its heads, in head-major columns.
        const AttentionShape& s = shapes[static_cast<size_t>(a)];
        int64_t units = h.units;
        if (!h.heads) {
          const bool q = h.width == s.heads * s.d;
          const bool kv = h.width == s.kvHeads * s.d || h.width == s.kvHeads * s.dv;
          if (q && kv && s.heads != s.kvHeads) {
            w.why = "its columns reach attention " + std::to_string(a) +
                    " in a width that could be its query or its KV heads";
            break;
          }
          units = q ? s.heads : kv ? s.kvHeads : 0;
        }
        if (units == 0 || (units != s.heads && units != s.kvHeads)) {
          w.why = "its columns reach attention " + std::to_string(a) + " as " +
                  std::to_string(units) + " head(s), neither its " + std::to_string(s.heads) +
                  " query heads nor its " + std::to_string(s.kvHeads) + " KV heads";
          break;
        }
        w.attentions.insert(a);
        addBlock(w, {h.offset, h.width, units});
        continue;
      }
      if (c.op == "Shape") continue;  // reads no element
      if (isWeightMatMul(g, c) && c.inputs[0] == v && !h.heads) {
        const int64_t k = shapeOf(g, c.inputs[1])[0];
        if (h.width != k) {
          w.why = c.name + " (MatMul) reads " + std::to_string(h.width) + " of its columns as " +
                  std::to_string(k) + " rows";
          break;
        }
        if (w.into != kNoNode && w.into != cid) {
          w.why = "it feeds two MatMuls (" + g.node(w.into).name + ", " + c.name + ")";
          break;
        }
        w.into = cid;
        addBlock(w, {h.offset, h.width, h.width});
        continue;
      }
      for (size_t o = 0; o < c.outputs.size(); ++o) {
        if (c.outputs[o] == kNoValue) continue;
        Holding next = h;
        if (!through(g, c, v, o, next, w.why)) break;
        queue.emplace_back(c.outputs[o], next);
      }
      if (!w.why.empty()) break;
    }
  }
  if (w.why.empty() && !w.attentions.empty() && w.into != kNoNode)
    w.why = "it reaches both an attention and " + g.node(w.into).name;
  if (w.why.empty() && w.attentions.empty() && w.into == kNoNode)
    w.why = "it reaches no decode attention and no MatMul through ops that keep its columns apart";
  std::sort(w.blocks.begin(), w.blocks.end(),
            [](const TensorParallelBlock& a, const TensorParallelBlock& b) { return a.offset < b.offset; });
  return w;
}

}  // namespace

TensorParallelSplit findTensorParallelSplit(const Graph& g) {
  TensorParallelSplit split;
  // Each attention's widest group (as decodeAttentionPlan chooses them).
  std::vector<NodeSet> chosen;
  for (auto& [nodes, label] : attentionGroups(g)) {
    if (label == "decode_attention")
      chosen.push_back(nodes);
    else if (label == "decode_attention_views" && !chosen.empty())
      chosen.back() = nodes;
  }
  if (chosen.empty())
    throw Error("tensor parallel: the model has no decode attention (MatMul, Softmax, MatMul over "
                "at most " + std::to_string(kDecodeMaxQueries) + " query rows) to split by heads");
  std::vector<int> attentionOf(static_cast<size_t>(g.numNodes()), -1);
  std::vector<AttentionShape> shapes;
  for (size_t a = 0; a < chosen.size(); ++a) {
    TensorParallelAttention t;
    t.nodes = chosen[a];
    AttentionShape s;
    NodeId softmax = kNoNode;
    for (NodeId n : chosen[a].members()) {
      attentionOf[static_cast<size_t>(n)] = static_cast<int>(a);
      if (g.node(n).op == "Softmax") softmax = n;
    }
    const std::string name = "attention " + std::to_string(a) +
                             (softmax == kNoNode ? "" : " (" + g.node(softmax).name + ")");
    if (softmax == kNoNode) throw Error("tensor parallel: " + name + " has no Softmax");
    const Shape& scores = shapeOf(g, g.node(softmax).outputs[0]);
    if (scores.size() != 4) throw Error("tensor parallel: " + name + ": its scores are not [batch, heads, query, key]");
    s.heads = scores[1];
    s.kvHeads = s.heads;
    for (NodeId n : chosen[a].members()) {
      const Node& node = g.node(n);
      if (node.op != "MatMul") continue;
      if (node.inputs[0] == g.node(softmax).outputs[0])
        s.dv = shapeOf(g, node.outputs[0]).back();
      else
        s.d = shapeOf(g, node.inputs[0]).back();
    }
    // The cache: a group input of [batch, KV heads, keys, columns] that is
    // a present (a graph output).
    for (NodeId n : chosen[a].members())
      for (ValueId v : g.node(n).inputs) {
        const Value& value = g.value(v);
        if (value.isConstant() || (value.producer != kNoNode && chosen[a].contains(value.producer)))
          continue;
        if (value.type.rank() == 4 && value.type.shape[2] == scores[3] && value.isGraphOutput)
          s.kvHeads = value.type.shape[1];
      }
    if (s.kvHeads <= 0 || s.heads % s.kvHeads != 0)
      throw Error("tensor parallel: " + name + ": " + std::to_string(s.heads) +
                  " query heads on " + std::to_string(s.kvHeads) + " KV heads");
    t.heads = s.heads;
    t.kvHeads = s.kvHeads;
    shapes.push_back(s);
    split.attentions.push_back(std::move(t));
  }

  // Row-sharded: the weight MatMul each attention's output feeds through its
  // head merge (query head h: columns [h Dv, (h + 1) Dv) of the merged rows).
  std::set<NodeId> rowSharded;
  for (size_t a = 0; a < chosen.size(); ++a) {
    TensorParallelAttention& t = split.attentions[a];
    const std::string name = "attention " + std::to_string(a);
    std::vector<ValueId> outs;
    for (NodeId n : chosen[a].members())
      for (ValueId v : g.node(n).outputs) {
        if (v == kNoValue) continue;
        const Value& value = g.value(v);
        bool outside = value.isGraphOutput;
        for (NodeId c : value.consumers) outside = outside || !chosen[a].contains(c);
        if (outside) outs.push_back(v);
      }
    if (outs.size() != 1)
      throw Error("tensor parallel: " + name + " has " + std::to_string(outs.size()) +
                  " outputs; its heads are split only when it has one");
    ValueId v = outs[0];
    const Shape& s0 = shapeOf(g, v);
    Holding h;
    h.units = t.heads;
    const int64_t dv = shapes[a].dv;
    if (s0.size() == 4 && s0[1] == t.heads && s0[3] == dv) {
      h.heads = true;
      h.axis = 1;
    } else if (!s0.empty() && s0.back() == t.heads * dv) {
      h.width = t.heads * dv;
    } else {
      throw Error("tensor parallel: " + name + "'s output " + g.value(v).name +
                  " is neither [batch, heads, query, columns] nor its heads merged");
    }
    NodeId into = kNoNode;
    for (int guard = 0; guard < 16 && into == kNoNode; ++guard) {
      const Value& value = g.value(v);
      if (value.isGraphOutput || value.consumers.size() != 1)
        throw Error("tensor parallel: " + name + "'s output " + value.name +
                    " is read by other than one node: its heads cannot be split");
      const Node& c = g.node(value.consumers[0]);
      if (isWeightMatMul(g, c) && c.inputs[0] == v && !h.heads) {
        into = value.consumers[0];
        break;
      }
      std::string why;
      if (c.op == "Transpose") {
        if (!through(g, c, v, 0, h, why)) throw Error("tensor parallel: " + name + ": " + why);
      } else if (c.op == "Reshape" && h.heads && c.inputs[0] == v) {
        // The head merge: [.., heads, columns] into [.., heads x columns].
        const Shape& in = shapeOf(g, v);
        const Shape& out = shapeOf(g, c.outputs[0]);
        if (h.axis != static_cast<int64_t>(in.size()) - 2 || out.size() + 1 != in.size() ||
            !std::equal(out.begin(), out.end() - 1, in.begin()) ||
            out.back() != in[in.size() - 2] * in.back())
          throw Error("tensor parallel: " + name + ": " + c.name +
                      " (Reshape) does not merge its heads into the last axis");
        h.heads = false;
        h.width = out.back();
      } else {
        throw Error("tensor parallel: " + name + "'s output reaches " + c.name + " (" + c.op +
                    ") before any weight MatMul: its heads cannot be split");
      }
      v = c.outputs[0];
    }
    if (into == kNoNode)
      throw Error("tensor parallel: " + name + "'s output reaches no weight MatMul");
    t.output = into;
    rowSharded.insert(into);
    TensorParallelMatMul m;
    m.node = into;
    m.rows = true;
    m.blocks.push_back({0, h.width, t.heads});
    m.role = name + " output";
    split.matmuls.push_back(m);
  }

  // Column-sharded: the weight MatMuls whose outputs reach only attentions'
  // heads or one MatMul's rows; the MatMuls those feed row-sharded. A MatMul
  // fed so cannot be column-sharded itself (its output is summed first), so
  // drop such walks until none is left.
  std::map<NodeId, Walk> walks;
  for (NodeId n = 0; n < g.numNodes(); ++n) {
    if (!isWeightMatMul(g, g.node(n)) || rowSharded.count(n)) continue;
    walks.emplace(n, walkFrom(g, n, attentionOf, shapes));
  }
  // Two walks through one value: fine for MLP walks into one MatMul (their
  // columns split alike), a conflict otherwise.
  std::map<ValueId, NodeId> toucher;
  for (auto& [n, w] : walks) {
    if (!w.why.empty()) continue;
    for (ValueId v : w.touched) {
      auto [it, fresh] = toucher.emplace(v, n);
      if (fresh) continue;
      Walk& other = walks[it->second];
      if (w.into != kNoNode && w.into == other.into) continue;
      w.why = "its output meets " + g.node(it->second).name + "'s at " + g.value(v).name;
      if (other.why.empty())
        other.why = "its output meets " + g.node(n).name + "'s at " + g.value(v).name;
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    std::set<NodeId> fed;
    for (auto& [n, w] : walks)
      if (w.why.empty() && w.into != kNoNode) fed.insert(w.into);
    for (auto& [n, w] : walks)
      if (w.why.empty() && fed.count(n)) {
        w.why = "it is row-sharded (fed by a column-sharded MatMul)";
        changed = true;
      }
  }
  std::set<NodeId> fed;
  for (auto& [n, w] : walks)
    if (w.why.empty() && w.into != kNoNode) fed.insert(w.into);
  std::map<NodeId, TensorParallelMatMul> mlpRows;
  for (auto& [n, w] : walks) {
    if (!w.why.empty()) {
      if (!fed.count(n)) split.replicated.push_back({n, g.node(n).name + ": " + w.why});
      continue;
    }
    TensorParallelMatMul m;
    m.node = n;
    m.blocks = w.blocks;
    if (w.into != kNoNode) {
      m.role = "MLP into " + g.node(w.into).name;
      TensorParallelMatMul& r = mlpRows[w.into];
      r.node = w.into;
      r.rows = true;
      r.role = "MLP";
      const int64_t k = shapeOf(g, g.node(w.into).inputs[1])[0];
      r.blocks.assign(1, {0, k, k});
    } else {
      std::string which;
      for (int a : w.attentions) which += (which.empty() ? "" : ", ") + std::to_string(a);
      m.role = "attention " + which + " heads";
    }
    split.matmuls.push_back(m);
  }
  for (auto& [n, m] : mlpRows) split.matmuls.push_back(m);
  std::sort(split.matmuls.begin(), split.matmuls.end(),
            [](const TensorParallelMatMul& a, const TensorParallelMatMul& b) { return a.node < b.node; });
  return split;
}

std::vector<std::pair<int64_t, int64_t>> ownedRanges(const Graph& graph,
                                                     const TensorParallelMatMul& m, int64_t rank,
                                                     int64_t ranks) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const TensorParallelBlock& b : m.blocks) {
    if (b.units <= 0 || b.width % b.units != 0)
      throw Error("tensor parallel: " + graph.node(m.node).name + ": " + std::to_string(b.width) +
                  " columns are not " + std::to_string(b.units) + " equal units");
    const int64_t unit = b.width / b.units;
    const int64_t u0 = rank * b.units / ranks, u1 = (rank + 1) * b.units / ranks;
    if (u1 > u0) out.emplace_back(b.offset + u0 * unit, b.offset + u1 * unit);
  }
  return out;
}

Plan tensorParallelPlan(const Graph& graph, const TensorParallelSplit& split) {
  Plan plan = decodeAttentionPlan(graph);
  plan.createdBy = "collage (tensor parallel: decode attention groups, sharded MatMuls)";
  std::set<std::string> sharded;
  for (const TensorParallelMatMul& m : split.matmuls) sharded.insert(graph.node(m.node).name);
  for (PlanGroup& group : plan.groups)
    if (group.nodes.size() == 1 && sharded.count(group.nodes[0])) {
      group.backend = "tensor_parallel";
      group.pattern = "rule:tensor_parallel_matmul";
    }
  return plan;
}

Plan tensorParallelPlan(const Graph& graph, const TensorParallelSplit& split, const Plan& plan,
                        size_t* kept) {
  const Plan own = tensorParallelPlan(graph, split);
  // Which of own's groups each node is in, and whether the user's group
  // holding it must be split.
  std::map<std::string, size_t> ownGroup;
  for (size_t i = 0; i < own.groups.size(); ++i)
    for (const std::string& n : own.groups[i].nodes) ownGroup[n] = i;
  std::set<std::string> splits;
  for (const TensorParallelMatMul& m : split.matmuls) splits.insert(graph.node(m.node).name);
  for (const TensorParallelAttention& a : split.attentions)
    for (NodeId n : a.nodes.members()) splits.insert(graph.node(n).name);
  Plan out = plan;
  out.groups.clear();
  out.createdBy = plan.createdBy + " (tensor parallel: its groups with a sharded MatMul or an "
                  "attention split)";
  std::set<size_t> emitted;
  size_t whole = 0;
  for (const PlanGroup& group : plan.groups) {
    const bool touched = std::any_of(group.nodes.begin(), group.nodes.end(),
                                     [&](const std::string& n) { return splits.count(n) != 0; });
    if (!touched) {
      out.groups.push_back(group);
      ++whole;
      continue;
    }
    for (const std::string& n : group.nodes) {
      auto at = ownGroup.find(n);
      if (at == ownGroup.end())
        throw Error("tensor parallel: the plan's group of " + n + " names a node the step graph "
                    "lacks");
      if (emitted.insert(at->second).second) out.groups.push_back(own.groups[at->second]);
    }
  }
  if (kept) *kept = whole;
  return out;
}

TensorParallelWeights tensorParallelWeights(const Graph& graph, const TensorParallelSplit& split) {
  const auto weightBytes = [&](NodeId n) {
    double bytes = 0;
    for (ValueId v : graph.node(n).inputs)
      if (v != kNoValue && graph.value(v).isConstant())
        bytes += static_cast<double>(graph.value(v).constant->byteSize());
    return bytes;
  };
  TensorParallelWeights w;
  for (const TensorParallelMatMul& m : split.matmuls) w.sharded += weightBytes(m.node);
  for (const TensorParallelSplit::Replicated& r : split.replicated)
    w.replicated += weightBytes(r.node);
  return w;
}

std::string describeSplit(const Graph& graph, const TensorParallelSplit& split) {
  (void)graph;
  int64_t rows = 0;
  for (const TensorParallelMatMul& m : split.matmuls) rows += m.rows;
  return std::to_string(split.attentions.size()) + " attention(s) split by heads, " +
         std::to_string(split.matmuls.size()) + " MatMul(s) sharded (" +
         std::to_string(static_cast<int64_t>(split.matmuls.size()) - rows) + " by columns, " +
         std::to_string(rows) + " by rows), " + std::to_string(split.replicated.size()) +
         " left whole";
}

}  // namespace collage::native
