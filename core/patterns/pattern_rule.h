// Pattern rules: the second way a backend declares what it can run, for
// backends whose fusion capability is too rich to list pattern by pattern (a
// code generator, a fusion engine). A rule has two halves, as in the Collage
// paper's Listing 1:
//
//   op rule      which single ops the backend runs (ops, OpKinds, attribute
//                and type conditions), and which it may fuse without running
//                them alone (the member rule, by default the same);
//   fusion rule  which groups it can fuse, usually said in OpKind terms.
//
// The pattern generator (core/patterns/pattern_generator.h) asks both while it grows
// groups along the post-dominator tree; validity (convexity, exits, depth) is
// not the rule's business, the core checks it (core/ir/sub_graph.h).
//
// Two implementations: DeclarativePatternRule, filled from plain data that a
// backend's spec file provides and covering the common fusion styles, and
// FunctionPatternRule for a backend written in C++ that wants arbitrary
// logic (or subclass PatternRule directly).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ir/element_type.h"
#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/ir/op_kind.h"

namespace collage {

class PatternRule {
 public:
  virtual ~PatternRule() = default;

  // For messages and labels: usually the backend's name.
  virtual std::string name() const = 0;
  // Whether the backend can run `node` on its own (and so whether it may be a
  // seed or a member of a grown group).
  virtual bool opRule(const Graph& graph, NodeId node) const = 0;
  // Whether `node` may be a member of a group grown from another seed, where
  // it need not run alone: the Erf inside a GELU written out with several
  // ops, which a backend fuses as one function but has no kernel for. The
  // fusion rule still decides whether the whole group fuses. By default the
  // op rule.
  virtual bool memberRule(const Graph& graph, NodeId node) const { return opRule(graph, node); }
  // Whether the backend can fuse `group` into one kernel. The generator calls
  // it with groups of two or more nodes that have grown from `seed` up to
  // `sink`, a post-dominator of the seed: every member lies on a path from
  // seed to sink, every member already passed opRule, and sink is the group's
  // only exit. Returns the name of the fusion that accepts the group (the
  // candidate's label becomes "fusion:<name>"), or nullopt, which stops the
  // growth from this seed.
  virtual std::optional<std::string> fusionRule(const Graph& graph, const NodeSet& group,
                                                NodeId seed, NodeId sink) const = 0;

  // Whether the generator also grows groups from forks. For a node f whose
  // result feeds several nodes, the first group is everything on a path from
  // f to its immediate post-dominator, f itself excluded (it belongs to
  // whatever makes it); growth then goes on along the post-dominators as from
  // a seed. Such a group keeps a whole block together: the branches of a
  // residual block with its shortcut, parallel branches joined by a Concat.
  // A backend that runs several anchors in one kernel says yes. The member
  // and fusion rules are asked as for any group; fusionRule sees seed == f,
  // which is not a member.
  //
  //          f          the first fork group is {a, b, c, d, join}
  //        / | \         (f itself is not in it)
  //       a  b  c
  //       |  |  |
  //       d  |  |
  //        \ | /
  //         join
  virtual bool growsFromForks() const { return false; }

  // Whether a group the fusion rule accepted is also a candidate. A rule may
  // grow through groups that cannot win against the next one (a region that
  // stops just before a post-op its last chain would take for free) and so
  // spare their measurement; growth goes on either way. By default every
  // accepted group is one.
  virtual bool emitsGroup(const Graph& graph, const NodeSet& group, NodeId seed,
                          NodeId sink) const {
    return true;
  }

