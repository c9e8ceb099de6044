#include "core/patterns/pattern_matcher.h"

#include <algorithm>
#include <set>

namespace collage {
namespace {

// ------------------------------------------------------------ constraints

bool compareNumbers(double a, CompareOp op, double b) {
  switch (op) {
    case CompareOp::Eq: return a == b;
    case CompareOp::Ne: return a != b;
    case CompareOp::Lt: return a < b;
    case CompareOp::Le: return a <= b;
    case CompareOp::Gt: return a > b;
    case CompareOp::Ge: return a >= b;
    case CompareOp::In: return false;
  }
  return false;
}

// One scalar attribute value: an int, a float or a string.
struct Scalar {
  bool isString = false;
  bool isInt = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
};

bool scalarEquals(const Scalar& a, const PatternLiteral& l) {
  if (a.isString) return l.kind == PatternLiteral::Kind::Name && l.name == a.s;
  if (!l.isNumber()) return false;
  // Exact for int == int; floats compare as the attribute's float (0.1 == 0.1f).
  if (a.isInt && l.kind == PatternLiteral::Kind::Int) return a.i == l.intValue;
  if (a.isInt) return static_cast<double>(a.i) == l.floatValue;
  return a.f == static_cast<double>(static_cast<float>(l.number()));
}

// `a op l` for a scalar attribute; a wrong literal type is never satisfied.
bool scalarSatisfies(const Scalar& a, CompareOp op, const PatternLiteral& l) {
  switch (op) {
    case CompareOp::Eq: return scalarEquals(a, l);
    case CompareOp::Ne:
      return (a.isString ? l.kind == PatternLiteral::Kind::Name : l.isNumber()) &&
             !scalarEquals(a, l);
    case CompareOp::In:
      return std::any_of(l.list.begin(), l.list.end(),
                         [&](const PatternLiteral& item) { return scalarEquals(a, item); });
    default:
      if (a.isString || !l.isNumber()) return false;
      if (a.isInt && l.kind == PatternLiteral::Kind::Int)  // exact, whatever the magnitude
        return compareNumbers(static_cast<double>((a.i > l.intValue) - (a.i < l.intValue)), op, 0);
      if (a.isInt) return compareNumbers(static_cast<double>(a.i), op, l.number());
      // A float attribute compares in float precision, as it was stored.
      return compareNumbers(a.f, op, static_cast<double>(static_cast<float>(l.number())));
  }
}

bool listEquals(const std::vector<Scalar>& items, const PatternLiteral& l) {
  if (l.kind != PatternLiteral::Kind::List || l.list.size() != items.size()) return false;
  for (size_t i = 0; i < items.size(); ++i)
    if (!scalarEquals(items[i], l.list[i])) return false;
  return true;
}

bool listSatisfies(const std::vector<Scalar>& items, CompareOp op, const PatternLiteral& l) {
  auto each = [&](CompareOp eachOp, const PatternLiteral& lit) {
    return std::all_of(items.begin(), items.end(),
                       [&](const Scalar& s) { return scalarSatisfies(s, eachOp, lit); });
  };
  if (op == CompareOp::In) {
    bool ofLists = !l.list.empty() && std::all_of(l.list.begin(), l.list.end(), [](const auto& x) {
      return x.kind == PatternLiteral::Kind::List;
    });
    if (ofLists)  // kernel_shape in [[1,1],[3,3]]
      return std::any_of(l.list.begin(), l.list.end(),
                         [&](const PatternLiteral& x) { return listEquals(items, x); });
    return each(CompareOp::In, l);  // strides in [1, 2]: every element
  }
  if (l.kind == PatternLiteral::Kind::List) {  // kernel_shape == [3,3]
    if (op == CompareOp::Eq) return listEquals(items, l);
    if (op == CompareOp::Ne) {
      bool wellTyped = std::all_of(l.list.begin(), l.list.end(), [&](const PatternLiteral& x) {
        return x.kind != PatternLiteral::Kind::List;
      });
      return wellTyped && !listEquals(items, l);
    }
    return false;
  }
  return each(op, l);  // dilations == 1: every element
}

bool attributeSatisfies(const Attribute& a, const AttrConstraint& c) {
  auto ofInt = [](int64_t v) {
    Scalar s;
    s.isInt = true;
    s.i = v;
    return s;
  };
  auto ofFloat = [](float v) {
    Scalar s;
    s.f = v;
    return s;
  };
  auto ofString = [](const std::string& v) {
    Scalar s;
    s.isString = true;
    s.s = v;
    return s;
  };
  std::vector<Scalar> items;
  switch (attributeTypeOf(a)) {
    case AttributeType::Int: return scalarSatisfies(ofInt(std::get<int64_t>(a)), c.op, c.value);
    case AttributeType::Float: return scalarSatisfies(ofFloat(std::get<float>(a)), c.op, c.value);
    case AttributeType::String:
      return scalarSatisfies(ofString(std::get<std::string>(a)), c.op, c.value);
    case AttributeType::Ints:
      for (int64_t v : std::get<std::vector<int64_t>>(a)) items.push_back(ofInt(v));
      return listSatisfies(items, c.op, c.value);
    case AttributeType::Floats:
      for (float v : std::get<std::vector<float>>(a)) items.push_back(ofFloat(v));
      return listSatisfies(items, c.op, c.value);
    case AttributeType::Strings:
      for (const auto& v : std::get<std::vector<std::string>>(a)) items.push_back(ofString(v));
      return listSatisfies(items, c.op, c.value);
    case AttributeType::Tensor:
    case AttributeType::Graph: return false;
  }
  return false;
}

bool typeSatisfies(const TensorType& t, const TypeConstraint& c) {
  if (c.elementType != ElementType::Undefined && t.elementType != c.elementType) return false;
  if (!c.hasShape) return true;
  size_t n = c.dims.size();
  if (c.ellipsisAt < 0 ? t.shape.size() != n : t.shape.size() < n) return false;
  size_t head = c.ellipsisAt < 0 ? n : static_cast<size_t>(c.ellipsisAt);
  for (size_t i = 0; i < n; ++i) {
    // Dims after '...' align with the end of the shape.
    size_t at = i < head ? i : t.shape.size() - (n - i);
    if (c.dims[i] != TypeConstraint::kAnyDim && c.dims[i] != t.shape[at]) return false;
  }
  return true;
}

// ------------------------------------------------------------ search

// Backtracking search for the matches rooted at one node. Bindings live in
// stacks; each step pushes, calls its continuation (the rest of the pattern),
// and pops, so every way the pattern can match is visited once.
class MatchSearch {
 public:
  // A non-owning callable reference: continuations live on the stack of the
  // caller for exactly the duration of the call, so std::function's heap
  // allocations would be pure overhead here.
  class Cont {
   public:
    template <class F>
    Cont(const F& f) : obj_(&f), call_([](const void* o) { (*static_cast<const F*>(o))(); }) {}
    void operator()() const { call_(obj_); }

