// Substitution rules written in spec files (core/rewrite/spec_substitution.h):
// the file format and its errors (FILE:LINE:COLUMN, the other rules still
// load), where the shipped rules apply and that what they make computes the
// same, on hand-made graphs and the small zoo; and that a wrong rule is
// dropped by the equivalence check, never applied.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <set>

#include <unistd.h>

#include "core/ir/tensor_compare.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/plan/plan.h"
#include "core/rewrite/equivalence_check.h"
#include "core/rewrite/substitution_spec_file.h"
#include "core/search/substitution_search.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/rewrite/rewrite_test_support.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using rewrite_test::applyOne;
using rewrite_test::countOp;
using rewrite_test::expectSameOutputs;
using rewrite_test::sitesOf;



// The first node of that op.
const Node& nodeOf(const Graph& g, const std::string& op) {
  for (const Node& n : g.nodes())
    if (n.op == op) return n;
  throw Error("no " + op);
}
// The op of the node that produces a node's first input.
std::string producerOp(const Graph& g, const Node& n) {
  return g.node(g.value(n.inputs[0]).producer).op;
}

// The one rule of a text, which must load.
std::shared_ptr<const SpecSubstitution> oneRule(const std::string& text) {
  SubstitutionRulesLoad load = parseSubstitutionRules(text, "test.toml");
  EXPECT_TRUE(load.errors.empty()) << (load.errors.empty() ? "" : load.errors[0]);
  EXPECT_EQ(load.rules.size(), 1u);
  return load.rules.empty() ? nullptr : load.rules[0];
}

// The only error of a text whose other rule ("fine") still loads.
std::string onlyError(const std::string& badRule) {
  const std::string text = "[rules.fine]\nsource = \"Neg(Neg(x))\"\ntarget = \"x\"\n\n" + badRule;
  SubstitutionRulesLoad load = parseSubstitutionRules(text, "my.toml");
  EXPECT_EQ(load.rules.size(), 1u) << "the good rule still loads";
  EXPECT_EQ(load.errors.size(), 1u);
  return load.errors.empty() ? "" : load.errors[0];
}

// x -> Transpose -> Relu -> Sigmoid (a reader after, so nothing is a graph output).
Graph reluTransposeGraph() {
  GraphBuilder b;
  const ValueId x = b.input({2, 3, 4});
  const ValueId t = b.op("Transpose", {x}, attrs({{"perm", std::vector<int64_t>{0, 2, 1}}}));
  const ValueId r = b.op("Relu", {t});
  b.finish(b.op("Sigmoid", {r}));
  return b.graph();
}

Graph applySite(const Graph& g, const SubstitutionSite& site) {
  std::string note;
  std::optional<Graph> after = applyChecked(g, site, &note);
  EXPECT_TRUE(after.has_value()) << note;
  return after ? *after : g;
}

// ---- the shipped file ------------------------------------------------------

TEST(SpecSubstitutionFile, ShippedRulesLoadAndAreFoundByName) {
  EXPECT_TRUE(builtinSubstitutionErrors().empty()) << builtinSubstitutionErrors().front();
  EXPECT_GE(specSubstitutions().size(), 8u);
  for (const char* name :
       {"swap-unary-transpose", "swap-transpose-unary", "swap-unary-reshape", "swap-reshape-unary",
        "div-const-to-mul", "remove-identity", "collapse-relu-relu", "collapse-neg-neg",
        "swap-relu-monotone", "swap-neg-odd"}) {
    const Substitution* rule = findSubstitution(name);
    ASSERT_NE(rule, nullptr) << name;
    EXPECT_EQ(rule->name(), name);
    EXPECT_NE(rule->describe().find("->"), std::string::npos);
  }
  EXPECT_EQ(findSubstitution("no-such-rule"), nullptr);
}

// ---- errors: FILE:LINE:COLUMN, the other rules still load --------------------

TEST(SpecSubstitutionFile, SourceThatDoesNotParse) {
  // line 5 is `[rules.bad]`; the source string's text begins at column 11.
  const std::string e = onlyError("[rules.bad]\nsource = \"Relu(Neg(x)\"\ntarget = \"x\"\n");
  EXPECT_EQ(e.rfind("my.toml:6:", 0), 0u) << e;
  EXPECT_NE(e.find("rule 'bad': source:"), std::string::npos) << e;
}

