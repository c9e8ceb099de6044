#include "backends/cuda_fusion/fusion_codegen.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/ir/error.h"
#include "core/ops/runtime_inputs.h"

namespace collage::cuda_fusion {

namespace {

// Unary ops as an expression of `x` (the operand at the same index).
const std::map<std::string, std::string>& unaryOps() {
  static const std::map<std::string, std::string> ops = {
      {"Relu", "fmaxf(x, 0.0f)"},
      {"Sigmoid", "1.0f / (1.0f + expf(-x))"},
      {"Tanh", "tanhf(x)"},
      {"Exp", "expf(x)"},
      {"Log", "logf(x)"},
      {"Sqrt", "sqrtf(x)"},
      {"Neg", "-x"},
      {"Abs", "fabsf(x)"},
      {"Erf", "erff(x)"},
      {"Reciprocal", "1.0f / x"},
      {"Identity", "x"},
      {"Floor", "floorf(x)"},
      {"Ceil", "ceilf(x)"},
      {"Sin", "sinf(x)"},
      {"Cos", "cosf(x)"},
      {"Softplus", "log1pf(expf(x))"},
      {"Softsign", "x / (1.0f + fabsf(x))"},
      {"HardSwish", "x * fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f)"},
  };
  return ops;
}

// Binary ops (NumPy broadcasting) as an expression of `a` and `b`.
const std::map<std::string, std::string>& binaryOps() {
  static const std::map<std::string, std::string> ops = {
      {"Add", "a + b"},       {"Sub", "a - b"},      {"Mul", "a * b"},
      {"Div", "a / b"},       {"Pow", "powf(a, b)"}, {"Max", "fmaxf(a, b)"},
      {"Min", "fminf(a, b)"}, {"Sum", "a + b"},      {"PRelu", "a >= 0.0f ? a : a * b"},
  };
  return ops;
}

// Unary ops with float attributes, written out in generate().
const std::set<std::string> kParameterisedUnary = {"LeakyRelu", "Elu", "HardSigmoid", "Gelu",
                                                   "Clip"};
// Ops whose output element i is input element i (row-major order kept).
const std::set<std::string> kSameIndex = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
const std::set<std::string> kReductions = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                           "ReduceSumSquare"};
const std::set<std::string> kSoftmaxes = {"Softmax", "LogSoftmax"};

bool isReduction(const std::string& op) { return kReductions.count(op) || kSoftmaxes.count(op); }

bool supportedOp(const std::string& op) {
  return unaryOps().count(op) || binaryOps().count(op) || kParameterisedUnary.count(op) ||
         kSameIndex.count(op) || isReduction(op) || op == "Transpose" || op == "Expand";
}

Shape stridesOf(const Shape& s) {
  Shape st(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

std::string ll(int64_t v) { return std::to_string(v) + "LL"; }

// The coordinate of dimension d of the flat index `var` in shape s.
std::string coord(const std::string& var, const Shape& s, const Shape& st, size_t d) {
  std::string e = st[d] == 1 ? var : "(" + var + " / " + ll(st[d]) + ")";
  if (d > 0) e = "(" + e + " % " + ll(s[d]) + ")";  // the outermost needs no modulo
  return e;
}

// Sum of terms "c * stride" as an index expression ("0" when empty).
std::string sumOf(const std::vector<std::string>& terms) {
  if (terms.empty()) return "0LL";
  std::string e;
  for (const auto& t : terms) e += (e.empty() ? "" : " + ") + t;
  return "(" + e + ")";
}

std::string times(const std::string& c, int64_t stride) {
  return stride == 1 ? c : c + " * " + ll(stride);
}

// The index into `in` (broadcast to `out`, NumPy rules) of out's flat index i.
std::string broadcastIndex(const Shape& in, const Shape& out) {
  if (in == out) return "i";
  const Shape os = stridesOf(out), is = stridesOf(in);
  const size_t offset = out.size() - in.size();
  std::vector<std::string> terms;
  for (size_t d = offset; d < out.size(); ++d) {
    const size_t id = d - offset;
    if (in[id] == 1) continue;
    terms.push_back(times(coord("i", out, os, d), is[id]));
  }
  return sumOf(terms);
}

// Exact float literal: the bit pattern, so no decimal rounding and inf/nan work.
std::string floatLiteral(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  char buf[64];
  std::snprintf(buf, sizeof buf, "__int_as_float(0x%08x) /* %g */", bits, static_cast<double>(f));
  return buf;
}

bool staticShape(const TensorType& t) {
  return std::all_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d >= 0; });
}

int64_t normalizeAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// The axes a reduction reduces (sorted, normalised); nullopt when they are
// not known at compile time. Empty axes reduce everything, unless
// noop_with_empty_axes.
std::optional<std::vector<int64_t>> reductionAxes(const Graph& g, const Node& n, int64_t rank) {
  std::vector<int64_t> axes;
  if (n.inputs.size() > 1 && n.inputs[1] != kNoValue) {
    const Value& a = g.value(n.inputs[1]);
    if (!a.isConstant()) return std::nullopt;
    axes = a.constant->toInts();
  } else {
    axes = n.attrs.getInts("axes", {});
  }
  if (axes.empty() && n.attrs.getInt("noop_with_empty_axes", 0) == 0)
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  for (auto& a : axes) a = normalizeAxis(a, rank);
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  for (int64_t a : axes)
    if (a < 0 || a >= rank) return std::nullopt;
  return axes;
}

// The inputs an op reads as data (the rest are shapes, axes, bounds read at
// compile time).
std::vector<size_t> dataInputs(const Node& n) {
  if (binaryOps().count(n.op)) return {0, 1};
  if (n.op == "Clip") return {0, 1, 2};
  return {0};
}

class Generator {
 public:
  explicit Generator(const KernelRequest& r) : r_(r), g_(*r.graph) {
    for (size_t k = 0; k < r.inputs.size(); ++k) slot_[r.inputs[k]] = static_cast<int>(k);
  }