  // Groups the rule names whole, beyond what growth from seeds reaches; each
  // is still checked for convexity by checkSubGraph (the spec's size and
  // exit limits are for grown groups: the backend that names a group runs
  // it whatever its exits). The native backend names the nodes
  // linked by sequence values this way: a sequence never crosses a kernel
  // boundary, so they run together or not at all. Pairs of (group, label).
  virtual std::vector<std::pair<NodeSet, std::string>> wholeGroups(const Graph& /*graph*/) const {
    return {};
  }
};

// How a rule learns an op's kind. The default asks the op registry (an op it
// does not know is Opaque); tests and experiments may pass their own table.
using OpKindFn = std::function<OpKind(const std::string& op)>;
OpKind registryOpKind(const std::string& op);

// The kind that fusion reasons with: a Broadcast op whose inputs all have its
// output's shape broadcasts nothing, so it is treated as ElemWise (Add of two
// equal tensors, as in a residual connection).
OpKind effectiveOpKind(const Graph& graph, NodeId node, OpKind registered);

// ---------------------------------------------------------------------------
// Declarative rules: plain data a spec loader fills.

// "Nodes of `op` pass only if attribute `attribute` is one of `allowed`",
// values compared in their text form (attributeToString: "1", "[1,1]",
// "NOTSET"). With an empty `op` the condition applies to every node that has
// the attribute; with a named op a node lacking the attribute fails (the
// importer fills ONNX defaults, so absence means the value is unknown).
struct AttributeCondition {
  std::string op;
  std::string attribute;
  std::vector<std::string> allowed;
};

// The op rule. A node passes when
//   (its op is in `ops` or its kind is in `kinds`, or both lists are empty; the
//    kind may be the registered or the effective one, so a shape-preserving Add
//    passes both [Broadcast] and [ElemWise])
//   and its op is not in `excludedOps`
//   and every present input and output has an element type in `elementTypes` (if any listed)
//   and rank at most `maxRank` (if > 0)
//   and every AttributeCondition that applies holds.
struct OpRuleSpec {
  std::vector<std::string> ops;
  std::vector<OpKind> kinds;
  std::vector<std::string> excludedOps;
  std::vector<ElementType> elementTypes;
  int maxRank = 0;
  std::vector<AttributeCondition> attributes;
};

// The fusion styles a declarative rule can name. "ElemWise" below includes
// Broadcast; "seed" is the node the group grew from and "sink" the
// post-dominator it grew to (its single exit).
enum class FusionStyle {
  // TVM's rule for kOutEWiseFusable ops: the seed is an Anchor (Conv, MatMul,
  // ...), every other member ElemWise, the sink may also be Injective.
  //   Conv -> Add(bias) -> Relu ;  MatMul -> Add -> Reshape
  AnchorElemwise,
  // Only ElemWise and Injective ops: Reshape -> Transpose, Transpose -> Add.
  InjectiveChain,
  // ElemWise ops and at least one Reduction: producers feeding a reduction,
  // elementwise work after it, chains of both (a decomposed LayerNorm).
  ElemwiseReduction,
  // Only ElemWise ops.
  ElemwiseOnly,
  // Anything the op rule accepts (a graph compiler that fuses freely; bound it
  // with maxNodes or the backend's SubGraphLimits).
  Any,
};

std::string_view fusionStyleName(FusionStyle style);  // "anchor_elemwise", ...
std::optional<FusionStyle> fusionStyleFromName(std::string_view name);
// All names, for error messages and the spec documentation.
std::vector<std::string> fusionStyleNames();

// The fusion rule: the styles in order of preference (the first that accepts
// a group names it) and a size limit (0 = none). No styles: single ops only.
struct FusionRuleSpec {
  std::vector<std::string> styles;
  int maxNodes = 0;
};

class DeclarativePatternRule : public PatternRule {
 public:
  // Throws Error naming an unknown fusion style.
  DeclarativePatternRule(std::string name, OpRuleSpec opRule, FusionRuleSpec fusionRule,
                         OpKindFn kindOf = registryOpKind);

  std::string name() const override { return name_; }
  bool opRule(const Graph& graph, NodeId node) const override;
  std::optional<std::string> fusionRule(const Graph& graph, const NodeSet& group, NodeId seed,
                                        NodeId sink) const override;

  // The op rule's reason for refusing `node`, or empty when it passes: for the
  // inspector's "why can't backend X run this node?".
  std::string opRuleRefusal(const Graph& graph, NodeId node) const;
  // Whether one style accepts `group` (ignores maxNodes).
  bool styleAccepts(FusionStyle style, const Graph& graph, const NodeSet& group, NodeId seed,
                    NodeId sink) const;

  const OpRuleSpec& opRuleSpec() const { return opSpec_; }
  const FusionRuleSpec& fusionRuleSpec() const { return fusionSpec_; }
  std::string toString() const;

 private:
  OpKind kindOf(const Graph& graph, NodeId node) const;

  std::string name_;
  OpRuleSpec opSpec_;
  FusionRuleSpec fusionSpec_;
  std::vector<FusionStyle> styles_;
  OpKindFn kindOf_;
};

// ---------------------------------------------------------------------------
// A rule made of two functions, for backends written in C++ and for tests.
class FunctionPatternRule : public PatternRule {
 public:
  using OpRuleFn = std::function<bool(const Graph&, NodeId)>;
  using FusionRuleFn = std::function<std::optional<std::string>(const Graph&, const NodeSet&,
                                                                NodeId seed, NodeId sink)>;

  // A null fusion function means "single ops only".
  FunctionPatternRule(std::string name, OpRuleFn opRule, FusionRuleFn fusionRule = nullptr)
      : name_(std::move(name)), opRule_(std::move(opRule)), fusionRule_(std::move(fusionRule)) {}

  std::string name() const override { return name_; }
  bool opRule(const Graph& graph, NodeId node) const override {
    return opRule_ && opRule_(graph, node);
  }
  std::optional<std::string> fusionRule(const Graph& graph, const NodeSet& group, NodeId seed,
                                        NodeId sink) const override {
    if (!fusionRule_) return std::nullopt;
    return fusionRule_(graph, group, seed, sink);
  }

 private:
  std::string name_;
  OpRuleFn opRule_;
  FusionRuleFn fusionRule_;
};

}  // namespace collage