TEST(SpecSubstitutionFile, UnknownOpInTheSourceOrTheTarget) {
  EXPECT_EQ(onlyError("[rules.bad]\nsource = \"Relu(Negg(x))\"\ntarget = \"x\"\n"),
            "my.toml:6:16: rule 'bad': source: unknown op 'Negg'");
  EXPECT_EQ(onlyError("[rules.bad]\nsource = \"Relu(x)\"\ntarget = \"Reluu(x)\"\n"),
            "my.toml:7:11: rule 'bad': target: unknown op 'Reluu'");
}

TEST(SpecSubstitutionFile, UndefinedVariableInTheTarget) {
  EXPECT_EQ(onlyError("[rules.bad]\nsource = \"Relu(x)\"\ntarget = \"Relu(y)\"\n"),
            "my.toml:7:16: rule 'bad': target: the source defines no variable 'y'");
}

TEST(SpecSubstitutionFile, UnknownAttribute) {
  EXPECT_EQ(onlyError("[rules.bad]\nsource = \"Relu(t=Transpose(x))\"\ntarget = "
                      "\"Transpose[prem=$t.perm](Relu(x))\"\n"),
            "my.toml:7:21: rule 'bad': target: op Transpose has no attribute 'prem'");
  EXPECT_EQ(onlyError("[rules.bad]\nsource = \"Relu(t=Transpose(x))\"\ntarget = "
                      "\"Transpose[perm=$t.axis](Relu(x))\"\n"),
            "my.toml:7:29: rule 'bad': target: op Transpose has no attribute 'axis'");
  EXPECT_EQ(onlyError("[rules.bad]\nsource = \"Relu(t=Transpose(x))\"\ntarget = \"x\"\ncondition = "
                      "[\"$t.prem == [0, 1]\"]\n"),
            "my.toml:8:18: rule 'bad': condition: op Transpose has no attribute 'prem'");
}

TEST(SpecSubstitutionFile, DuplicateNameAndCxxName) {
  SubstitutionRulesLoad load = parseSubstitutionRules(
      "[rules.a]\nsource = \"Relu(x)\"\ntarget = \"x\"\n"
      "[rules.collapse-transposes]\nsource = \"Relu(x)\"\ntarget = \"x\"\n",
      "dup.toml");
  ASSERT_EQ(load.errors.size(), 1u);
  EXPECT_EQ(load.errors[0].rfind("dup.toml:4:", 0), 0u) << load.errors[0];
  EXPECT_NE(load.errors[0].find("a built-in C++ rule has that name"), std::string::npos);
  // A rule defined twice: the second is an error at its name, the others load.
  load = parseSubstitutionRules(
      "[rules.a]\nsource = \"Relu(x)\"\ntarget = \"x\"\n"
      "[rules.a]\nsource = \"Neg(x)\"\ntarget = \"x\"\n"
      "[rules.b]\nsource = \"Neg(Neg(x))\"\ntarget = \"x\"\n",
      "dup.toml");
  ASSERT_EQ(load.errors.size(), 1u);
  EXPECT_EQ(load.errors[0], "dup.toml:4:8: rule 'a' is defined twice (first at line 1)");
  ASSERT_EQ(load.rules.size(), 2u);
  EXPECT_EQ(load.rules[0]->text().source, "Relu(x)");
  EXPECT_EQ(load.rules[1]->name(), "b");
  // Registering a different rule under a known name is refused, naming both.
  test_support::expectError(
      [] {
        registerSubstitution(
            oneRule("[rules.collapse-neg-neg]\nsource = \"Neg(Neg(x))\"\ntarget = \"Neg(x)\"\n"));
      },
      {"test.toml:1:", "'collapse-neg-neg' is already defined, differently"});
}