  FusionSource run() {
    FusionSource out;
    std::vector<std::string> outputFns;
    try {
      for (ValueId v : r_.outputs) {
        outputFns.push_back(define(v));
        out.outputSizes.push_back(g_.value(v).type.numElements());
        out.maxOutputSize = std::max(out.maxOutputSize, out.outputSizes.back());
      }
    } catch (const Refusal& e) {
      out.refusal = e.why;
      return out;
    }
    const size_t slots = r_.inputs.size() + constants_.size() + r_.outputs.size();
    std::ostringstream src;
    src << "// Generated by Collage's cuda_fusion backend: one pass over the group's outputs.\n"
        << "typedef long long idx_t;\n"
        << "struct Args { void* p[" << slots << "]; };\n\n"
        << functions_.str() << "extern \"C\" __global__ void " << kEntryName << "(Args args) {\n"
        << "  const idx_t stride = (idx_t)gridDim.x * blockDim.x;\n"
        << "  const idx_t first = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;\n";
    for (size_t k = 0; k < r_.outputs.size(); ++k) {
      const size_t s = r_.inputs.size() + constants_.size() + k;
      src << "  for (idx_t i = first; i < " << ll(out.outputSizes[k]) << "; i += stride)\n"
          << "    static_cast<float*>(args.p[" << s << "])[i] = " << outputFns[k] << "(args, i);\n";
    }
    src << "}\n";
    out.source = src.str();
    out.constants = constants_;
    return out;
  }

 private:
  struct Refusal {
    std::string why;
  };

