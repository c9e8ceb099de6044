#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/ops/op_registry.h"
#include "core/patterns/pattern.h"
#include "core/patterns/pattern_parser.h"

namespace collage {
namespace {

// Parses `text`, checks that its canonical form is `canonical` and that the
// canonical form reads back to itself.
void expectCanonical(const std::string& text, const std::string& canonical) {
  SCOPED_TRACE(text);
  Pattern p = parsePattern(text);
  EXPECT_EQ(p.toString(), canonical);
  EXPECT_EQ(p.text(), text);
  EXPECT_EQ(parsePattern(p.toString()).toString(), canonical);
}

TEST(PatternParser, RoundTripsThroughCanonicalText) {
  expectCanonical("Relu(Add(Conv(*, *), *))", "Relu(Add(Conv(*, *), *))");
  expectCanonical("Relu( Add( Conv(*,const,?const) ,*) )", "Relu(Add(Conv(*, const, ?const), *))");
  expectCanonical("Relu?(Conv(*, const))", "Relu?(Conv(*, const))");
  expectCanonical("Conv[group > 1, kernel_shape == [3,3], auto_pad in [NOTSET, VALID]](*, const)",
                  "Conv[group > 1, kernel_shape == [3, 3], auto_pad in [NOTSET, VALID]](*, const)");
  expectCanonical("Conv(*:float32[1,*,*,*], const):float32",
                  "Conv(*:float32[1,*,*,*], const):float32");
  expectCanonical("Relu(*:rank(4))", "Relu(*:[*,*,*,*])");
  expectCanonical("Relu(*:[...,64]):float16[2,...]", "Relu(*:[...,64]):float16[2,...]");
  expectCanonical("Relu(*:[1,...,3,*])", "Relu(*:[1,...,3,*])");
  expectCanonical("Relu(*:int64[])", "Relu(*:int64[])");
  expectCanonical("Relu(*:float)", "Relu(*:float32)");
  expectCanonical("(Relu | Sigmoid | Tanh)(Conv(*, const))", "Relu|Sigmoid|Tanh(Conv(*, const))");
  expectCanonical("Relu|Sigmoid|Tanh(Conv(*, const))", "Relu|Sigmoid|Tanh(Conv(*, const))");
  expectCanonical("Add((Conv(*, const) | MatMul(*, const)), *)",
                  "Add((Conv(*, const) | MatMul(*, const)), *)");
  expectCanonical("act = Relu(conv=Conv(x=*, w=const, ?b=const))",
                  "act=Relu(conv=Conv(x=*, w=const, ?b=const))");
  expectCanonical("Mul(x=*, Sigmoid($x))", "Mul(x=*, Sigmoid($x))");
  expectCanonical("LeakyRelu[alpha == 0.1, alpha != 1e-3](*)",
                  "LeakyRelu[alpha == 0.1, alpha != 0.001](*)");
  expectCanonical("Clip[min == 0.0, max <= 6](*)", "Clip[min == 0.0, max <= 6](*)");
  expectCanonical("Concat[axis == -1]", "Concat[axis == -1]");
  expectCanonical("Pad[mode == \"reflect\", x == \"a b\", y in []](*)",
                  "Pad[mode == reflect, x == \"a b\", y in []](*)");
  expectCanonical("Conv[kernel_shape in [[1,1],[3,3]]](*, const)",
                  "Conv[kernel_shape in [[1, 1], [3, 3]]](*, const)");
  expectCanonical("Shape()", "Shape()");
  expectCanonical("Relu(  # the activation\n  Conv(*, const)  # and its producer\n)",
                  "Relu(Conv(*, const))");
  expectCanonical("Relu|Clip?[min == 0](Add?(Conv(*, const), *))",
                  "Relu|Clip?[min == 0](Add?(Conv(*, const), *))");
  expectCanonical("Add((a=Relu(*) | a=Tanh(*)), *)", "Add((a=Relu(*) | a=Tanh(*)), *)");
  expectCanonical("(Relu)", "Relu");
}

TEST(PatternParser, BuildsTheExpectedTree) {
  Pattern p = parsePattern(
      "act=Relu|Clip?(Add(conv=Conv[group == 1, strides in [1, 2]](*:float32, const, ?const), *))");
  const PatternExpr& root = p.root();
  EXPECT_EQ(root.kind, PatternExpr::Kind::Op);
  EXPECT_EQ(root.ops, (std::vector<std::string>{"Relu", "Clip"}));
  EXPECT_TRUE(root.optionalOp);
  EXPECT_TRUE(root.hasArgs);
  EXPECT_EQ(root.capture, "act");
  ASSERT_EQ(root.children.size(), 1u);
  const PatternExpr& add = root.children[0];
  EXPECT_EQ(add.ops, std::vector<std::string>{"Add"});
  EXPECT_FALSE(add.optionalOp);
  ASSERT_EQ(add.children.size(), 2u);
  EXPECT_EQ(add.children[1].kind, PatternExpr::Kind::Wildcard);
  const PatternExpr& conv = add.children[0];
  EXPECT_EQ(conv.capture, "conv");
  ASSERT_EQ(conv.attrs.size(), 2u);
  EXPECT_EQ(conv.attrs[0].attribute, "group");
  EXPECT_EQ(conv.attrs[0].op, CompareOp::Eq);
  EXPECT_EQ(conv.attrs[0].value.kind, PatternLiteral::Kind::Int);
  EXPECT_EQ(conv.attrs[0].value.intValue, 1);
  EXPECT_EQ(conv.attrs[1].op, CompareOp::In);
  EXPECT_EQ(conv.attrs[1].value.list.size(), 2u);
  EXPECT_EQ(conv.attrs[1].pos.column, 42);
  ASSERT_EQ(conv.children.size(), 3u);
  EXPECT_TRUE(conv.children[0].hasType);
  EXPECT_EQ(conv.children[0].type.elementType, ElementType::Float32);
  EXPECT_FALSE(conv.children[0].type.hasShape);
  EXPECT_EQ(conv.children[1].kind, PatternExpr::Kind::Const);
  EXPECT_EQ(conv.children[2].kind, PatternExpr::Kind::Optional);
  EXPECT_EQ(conv.children[2].children.at(0).kind, PatternExpr::Kind::Const);
  // An absent optional Relu|Clip hands the exit to Add.
  EXPECT_EQ(p.rootOps(), (std::vector<std::string>{"Add", "Clip", "Relu"}));
  EXPECT_EQ(p.captureNames(), (std::vector<std::string>{"act", "conv"}));
}

TEST(PatternParser, BareOpNameHasNoArgumentList) {
  Pattern p = parsePattern("Concat[axis == 1]");
  EXPECT_FALSE(p.root().hasArgs);
  EXPECT_TRUE(parsePattern("Shape()").root().hasArgs);
}

TEST(PatternParser, OpAlternativesBindTighterThanArguments) {
  // (Relu | Conv(*, const)) is the op Relu|Conv applied to (*, const).
  Pattern p = parsePattern("Add((Relu | Conv(*, const)), *)");
  const PatternExpr& arg = p.root().children[0];
  EXPECT_EQ(arg.kind, PatternExpr::Kind::Op);
  EXPECT_EQ(arg.ops, (std::vector<std::string>{"Relu", "Conv"}));
  EXPECT_EQ(arg.children.size(), 2u);
  // With its own arguments, Relu is a separate alternative.
  Pattern q = parsePattern("Add((Relu(*) | Conv(*, const)), *)");
  EXPECT_EQ(q.root().children[0].kind, PatternExpr::Kind::Alternative);
  EXPECT_EQ(q.root().children[0].children.size(), 2u);
}

struct BadCase {
  std::string text;
  int line;
  int column;
  std::string reason;  // a part of the reason
};

void expectError(const BadCase& c, int firstLine = 1, int firstColumn = 1) {
  SCOPED_TRACE(c.text);
  try {
    parsePattern(c.text, firstLine, firstColumn);
    FAIL() << "expected a PatternError";
  } catch (const PatternError& e) {
    EXPECT_EQ(e.line(), c.line) << e.what();
    EXPECT_EQ(e.column(), c.column) << e.what();
    EXPECT_NE(e.reason().find(c.reason), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()), "line " + std::to_string(c.line) + ", column " +
                                         std::to_string(c.column) + ": " + e.reason());
  }
}

TEST(PatternParser, ReportsErrorsWithLineAndColumn) {
  const BadCase cases[] = {
      {"Relu(Conv(*, *)", 1, 16, "expected ')' after the inputs of Relu, found the end"},
      {"Relu(Conv(*, *) *)", 1, 17, "expected ')' after the inputs of Relu, found '*'"},
      {"Conv[group >> 1](*, *)", 1, 13, "expected a value"},
      {"Conv[auto_pad in NOTSET](*, *)", 1, 18, "'in' needs a list"},
      {"Conv[group ~ 1](*, *)", 1, 12, "unexpected character '~'"},
      {"Conv[group 1](*, *)", 1, 12, "expected ==, !=, <, <=, >, >= or 'in' after attribute 'group'"},
      {"Conv[group > NOTSET](*, *)", 1, 14, "'>' compares with a number"},
      {"Conv[group == 1 kernel_shape == [3,3]](*, *)", 1, 17, "expected ',' or ']'"},
      {"Conv[](*, *)", 1, 6, "expected an attribute name"},
      {"Relu(*:flaot32)", 1, 8, "unknown element type 'flaot32'"},
      {"Relu(*:[1,...,...])", 1, 15, "'...' may appear only once"},
      {"Relu(*:[1,-2])", 1, 11, "expected a dimension"},
      {"Relu(*:)", 1, 8, "expected an element type"},
      {"*", 1, 1, "a pattern's root must be an operator"},
      {"(Relu(*) | const)", 1, 12, "a pattern's root must be an operator"},
      {"?Relu(*)", 1, 1, "'?' marks an optional input"},
      {"Relu(?)", 1, 7, "expected an operator name, '*', 'const', '$name' or '('"},
      {"Relu(??*)", 1, 7, "'?' given twice"},
      {"Relu(b=?const)", 1, 8, "write the capture after '?'"},
      {"Relu(*) Tanh", 1, 9, "unexpected 'Tanh' after the pattern"},
      {"Relu?", 1, 1, "optional operator Relu? needs inputs"},
      // Found by pattern_parser_fuzzer: an escaped newline made a string
      // whose printed form did not parse.
      {"Conv[auto_pad == 'SAME\\\nUPPER'](*, *)", 1, 18, "unterminated string"},
      {"(Relu(*) | Tanh(*))(*)", 1, 20, "a group of alternatives takes no inputs"},
      {"(Relu(*))(*)", 1, 10, "only a group of bare operator names"},
      {"Add(a=*, a=*)", 1, 10, "capture 'a' is defined twice"},
      {"a=Relu(a=*)", 1, 1, "capture 'a' is defined twice"},
      {"Add(x=(Relu(*) | Tanh(*)), *)", 1, 5, "a capture names an operator"},
      {"Mul(*, $x)", 1, 8, "no capture named 'x'"},
      {"c=Relu($c)", 1, 8, "refers to an expression that contains it"},
      {"Mul(*, $)", 1, 9, "expected a capture name after '$'"},
      {"Pad[mode == \"refl](*)", 1, 13, "unterminated string"},
      {"const=Relu(*)", 1, 1, "'const' is a keyword"},
      {"Relu(\n  Conv(*, const\n", 3, 1, "expected ')' after the inputs of Conv"},
      {"Relu(\n  Conv(*, const),\n  *:bogus)", 3, 5, "unknown element type 'bogus'"},
      {"Relu(*:rank(-1))", 1, 13, "expected a rank"},
      {"Relu(*:rank(99999999999999999999))", 1, 13, "is too large"},
      {std::string(300, '(') + "Relu", 1, 257, "nested too deeply"},
      {"", 1, 1, "expected an operator name"},
  };
  for (const auto& c : cases) expectError(c);
}

TEST(PatternParser, ErrorPositionsHonourTheFileOffset) {
  // A spec file passes where the pattern starts: line 12, column 20.
  expectError({"Relu(%)", 12, 25, "unexpected character '%'"}, 12, 20);
  // The column offset applies to the first line only.
  expectError({"Relu(\n  %)", 13, 3, "unexpected character '%'"}, 12, 20);
}

// A registry with a few ops, so that validation is tested whatever the
// built-in registry holds.
OpRegistry smallRegistry() {
  auto infer = [](const Node&, const std::vector<TensorType>& in) {
    return std::vector<TensorType>{in.at(0)};
  };
  auto reference = [](const Node&, const std::vector<const Tensor*>&,
                      const std::vector<Tensor*>&) {};
  OpRegistry r;
  OpSchema conv;
  conv.name = "Conv";
  conv.kind = OpKind::Anchor;
  conv.minInputs = 2;
  conv.maxInputs = 3;
  conv.attributes = {{"group", AttributeType::Int, int64_t{1}},
                     {"kernel_shape", AttributeType::Ints, std::nullopt},
                     {"auto_pad", AttributeType::String, std::string("NOTSET")},
                     {"strides", AttributeType::Ints, std::nullopt}};
  conv.infer = infer;
  conv.reference = reference;
  r.add(conv);
  OpSchema relu;
  relu.name = "Relu";
  relu.kind = OpKind::ElemWise;
  relu.infer = infer;
  relu.reference = reference;
  r.add(relu);
  OpSchema add = relu;
  add.name = "Add";
  add.kind = OpKind::Broadcast;
  add.minInputs = add.maxInputs = 2;
  r.add(add);
  OpSchema leaky = relu;
  leaky.name = "LeakyRelu";
  leaky.attributes = {{"alpha", AttributeType::Float, 0.01f}};
  r.add(leaky);
  OpSchema reshape = relu;
  reshape.name = "Reshape";
  reshape.kind = OpKind::Injective;
  reshape.constInputs = {{1, "shape", AttributeType::Ints}};
  r.add(reshape);
  OpSchema constant = relu;
  constant.name = "Constant";
  constant.minInputs = constant.maxInputs = 0;
  constant.attributes = {{"value", AttributeType::Tensor, std::nullopt}};
  r.add(constant);
  return r;
}

TEST(PatternValidation, AcceptsKnownOpsAndAttributes) {
  OpRegistry r = smallRegistry();
  const char* good[] = {
      "Relu(Add(Conv[group > 1, kernel_shape == [3,3], auto_pad in [NOTSET, VALID]](*, const, "
      "?const), *))",
      "Relu?(Conv[strides == 1, kernel_shape in [[1,1],[3,3]]](*, const))",
      "LeakyRelu[alpha >= 0.1, alpha < 1](*)",
      "Reshape[shape == [1, -1]](*)",
      "Relu|LeakyRelu(Conv)",
      "Add((Conv(*, const) | Relu(*)), *)",
  };
  for (const char* text : good) {
    SCOPED_TRACE(text);
    EXPECT_NO_THROW(validatePattern(parsePattern(text), r));
  }
}

TEST(PatternValidation, ReportsUnknownOpsAttributesAndArity) {
  OpRegistry r = smallRegistry();
  const BadCase cases[] = {
      {"Relu(Convv(*, const))", 1, 6, "unknown op 'Convv'"},
      {"Relu(\n  Conv[kernal_shape == [3,3]](*, const))", 2, 8,
       "op Conv has no attribute 'kernal_shape'"},
      {"Relu(*, *)", 1, 1, "Relu takes at most 1 input, the pattern gives 2"},
      {"Relu(Conv(*))", 1, 6, "Conv takes at least 2 inputs, the pattern gives 1"},
      {"Conv[auto_pad > 1](*, const)", 1, 6,
       "attribute 'auto_pad' of Conv has type string: compare it with == != or in"},
      {"Conv[group == NOTSET](*, const)", 1, 6,
       "attribute 'group' of Conv has type int: compare it with a number"},
      {"Conv[kernel_shape == [a, b]](*, const)", 1, 6, "attribute 'kernel_shape' of Conv has type ints"},
      {"Constant[value == 1]()", 1, 10, "patterns cannot constrain tensor attributes"},
      {"Relu|LeakyRelu[alpha == 0.1](*)", 1, 16, "op Relu has no attribute 'alpha'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    try {
      validatePattern(parsePattern(c.text), r);
      FAIL() << "expected a PatternError";
    } catch (const PatternError& e) {
      EXPECT_EQ(e.line(), c.line) << e.what();
      EXPECT_EQ(e.column(), c.column) << e.what();
      EXPECT_NE(e.reason().find(c.reason), std::string::npos) << e.what();
    }
  }
}

TEST(PatternValidation, ChecksAgainstTheBuiltInRegistry) {
  EXPECT_NO_THROW(parseValidPattern(
      "Relu(Add(Conv[group > 1, kernel_shape == [3,3], auto_pad in [NOTSET, VALID]](*, const, "
      "?const), *))"));
  try {
    parseValidPattern("Relu(Add(Convv(*, const), *))", 7, 12);
    FAIL() << "expected a PatternError";
  } catch (const PatternError& e) {
    EXPECT_EQ(e.line(), 7);
    EXPECT_EQ(e.column(), 21);
    EXPECT_EQ(e.reason(), "unknown op 'Convv'");
  }
  try {
    parseValidPattern("Conv[kernal_shape == [3,3]](*, const)");
    FAIL() << "expected a PatternError";
  } catch (const PatternError& e) {
    EXPECT_EQ(std::string(e.what()), "line 1, column 6: op Conv has no attribute 'kernal_shape'");
  }
}

// Every line of the untagged code blocks in docs/patterns.md is a pattern
// (or a comment): the documentation's examples must parse and validate.
TEST(PatternValidation, DocumentationExamplesAreValid) {
  std::ifstream in(std::string(COLLAGE_SOURCE_DIR) + "/docs/patterns.md");
  ASSERT_TRUE(in) << "cannot read docs/patterns.md";
  std::string line;
  bool inBlock = false, patternBlock = false;
  int lineNo = 0, checked = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    if (line.rfind("```", 0) == 0) {
      patternBlock = !inBlock && line == "```";
      inBlock = !inBlock;
      continue;
    }
    if (!inBlock || !patternBlock) continue;
    size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos || line[first] == '#') continue;
    SCOPED_TRACE("docs/patterns.md:" + std::to_string(lineNo) + ": " + line);
    EXPECT_NO_THROW({
      try {
        Pattern p = parseValidPattern(line, lineNo);
        // The canonical form means the same: it reads back to itself.
        EXPECT_EQ(parsePattern(p.toString()).toString(), p.toString());
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
        throw;
      }
    });
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

}  // namespace
}  // namespace collage

namespace collage {
namespace {
// Found by pattern_parser_fuzzer: a parenthesised alternative of one op.
TEST(PatternParser, FuzzFoundAlternativeOfOneParenthesisedOp) {
  const Pattern p = parsePattern("A((Relu |(hRe)))");
  const std::string printed = p.toString();
  EXPECT_EQ(parsePattern(printed).toString(), printed);
}

// Found by pattern_parser_fuzzer: a bare name before an alternative with
// inputs printed as "(Reu | a())", which reads back as the one op Reu|a().
TEST(PatternParser, FuzzFoundBareNameBeforeAnAlternativeWithInputs) {
  expectCanonical("Add((Reu| (a)()), *)", "Add(((Reu) | a()), *)");
  expectCanonical("(A | (B) | c(*))", "((A) | (B) | c(*))");
  expectCanonical("(c(*) | A)", "(c(*) | A)");
  expectCanonical("((x=Relu) | Sigmoid(*))", "((x=Relu) | Sigmoid(*))");
}
}  // namespace
}  // namespace collage