   private:
    const void* obj_;
    void (*call_)(const void*);
  };

  MatchSearch(const Graph& graph, NodeId root, std::vector<PatternMatch>& out)
      : graph_(graph), root_(root), out_(out), firstOut_(out.size()) {}

  void run(const PatternExpr& e) { matchRoot(e, root_, [this] { finish(); }); }

 private:
  template <class T>
  struct Restore {  // pops a stack back to its size at construction
    std::vector<T>& v;
    size_t size;
    explicit Restore(std::vector<T>& vec) : v(vec), size(vec.size()) {}
    ~Restore() { v.resize(size); }
  };

  bool typeOk(const PatternExpr& e, ValueId v) const {
    return !e.hasType || (v != kNoValue && typeSatisfies(graph_.value(v).type, e.type));
  }

  // Matches `e` with node n as the exit; a type constraint applies to n's first output.
  void matchRoot(const PatternExpr& e, NodeId n, const Cont& k) {
    const Node& node = graph_.node(n);
    ValueId out = node.outputs.empty() ? kNoValue : node.outputs[0];
    if (!typeOk(e, out)) return;
    if (e.kind == PatternExpr::Kind::Alternative) {
      for (const auto& alt : e.children) matchRoot(alt, n, k);
      return;
    }
    if (e.kind != PatternExpr::Kind::Op) return;  // a value leaf is never an exit
    matchOp(e, n, out, k);
    if (e.optionalOp) matchRoot(e.children[0], n, k);
  }