  // The device function that gives value v at a flat index; defines it (and
  // its operands first) on first use.
  std::string define(ValueId v) {
    if (auto it = fn_.find(v); it != fn_.end()) return it->second;
    const Value& val = g_.value(v);
    if (val.type.elementType != ElementType::Float32 || !staticShape(val.type))
      throw Refusal{"value '" + val.name + "' is " + val.type.toString() +
                    " (only float32 with static shapes)"};
    std::ostringstream body;
    if (auto s = slot_.find(v); s != slot_.end()) {
      body << "  return static_cast<const float*>(args.p[" << s->second << "])[i];\n";
    } else if (val.isConstant() && val.type.numElements() == 1) {
      body << "  return " << floatLiteral(val.constant->toFloats()[0]) << ";\n";
    } else if (val.isConstant()) {
      const int s = static_cast<int>(r_.inputs.size() + constants_.size());
      constants_.push_back(v);
      slot_[v] = s;
      body << "  return static_cast<const float*>(args.p[" << s << "])[i];\n";
    } else {
      COLLAGE_CHECK(val.producer != kNoNode && r_.nodes.contains(val.producer),
                    "value '" + val.name + "' is read by the group but neither input nor member");
      body << nodeBody(val.producer);
    }
    const std::string name = "x" + std::to_string(fn_.size());
    fn_[v] = name;
    const std::string what = val.producer != kNoNode && r_.nodes.contains(val.producer)
                                 ? g_.node(val.producer).op
                                 : (val.isConstant() ? "constant" : "input");
    functions_ << "// " << what << " " << val.type.toString() << "\n"
               << "__device__ __forceinline__ float " << name << "(const Args& args, idx_t i) {\n"
               << body.str() << "}\n\n";
    return name;
  }

  std::string read(ValueId v, const std::string& index) {
    return define(v) + "(args, " + index + ")";
  }