TEST(SpecSubstitutionFile, OtherMistakes) {
  EXPECT_EQ(onlyError("[rules.bad]\nsource = \"Relu(x)\"\n"),
            "my.toml:5:8: rule 'bad' needs a target");
  EXPECT_EQ(onlyError("[rules.bad]\nsource = \"Relu(x)\"\ntarget = \"x\"\nwhen = \"x\"\n"),
            "my.toml:8:1: rule 'bad': unknown key 'when' (source, target, condition)");
  EXPECT_EQ(onlyError("[rules.bad]\nsource = \"Relu(x)\"\ntarget = \"Relu(x, x)\"\n"),
            "my.toml:7:15: rule 'bad': target: Relu takes 1 input(s), the target gives 2");
  EXPECT_EQ(
      onlyError("[rules.bad]\nsource = \"Relu(x)\"\ntarget = \"Transpose[perm=[1,0]]($t(x))\"\n"),
      "my.toml:7:33: rule 'bad': target: the source captures no node 't' (write c=Op(...) there)");
  EXPECT_EQ(
      onlyError("[rules.bad]\nsource = \"Relu(x)\"\ntarget = \"Transpose[perm=\\\"a\\\"](x)\"\n"),
      "my.toml:7:26: rule 'bad': target: attribute 'perm' of Transpose is ints, not a");
  EXPECT_EQ(onlyError("[rules.bad]\nsource = \"Relu(?x)\"\ntarget = \"x\"\n"),
            "my.toml:6:16: rule 'bad': source: optional inputs ('?') are not allowed in a rule's "
            "source: write one "
            "rule per form");
}

// ---- the shipped rules on hand-made graphs -----------------------------------

