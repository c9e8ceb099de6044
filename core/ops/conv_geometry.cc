#include "core/ops/conv_geometry.h"

#include <algorithm>

#include "core/ir/error.h"
#include "core/ops/op_helpers.h"

namespace collage {

namespace {

// Floor division (C++ '/' truncates toward zero; negative totals need floor).
int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::string ints(const std::vector<int64_t>& v, const char* sep = "x") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

// Reads a per-dimension attribute: absent or empty gives `fill` for every
// dimension; otherwise it must have `count` entries, each >= minValue.
std::vector<int64_t> perDim(const Node& node, const char* name, size_t count, int64_t fill,
                            int64_t minValue) {
  std::vector<int64_t> v = node.attrs.getInts(name, {});
  if (v.empty()) return std::vector<int64_t>(count, fill);
  if (v.size() != count)
    throw Error(nodeLabel(node) + "attribute '" + name + "' has " + std::to_string(v.size()) +
                " values, expected " + std::to_string(count));
  for (int64_t x : v)
    if (x < minValue)
      throw Error(nodeLabel(node) + "attribute '" + name + "' = [" + ints(v, ",") +
                  "] must be >= " + std::to_string(minValue));
  return v;
}

void requireRank(const Node& node, const Shape& x, const char* what) {
  if (x.size() < 3)
    throw Error(nodeLabel(node) + what + " must have rank >= 3 (N, C, spatial...), got " +
                shapeToString(x));
}

// Fills strides, dilations and pads (explicit or from auto_pad) and the output
// size of a forward window op. `g.kernel` and `g.inputSpatial` must be set.
void resolveForward(const Node& node, ConvGeometry& g, bool ceilMode) {
  const size_t k = g.spatialRank();
  g.strides = perDim(node, "strides", k, 1, 1);
  g.dilations = perDim(node, "dilations", k, 1, 1);
  g.outputPadding.assign(k, 0);
  const AutoPad autoPad = autoPadOf(node);
  std::vector<int64_t> pads = perDim(node, "pads", 2 * k, 0, 0);
  g.padsBegin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(k));
  g.padsEnd.assign(pads.begin() + static_cast<std::ptrdiff_t>(k), pads.end());
  g.outputSpatial.assign(k, 0);
  for (size_t i = 0; i < k; ++i) {
    const int64_t in = g.inputSpatial[i];
    const int64_t effK = g.effectiveKernel(i);
    const int64_t s = g.strides[i];
    switch (autoPad) {
      case AutoPad::NotSet:
        break;
      case AutoPad::Valid:
        g.padsBegin[i] = g.padsEnd[i] = 0;
        break;
      case AutoPad::SameUpper:
      case AutoPad::SameLower: {
        const int64_t out = (in + s - 1) / s;
        const int64_t total = std::max<int64_t>(0, (out - 1) * s + effK - in);
        const int64_t small = total / 2;
        g.padsBegin[i] = autoPad == AutoPad::SameUpper ? small : total - small;
        g.padsEnd[i] = total - g.padsBegin[i];
        g.outputSpatial[i] = out;
        continue;
      }
    }
    g.outputSpatial[i] =
        windowOutputSize(in, g.kernel[i], s, g.dilations[i], g.padsBegin[i], g.padsEnd[i], ceilMode);
  }
  for (size_t i = 0; i < k; ++i)
    if (g.outputSpatial[i] <= 0)
      throw Error(nodeLabel(node) + "the window (" + g.toString() + ") does not fit the input " +
                  shapeToString(g.inputShape()));
}

}  // namespace

AutoPad autoPadOf(const Node& node) {
  const std::string s = node.attrs.getString("auto_pad", "NOTSET");
  if (s == "NOTSET" || s.empty()) return AutoPad::NotSet;
  if (s == "SAME_UPPER") return AutoPad::SameUpper;
  if (s == "SAME_LOWER") return AutoPad::SameLower;
  if (s == "VALID") return AutoPad::Valid;
  throw Error(nodeLabel(node) + "unknown auto_pad '" + s +
              "' (expected NOTSET, SAME_UPPER, SAME_LOWER or VALID)");
}

std::string_view autoPadName(AutoPad pad) {
  switch (pad) {
    case AutoPad::NotSet: return "NOTSET";
    case AutoPad::SameUpper: return "SAME_UPPER";
    case AutoPad::SameLower: return "SAME_LOWER";
    case AutoPad::Valid: return "VALID";
  }
  return "?";
}

