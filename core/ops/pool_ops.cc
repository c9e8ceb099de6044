// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.
//
// The windowed pools run on the ConvGeometry expanded to 3 spatial
// dimensions. Padding never contributes a value: MaxPool takes the maximum
// over the window's elements inside the input, AveragePool divides by that
// count, or with count_include_pad by the number of window taps inside the
// padded input (taps beyond the end padding, which ceil_mode can create, are
// not counted, as in PyTorch).
#include <algorithm>
#include <limits>
#include <vector>

#include "core/ops/conv_geometry.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_helpers.h"

namespace collage {

namespace {

constexpr size_t kMaxSpatialRank = 3;

std::vector<AttributeSpec> poolAttributes() {
  return {
      {"auto_pad", AttributeType::String, Attribute(std::string("NOTSET"))},
      {"ceil_mode", AttributeType::Int, Attribute(int64_t{0})},
      {"dilations", AttributeType::Ints, std::nullopt},  // absent: 1 per dimension
      {"kernel_shape", AttributeType::Ints, std::nullopt, true},
      {"pads", AttributeType::Ints, std::nullopt},       // absent: 0
      {"strides", AttributeType::Ints, std::nullopt},    // absent: 1 per dimension
  };
}

ConvGeometry poolGeometry(const Node& node, const Shape& x) {
  ConvGeometry g = ConvGeometry::pool(node, x);
  if (g.spatialRank() > kMaxSpatialRank)
    throw Unsupported(nodeLabel(node) + std::to_string(g.spatialRank()) +
                      " spatial dimensions (at most 3 are supported)");
  return g;
}

// The taps of one window along one dimension that fall inside the input:
// input positions start + t * dilation for t in [lo, hi).
struct TapRange {
  int64_t start, lo, hi;
};

TapRange tapRange(int64_t outPos, size_t dim, const ConvGeometry& g) {
  const int64_t start = outPos * g.strides[dim] - g.padsBegin[dim];
  const int64_t d = g.dilations[dim], in = g.inputSpatial[dim];
  int64_t lo = 0, hi = g.kernel[dim];
  while (lo < hi && start + lo * d < 0) ++lo;
  while (hi > lo && start + (hi - 1) * d >= in) --hi;
  return {start, lo, hi};
}

// Taps inside the padded input [-padBegin, in + padEnd), for count_include_pad.
int64_t paddedTapCount(int64_t outPos, size_t dim, const ConvGeometry& g) {
  const int64_t start = outPos * g.strides[dim] - g.padsBegin[dim];
  const int64_t d = g.dilations[dim];
  const int64_t limit = g.inputSpatial[dim] + g.padsEnd[dim];
  int64_t count = 0;
  for (int64_t t = 0; t < g.kernel[dim]; ++t)
    if (start + t * d < limit) ++count;
  return count;
}

// Tap ranges of every output position, per dimension (computed once per
// node rather than once per output element).
std::vector<std::vector<TapRange>> allTapRanges(const ConvGeometry& g) {
  std::vector<std::vector<TapRange>> r(g.spatialRank());
  for (size_t d = 0; d < g.spatialRank(); ++d)
    for (int64_t o = 0; o < g.outputSpatial[d]; ++o) r[d].push_back(tapRange(o, d, g));
  return r;
}

// ---- MaxPool ----

std::vector<TensorType> inferMaxPool(const Node& node, const std::vector<TensorType>& in) {
  const ElementType et = in.at(0).elementType;
  if (et != ElementType::Float32 && et != ElementType::UInt8 && et != ElementType::Int8)
    requireFloat32(node, in[0]);
  const int64_t order = node.attrs.getInt("storage_order", 0);
  if (order != 0 && order != 1)
    throw Error(nodeLabel(node) + "storage_order must be 0 or 1");
  const Shape y = poolGeometry(node, in[0].shape).outputShape();
  std::vector<TensorType> out{TensorType{et, y}};
  if (node.outputs.size() > 1 && node.outputs[1] != kNoValue)
    out.push_back(TensorType{ElementType::Int64, y});
  return out;
}

template <class T>
void maxPool(const Node& node, const Tensor& X, Tensor& Y, Tensor* indices) {
  const ConvGeometry full = poolGeometry(node, X.shape());
  const ConvGeometry g = full.expandedTo(kMaxSpatialRank);
  const bool columnMajor = node.attrs.getInt("storage_order", 0) == 1;
  const int64_t ID = g.inputSpatial[0], IH = g.inputSpatial[1], IW = g.inputSpatial[2];
  const int64_t OD = g.outputSpatial[0], OH = g.outputSpatial[1], OW = g.outputSpatial[2];
  const int64_t inP = g.inputSpatialSize();
  const T* x = X.data<T>();
  T* y = Y.data<T>();
  int64_t* idx = indices ? indices->data<int64_t>() : nullptr;
  const std::vector<std::vector<TapRange>> ranges = allTapRanges(g);
  for (int64_t nc = 0; nc < g.batch * g.inChannels; ++nc) {
    const T* xc = x + nc * inP;
    for (int64_t od = 0; od < OD; ++od) {
      const TapRange& rd = ranges[0][od];
      for (int64_t oh = 0; oh < OH; ++oh) {
        const TapRange& rh = ranges[1][oh];
        for (int64_t ow = 0; ow < OW; ++ow) {
          const TapRange& rw = ranges[2][ow];
          T best = std::numeric_limits<T>::lowest();
          int64_t bd = -1, bh = 0, bw = 0;
          for (int64_t td = rd.lo; td < rd.hi; ++td) {
            const int64_t id = rd.start + td * g.dilations[0];
            for (int64_t th = rh.lo; th < rh.hi; ++th) {
              const int64_t ih = rh.start + th * g.dilations[1];
              const T* row = xc + (id * IH + ih) * IW;
              for (int64_t tw = rw.lo; tw < rw.hi; ++tw) {
                const int64_t iw = rw.start + tw * g.dilations[2];
                if (bd < 0 || row[iw] > best) {  // first maximum wins
                  best = row[iw];
                  bd = id, bh = ih, bw = iw;
                }
              }
            }
          }
          *y++ = best;
          if (idx) {
            // Flat index into X: row-major, or column-major over the spatial
            // dimensions (storage_order 1); the (n, c) offset is included.
            // The expanded leading dims are size 1, so they add nothing.
            int64_t flat;
            if (columnMajor) {
              const int64_t r = static_cast<int64_t>(full.spatialRank());
              if (r == 1) flat = bw;
              else if (r == 2) flat = bh + bw * IH;
              else flat = bd + bh * ID + bw * ID * IH;
            } else {
              flat = (bd * IH + bh) * IW + bw;
            }
            *idx++ = nc * inP + flat;
          }
        }
      }
    }
  }
}

void runMaxPool(const Node& node, const std::vector<const Tensor*>& in,
                const std::vector<Tensor*>& out) {
  Tensor* indices = out.size() > 1 ? out[1] : nullptr;
  switch (in[0]->elementType()) {
    case ElementType::Float32: maxPool<float>(node, *in[0], *out[0], indices); break;
    case ElementType::UInt8: maxPool<uint8_t>(node, *in[0], *out[0], indices); break;
    case ElementType::Int8: maxPool<int8_t>(node, *in[0], *out[0], indices); break;
    default: requireFloat32(node, in[0]->type());
  }
}

// ---- AveragePool ----

std::vector<TensorType> inferAveragePool(const Node& node, const std::vector<TensorType>& in) {
  requireFloat32(node, in.at(0));
  return {TensorType{ElementType::Float32, poolGeometry(node, in[0].shape).outputShape()}};
}

void runAveragePool(const Node& node, const std::vector<const Tensor*>& in,
                    const std::vector<Tensor*>& out) {
  const ConvGeometry g = poolGeometry(node, in[0]->shape()).expandedTo(kMaxSpatialRank);
  const bool includePad = node.attrs.getInt("count_include_pad", 0) != 0;
  const int64_t IH = g.inputSpatial[1], IW = g.inputSpatial[2];
  const int64_t OD = g.outputSpatial[0], OH = g.outputSpatial[1], OW = g.outputSpatial[2];
  const int64_t inP = g.inputSpatialSize();
  const float* x = in[0]->data<float>();
  float* y = out[0]->data<float>();
  const std::vector<std::vector<TapRange>> ranges = allTapRanges(g);
  // Divisors per dimension; the window's divisor is their product.
  std::vector<std::vector<int64_t>> counts(3);
  for (size_t d = 0; d < 3; ++d)
    for (int64_t o = 0; o < g.outputSpatial[d]; ++o)
      counts[d].push_back(includePad ? paddedTapCount(o, d, g)
                                     : ranges[d][o].hi - ranges[d][o].lo);
  for (int64_t nc = 0; nc < g.batch * g.inChannels; ++nc) {
    const float* xc = x + nc * inP;
    for (int64_t od = 0; od < OD; ++od) {
      const TapRange& rd = ranges[0][od];
      for (int64_t oh = 0; oh < OH; ++oh) {
        const TapRange& rh = ranges[1][oh];
        for (int64_t ow = 0; ow < OW; ++ow) {
          const TapRange& rw = ranges[2][ow];
          float sum = 0.0f;
          for (int64_t td = rd.lo; td < rd.hi; ++td) {
            const int64_t id = rd.start + td * g.dilations[0];
            for (int64_t th = rh.lo; th < rh.hi; ++th) {
              const float* row = xc + (id * IH + rh.start + th * g.dilations[1]) * IW;
              for (int64_t tw = rw.lo; tw < rw.hi; ++tw) sum += row[rw.start + tw * g.dilations[2]];
            }
          }
          const int64_t count = counts[0][od] * counts[1][oh] * counts[2][ow];
          *y++ = count > 0 ? sum / static_cast<float>(count) : 0.0f;
        }
      }
    }
  }
}

double windowFlops(const Node& node, const std::vector<TensorType>&,
                   const std::vector<TensorType>& out) {
  int64_t k = 1;
  for (int64_t d : node.attrs.getInts("kernel_shape", {})) k *= d;
  return static_cast<double>(out.at(0).numElements()) * static_cast<double>(k);
}

// ---- GlobalAveragePool / GlobalMaxPool ----

std::vector<TensorType> inferGlobalPool(const Node& node, const std::vector<TensorType>& in) {
  const TensorType& x = in.at(0);
  requireFloat32(node, x);
  if (x.rank() < 3)
    throw Error(nodeLabel(node) + "input must have rank >= 3 (N, C, spatial...), got " +
                shapeToString(x.shape));
  Shape y(x.shape.size(), 1);
  y[0] = x.shape[0];
  y[1] = x.shape[1];
  return {TensorType{ElementType::Float32, y}};
}

template <bool kMax>
void runGlobalPool(const Node& node, const std::vector<const Tensor*>& in,
                   const std::vector<Tensor*>& out) {
  const Shape& s = in[0]->shape();
  const int64_t planes = s[0] * s[1];
  const int64_t size = in[0]->numElements() / std::max<int64_t>(planes, 1);
  const float* x = in[0]->data<float>();
  float* y = out[0]->data<float>();
  for (int64_t p = 0; p < planes; ++p) {
    const float* xp = x + p * size;
    if constexpr (kMax) {
      float m = size > 0 ? xp[0] : 0.0f;
      for (int64_t i = 1; i < size; ++i) m = std::max(m, xp[i]);
      y[p] = m;
    } else {
      double sum = 0;
      for (int64_t i = 0; i < size; ++i) sum += xp[i];
      y[p] = size > 0 ? static_cast<float>(sum / static_cast<double>(size)) : 0.0f;
    }
  }
}

double globalPoolFlops(const Node&, const std::vector<TensorType>& in,
                       const std::vector<TensorType>&) {
  return static_cast<double>(in.at(0).numElements());
}


// ---- MaxUnpool: scatters MaxPool's values back to the positions its
// Indices output recorded (flat indices into the whole output tensor) ----

// The output shape from kernel, strides and pads: the shape MaxPool's
// Indices refer to.
Shape maxUnpoolDefaultShape(const Node& node, const TensorType& x) {
  if (x.rank() < 3)
    throw Error(nodeLabel(node) + "X must be [N, C, D1, ...], not " + x.toString());
  const int64_t spatial = x.rank() - 2;
  const std::vector<int64_t> kernel = node.attrs.getInts("kernel_shape");
  const std::vector<int64_t> strides = node.attrs.getInts("strides", std::vector<int64_t>(spatial, 1));
  const std::vector<int64_t> pads = node.attrs.getInts("pads", std::vector<int64_t>(2 * spatial, 0));
  if (static_cast<int64_t>(kernel.size()) != spatial || static_cast<int64_t>(strides.size()) != spatial ||
      static_cast<int64_t>(pads.size()) != 2 * spatial)
    throw Error(nodeLabel(node) + "kernel_shape, strides and pads must match the " +
                std::to_string(spatial) + " spatial dimensions of X");
  Shape out = {x.shape[0], x.shape[1]};
  for (int64_t d = 0; d < spatial; ++d)
    out.push_back((x.shape[d + 2] - 1) * strides[d] + kernel[d] - pads[d] - pads[d + spatial]);
  return out;
}

// output_shape, when given, may be larger than the default (MaxPool's input
// had a remainder the windows did not cover): each value keeps the position
// its index has in the default shape, and the rest is zeros.
Shape maxUnpoolShape(const Node& node, const TensorType& x) {
  const Shape def = maxUnpoolDefaultShape(node, x);
  if (!node.attrs.has("output_shape")) return def;
  const std::vector<int64_t> s = node.attrs.getInts("output_shape");
  bool ok = s.size() == def.size();
  for (size_t d = 0; ok && d < s.size(); ++d) ok = d < 2 ? s[d] == def[d] : s[d] >= def[d];
  if (!ok)
    throw Error(nodeLabel(node) + "output_shape " + shapeToString(s) +
                " must keep N and C and be at least the default shape " + shapeToString(def));
  return s;
}

std::vector<TensorType> inferMaxUnpool(const Node& node, const std::vector<TensorType>& in) {
  requireFloat32(node, in[0]);
  if (in[1].shape != in[0].shape || in[1].elementType != ElementType::Int64)
    throw Error(nodeLabel(node) + "I must be int64 with the shape of X, not " + in[1].toString());
  return {{in[0].elementType, maxUnpoolShape(node, in[0])}};
}

void runMaxUnpool(const Node& node, const std::vector<const Tensor*>& in,
                  const std::vector<Tensor*>& out) {
  const float* x = in[0]->data<float>();
  const int64_t* index = in[1]->data<int64_t>();
  float* y = out[0]->data<float>();
  const Shape def = maxUnpoolDefaultShape(node, in[0]->type());
  const Shape& shape = out[0]->shape();
  const int64_t total = numElements(def);
  std::fill(y, y + out[0]->numElements(), 0.0f);
  for (int64_t i = 0; i < in[0]->numElements(); ++i) {
    if (index[i] < 0 || index[i] >= total)
      throw Error(nodeLabel(node) + "index " + std::to_string(index[i]) +
                  " in I is outside the unpooled shape " + shapeToString(def));
    // Coordinates in the default shape, placed at the same coordinates of the output.
    int64_t rest = index[i], at = 0, stride = 1;
    for (size_t d = def.size(); d-- > 0;) {
      at += (rest % def[d]) * stride;
      rest /= def[d];
      stride *= shape[d];
    }
    y[at] = x[i];
  }
}

}  // namespace

void registerPoolOps(OpRegistry& r) {
  OpSchema unpool;
  unpool.name = "MaxUnpool";
  unpool.kind = OpKind::Opaque;
  unpool.minInputs = unpool.maxInputs = 2;
  unpool.attributes = {{"kernel_shape", AttributeType::Ints, std::nullopt, true},
                       {"pads", AttributeType::Ints, std::nullopt},
                       {"strides", AttributeType::Ints, std::nullopt},
                       {"output_shape", AttributeType::Ints, std::nullopt}};
  unpool.constInputs = {{2, "output_shape", AttributeType::Ints}};
  unpool.infer = inferMaxUnpool;
  unpool.reference = runMaxUnpool;
  r.add(std::move(unpool));

  OpSchema maxPool;
  maxPool.name = "MaxPool";
  maxPool.kind = OpKind::Anchor;
  maxPool.maxOutputs = 2;  // Y and optional Indices
  maxPool.attributes = poolAttributes();
  maxPool.attributes.push_back({"storage_order", AttributeType::Int, Attribute(int64_t{0})});
  maxPool.infer = inferMaxPool;
  maxPool.reference = runMaxPool;
  maxPool.flops = windowFlops;
  r.add(std::move(maxPool));

  OpSchema avgPool;
  avgPool.name = "AveragePool";
  avgPool.kind = OpKind::Anchor;
  avgPool.attributes = poolAttributes();
  avgPool.attributes.push_back({"count_include_pad", AttributeType::Int, Attribute(int64_t{0})});
  avgPool.infer = inferAveragePool;
  avgPool.reference = runAveragePool;
  avgPool.flops = windowFlops;
  r.add(std::move(avgPool));

  OpSchema gap;
  gap.name = "GlobalAveragePool";
  gap.kind = OpKind::Anchor;
  gap.infer = inferGlobalPool;
  gap.reference = runGlobalPool<false>;
  gap.flops = globalPoolFlops;
  r.add(std::move(gap));

  OpSchema gmp;
  gmp.name = "GlobalMaxPool";
  gmp.kind = OpKind::Anchor;
  gmp.infer = inferGlobalPool;
  gmp.reference = runGlobalPool<true>;
  gmp.flops = globalPoolFlops;
  r.add(std::move(gmp));
}

}  // namespace collage