TEST(SpecSubstitution, MovesAnElementwiseOpAcrossATransposeBothWays) {
  const Graph g = reluTransposeGraph();
  const auto sites = findSubstitution("swap-unary-transpose")->find(g);
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].nodes.size(), 2u);
  const Graph after = applySite(g, sites[0]);
  // Transpose now reads the Relu; the value names downstream are kept.
  const Node& sig = nodeOf(after, "Sigmoid");
  const Node& tr = after.node(after.value(sig.inputs[0]).producer);
  EXPECT_EQ(tr.op, "Transpose");
  EXPECT_EQ(tr.attrs.getInts("perm"), (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(producerOp(after, tr), "Relu");
  EXPECT_EQ(after.value(sig.inputs[0]).name, g.value(nodeOf(g, "Sigmoid").inputs[0]).name);
  expectSameOutputs(g, after);
  // ...and back.
  const auto back = findSubstitution("swap-transpose-unary")->find(after);
  ASSERT_EQ(back.size(), 1u);
  const Graph again = applySite(after, back[0]);
  EXPECT_EQ(producerOp(again, nodeOf(again, "Sigmoid")), "Relu");
  expectSameOutputs(g, again);
  // A plan replays it by name.
  EXPECT_EQ(canonicalGraphKey(replaySubstitutions(g, {sites[0]})), canonicalGraphKey(after));
}

TEST(SpecSubstitution, CarriesAttributesOfTheMovedOpAndAcrossReshape) {
  GraphBuilder b;
  const ValueId x = b.input({2, 12});
  const ValueId r = b.op("Reshape", {x}, attrs({{"shape", std::vector<int64_t>{2, 3, 4}}}));
  const ValueId l = b.op("LeakyRelu", {r}, attrs({{"alpha", 0.3f}}));
  b.finish(b.op("Sigmoid", {l}));
  const Graph g = b.graph();
  const auto sites = findSubstitution("swap-unary-reshape")->find(g);
  ASSERT_EQ(sites.size(), 1u);
  const Graph after = applySite(g, sites[0]);
  bool found = false;
  for (const Node& n : after.nodes())
    if (n.op == "LeakyRelu") {
      found = true;
      EXPECT_FLOAT_EQ(n.attrs.getFloat("alpha"), 0.3f);
      EXPECT_EQ(after.value(n.inputs[0]).name, g.value(x).name);
    }
  EXPECT_TRUE(found);
  expectSameOutputs(g, after);
  const auto back = findSubstitution("swap-reshape-unary")->find(after);
  ASSERT_EQ(back.size(), 1u);
  expectSameOutputs(g, applySite(after, back[0]));
}

TEST(SpecSubstitution, RemovesIdentities) {
  GraphBuilder b;
  const ValueId x = b.input({3, 4});
  const ValueId n2 = b.op("Neg", {b.op("Neg", {x})});
  const ValueId r2 = b.op("Relu", {b.op("Relu", {n2})});
  const ValueId i = b.op("Identity", {r2});
  b.finish(b.op("Sigmoid", {i}));
  const Graph g = b.graph();
  Graph current = g;
  for (const char* rule : {"collapse-neg-neg", "collapse-relu-relu", "remove-identity"}) {
    const auto sites = findSubstitution(rule)->find(current);
    ASSERT_EQ(sites.size(), 1u) << rule;
    current = applySite(current, sites[0]);
  }
  EXPECT_EQ(countOp(current, "Neg"), 0);
  EXPECT_EQ(countOp(current, "Relu"), 1);
  EXPECT_EQ(countOp(current, "Identity"), 0);
  expectSameOutputs(g, current);
}

TEST(SpecSubstitution, AnIdentityThatIsAGraphOutputStays) {
  GraphBuilder b;
  const ValueId x = b.input({3, 4});
  b.finish(b.op("Neg", {b.op("Neg", {x})}));
  EXPECT_TRUE(findSubstitution("collapse-neg-neg")->find(b.graph()).empty());
}

TEST(SpecSubstitution, ReordersCommutingElementwiseOps) {
  GraphBuilder b;
  const ValueId x = b.input({4, 5});
  const ValueId a = b.op("Relu", {b.op("Tanh", {x})});
  const ValueId c = b.op("Neg", {b.op("Erf", {a})});
  b.finish(b.op("Sigmoid", {c}));
  const Graph g = b.graph();
  Graph current = g;
  for (const char* rule : {"swap-relu-monotone", "swap-neg-odd"}) {
    const auto sites = findSubstitution(rule)->find(current);
    ASSERT_EQ(sites.size(), 1u) << rule;
    current = applySite(current, sites[0]);
  }
  expectSameOutputs(g, current);
  // Relu does not commute with Neg: no rule offers that.
  GraphBuilder nb;
  nb.finish(nb.op("Sigmoid", {nb.op("Relu", {nb.op("Neg", {nb.input({4})})})}));
  EXPECT_TRUE(findSubstitution("swap-relu-monotone")->find(nb.graph()).empty());
}

TEST(SpecSubstitution, ConditionsLimitTheSites) {
  const Graph g = reluTransposeGraph();  // perm [0, 2, 1], rank 3
  auto sitesWith = [&](const std::string& condition) {
    return oneRule(
               "[rules.c]\nsource = \"Relu(t=Transpose(x))\"\ntarget = "
               "\"Transpose[$t](Relu(x))\"\ncondition = [" +
               condition + "]\n")
        ->find(g)
        .size();
  };
  EXPECT_EQ(sitesWith("\"$t.perm == [0, 2, 1]\""), 1u);
  EXPECT_EQ(sitesWith("\"$t.perm != [0, 2, 1]\""), 0u);
  EXPECT_EQ(sitesWith("\"rank(x) == 3\""), 1u);
  EXPECT_EQ(sitesWith("\"rank(x) == 4\""), 0u);
  EXPECT_EQ(sitesWith("\"single_reader(x)\""), 1u);
  EXPECT_EQ(sitesWith("\"const(x)\""), 0u);
}

// ---- a wrong rule is dropped, never applied -------------------------------------

TEST(SpecSubstitution, AWrongRuleIsDroppedByTheEquivalenceCheck) {
  // Relu(-x) is not -Relu(x): the rule parses and matches, the check refuses it.
  auto wrong =
      oneRule("[rules.wrong-relu-neg]\nsource = \"Relu(Neg(x))\"\ntarget = \"Neg(Relu(x))\"\n");
  registerSubstitution(wrong);
  GraphBuilder b;
  b.finish(b.op("Sigmoid", {b.op("Relu", {b.op("Neg", {b.input({4, 8})})})}));
  const Graph g = b.graph();
  const auto sites = wrong->find(g);
  ASSERT_EQ(sites.size(), 1u);
  std::string note;
  EXPECT_FALSE(applyChecked(g, sites[0], &note).has_value());
  EXPECT_NE(note.find("wrong-relu-neg at"), std::string::npos) << note;
  EXPECT_NE(note.find("dropped, not equivalent"), std::string::npos) << note;
  // Replaying it (a plan that names it) fails too.
  test_support::expectError([&] { replaySubstitutions(g, sites); },
                            {"does not hold", "wrong-relu-neg"});
  // The search tries it, drops it with a note, and keeps the graph.
  SubstitutionSearchOptions options;
  options.rules = {wrong.get()};
  options.forcedRules = {"wrong-relu-neg"};
  const SubstitutionSearchResult r = searchSubstitutions(
      g,
      [](const Graph& graph, const std::vector<SubstitutionSite>&) {
        return Cost(graph.numNodes());
      },
      options);
  EXPECT_TRUE(r.applied.empty());
  EXPECT_EQ(canonicalGraphKey(r.graph), canonicalGraphKey(g));
  bool noted = false;
  for (const auto& n : r.notes) noted |= n.find("wrong-relu-neg at") != std::string::npos;
  EXPECT_TRUE(noted);
}

// ---- a rule that holds on [-1, 1] only -------------------------------------------

// Two rules that hold on the uniform [-1, 1] inputs the check used to draw,
// and nowhere else: a bounded Clip is not its input, Relu6 is not Relu.
const char* kNarrowRules =
    "# both hold on [-1, 1] and nowhere else\n"
    "[rules.wrong-clip6-is-identity]\n"
    "source = \"Clip[min == -6, max == 6](x)\"\n"
    "target = \"x\"\n"
    "\n"
    "[rules.wrong-relu6-is-relu]\n"
    "source = \"Clip[min == 0, max == 6](x)\"\n"
    "target = \"Relu(x)\"\n";

// x -> Clip(lo, hi) -> Sigmoid.
Graph clipGraph(float lo, float hi) {
  GraphBuilder b;
  const ValueId x = b.input({4, 16});
  b.finish(b.op("Sigmoid", {b.op("Clip", {x}, attrs({{"min", lo}, {"max", hi}}))}));
  return b.graph();
}

TEST(SpecSubstitution, ARuleThatHoldsOnlyNearZeroIsRefusedWithItsPlaceAndACounterexample) {
  const SubstitutionRulesLoad load = parseSubstitutionRules(kNarrowRules, "narrow.toml");
  ASSERT_TRUE(load.errors.empty()) << load.errors[0];
  ASSERT_EQ(load.rules.size(), 2u);
  for (const auto& rule : load.rules) registerSubstitution(rule);
  const struct {
    std::string rule, where;
    float lo, hi;
  } cases[] = {{"wrong-clip6-is-identity", "narrow.toml:2:8: ", -6, 6},
               {"wrong-relu6-is-relu", "narrow.toml:6:8: ", 0, 6}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.rule);
    const Graph g = clipGraph(c.lo, c.hi);
    const auto sites = findSubstitution(c.rule)->find(g);
    ASSERT_EQ(sites.size(), 1u);
    std::string note;
    EXPECT_FALSE(applyChecked(g, sites[0], &note).has_value()) << "a wrong rule was applied";
    // Where the rule is written, then the site, then the input that tells them apart.
    EXPECT_EQ(note.rfind(c.where + c.rule + " at ", 0), 0u) << note;
    EXPECT_NE(note.find("dropped, not equivalent"), std::string::npos) << note;
    EXPECT_NE(note.find("counterexample: '"), std::string::npos) << note;
    // The search drops it too, with the same note, and keeps the graph.
    SubstitutionSearchOptions options;
    options.rules = {findSubstitution(c.rule)};
    options.forcedRules = {c.rule};
    const SubstitutionSearchResult r = searchSubstitutions(
        g, [](const Graph& graph, const std::vector<SubstitutionSite>&) { return Cost(graph.numNodes()); },
        options);
    EXPECT_TRUE(r.applied.empty());
    bool noted = false;
    for (const auto& n : r.notes) noted |= n.rfind(c.where + c.rule + " at ", 0) == 0 &&
                                          n.find("counterexample") != std::string::npos;
    EXPECT_TRUE(noted);
  }
  // A Clip those rules do not match is left alone, and a right rule of the
  // same shape still passes every trial.
  auto right = oneRule("[rules.narrow-clip-clip]\nsource = \"c=Clip[min == 0, max == 6](Clip[min == 0, max == 6](x))\"\n"
                       "target = \"$c(x)\"\n");
  registerSubstitution(right);
  GraphBuilder b;
  const AttributeMap six = attrs({{"min", 0.0f}, {"max", 6.0f}});
  b.finish(b.op("Sigmoid", {b.op("Clip", {b.op("Clip", {b.input({4, 16})}, six)}, six)}));
  const auto sites = right->find(b.graph());
  ASSERT_EQ(sites.size(), 1u);
  std::string note;
  EXPECT_TRUE(applyChecked(b.graph(), sites[0], &note).has_value()) << note;
}

