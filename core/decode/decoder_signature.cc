#include "core/decode/decoder_signature.h"

#include <algorithm>

#include "core/ir/element_type.h"
#include "core/ir/error.h"

namespace collage {
namespace {

bool isIntegerInput(const Value& v) {
  return v.type.elementType == ElementType::Int64 || v.type.elementType == ElementType::Int32;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string namesOf(const Graph& graph, const std::vector<NodeId>& nodes) {
  std::string s;
  for (NodeId n : nodes)
    s += (s.empty() ? "" : ", ") + graph.node(n).op + " '" + graph.node(n).name + "'";
  return s.empty() ? "none" : s;
}

// The pair of a past input, or why it is not one (in `why`).
std::optional<KvCachePair> pairOf(const Graph& graph, ValueId input, std::string& why) {
  const Value& past = graph.value(input);
  const std::string name = "input '" + past.name + "'";
  if (past.consumers.size() != 1 || graph.node(past.consumers[0]).op != "Concat") {
    why = name + " is not read by one Concat that appends new rows to it (its readers: " +
          namesOf(graph, past.consumers) + ")";
    return std::nullopt;
  }
  const Node& concat = graph.node(past.consumers[0]);
  if (concat.inputs.size() != 2 || concat.inputs[0] != input) {
    why = name + " is not the first of two inputs of Concat '" + concat.name + "'";
    return std::nullopt;
  }
  const Value& fresh = graph.value(concat.inputs[1]);
  if (fresh.isGraphInput || fresh.isConstant()) {
    why = name + " is concatenated by '" + concat.name + "' with '" + fresh.name +
          "', which the graph does not compute";
    return std::nullopt;
  }
  const Value& present = graph.value(concat.outputs[0]);
  if (!present.isGraphOutput) {
    why = name + " is appended to by Concat '" + concat.name + "', but its result '" +
          present.name + "' is not a graph output (no present to pair it with)";
    return std::nullopt;
  }
  int64_t axis = concat.attrs.getInt("axis");
  if (axis < 0) axis += past.type.rank();
  return KvCachePair{past.name, present.name, static_cast<int>(axis)};
}

std::string typesOf(const Graph& branch) {
  std::string s;
  for (ValueId v : branch.outputs()) s += (s.empty() ? "" : ", ") + branch.value(v).type.toString();
  return std::to_string(branch.outputs().size()) + " output(s) (" + s + ")";
}

// Whether the two branches return the same outputs: the same number, each
// of the same element type and rank (the sizes differ: the past's rows).
bool sameOutputs(const Graph& a, const Graph& b) {
  if (a.outputs().size() != b.outputs().size()) return false;
  for (size_t i = 0; i < a.outputs().size(); ++i) {
    const TensorType& x = a.value(a.outputs()[i]).type;
    const TensorType& y = b.value(b.outputs()[i]).type;
    if (x.elementType != y.elementType || x.rank() != y.rank()) return false;
  }
  return true;
}

}  // namespace

std::string mergedDecoderFlag(const Graph& graph, const std::string& model) {
  std::string flag;
  for (const Node& node : graph.nodes()) {
    if (node.op != "If") continue;
    const std::string label = model + ": node '" + node.name + "' (If)";
    const Value& cond = graph.value(node.inputs.at(0));
    if (!cond.isGraphInput)
      throw Error(label + " chooses its branch by '" + cond.name +
                  "', which the graph computes: the decode loop fixes an If's branch only when "
                  "its condition is a boolean graph input (a merged decoder's use-cache flag) "
                  "or a constant");
    if (cond.type.elementType != ElementType::Bool || cond.type.numElements() != 1)
      throw Error(label + " chooses its branch by input '" + cond.name + "', which is " +
                  cond.type.toString() + ", not one boolean (a merged decoder's use-cache flag)");
    if (!flag.empty() && flag != cond.name)
      throw Error(label + " chooses its branch by input '" + cond.name + "', another If by '" +
                  flag + "': a merged decoder has one use-cache flag");
    const Graph& thenBranch = node.attrs.getGraph("then_branch");
    const Graph& elseBranch = node.attrs.getGraph("else_branch");
    if (!sameOutputs(thenBranch, elseBranch))
      throw Error(label + " on '" + cond.name +
                  "': its branches do not return the same outputs, so it is not a merged "
                  "decoder's cache switch: then_branch returns " +
                  typesOf(thenBranch) + ", else_branch " + typesOf(elseBranch));
    flag = cond.name;
  }
  return flag;
}

std::string useCacheBinding(const DecoderSignature& signature, bool withPast) {
  if (signature.useCacheFlag.empty()) return "";
  return signature.useCacheFlag + (withPast ? "=true" : "=false");
}

DecoderSignature decoderSignature(const Graph& graph, const std::string& model) {
  DecoderSignature sig;
  std::vector<ValueId> ints, unknown;
  std::string firstWhy;
  for (ValueId v : graph.inputs()) {
    const Value& value = graph.value(v);
    if (isIntegerInput(value)) {
      ints.push_back(v);
      continue;
    }
    std::string why;
    if (auto pair = pairOf(graph, v, why)) {
      sig.cache.push_back(*pair);
    } else {
      if (firstWhy.empty()) firstWhy = why;
      unknown.push_back(v);
    }
  }
  if (sig.cache.empty())
    throw Error(
        model +
        ": not a decoder with a KV cache: no graph input is appended to on the "
        "sequence axis by a Concat whose result is a graph output (past_key_values.N.key -> "
        "present.N.key)" +
        (firstWhy.empty() ? std::string() : ": " + firstWhy));
  if (!unknown.empty())
    throw Error(model + ": " + firstWhy +
                "; the decode loop feeds only the token ids, the attention "
                "mask, the positions and the cache");
  // Pairs of the same cache must agree on the sequence axis.
  for (const KvCachePair& p : sig.cache)
    if (p.sequenceAxis != sig.cache[0].sequenceAxis)
      throw Error(model + ": input '" + p.past + "' is appended to on axis " +
                  std::to_string(p.sequenceAxis) + ", input '" + sig.cache[0].past + "' on axis " +
                  std::to_string(sig.cache[0].sequenceAxis));

  for (ValueId v : ints) {
    const std::string& n = graph.value(v).name;
    std::string lower = n;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    std::string* role = contains(lower, "mask")                              ? &sig.attentionMask
                        : contains(lower, "position")                        ? &sig.positionIds
                        : contains(lower, "ids") || contains(lower, "token") ? &sig.inputIds
                                                                             : nullptr;
    if (!role) {
      // An unnamed role: the token ids if it indexes a Gather (the embedding).
      const Value& value = graph.value(v);
      const bool indexes =
          std::any_of(value.consumers.begin(), value.consumers.end(), [&](NodeId c) {
            const Node& node = graph.node(c);
            return node.op == "Gather" && node.inputs.size() > 1 && node.inputs[1] == v;
          });
      if (indexes) role = &sig.inputIds;
    }
    if (!role)
      throw Error(model + ": integer input '" + n +
                  "' has no role the decode loop knows (token ids, "
                  "attention mask, positions)");
    if (!role->empty())
      throw Error(model + ": inputs '" + *role + "' and '" + n + "' both look like the " +
                  (role == &sig.inputIds        ? "token ids"
                   : role == &sig.attentionMask ? "attention mask"
                                                : "positions"));
    *role = n;
  }
  if (sig.inputIds.empty())
    throw Error(model + ": no token ids input (an integer input named like input_ids)");
  if (sig.attentionMask.empty())
    throw Error(
        model +
        ": no attention mask input (an integer input named like attention_mask): the decode "
        "loop masks the cache's unused rows with it");

  std::vector<std::string> others;
  for (ValueId v : graph.outputs()) {
    const std::string& n = graph.value(v).name;
    const bool isPresent = std::any_of(sig.cache.begin(), sig.cache.end(),
                                       [&](const KvCachePair& p) { return p.present == n; });
    if (n == "logits") sig.logits = n;
    if (!isPresent) others.push_back(n);
  }
  if (sig.logits.empty()) {
    if (others.size() != 1) {
      std::string list;
      for (const auto& o : others) list += (list.empty() ? "'" : ", '") + o + "'";
      throw Error(model + ": cannot tell the logits among the outputs " +
                  (list.empty() ? "(none)" : list) + " (name it 'logits')");
    }
    sig.logits = others[0];
  }
  const TensorType& logits = graph.value(*graph.findValue(sig.logits)).type;
  if (!isFloatingPoint(logits.elementType) || logits.rank() < 2)
    throw Error(model + ": output '" + sig.logits + "' is " + logits.toString() +
                ", not logits [batch, sequence, vocabulary]");
  return sig;
}

}  // namespace collage