  std::string nodeBody(NodeId id) {
    const Node& n = g_.node(id);
    const Shape& out = g_.value(n.outputs[0]).type.shape;
    const Shape& in = g_.value(n.inputs[0]).type.shape;
    const ValueId x = n.inputs[0];
    std::ostringstream b;
    if (auto u = unaryOps().find(n.op); u != unaryOps().end()) {
      b << "  const float x = " << read(x, "i") << ";\n  return " << u->second << ";\n";
    } else if (auto bin = binaryOps().find(n.op); bin != binaryOps().end()) {
      const ValueId y = n.inputs[1];
      b << "  const float a = " << read(x, broadcastIndex(in, out)) << ";\n"
        << "  const float b = " << read(y, broadcastIndex(g_.value(y).type.shape, out)) << ";\n"
        << "  return " << bin->second << ";\n";
    } else if (kParameterisedUnary.count(n.op)) {
      b << "  const float x = " << read(x, "i") << ";\n";
      if (n.op == "LeakyRelu") {
        b << "  return x >= 0.0f ? x : x * " << floatLiteral(n.attrs.getFloat("alpha", 0.01f))
          << ";\n";
      } else if (n.op == "Elu") {
        b << "  return x >= 0.0f ? x : " << floatLiteral(n.attrs.getFloat("alpha", 1.0f))
          << " * (expf(x) - 1.0f);\n";
      } else if (n.op == "HardSigmoid") {
        b << "  return fminf(fmaxf(" << floatLiteral(n.attrs.getFloat("alpha", 0.2f)) << " * x + "
          << floatLiteral(n.attrs.getFloat("beta", 0.5f)) << ", 0.0f), 1.0f);\n";
      } else if (n.op == "Gelu") {
        if (n.attrs.getString("approximate", "none") == "tanh")
          b << "  return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));\n";
        else
          b << "  return 0.5f * x * (1.0f + erff(x * 0.70710678118f));\n";
      } else {  // Clip: bounds from inputs 1 and 2 (opset 11+) or attributes
        const float inf = std::numeric_limits<float>::infinity();
        auto bound = [&](size_t k, const char* attr, float fallback) {
          if (n.inputs.size() > k && n.inputs[k] != kNoValue) return read(n.inputs[k], "0LL");
          return floatLiteral(n.attrs.getFloat(attr, fallback));
        };
        b << "  return fminf(fmaxf(x, " << bound(1, "min", -inf) << "), " << bound(2, "max", inf)
          << ");\n";
      }
    } else if (kSameIndex.count(n.op)) {
      b << "  return " << read(x, "i") << ";\n";
    } else if (n.op == "Expand") {
      b << "  return " << read(x, broadcastIndex(in, out)) << ";\n";
    } else if (n.op == "Transpose") {
      std::vector<int64_t> perm = n.attrs.getInts("perm", {});
      if (perm.empty())
        for (int64_t d = static_cast<int64_t>(in.size()) - 1; d >= 0; --d) perm.push_back(d);
      const Shape os = stridesOf(out), is = stridesOf(in);
      std::vector<std::string> terms;
      for (size_t d = 0; d < out.size(); ++d)
        if (out[d] != 1) terms.push_back(times(coord("i", out, os, d), is[perm[d]]));
      b << "  return " << read(x, sumOf(terms)) << ";\n";
    } else if (kSoftmaxes.count(n.op)) {
      const int64_t axis =
          normalizeAxis(n.attrs.getInt("axis", -1), static_cast<int64_t>(in.size()));
      const Shape is = stridesOf(in);
      const std::string at = "base + k * " + ll(is[axis]);
      b << "  const idx_t base = i - " << times(coord("i", in, is, axis), is[axis]) << ";\n"
        << "  float m = __int_as_float(0xff800000);\n"
        << "  for (idx_t k = 0; k < " << ll(in[axis]) << "; ++k) m = fmaxf(m, " << read(x, at)
        << ");\n"
        << "  float s = 0.0f;\n"
        << "  for (idx_t k = 0; k < " << ll(in[axis]) << "; ++k) s += expf(" << read(x, at)
        << " - m);\n";
      if (n.op == "Softmax")
        b << "  return expf(" << read(x, "i") << " - m) / s;\n";
      else
        b << "  return " << read(x, "i") << " - m - logf(s);\n";
    } else {  // ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceSumSquare
      const int64_t rank = static_cast<int64_t>(in.size());
      const std::vector<int64_t> axes = *reductionAxes(g_, n, rank);
      const bool keep = n.attrs.getInt("keepdims", 1) != 0;
      const Shape os = stridesOf(out), is = stridesOf(in);
      std::vector<std::string> baseTerms, offsetTerms;
      Shape reduced;
      for (int64_t d = 0, od = 0; d < rank; ++d) {
        const bool r = std::binary_search(axes.begin(), axes.end(), d);
        if (r)
          reduced.push_back(in[d]);
        else if (in[d] != 1)
          baseTerms.push_back(times(coord("i", out, os, od), is[d]));
        if (!r || keep) ++od;
      }
      const Shape rs = stridesOf(reduced);
      for (size_t k = 0; k < axes.size(); ++k)
        if (reduced[k] != 1) offsetTerms.push_back(times(coord("r", reduced, rs, k), is[axes[k]]));
      int64_t count = 1;
      for (int64_t d : reduced) count *= d;
      const bool isMax = n.op == "ReduceMax", isMin = n.op == "ReduceMin";
      b << "  const idx_t base = " << sumOf(baseTerms) << ";\n"
        << "  float acc = "
        << (isMax   ? "__int_as_float(0xff800000)"
            : isMin ? "__int_as_float(0x7f800000)"
                    : "0.0f")
        << ";\n"
        << "  for (idx_t r = 0; r < " << ll(count) << "; ++r) {\n"
        << "    const float v = " << read(x, "base + " + sumOf(offsetTerms)) << ";\n"
        << "    acc = "
        << (isMax                       ? "fmaxf(acc, v)"
            : isMin                     ? "fminf(acc, v)"
            : n.op == "ReduceSumSquare" ? "acc + v * v"
                                        : "acc + v")
        << ";\n  }\n"
        << "  return acc"
        << (n.op == "ReduceMean" ? " * " + floatLiteral(1.0f / static_cast<float>(count)) : "")
        << ";\n";
    }
    return b.str();
  }