TEST(SpecSubstitution, APlanCarryingARuleThatHoldsOnlyNearZeroIsRefusedOnLoad) {
  const Graph g = clipGraph(0, 6);
  std::string clip;
  for (const Node& n : g.nodes())
    if (n.op == "Clip") clip = n.name;
  const std::string json = R"J({"format": "collage-plan", "version": 1, "model": {"sha256": "abc"},
      "substitution_rules": [{"name": "wrong-carried-relu6-is-relu", "source": "Clip[min == 0, max == 6](x)",
                              "target": "Relu(x)"}],
      "substitutions": [{"rule": "wrong-carried-relu6-is-relu", "nodes": [")J" + clip + R"J("]}],
      "groups": [{"backend": "native", "nodes": ["a"]}]})J";
  const Plan plan = planFromJson(json, "shared.json");
  // Replaying it on the model (what `run --plan`, `explain` and the app do
  // first) refuses it, naming the plan's rule and the values that differ.
  test_support::expectError([&] { planGraph(plan, g); },
                            {"shared.json", "substitution_rules[0]", "wrong-carried-relu6-is-relu at " + clip,
                             "not equivalent", "counterexample: '"});
}

// Chains of one-input elementwise ops, layout ops, identities and divisions
// by a constant, where every shipped rule finds sites.
Graph randomChain(uint64_t seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  GraphBuilder b(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  using Ints = std::vector<int64_t>;
  ValueId x = b.input({2, 3, 4});
  const char* unary[] = {"Relu",  "Tanh", "Neg",      "Sigmoid", "Erf",
                         "Floor", "Abs",  "Identity", "Sin"};
  for (int step = 0; step < 10; ++step) {
    switch (pick(5)) {
      case 0:
        x = b.op("Transpose", {x}, attrs({{"perm", pick(2) ? Ints{0, 2, 1} : Ints{2, 1, 0}}}));
        break;
      case 1: {
        const Shape s = b.shape(x);
        x = b.op("Reshape", {x}, attrs({{"shape", Ints{s[0] * s[1], s[2]}}}));
        x = b.op("Reshape", {x}, attrs({{"shape", Ints{s[0], s[1], s[2]}}}));
        break;
      }
      case 2:
        x = b.op("LeakyRelu", {x}, attrs({{"alpha", 0.25f}}));
        break;
      case 3:
        x = b.op("Div", {x, b.scalar(1.5f + static_cast<float>(pick(4)))});
        break;
      default: {
        const char* op = unary[pick(9)];
        x = b.op(op, {x});
        if (pick(2)) x = b.op(op, {x});  // Relu(Relu(x)), Neg(Neg(x)), ...
      }
    }
  }
  b.finish(b.op("Sigmoid", {x}));
  return b.graph();
}

TEST(SpecSubstitution, RandomChainsKeepTheirOutputs) {
  int applied = 0;
  std::set<std::string> used;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Graph g = randomChain(seed);
    Graph current = g;
    for (int round = 0; round < 8; ++round)
      for (const Substitution* rule : specSubstitutions()) {
        if (rule->name().rfind("wrong-", 0) == 0) continue;
        const auto sites = rule->find(current);
        if (sites.empty()) continue;
        std::string note;
        auto next = applyChecked(current, sites[static_cast<size_t>(round) % sites.size()], &note);
        EXPECT_TRUE(next.has_value()) << note;
        if (!next) continue;
        current = std::move(*next);
        used.insert(rule->name());
        ++applied;
      }
    expectSameOutputs(g, current, seed);
  }
  EXPECT_GT(applied, 30);
  for (const char* name :
       {"swap-unary-transpose", "swap-transpose-unary", "swap-unary-reshape", "swap-reshape-unary",
        "div-const-to-mul", "collapse-relu-relu", "collapse-neg-neg", "remove-identity"})
    EXPECT_TRUE(used.count(name)) << name << " never applied";
}