int64_t windowOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                         int64_t padBegin, int64_t padEnd, bool ceilMode) {
  const int64_t effK = (kernel - 1) * dilation + 1;
  const int64_t span = in + padBegin + padEnd - effK;
  if (span < 0) return 0;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  // With ceil_mode, a window starting in the end padding would see no input.
  if (ceilMode && (out - 1) * stride >= in + padBegin) --out;
  return out;
}

ConvGeometry ConvGeometry::conv(const Node& node, const Shape& x, const Shape& w) {
  requireRank(node, x, "input X");
  if (w.size() != x.size())
    throw Error(nodeLabel(node) + "weight W " + shapeToString(w) + " must have the rank of X " +
                shapeToString(x));
  ConvGeometry g;
  g.batch = x[0];
  g.inChannels = x[1];
  g.outChannels = w[0];
  g.group = node.attrs.getInt("group", 1);
  if (g.group < 1) throw Error(nodeLabel(node) + "group must be >= 1");
  if (g.inChannels != w[1] * g.group)
    throw Error(nodeLabel(node) + "X has " + std::to_string(g.inChannels) +
                " channels but W " + shapeToString(w) + " with group " +
                std::to_string(g.group) + " expects " + std::to_string(w[1] * g.group));
  if (g.outChannels % g.group != 0)
    throw Error(nodeLabel(node) + "output channels " + std::to_string(g.outChannels) +
                " are not divisible by group " + std::to_string(g.group));
  g.inputSpatial.assign(x.begin() + 2, x.end());
  g.kernel.assign(w.begin() + 2, w.end());
  std::vector<int64_t> ks = node.attrs.getInts("kernel_shape", {});
  if (!ks.empty() && ks != g.kernel)
    throw Error(nodeLabel(node) + "kernel_shape [" + ints(ks, ",") +
                "] does not match the weight " + shapeToString(w));
  for (int64_t d : g.kernel)
    if (d < 1) throw Error(nodeLabel(node) + "empty kernel in weight " + shapeToString(w));
  resolveForward(node, g, false);
  return g;
}

ConvGeometry ConvGeometry::convTranspose(const Node& node, const Shape& x, const Shape& w) {
  requireRank(node, x, "input X");
  if (w.size() != x.size())
    throw Error(nodeLabel(node) + "weight W " + shapeToString(w) + " must have the rank of X " +
                shapeToString(x));
  ConvGeometry g;
  g.batch = x[0];
  g.inChannels = x[1];
  g.group = node.attrs.getInt("group", 1);
  if (g.group < 1) throw Error(nodeLabel(node) + "group must be >= 1");
  if (w[0] != g.inChannels || g.inChannels % g.group != 0)
    throw Error(nodeLabel(node) + "weight W " + shapeToString(w) + " does not match X " +
                shapeToString(x) + " with group " + std::to_string(g.group) +
                " (W must be [C, M/group, kernel...])");
  g.outChannels = w[1] * g.group;
  const size_t k = x.size() - 2;
  g.inputSpatial.assign(x.begin() + 2, x.end());
  g.kernel.assign(w.begin() + 2, w.end());
  std::vector<int64_t> ks = node.attrs.getInts("kernel_shape", {});
  if (!ks.empty() && ks != g.kernel)
    throw Error(nodeLabel(node) + "kernel_shape [" + ints(ks, ",") +
                "] does not match the weight " + shapeToString(w));
  g.strides = perDim(node, "strides", k, 1, 1);
  g.dilations = perDim(node, "dilations", k, 1, 1);
  g.outputPadding = perDim(node, "output_padding", k, 0, 0);
  std::vector<int64_t> pads = perDim(node, "pads", 2 * k, 0, 0);
  g.padsBegin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(k));
  g.padsEnd.assign(pads.begin() + static_cast<std::ptrdiff_t>(k), pads.end());
  // output_shape holds the spatial dims; some exporters write N and C too.
  std::vector<int64_t> outShape = node.attrs.getInts("output_shape", {});
  if (outShape.size() == k + 2) outShape.erase(outShape.begin(), outShape.begin() + 2);
  if (!outShape.empty() && outShape.size() != k)
    throw Error(nodeLabel(node) + "output_shape has " + std::to_string(outShape.size()) +
                " values, expected " + std::to_string(k));
  const AutoPad autoPad = autoPadOf(node);
  g.outputSpatial.assign(k, 0);
  for (size_t i = 0; i < k; ++i) {
    const int64_t natural = g.strides[i] * (g.inputSpatial[i] - 1) + g.outputPadding[i] +
                            g.effectiveKernel(i);
    if (autoPad == AutoPad::Valid) g.padsBegin[i] = g.padsEnd[i] = 0;
    int64_t wanted = -1;
    if (!outShape.empty())
      wanted = outShape[i];
    else if (autoPad == AutoPad::SameUpper || autoPad == AutoPad::SameLower)
      wanted = g.inputSpatial[i] * g.strides[i];
    if (wanted >= 0) {
      const int64_t total = natural - wanted;
      if (autoPad == AutoPad::SameUpper) {
        g.padsBegin[i] = floorDiv(total, 2);
        g.padsEnd[i] = total - g.padsBegin[i];
      } else {
        g.padsEnd[i] = floorDiv(total, 2);
        g.padsBegin[i] = total - g.padsEnd[i];
      }
    }
    g.outputSpatial[i] = natural - g.padsBegin[i] - g.padsEnd[i];
    if (g.kernel[i] < 1 || g.outputSpatial[i] <= 0)
      throw Error(nodeLabel(node) + "the output (" + g.toString() + ") is empty for input " +
                  shapeToString(x));
  }
  return g;
}