  const KernelRequest& r_;
  const Graph& g_;
  std::map<ValueId, int> slot_;        // inputs and constant tensors -> parameter slot
  std::map<ValueId, std::string> fn_;  // value -> its device function
  std::vector<ValueId> constants_;
  std::ostringstream functions_;
};

// How deeply reductions nest inside the group: a reduction whose operand
// already depends on a reduction would recompute that one for every element
// it reads, which is quadratic, so such groups are refused.
int reductionDepth(const Graph& g, const NodeSet& nodes, NodeId n, std::map<NodeId, int>& memo) {
  if (auto it = memo.find(n); it != memo.end()) return it->second;
  int depth = 0;
  for (ValueId v : g.node(n).inputs)
    if (v != kNoValue && g.value(v).producer != kNoNode && nodes.contains(g.value(v).producer))
      depth = std::max(depth, reductionDepth(g, nodes, g.value(v).producer, memo));
  if (isReduction(g.node(n).op)) ++depth;
  return memo[n] = depth;
}

}  // namespace

std::string nodeRefusal(const Graph& graph, NodeId node) {
  const Node& n = graph.node(node);
  if (!supportedOp(n.op)) return "op " + n.op + " has no generated form";
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (n.outputs[k] != kNoValue && !graph.value(n.outputs[k]).consumers.empty())
      return n.op + " with more than one output";
  if (n.outputs.empty() || n.outputs[0] == kNoValue) return n.op + " without an output";
  if (binaryOps().count(n.op) && (n.inputs.size() != 2 || n.inputs[1] == kNoValue))
    return n.op + " with " + std::to_string(n.inputs.size()) + " inputs (two only)";
  for (size_t k : dataInputs(n)) {
    if (k >= n.inputs.size() || n.inputs[k] == kNoValue) continue;
    const TensorType& t = graph.value(n.inputs[k]).type;
    if (t.elementType != ElementType::Float32) return "input of type " + t.toString();
    if (!staticShape(t)) return "input without a static shape";
  }
  const TensorType& o = graph.value(n.outputs[0]).type;
  if (o.elementType != ElementType::Float32 || !staticShape(o)) return "output " + o.toString();
  if (kReductions.count(n.op) && !reductionAxes(graph, n, graph.value(n.inputs[0]).type.rank()))
    return "reduction axes not known at compile time";
  if (n.op == "Clip")
    for (size_t k = 1; k < n.inputs.size(); ++k)
      if (n.inputs[k] != kNoValue && graph.value(n.inputs[k]).type.numElements() != 1)
        return "Clip bound that is not a scalar";
  if (n.op == "Transpose") {
    const auto perm = n.attrs.getInts("perm", {});
    if (!perm.empty() && static_cast<int64_t>(perm.size()) != graph.value(n.inputs[0]).type.rank())
      return "Transpose perm of the wrong length";
  }
  return "";
}

std::string groupRefusal(const Graph& graph, const NodeSet& nodes) {
  std::map<NodeId, int> memo;
  std::string why;
  nodes.forEach([&](NodeId n) {
    if (!why.empty()) return;
    // Its code is generated with the parameters (Clip's bounds) as literals.
    if (std::string r = runtimeInputRefusal(graph, {n}, "the CUDA fusion generator"); !r.empty())
      why = r;
    else if (std::string r = nodeRefusal(graph, n); !r.empty())
      why = "node '" + graph.node(n).name + "': " + r;
    else if (reductionDepth(graph, nodes, n, memo) > 1)
      why = "node '" + graph.node(n).name +
            "': a reduction over another reduction of the same group (recomputed quadratically)";
  });
  return why;
}

FusionSource generateFusionKernel(const KernelRequest& request) {
  FusionSource refused;
  refused.refusal = groupRefusal(*request.graph, request.nodes);
  if (refused.refusal.empty() && request.outputs.empty())
    refused.refusal = "the group has no outputs";
  if (!refused.refusal.empty()) return refused;
  return Generator(request).run();
}

}  // namespace collage::cuda_fusion
