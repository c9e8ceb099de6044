// DepthToSpace and SpaceToDepth: move blocks of b x b pixels between the
// channel axis and the spatial axes of an NCHW tensor (sub-pixel convolution
// upsamplers export them). Elements are only moved, so any sized type works.
//
//   DepthToSpace DCR: y[n][c][h*b+i][w*b+j] = x[n][(i*b+j)*C' + c][h][w]
//   DepthToSpace CRD: y[n][c][h*b+i][w*b+j] = x[n][c*b*b + i*b + j][h][w]
//   SpaceToDepth:     y[n][(i*b+j)*C + c][h][w] = x[n][c][h*b+i][w*b+j]
#include <cstring>

#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

int64_t blockSize(const Node& node, const TensorType& x) {
  if (elementSize(x.elementType) == 0) throw unsupportedType(node, x.elementType);
  if (x.rank() != 4) throw Error(nodeLabel(node) + "the input must be 4-D (NCHW), not " + x.toString());
  const int64_t b = node.attrs.getInt("blocksize");
  if (b < 1) throw Error(nodeLabel(node) + "blocksize must be positive, not " + std::to_string(b));
  return b;
}

bool crdMode(const Node& node) {
  const std::string mode = node.attrs.getString("mode", "DCR");
  if (mode != "DCR" && mode != "CRD")
    throw Error(nodeLabel(node) + "mode must be DCR or CRD, not '" + mode + "'");
  return mode == "CRD";
}

// Copies element by element with a source index computed from the
// destination's (n, c, h, w) by `source`.
template <class Source>
void moveElements(const Node& node, const Tensor& x, Tensor& y, Source source) {
  const Shape& s = y.shape();
  visitBySize(node, x.elementType(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    int64_t at = 0;
    for (int64_t n = 0; n < s[0]; ++n)
      for (int64_t c = 0; c < s[1]; ++c)
        for (int64_t h = 0; h < s[2]; ++h)
          for (int64_t w = 0; w < s[3]; ++w) dst[at++] = src[source(n, c, h, w)];
  });
}

void addDepthToSpace(OpRegistry& r) {
  OpSchema s;
  s.name = "DepthToSpace";
  s.kind = OpKind::Injective;
  s.attributes = {{"blocksize", AttributeType::Int, std::nullopt, true},
                  {"mode", AttributeType::String, Attribute(std::string("DCR"))}};
  s.infer = [](const Node& node, const Types& in) {
    const int64_t b = blockSize(node, in[0]);
    crdMode(node);
    const Shape& x = in[0].shape;
    if (x[1] % (b * b) != 0)
      throw Error(nodeLabel(node) + "channels " + std::to_string(x[1]) +
                  " are not a multiple of blocksize^2 = " + std::to_string(b * b));
    return Types{{in[0].elementType, {x[0], x[1] / (b * b), x[2] * b, x[3] * b}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const int64_t b = node.attrs.getInt("blocksize");
    const bool crd = crdMode(node);
    const Shape& x = in[0]->shape();
    const int64_t c2 = x[1] / (b * b);
    moveElements(node, *in[0], *out[0], [&](int64_t n, int64_t c, int64_t h, int64_t w) {
      const int64_t i = h % b, j = w % b;
      const int64_t channel = crd ? c * b * b + i * b + j : (i * b + j) * c2 + c;
      return ((n * x[1] + channel) * x[2] + h / b) * x[3] + w / b;
    });
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addSpaceToDepth(OpRegistry& r) {
  OpSchema s;
  s.name = "SpaceToDepth";
  s.kind = OpKind::Injective;
  s.attributes = {{"blocksize", AttributeType::Int, std::nullopt, true}};
  s.infer = [](const Node& node, const Types& in) {
    const int64_t b = blockSize(node, in[0]);
    const Shape& x = in[0].shape;
    if (x[2] % b != 0 || x[3] % b != 0)
      throw Error(nodeLabel(node) + "spatial size " + std::to_string(x[2]) + "x" +
                  std::to_string(x[3]) + " is not a multiple of blocksize " + std::to_string(b));
    return Types{{in[0].elementType, {x[0], x[1] * b * b, x[2] / b, x[3] / b}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const int64_t b = node.attrs.getInt("blocksize");
    const Shape& x = in[0]->shape();
    moveElements(node, *in[0], *out[0], [&](int64_t n, int64_t c, int64_t h, int64_t w) {
      const int64_t block = c / x[1], channel = c % x[1];
      const int64_t i = block / b, j = block % b;
      return ((n * x[1] + channel) * x[2] + h * b + i) * x[3] + w * b + j;
    });
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

}  // namespace

void registerLayoutOps(OpRegistry& r) {
  addDepthToSpace(r);
  addSpaceToDepth(r);
}

}  // namespace collage