TEST(SpecSubstitution, TheShortestSpellingCarriesTheLayoutOpsAttributes) {
  // `Transpose(...)` in the target takes the one source Transpose's perm.
  auto rule =
      oneRule("[rules.short]\nsource = \"Relu(Transpose(x))\"\ntarget = \"Transpose(Relu(x))\"\n");
  const Graph g = reluTransposeGraph();
  const auto sites = rule->find(g);
  ASSERT_EQ(sites.size(), 1u);
  registerSubstitution(rule);
  const Graph after = applySite(g, sites[0]);
  EXPECT_EQ(nodeOf(after, "Transpose").attrs.getInts("perm"), (std::vector<int64_t>{0, 2, 1}));
  // With the op's default perm (reversed axes) the shapes differ: no site.
  auto defaults = oneRule(
      "[rules.d]\nsource = \"Relu(Transpose(x))\"\ntarget = "
      "\"Transpose[perm=[2,1,0]](Relu(x))\"\n");
  EXPECT_TRUE(defaults->find(g).empty());
}

TEST(SpecSubstitution, ACommutativeSourceMatchesEitherOrder) {
  // x + (-y) == x - y, written with the Neg first or second.
  auto rule =
      oneRule("[rules.add-neg-to-sub]\nsource = \"Add(x, Neg(y))\"\ntarget = \"Sub(x, y)\"\n");
  registerSubstitution(rule);
  GraphBuilder b;
  const ValueId a = b.input({3, 4}), c = b.input({3, 4});
  const ValueId s1 = b.op("Add", {b.op("Neg", {c}), a});
  const ValueId s2 = b.op("Add", {a, b.op("Neg", {c})});
  b.finish(b.op("Mul", {s1, s2}));
  Graph current = b.graph();
  const Graph g = current;
  for (int i = 0; i < 2; ++i) {
    const auto sites = rule->find(current);
    ASSERT_EQ(sites.size(), static_cast<size_t>(2 - i));
    current = applySite(current, sites[0]);
  }
  EXPECT_EQ(countOp(current, "Sub"), 2);
  EXPECT_EQ(countOp(current, "Neg"), 0);
  expectSameOutputs(g, current);
}