  void matchValue(const PatternExpr& e, ValueId v, const Cont& k) {
    using K = PatternExpr::Kind;
    if (e.kind == K::Optional) {
      if (v == kNoValue)
        k();
      else
        matchValue(e.children[0], v, k);
      return;
    }
    if (v == kNoValue || !typeOk(e, v)) return;
    switch (e.kind) {
      case K::Const:
        if (!graph_.value(v).isConstant()) return;
        [[fallthrough]];
      case K::Wildcard: {
        Restore r1(inputs_);
        Restore r2(valueCaptures_);
        inputs_.push_back(v);
        if (!e.capture.empty()) valueCaptures_.push_back({&e.capture, v});
        k();
        return;
      }
      case K::Ref: {
        Restore r(refs_);
        refs_.push_back({&e.refName, v});
        k();
        return;
      }
      case K::Alternative:
        for (const auto& alt : e.children) matchValue(alt, v, k);
        return;
      case K::Op: {
        NodeId producer = graph_.value(v).producer;
        if (producer != kNoNode) matchOp(e, producer, v, k);
        if (e.optionalOp) matchValue(e.children[0], v, k);
        return;
      }
      case K::Optional: return;  // handled above
    }
  }

  // Matches op pattern `e` at node n, whose output `out` is the value at e's position.
  void matchOp(const PatternExpr& e, NodeId n, ValueId out, const Cont& k) {
    const Node& node = graph_.node(n);
    if (std::find(e.ops.begin(), e.ops.end(), node.op) == e.ops.end()) return;
    for (const auto& c : e.attrs) {
      const Attribute* a = node.attrs.find(c.attribute);
      if (!a || !attributeSatisfies(*a, c)) return;  // a missing attribute never satisfies
    }
    Restore r1(nodes_);
    Restore r2(nodeCaptures_);
    Restore r3(inputs_);
    nodes_.push_back(n);
    if (!e.capture.empty()) nodeCaptures_.push_back({&e.capture, n, out});
    if (!e.hasArgs) {  // a bare op name: every present input is a match input
      for (ValueId v : node.inputs)
        if (v != kNoValue) inputs_.push_back(v);
      k();
      return;
    }
    size_t present = node.inputs.size();
    while (present > 0 && node.inputs[present - 1] == kNoValue) --present;
    if (present > e.children.size()) return;
    std::vector<size_t> order(e.children.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    matchArgs(e, node, order, 0, k);
    if (e.children.size() == 2 && present == 2 && isCommutativeOp(node.op)) {
      std::swap(order[0], order[1]);
      matchArgs(e, node, order, 0, k);
    }
  }

  void matchArgs(const PatternExpr& e, const Node& node, const std::vector<size_t>& order,
                 size_t i, const Cont& k) {
    if (i == e.children.size()) {
      k();
      return;
    }
    size_t at = order[i];
    ValueId v = at < node.inputs.size() ? node.inputs[at] : kNoValue;
    matchValue(e.children[i], v, [&] { matchArgs(e, node, order, i + 1, k); });
  }

  // A complete binding: check the whole-match rules and record it.
  void finish() {
    NodeSet set(graph_.numNodes());
    for (NodeId n : nodes_) set.insert(n);
    // One exit: only the root's outputs may leave the match.
    for (NodeId n : nodes_) {
      if (n == root_) continue;
      for (ValueId o : graph_.node(n).outputs) {
        if (o == kNoValue) continue;
        const Value& val = graph_.value(o);
        if (val.isGraphOutput) return;
        for (NodeId c : val.consumers)
          if (!set.contains(c)) return;
      }
    }
    // Inputs come from outside (Add(Relu(*), *) must not bind the Relu's output).
    for (ValueId v : inputs_)
      if (set.contains(graph_.value(v).producer)) return;
    // $name is the very value the capture matched.
    for (const auto& [name, v] : refs_) {
      ValueId bound = kNoValue;
      for (const auto& [capName, cv] : valueCaptures_)
        if (*capName == *name) bound = cv;
      for (const auto& nc : nodeCaptures_)
        if (*nc.name == *name) bound = nc.out;
      if (bound != v) return;
    }
    PatternMatch m;
    m.nodes = std::move(set);
    m.exit = root_;
    for (ValueId v : inputs_)
      if (std::find(m.inputs.begin(), m.inputs.end(), v) == m.inputs.end()) m.inputs.push_back(v);
    for (const auto& nc : nodeCaptures_) m.captures[*nc.name] = nc.node;
    for (const auto& [name, v] : valueCaptures_) m.valueCaptures[*name] = v;
    for (size_t i = firstOut_; i < out_.size(); ++i) {
      const PatternMatch& o = out_[i];
      if (o.nodes == m.nodes && o.captures == m.captures && o.valueCaptures == m.valueCaptures)
        return;
    }
    out_.push_back(std::move(m));
  }

  struct NodeCapture {
    const std::string* name;
    NodeId node;
    ValueId out;
  };

  const Graph& graph_;
  NodeId root_;
  std::vector<PatternMatch>& out_;
  size_t firstOut_;
  std::vector<NodeId> nodes_;  // may repeat: two sub-patterns can match one shared node
  std::vector<ValueId> inputs_;
  std::vector<NodeCapture> nodeCaptures_;
  std::vector<std::pair<const std::string*, ValueId>> valueCaptures_;
  std::vector<std::pair<const std::string*, ValueId>> refs_;
};

std::string nodeText(const Graph* g, NodeId n) {
  std::string s = "#" + std::to_string(n);
  if (g) s += " '" + g->node(n).name + "'";
  return s;
}

std::string valueText(const Graph* g, ValueId v) {
  return g ? g->value(v).name : "%" + std::to_string(v);
}

std::string matchText(const PatternMatch& m, const Graph* g) {
  std::string s = "nodes " + m.nodes.toString() + " exit " + nodeText(g, m.exit) + " inputs (";
  for (size_t i = 0; i < m.inputs.size(); ++i) s += (i ? ", " : "") + valueText(g, m.inputs[i]);
  s += ")";
  for (const auto& [name, n] : m.captures) s += " " + name + "=" + nodeText(g, n);
  for (const auto& [name, v] : m.valueCaptures) s += " " + name + "=" + valueText(g, v);
  return s;
}

}  // namespace

std::string PatternMatch::toString(const Graph& graph) const { return matchText(*this, &graph); }
std::string PatternMatch::toString() const { return matchText(*this, nullptr); }

bool isCommutativeOp(const std::string& op) {
  static const std::set<std::string> kOps = {"Add", "Mul", "Max", "Min", "Sum",
                                             "Mean", "Equal", "And", "Or", "Xor"};
  return kOps.count(op) != 0;
}

PatternMatcher::PatternMatcher(const Graph& graph) : graph_(graph) {
  for (NodeId n = 0; n < graph.numNodes(); ++n) nodesByOp_[graph.node(n).op].push_back(n);
}

std::vector<PatternMatch> PatternMatcher::matchesAt(const Pattern& pattern, NodeId root) const {
  COLLAGE_CHECK(root >= 0 && root < graph_.numNodes(), "matchesAt: node index out of range");
  std::vector<PatternMatch> out;
  MatchSearch(graph_, root, out).run(pattern.root());
  return out;
}

std::vector<PatternMatch> PatternMatcher::findMatches(const Pattern& pattern) const {
  std::vector<NodeId> roots;
  for (const auto& op : pattern.rootOps()) {
    auto it = nodesByOp_.find(op);
    if (it != nodesByOp_.end()) roots.insert(roots.end(), it->second.begin(), it->second.end());
  }
  std::sort(roots.begin(), roots.end());
  std::vector<PatternMatch> out;
  for (NodeId root : roots) MatchSearch(graph_, root, out).run(pattern.root());
  return out;
}

std::vector<PatternMatch> findMatches(const Pattern& pattern, const Graph& graph) {
  return PatternMatcher(graph).findMatches(pattern);
}

std::vector<PatternMatch> matchesAt(const Pattern& pattern, const Graph& graph, NodeId root) {
  return PatternMatcher(graph).matchesAt(pattern, root);
}

}  // namespace collage