ConvGeometry ConvGeometry::pool(const Node& node, const Shape& x) {
  requireRank(node, x, "input X");
  ConvGeometry g;
  g.batch = x[0];
  g.inChannels = g.outChannels = x[1];
  g.inputSpatial.assign(x.begin() + 2, x.end());
  const size_t k = g.inputSpatial.size();
  g.kernel = node.attrs.getInts("kernel_shape", {});
  if (g.kernel.size() != k)
    throw Error(nodeLabel(node) + "kernel_shape [" + ints(g.kernel, ",") + "] must have " +
                std::to_string(k) + " values for input " + shapeToString(x));
  for (int64_t d : g.kernel)
    if (d < 1) throw Error(nodeLabel(node) + "kernel_shape values must be >= 1");
  resolveForward(node, g, node.attrs.getInt("ceil_mode", 0) != 0);
  return g;
}

int64_t ConvGeometry::kernelSize() const { return numElements(kernel); }
int64_t ConvGeometry::inputSpatialSize() const { return numElements(inputSpatial); }
int64_t ConvGeometry::outputSpatialSize() const { return numElements(outputSpatial); }

Shape ConvGeometry::inputShape() const {
  Shape s{batch, inChannels};
  s.insert(s.end(), inputSpatial.begin(), inputSpatial.end());
  return s;
}

Shape ConvGeometry::outputShape() const {
  Shape s{batch, outChannels};
  s.insert(s.end(), outputSpatial.begin(), outputSpatial.end());
  return s;
}

std::vector<int64_t> ConvGeometry::onnxPads() const {
  std::vector<int64_t> p = padsBegin;
  p.insert(p.end(), padsEnd.begin(), padsEnd.end());
  return p;
}

bool ConvGeometry::isPointwise() const {
  for (size_t i = 0; i < spatialRank(); ++i)
    if (kernel[i] != 1 || strides[i] != 1 || padsBegin[i] != 0 || padsEnd[i] != 0) return false;
  return true;
}

ConvGeometry ConvGeometry::expandedTo(size_t rank) const {
  ConvGeometry g = *this;
  while (g.spatialRank() < rank) {
    g.inputSpatial.insert(g.inputSpatial.begin(), 1);
    g.outputSpatial.insert(g.outputSpatial.begin(), 1);
    g.kernel.insert(g.kernel.begin(), 1);
    g.strides.insert(g.strides.begin(), 1);
    g.dilations.insert(g.dilations.begin(), 1);
    g.padsBegin.insert(g.padsBegin.begin(), 0);
    g.padsEnd.insert(g.padsEnd.begin(), 0);
    g.outputPadding.insert(g.outputPadding.begin(), 0);
  }
  return g;
}

std::string ConvGeometry::toString() const {
  std::string s = "kernel " + ints(kernel) + " stride " + ints(strides) + " dil " +
                  ints(dilations) + " pads [" + ints(onnxPads(), ",") + "]";
  bool anyOutPad = false;
  for (int64_t p : outputPadding) anyOutPad |= p != 0;
  if (anyOutPad) s += " output_padding " + ints(outputPadding);
  if (!outputSpatial.empty()) s += " out " + ints(outputSpatial);
  return s;
}

}  // namespace collage