TEST(SpecSubstitution, TheSearchTriesSpecRulesWithTheCxxOnes) {
  // A cost that counts Divs: the search finds div-const-to-mul on its own.
  GraphBuilder b;
  b.finish(b.op("Sigmoid", {b.op("Div", {b.input({4, 8}), b.scalar(3.0f)})}));
  const Graph g = b.graph();
  const SubstitutionSearchResult r = searchSubstitutions(
      g,
      [](const Graph& graph, const std::vector<SubstitutionSite>&) {
        return Cost(1 + countOp(graph, "Div"));
      },
      SubstitutionSearchOptions{});
  ASSERT_EQ(r.applied.size(), 1u);
  EXPECT_EQ(r.applied[0].rule, "div-const-to-mul");
  EXPECT_EQ(countOp(r.graph, "Div"), 0);
  expectSameOutputs(g, r.graph);
}

TEST(SpecSubstitutionFile, AUsersFileIsRegisteredAndToldFromABackendSpec) {
  // Named by the process: ctest -j runs other tests (and other checkouts' runs) beside it.
  const std::string dir = ::testing::TempDir(), pid = std::to_string(getpid());
  const std::string rules = dir + "/spec_rules_test_rules_" + pid + ".toml",
                    backend = dir + "/spec_rules_test_backend_" + pid + ".toml";
  std::ofstream(rules)
      << "[rules.users-neg-tanh]\nsource = \"Neg(Tanh(x))\"\ntarget = \"Tanh(Neg(x))\"\n"
         "[rules.users-bad]\nsource = \"Neg(x)\"\ntarget = \"Negg(x)\"\n";
  std::ofstream(backend) << "name = \"x\"\n[patterns]\na = \"Relu(*)\"\n";
  EXPECT_TRUE(isSubstitutionRuleFile(rules));
  EXPECT_FALSE(isSubstitutionRuleFile(backend));
  EXPECT_FALSE(isSubstitutionRuleFile(dir + "/no-such-file.toml"));
  const std::vector<std::string> errors = registerSubstitutionRules(rules);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], rules + ":6:11: rule 'users-bad': target: unknown op 'Negg'");
  ASSERT_NE(findSubstitution("users-neg-tanh"), nullptr);
  EXPECT_EQ(findSubstitution("users-bad"), nullptr);
  // Registering the same file again changes nothing.
  EXPECT_EQ(registerSubstitutionRules(rules).size(), 1u);
  EXPECT_EQ(registerSubstitutionRules(dir + "/no-such-file.toml"),
            std::vector<std::string>{dir + "/no-such-file.toml: cannot open"});
}

