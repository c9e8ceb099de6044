// Einsum: the numpy-style summation over an equation such as "bij,bjk->bik".
//
// The equation is parsed into labels: one per letter, and one per dimension
// covered by "..." (ellipsis dimensions broadcast across operands, aligned
// from the right). Without "->" the output is the ellipsis dimensions, then
// the letters that appear exactly once, in alphabetical order (numpy's rule).
// A letter repeated within one operand takes its diagonal.
//
// The kernel is the direct definition: every combination of output labels,
// summed over every combination of the other labels. It is the ground truth
// for backends, not a fast path: a backend lowers common equations to MatMul.
#include <algorithm>
#include <cctype>
#include <limits>
#include <type_traits>
#include <map>
#include <set>

#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

// Labels: letters are their char code; ellipsis dimension i is 256 + i.
constexpr int kEllipsisLabel = 256;

struct EinsumPlan {
  std::vector<std::vector<int>> inputs;  // labels per input dimension
  std::vector<int> output;               // labels per output dimension
  std::map<int, int64_t> sizes;          // label -> extent
};

// Splits one term into labels; "..." becomes the marker -1.
std::vector<int> parseTerm(const Node& node, const std::string& term) {
  std::vector<int> out;
  for (size_t i = 0; i < term.size(); ++i) {
    const char ch = term[i];
    if (ch == '.') {
      if (term.compare(i, 3, "...") != 0)
        throw Error(nodeLabel(node) + "a '.' in the equation must be part of '...'");
      if (std::count(out.begin(), out.end(), -1))
        throw Error(nodeLabel(node) + "'...' appears twice in the term '" + term + "'");
      out.push_back(-1);
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(ch))) {
      out.push_back(ch);
    } else {
      throw Error(nodeLabel(node) + "unexpected character '" + std::string(1, ch) +
                  "' in the equation");
    }
  }
  return out;
}

EinsumPlan planEinsum(const Node& node, const std::vector<Shape>& shapes) {
  std::string eq;
  for (char ch : node.attrs.getString("equation"))
    if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != shapes.size())
    throw Error(nodeLabel(node) + "the equation '" + eq + "' has " + std::to_string(terms.size()) +
                " operands, the node " + std::to_string(shapes.size()) + " inputs");
  EinsumPlan plan;
  int64_t ellipsisRank = 0;
  bool anyEllipsis = false;
  std::vector<std::vector<int>> raw;
  for (size_t k = 0; k < terms.size(); ++k) {
    raw.push_back(parseTerm(node, terms[k]));
    const int64_t letters = static_cast<int64_t>(
        std::count_if(raw[k].begin(), raw[k].end(), [](int l) { return l >= 0; }));
    const bool hasEllipsis = letters != static_cast<int64_t>(raw[k].size());
    const int64_t rank = static_cast<int64_t>(shapes[k].size());
    if (hasEllipsis ? rank < letters : rank != letters)
      throw Error(nodeLabel(node) + "operand " + std::to_string(k) + " '" + terms[k] +
                  "' does not match its shape " + shapeToString(shapes[k]));
    if (hasEllipsis) {
      anyEllipsis = true;
      ellipsisRank = std::max(ellipsisRank, rank - letters);
    }
  }
  // Expand "..." into ellipsis labels, right-aligned, and record extents.
  for (size_t k = 0; k < raw.size(); ++k) {
    const int64_t rank = static_cast<int64_t>(shapes[k].size());
    const int64_t letters = static_cast<int64_t>(
        std::count_if(raw[k].begin(), raw[k].end(), [](int l) { return l >= 0; }));
    std::vector<int> labels;
    for (int l : raw[k]) {
      if (l >= 0) {
        labels.push_back(l);
        continue;
      }
      const int64_t here = rank - letters;
      for (int64_t i = 0; i < here; ++i)
        labels.push_back(kEllipsisLabel + static_cast<int>(ellipsisRank - here + i));
    }
    for (size_t d = 0; d < labels.size(); ++d) {
      const int l = labels[d];
      const int64_t extent = shapes[k][d];
      auto it = plan.sizes.find(l);
      if (it == plan.sizes.end()) {
        plan.sizes[l] = extent;
      } else if (it->second != extent) {
        // Ellipsis dimensions broadcast (1 against n); letters must agree.
        if (l >= kEllipsisLabel && (it->second == 1 || extent == 1)) {
          it->second = std::max(it->second, extent);
        } else {
          const std::string what = l >= kEllipsisLabel
                                       ? std::string("'...' dimensions")
                                       : "label '" + std::string(1, static_cast<char>(l)) + "'";
          throw Error(nodeLabel(node) + what + " have sizes " + std::to_string(it->second) +
                      " and " + std::to_string(extent));
        }
      }
    }
    plan.inputs.push_back(std::move(labels));
  }
  if (arrow != std::string::npos) {
    for (int l : parseTerm(node, eq.substr(arrow + 2))) {
      if (l < 0) {
        for (int64_t i = 0; i < ellipsisRank; ++i) plan.output.push_back(kEllipsisLabel + static_cast<int>(i));
        continue;
      }
      if (!plan.sizes.count(l))
        throw Error(nodeLabel(node) + "output label '" + std::string(1, static_cast<char>(l)) +
                    "' appears in no operand");
      if (std::count(plan.output.begin(), plan.output.end(), l))
        throw Error(nodeLabel(node) + "output label '" + std::string(1, static_cast<char>(l)) +
                    "' appears twice");
      plan.output.push_back(l);
    }
  } else {
    if (anyEllipsis)
      for (int64_t i = 0; i < ellipsisRank; ++i) plan.output.push_back(kEllipsisLabel + static_cast<int>(i));
    std::map<int, int> counts;
    for (const auto& labels : plan.inputs)
      for (int l : labels)
        if (l < kEllipsisLabel) ++counts[l];
    for (const auto& [l, n] : counts)  // std::map: alphabetical (upper case first, as numpy)
      if (n == 1) plan.output.push_back(l);
  }
  return plan;
}

