#include "core/ops/layout_attrs.h"

#include <algorithm>

#include "core/ops/op_helpers.h"

namespace collage {

std::vector<int64_t> transposePerm(const Node& node, int64_t rank) {
  std::vector<int64_t> perm = node.attrs.getInts("perm", {});
  if (perm.empty()) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
    return perm;
  }
  std::vector<bool> seen(rank, false);
  bool ok = static_cast<int64_t>(perm.size()) == rank;
  for (int64_t& p : perm) {
    if (!ok) break;
    if (p < 0) p += rank;
    ok = p >= 0 && p < rank && !seen[p];
    if (ok) seen[p] = true;
  }
  if (!ok)
    throw Error(nodeLabel(node) + "perm " + intsToString(node.attrs.getInts("perm")) +
                " is not a permutation of " + std::to_string(rank) + " axes");
  return perm;
}

std::vector<SliceRange> sliceRanges(const Node& node, const Shape& in) {
  const int64_t rank = static_cast<int64_t>(in.size());
  const std::vector<int64_t> starts = node.attrs.getInts("starts");
  const std::vector<int64_t> ends = node.attrs.getInts("ends");
  std::vector<int64_t> axes = node.attrs.getInts("axes", {});
  std::vector<int64_t> steps = node.attrs.getInts("steps", {});
  if (axes.empty())
    for (int64_t d = 0; d < static_cast<int64_t>(starts.size()); ++d) axes.push_back(d);
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    throw Error(nodeLabel(node) + "starts, ends, axes and steps differ in length");
  std::vector<SliceRange> ranges(in.size());
  for (int64_t d = 0; d < rank; ++d) ranges[d] = {0, 1, in[d]};
  std::vector<bool> seen(in.size(), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t d = normalizeAxis(node, axes[i], rank);
    if (seen[d]) throw Error(nodeLabel(node) + "axis " + std::to_string(axes[i]) + " is repeated");
    seen[d] = true;
    const int64_t dim = in[d], step = steps[i];
    if (step == 0) throw Error(nodeLabel(node) + "a step is 0");
    int64_t start = starts[i], end = ends[i];
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    int64_t count;
    if (dim == 0) {
      start = 0;
      count = 0;
    } else if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      count = end > start ? (end - start + step - 1) / step : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      count = start > end ? (start - end + (-step) - 1) / (-step) : 0;
    }
    ranges[d] = {start, step, count};
  }
  return ranges;
}

std::vector<int64_t> splitSizes(const Node& node, const Shape& in, int64_t axis) {
  const int64_t n = static_cast<int64_t>(node.outputs.size());
  const int64_t dim = in[axis];
  std::vector<int64_t> split = node.attrs.getInts("split", {});
  if (!split.empty()) {
    int64_t sum = 0;
    for (int64_t v : split) {
      if (v < 0) throw Error(nodeLabel(node) + "split " + intsToString(split) + " is negative");
      sum += v;
    }
    if (static_cast<int64_t>(split.size()) != n || sum != dim)
      throw Error(nodeLabel(node) + "split " + intsToString(split) + " does not divide dimension " +
                  std::to_string(dim) + " into " + std::to_string(n) + " outputs");
    return split;
  }
  if (node.attrs.has("num_outputs")) {
    // Opset 18: chunks of ceil(dim / n), the last one smaller.
    const int64_t numOutputs = node.attrs.getInt("num_outputs");
    if (numOutputs != n || n <= 0)
      throw Error(nodeLabel(node) + "num_outputs " + std::to_string(numOutputs) + " but " +
                  std::to_string(n) + " outputs");
    const int64_t chunk = (dim + n - 1) / n;
    for (int64_t i = 0; i < n; ++i)
      split.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
    return split;
  }
  if (n <= 0 || dim % n != 0)
    throw Error(nodeLabel(node) + "dimension " + std::to_string(dim) + " of " + shapeToString(in) +
                " does not split evenly into " + std::to_string(n) + " outputs");
  return std::vector<int64_t>(n, dim / n);
}

}  // namespace collage
