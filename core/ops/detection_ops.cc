// NonMaxSuppression, the last step of SSD/YOLO/Faster-RCNN exports.
//
//   boxes  [batches, boxes, 4]   (center_point_box 0: two opposite corners
//                                 y1, x1, y2, x2 in either order; 1: x, y, w, h)
//   scores [batches, classes, boxes]
//   max_output_boxes_per_class, iou_threshold, score_threshold: scalars
//   selected_indices [selected, 3] int64: (batch, class, box)
//
// How many boxes survive depends on every input's values, so all five
// inputs are value-shaped (OpSchema::valueShapedInputs): the node is folded
// at import, which is where the static-shape IR can hold its result.
#include <algorithm>
#include <numeric>

#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

struct Box {
  double y1, x1, y2, x2;  // y1 <= y2, x1 <= x2
  double area() const { return (y2 - y1) * (x2 - x1); }
};

Box boxAt(const std::vector<double>& b, int64_t at, bool centerPoint) {
  const double* v = b.data() + at * 4;
  if (centerPoint) {
    const double x = v[0], y = v[1], w = v[2], h = v[3];
    return {y - h / 2, x - w / 2, y + h / 2, x + w / 2};
  }
  return {std::min(v[0], v[2]), std::min(v[1], v[3]), std::max(v[0], v[2]), std::max(v[1], v[3])};
}

double iou(const Box& a, const Box& b) {
  const double ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  const double iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (ih <= 0 || iw <= 0) return 0.0;
  const double inter = ih * iw;
  const double uni = a.area() + b.area() - inter;
  return uni > 0 ? inter / uni : 0.0;
}

void addNonMaxSuppression(OpRegistry& r) {
  OpSchema s;
  s.name = "NonMaxSuppression";
  s.kind = OpKind::Opaque;
  s.minInputs = 2;
  s.maxInputs = 5;
  s.valueShapedInputs = {0, 1, 2, 3, 4};
  s.attributes = {{"center_point_box", AttributeType::Int, Attribute(int64_t{0})}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kFloatTypes, in[0].elementType);
    const TensorType &boxes = in[0], &scores = in[1];
    if (boxes.rank() != 3 || boxes.shape[2] != 4 || scores.rank() != 3 ||
        scores.shape[0] != boxes.shape[0] || scores.shape[2] != boxes.shape[1] ||
        scores.elementType != boxes.elementType)
      throw Error(nodeLabel(node) + "boxes " + boxes.toString() + " and scores " +
                  scores.toString() + " must be [batches, boxes, 4] and [batches, classes, boxes]");
    return Types{{ElementType::Int64, {0, 3}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    auto has = [&](size_t i) { return i < in.size() && in[i] != nullptr; };
    const bool centerPoint = node.attrs.getInt("center_point_box", 0) != 0;
    const int64_t maxOut = has(2) ? scalarInt(node, *in[2], "max_output_boxes_per_class") : 0;
    const double iouThreshold = has(3) ? scalarDouble(node, *in[3], "iou_threshold") : 0.0;
    const bool hasScoreThreshold = has(4);
    const double scoreThreshold = hasScoreThreshold ? scalarDouble(node, *in[4], "score_threshold") : 0.0;
    const std::vector<double> boxes = in[0]->toDoubles(), scores = in[1]->toDoubles();
    const int64_t batches = in[0]->shape()[0], count = in[0]->shape()[1];
    const int64_t classes = in[1]->shape()[1];
    std::vector<int64_t> selected;  // triples
    for (int64_t b = 0; b < batches; ++b)
      for (int64_t c = 0; c < classes; ++c) {
        const double* sc = scores.data() + (b * classes + c) * count;
        std::vector<int64_t> order;
        for (int64_t i = 0; i < count; ++i)
          if (!hasScoreThreshold || sc[i] > scoreThreshold) order.push_back(i);
        // Highest score first; equal scores keep the lower box index first.
        std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return sc[x] > sc[y]; });
        std::vector<int64_t> kept;
        for (int64_t i : order) {
          if (static_cast<int64_t>(kept.size()) >= maxOut) break;
          const Box bi = boxAt(boxes, b * count + i, centerPoint);
          bool suppressed = false;
          for (int64_t k : kept)
            if (iou(bi, boxAt(boxes, b * count + k, centerPoint)) > iouThreshold) {
              suppressed = true;
              break;
            }
          if (suppressed) continue;
          kept.push_back(i);
          selected.insert(selected.end(), {b, c, i});
        }
      }
    const int64_t n = static_cast<int64_t>(selected.size() / 3);
    *out[0] = Tensor::fromInts({n, 3}, selected);
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

}  // namespace

void registerDetectionOps(OpRegistry& r) { addNonMaxSuppression(r); }

}  // namespace collage