TEST(SpecSubstitution, APlanRoundTripKeepsTheRulesConditions) {
  auto rule = oneRule(
      "[rules.plan-cond]\nsource = \"Relu(t=Transpose(x))\"\ntarget = \"Transpose[$t](Relu(x))\"\n"
      "condition = [\"rank(x) == 3\", \"$t.perm != [2, 1, 0]\"]\n");
  Plan p = planFromJson(R"({"format": "collage-plan", "version": 1, "model": {"sha256": "abc"},
                            "groups": [{"backend": "native", "nodes": ["a"]}]})",
                        "hand.json");
  p.substitutionRules.push_back(rule->text());
  const Plan back = planFromJson(planToJson(p), "back.json");
  EXPECT_EQ(back, p);
  EXPECT_EQ(back.substitutionRules.at(0).conditions, rule->text().conditions);
  // Without spec rules the field is absent.
  p.substitutionRules.clear();
  EXPECT_EQ(planToJson(p).find("substitution_rules"), std::string::npos);
  // A carried rule that does not parse names the plan and the field.
  test_support::expectError(
      [] {
        planFromJson(R"J({"format": "collage-plan", "version": 1, "model": {"sha256": "abc"},
                         "substitution_rules": [{"name": "r", "source": "Relu(x)", "target": "Reluu(x)"}],
                         "groups": [{"backend": "native", "nodes": ["a"]}]
})J",
                     "bad.json");
      },
      {"bad.json: substitution_rules[0]:1:1:", "unknown op 'Reluu'"});
}

// ---- the shipped rules on the small zoo -------------------------------------------

TEST(SpecSubstitution, ZooModelsKeepTheirOutputs) {
  int applied = 0;
  std::set<std::string> used;
  for (const char* model :
       {"resnet50_small", "mobilenet_v2_small", "bert_small", "mobilenet_v3_large_small",
        "efficientnet_b0_small", "shufflenet_v2_small", "convnext_tiny_small", "vit_b_16_small",
        "gpt2_small"}) {
    SCOPED_TRACE(model);
    const Graph g =
        importOnnx(std::string(COLLAGE_SOURCE_DIR) + "/resources/models/" + model + ".onnx");
    Graph current = g;
    for (int round = 0; round < 20; ++round) {
      bool any = false;
      for (const Substitution* rule : specSubstitutions()) {
        if (rule->name().rfind("wrong-", 0) == 0)
          continue;  // the deliberately wrong rule of the test above
        const auto sites = rule->find(current);
        if (sites.empty()) continue;
        std::string note;
        auto next = applyChecked(current, sites[0], &note);
        EXPECT_TRUE(next.has_value()) << note;
        if (!next) continue;
        current = std::move(*next);
        used.insert(rule->name());
        ++applied;
        any = true;
      }
      if (!any) break;
    }
    expectSameOutputs(g, current);
  }
  EXPECT_GT(applied, 0);
  EXPECT_TRUE(used.count("div-const-to-mul"));  // the transformers' scales
  std::string names;
  for (const auto& n : used) names += n + " ";
  std::printf("spec rules applied on the zoo: %d (%s)\n", applied, names.c_str());
}

// ---- a plan carries the spec rules it used ---------------------------------------

TEST(SpecSubstitution, APlanCarriesItsSpecRules) {
  auto rule = oneRule(
      "[rules.plan-carried-relu-transpose]\nsource = \"Relu(t=Transpose(x))\"\n"
      "target = \"Transpose[perm=$t.perm](Relu(x))\"\n");
  const Graph g = reluTransposeGraph();
  const auto sites = rule->find(g);
  ASSERT_EQ(sites.size(), 1u);
  Plan p = planFromJson(R"({"format": "collage-plan", "version": 1, "model": {"sha256": "abc"},
                            "groups": [{"backend": "native", "nodes": ["a"]}]})",
                        "hand.json");
  p.substitutions.push_back(PlanSubstitution{sites[0], 1});
  p.substitutionRules.push_back(rule->text());
  const std::string json = planToJson(p);
  // Loading the plan registers the rule (this process did not know it), so it replays.
  EXPECT_EQ(findSubstitution("plan-carried-relu-transpose"), nullptr);
  const Plan back = planFromJson(json, "back.json");
  ASSERT_EQ(back.substitutionRules.size(), 1u);
  EXPECT_TRUE(back.substitutionRules[0].sameRule(rule->text()));
  ASSERT_NE(findSubstitution("plan-carried-relu-transpose"), nullptr);
  const Graph after = planGraph(back, g);
  EXPECT_EQ(producerOp(after, nodeOf(after, "Sigmoid")), "Transpose");
  // A plan whose rule of a known name says something else is refused.
  std::string other = json;
  const std::string from = "Transpose[perm=$t.perm](Relu(x))";
  other.replace(other.find(from), from.size(), "Transpose(Relu(x))");
  test_support::expectError(
      [&] { planFromJson(other, "other.json"); },
      {"other.json", "plan-carried-relu-transpose", "already defined, differently"});
}

}  // namespace
}  // namespace collage
