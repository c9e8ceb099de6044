#include "core/patterns/pattern_rule.h"

#include <algorithm>

#include "core/ir/attribute.h"
#include "core/ir/error.h"
#include "core/ops/op_registry.h"

namespace collage {

namespace {

constexpr FusionStyle kAllStyles[] = {FusionStyle::AnchorElemwise, FusionStyle::InjectiveChain,
                                      FusionStyle::ElemwiseReduction, FusionStyle::ElemwiseOnly,
                                      FusionStyle::Any};

template <class T>
bool listed(const std::vector<T>& list, const T& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

bool isElemWise(OpKind k) { return k == OpKind::ElemWise || k == OpKind::Broadcast; }

std::string nodeLabel(const Graph& graph, NodeId n) {
  const Node& node = graph.node(n);
  return "node '" + node.name + "' (" + node.op + ")";
}

}  // namespace

OpKind registryOpKind(const std::string& op) {
  const OpSchema* schema = OpRegistry::instance().find(op);
  return schema ? schema->kind : OpKind::Opaque;
}

OpKind effectiveOpKind(const Graph& graph, NodeId node, OpKind registered) {
  if (registered != OpKind::Broadcast) return registered;
  const Node& n = graph.node(node);
  if (n.outputs.empty() || n.outputs[0] == kNoValue) return registered;
  const Shape& out = graph.value(n.outputs[0]).type.shape;
  for (ValueId v : n.inputs)
    if (v != kNoValue && graph.value(v).type.shape != out) return registered;
  return OpKind::ElemWise;
}

std::string_view fusionStyleName(FusionStyle style) {
  switch (style) {
    case FusionStyle::AnchorElemwise:
      return "anchor_elemwise";
    case FusionStyle::InjectiveChain:
      return "injective_chain";
    case FusionStyle::ElemwiseReduction:
      return "elemwise_reduction";
    case FusionStyle::ElemwiseOnly:
      return "elemwise_only";
    case FusionStyle::Any:
      return "any";
  }
  return "?";
}

std::optional<FusionStyle> fusionStyleFromName(std::string_view name) {
  for (FusionStyle s : kAllStyles)
    if (fusionStyleName(s) == name) return s;
  return std::nullopt;
}

std::vector<std::string> fusionStyleNames() {
  std::vector<std::string> out;
  for (FusionStyle s : kAllStyles) out.emplace_back(fusionStyleName(s));
  return out;
}

// ---------------------------------------------------------------------------
// DeclarativePatternRule

DeclarativePatternRule::DeclarativePatternRule(std::string name, OpRuleSpec opRule,
                                               FusionRuleSpec fusionRule, OpKindFn kindOf)
    : name_(std::move(name)),
      opSpec_(std::move(opRule)),
      fusionSpec_(std::move(fusionRule)),
      kindOf_(kindOf ? std::move(kindOf) : OpKindFn(registryOpKind)) {
  for (const std::string& s : fusionSpec_.styles) {
    std::optional<FusionStyle> style = fusionStyleFromName(s);
    if (!style) {
      std::string known;
      for (const std::string& k : fusionStyleNames()) known += (known.empty() ? "" : ", ") + k;
      throw Error("pattern rule '" + name_ + "': unknown fusion style '" + s +
                  "' (known: " + known + ")");
    }
    if (!listed(styles_, *style)) styles_.push_back(*style);
  }
  if (fusionSpec_.maxNodes < 0)
    throw Error("pattern rule '" + name_ + "': max nodes must not be negative");
  if (opSpec_.maxRank < 0)
    throw Error("pattern rule '" + name_ + "': max rank must not be negative");
}

OpKind DeclarativePatternRule::kindOf(const Graph& graph, NodeId node) const {
  return effectiveOpKind(graph, node, kindOf_(graph.node(node).op));
}

bool DeclarativePatternRule::opRule(const Graph& graph, NodeId node) const {
  return opRuleRefusal(graph, node).empty();
}

std::string DeclarativePatternRule::opRuleRefusal(const Graph& graph, NodeId node) const {
  const Node& n = graph.node(node);
  const std::string who = nodeLabel(graph, node);
  if (listed(opSpec_.excludedOps, n.op)) return who + ": op " + n.op + " is excluded";
  if (!opSpec_.ops.empty() || !opSpec_.kinds.empty()) {
    // Either kind will do: an Add listed as Broadcast is still a Broadcast op
    // when it happens to broadcast nothing.
    OpKind registered = kindOf_(n.op);
    OpKind effective = effectiveOpKind(graph, node, registered);
    if (!listed(opSpec_.ops, n.op) && !listed(opSpec_.kinds, registered) &&
        !listed(opSpec_.kinds, effective))
      return who + ": neither the op nor its kind " + std::string(opKindName(effective)) +
             " is supported";
  }
  auto checkType = [&](ValueId v, const char* role) -> std::string {
    if (v == kNoValue) return {};
    const Value& value = graph.value(v);
    if (!opSpec_.elementTypes.empty() && !listed(opSpec_.elementTypes, value.type.elementType))
      return who + ": " + role + " '" + value.name + "' has unsupported element type " +
             std::string(elementTypeName(value.type.elementType));
    if (opSpec_.maxRank > 0 && value.type.rank() > opSpec_.maxRank)
      return who + ": " + role + " '" + value.name + "' has rank " +
             std::to_string(value.type.rank()) + ", more than " + std::to_string(opSpec_.maxRank);
    return {};
  };
  for (ValueId v : n.inputs)
    if (std::string r = checkType(v, "input"); !r.empty()) return r;
  for (ValueId v : n.outputs)
    if (std::string r = checkType(v, "output"); !r.empty()) return r;
  for (const AttributeCondition& c : opSpec_.attributes) {
    if (!c.op.empty() && c.op != n.op) continue;
    const Attribute* a = n.attrs.find(c.attribute);
    if (!a) {
      if (c.op.empty()) continue;
      return who + ": attribute '" + c.attribute + "' is not set";
    }
    std::string text = attributeToString(*a);
    if (!listed(c.allowed, text))
      return who + ": attribute " + c.attribute + "=" + text + " is not supported";
  }
  return {};
}

bool DeclarativePatternRule::styleAccepts(FusionStyle style, const Graph& graph,
                                          const NodeSet& group, NodeId seed, NodeId sink) const {
  bool ok = true;
  int reductions = 0;
  switch (style) {
    case FusionStyle::AnchorElemwise:
      if (kindOf(graph, seed) != OpKind::Anchor) return false;
      group.forEach([&](NodeId m) {
        if (m == seed) return;
        OpKind k = kindOf(graph, m);
        if (!(isElemWise(k) || (m == sink && k == OpKind::Injective))) ok = false;
      });
      return ok;
    case FusionStyle::InjectiveChain:
      group.forEach([&](NodeId m) {
        OpKind k = kindOf(graph, m);
        if (!isElemWise(k) && k != OpKind::Injective) ok = false;
      });
      return ok;
    case FusionStyle::ElemwiseReduction:
      group.forEach([&](NodeId m) {
        OpKind k = kindOf(graph, m);
        if (k == OpKind::Reduction)
          ++reductions;
        else if (!isElemWise(k))
          ok = false;
      });
      return ok && reductions > 0;
    case FusionStyle::ElemwiseOnly:
      group.forEach([&](NodeId m) {
        if (!isElemWise(kindOf(graph, m))) ok = false;
      });
      return ok;
    case FusionStyle::Any:
      return true;
  }
  return false;
}

std::optional<std::string> DeclarativePatternRule::fusionRule(const Graph& graph,
                                                              const NodeSet& group, NodeId seed,
                                                              NodeId sink) const {
  if (fusionSpec_.maxNodes > 0 && group.count() > fusionSpec_.maxNodes) return std::nullopt;
  for (FusionStyle style : styles_)
    if (styleAccepts(style, graph, group, seed, sink)) return std::string(fusionStyleName(style));
  return std::nullopt;
}

std::string DeclarativePatternRule::toString() const {
  auto join = [](const std::vector<std::string>& items) {
    std::string s;
    for (const auto& i : items) s += (s.empty() ? "" : ",") + i;
    return s;
  };
  std::vector<std::string> kinds, types, attrs;
  for (OpKind k : opSpec_.kinds) kinds.emplace_back(opKindName(k));
  for (ElementType t : opSpec_.elementTypes) types.emplace_back(elementTypeName(t));
  for (const AttributeCondition& c : opSpec_.attributes)
    attrs.push_back((c.op.empty() ? "*" : c.op) + "." + c.attribute + " in [" + join(c.allowed) +
                    "]");
  std::string s = "PatternRule '" + name_ + "' {ops=[" + join(opSpec_.ops) + "], kinds=[" +
                  join(kinds) + "], excluded=[" + join(opSpec_.excludedOps) + "], types=[" +
                  join(types) + "]";
  if (opSpec_.maxRank > 0) s += ", maxRank=" + std::to_string(opSpec_.maxRank);
  if (!attrs.empty()) s += ", attributes=[" + join(attrs) + "]";
  s += ", fusion=[" + join(fusionSpec_.styles) + "]";
  if (fusionSpec_.maxNodes > 0) s += ", maxNodes=" + std::to_string(fusionSpec_.maxNodes);
  return s + "}";
}

}  // namespace collage
