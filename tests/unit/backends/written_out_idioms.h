// Functions that exporters write out with several elementwise ops (HardSwish
// as x * Clip(x + 3, 0, 6) / 6, GELU with erf or tanh, SiLU, ...), in the
// forms and associations seen in exported models: what every backend's
// pattern rule is checked against.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tests/unit/graph_builder.h"

namespace collage {

// A function of the running result that an exporter wrote out with several ops.
struct Idiom {
  std::string name;
  std::function<ValueId(GraphBuilder&, ValueId)> write;
  std::string postOp;  // what the kernel's description must show
};

inline std::vector<Idiom> writtenOutIdioms() {
  auto mul = [](GraphBuilder& b, ValueId a, ValueId c) { return b.op("Mul", {a, c}); };
  auto clip06 = [](GraphBuilder& b, ValueId v) {
    return b.op("Clip", {v}, attrs({{"min", 0.0f}, {"max", 6.0f}}));
  };
  auto geluTanhInner = [mul](GraphBuilder& b, ValueId x, ValueId cube) {
    ValueId inner = b.op("Add", {x, mul(b, cube, b.scalar(0.044715f))});
    return b.op("Tanh", {mul(b, inner, b.scalar(0.7978845608f))});
  };
  return {
      {"hardswish x*Clip(x+3,0,6)/6",
       [=](GraphBuilder& b, ValueId x) {
         ValueId r = clip06(b, b.op("Add", {x, b.scalar(3)}));
         return b.op("Div", {mul(b, x, r), b.scalar(6)});
       },
       "hardswish"},
      {"hardswish (Clip(x+3,0,6)*(1/6))*x",
       [=](GraphBuilder& b, ValueId x) {
         ValueId r = mul(b, clip06(b, b.op("Add", {b.scalar(3), x})), b.scalar(1.0f / 6));
         return mul(b, r, x);
       },
       "hardswish"},
      {"hardswish x*HardSigmoid(x)",
       [=](GraphBuilder& b, ValueId x) {
         ValueId h = b.op("HardSigmoid", {x}, attrs({{"alpha", 1.0f / 6}, {"beta", 0.5f}}));
         return mul(b, x, h);
       },
       "hardswish"},
      {"hardsigmoid Clip(x+3,0,6)/6",
       [=](GraphBuilder& b, ValueId x) {
         return b.op("Div", {clip06(b, b.op("Add", {x, b.scalar(3)})), b.scalar(6)});
       },
       "clip"},
      {"silu x*Sigmoid(x)", [=](GraphBuilder& b, ValueId x) { return mul(b, b.op("Sigmoid", {x}), x); },
       "swish"},
      {"gelu (x*(1+erf(x/sqrt2)))*0.5",
       [=](GraphBuilder& b, ValueId x) {
         ValueId e = b.op("Erf", {b.op("Div", {x, b.scalar(1.4142135f)})});
         return mul(b, mul(b, x, b.op("Add", {e, b.scalar(1)})), b.scalar(0.5f));
       },
       "gelu_erf"},
      {"gelu (x*0.5)*(1+erf(x*(1/sqrt2)))",
       [=](GraphBuilder& b, ValueId x) {
         ValueId e = b.op("Erf", {mul(b, x, b.scalar(0.70710678f))});
         return mul(b, mul(b, x, b.scalar(0.5f)), b.op("Add", {b.scalar(1), e}));
       },
       "gelu_erf"},
      {"gelu tanh form with Pow(x,3)",
       [=](GraphBuilder& b, ValueId x) {
         ValueId t = geluTanhInner(b, x, b.op("Pow", {x, b.scalar(3)}));
         return mul(b, mul(b, b.scalar(0.5f), x), b.op("Add", {t, b.scalar(1)}));
       },
       "gelu_tanh"},
      {"gelu tanh form with x*x*x",
       [=](GraphBuilder& b, ValueId x) {
         ValueId t = geluTanhInner(b, x, mul(b, mul(b, x, x), x));
         return mul(b, mul(b, x, b.op("Add", {t, b.scalar(1)})), b.scalar(0.5f));
       },
       "gelu_tanh"},
  };
}

}  // namespace collage