std::vector<Shape> shapesOf(const Types& in) {
  std::vector<Shape> s;
  for (const auto& t : in) s.push_back(t.shape);
  return s;
}

void addEinsum(OpRegistry& r) {
  OpSchema s;
  s.name = "Einsum";
  s.kind = OpKind::Opaque;
  s.minInputs = 1;
  s.maxInputs = std::numeric_limits<int>::max();
  s.attributes = {{"equation", AttributeType::String, std::nullopt, true}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kNumeric, in[0].elementType);
    for (const auto& t : in)
      if (t.elementType != in[0].elementType)
        throw Error(nodeLabel(node) + "every input must be " +
                    std::string(elementTypeName(in[0].elementType)) + ", not " + t.toString());
    const EinsumPlan plan = planEinsum(node, shapesOf(in));
    Shape out;
    for (int l : plan.output) out.push_back(plan.sizes.at(l));
    return Types{{in[0].elementType, out}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    std::vector<Shape> shapes;
    for (const Tensor* t : in) shapes.push_back(t->shape());
    const EinsumPlan plan = planEinsum(node, shapes);
    // Loop order: output labels, then the summed ones.
    std::vector<int> labels = plan.output;
    for (const auto& [l, n] : plan.sizes)
      if (!std::count(labels.begin(), labels.end(), l)) labels.push_back(l);
    const size_t numOut = plan.output.size();
    std::vector<int64_t> extent;
    for (int l : labels) extent.push_back(plan.sizes.at(l));
    // stride[k][j]: how far operand k moves when label j steps (0 where it
    // broadcasts; summed where a label repeats: the diagonal).
    std::vector<std::vector<int64_t>> stride(in.size(), std::vector<int64_t>(labels.size(), 0));
    for (size_t k = 0; k < in.size(); ++k) {
      const std::vector<int64_t> st = stridesOf(shapes[k]);
      for (size_t d = 0; d < plan.inputs[k].size(); ++d) {
        if (shapes[k][d] == 1 && plan.sizes.at(plan.inputs[k][d]) != 1) continue;
        const size_t j = static_cast<size_t>(
            std::find(labels.begin(), labels.end(), plan.inputs[k][d]) - labels.begin());
        stride[k][j] += st[d];
      }
    }
    int64_t outCount = 1, sumCount = 1;
    for (size_t j = 0; j < labels.size(); ++j) (j < numOut ? outCount : sumCount) *= extent[j];
    visitType<kNumeric>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
      T* y = out[0]->data<T>();
      std::vector<int64_t> idx(labels.size(), 0);
      for (int64_t o = 0; o < outCount; ++o) {
        // idx[0..numOut) is the output position (row-major), set from o.
        int64_t rest = o;
        for (size_t j = numOut; j-- > 0;) {
          idx[j] = rest % extent[j];
          rest /= extent[j];
        }
        std::fill(idx.begin() + static_cast<std::ptrdiff_t>(numOut), idx.end(), 0);
        Acc acc = 0;
        for (int64_t s2 = 0; s2 < sumCount; ++s2) {
          Acc prod = 1;
          for (size_t k = 0; k < in.size(); ++k) {
            int64_t off = 0;
            for (size_t j = 0; j < labels.size(); ++j) off += idx[j] * stride[k][j];
            prod *= static_cast<Acc>(in[k]->data<T>()[off]);
          }
          acc += prod;
          for (size_t j = labels.size(); j-- > numOut;) {  // next summed combination
            if (++idx[j] < extent[j]) break;
            idx[j] = 0;
          }
        }
        y[o] = static_cast<T>(acc);
      }
    });
  };
  s.flops = [](const Node& node, const Types& in, const Types&) {
    const EinsumPlan plan = planEinsum(node, shapesOf(in));
    double total = 1;
    for (const auto& [l, n] : plan.sizes) total *= static_cast<double>(n);
    return total * static_cast<double>(in.size());
  };
  r.add(std::move(s));
}

}  // namespace

void registerEinsumOps(OpRegistry& r) { addEinsum(r); }

}  // namespace collage
