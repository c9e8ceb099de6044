#include "backends/cudnn/cudnn_plan.h"

#include <algorithm>

#include "core/ir/sub_graph.h"
#include "core/ops/runtime_inputs.h"

namespace collage::cudnn {

namespace {

CudnnPlan refuse(std::string why) {
  CudnnPlan p;
  p.refusal = std::move(why);
  return p;
}

bool floatStatic(const Graph& g, ValueId v) {
  if (v == kNoValue) return false;
  const TensorType& t = g.value(v).type;
  return t.elementType == ElementType::Float32 &&
         std::all_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d >= 0; });
}

// NC + spatial, with a leading spatial 1 for 1-D data (cuDNN wants >= 4 dims).
std::vector<int> cudnnDims(const Shape& s) {
  std::vector<int> d(s.begin(), s.end());
  if (d.size() == 3) d.insert(d.begin() + 2, 1);
  return d;
}

// A per-spatial-dim attribute, widened for 1-D data with `fill` in front.
std::vector<int> spatial(const std::vector<int64_t>& v, size_t rank, int fill) {
  std::vector<int> out(v.begin(), v.end());
  if (rank == 1) out.insert(out.begin(), fill);
  return out;
}

// Symmetric pads per spatial dim, or a refusal.
std::string symmetricPads(const Node& n, size_t rank, std::vector<int>& out) {
  if (n.attrs.getString("auto_pad", "NOTSET") != "NOTSET")
    return "auto_pad " + n.attrs.getString("auto_pad");
  std::vector<int64_t> pads = n.attrs.getInts("pads", std::vector<int64_t>(2 * rank, 0));
  if (pads.size() != 2 * rank) return "pads of the wrong length";
  std::vector<int64_t> begin(pads.begin(), pads.begin() + static_cast<long>(rank));
  for (size_t d = 0; d < rank; ++d)
    if (pads[d] != pads[d + rank]) return "asymmetric pads (cuDNN pads both sides alike)";
  out = spatial(begin, rank, 0);
  return "";
}

// A constant of C values broadcasting over [N, C, spatial...]: [C], [C,1,..], [1,C,1,..].
bool perChannel(const Graph& g, ValueId v, int64_t channels, size_t outRank) {
  if (!g.value(v).isConstant() || !floatStatic(g, v)) return false;
  const Shape& s = g.value(v).type.shape;
  if (s.empty() || s.size() > outRank) return false;
  const size_t channelAxis = 1 - (outRank - s.size());  // where axis 1 of the output lands
  if (outRank - s.size() > 1) return false;
  for (size_t d = 0; d < s.size(); ++d)
    if (s[d] != (d == channelAxis ? channels : 1)) return false;
  return true;
}

CudnnPlan planConv(const Graph& g, const NodeSet& nodes, const Node& conv) {
  CudnnPlan p;
  p.op = CudnnOp::Conv;
  p.x = conv.inputs[0];
  p.w = conv.inputs.size() > 1 ? conv.inputs[1] : kNoValue;
  if (!floatStatic(g, p.x) || !floatStatic(g, p.w) || !g.value(p.w).isConstant())
    return refuse("Conv needs float32 data and constant float32 weights");
  const Shape& xs = g.value(p.x).type.shape;
  if (xs.size() < 3 || xs.size() > 5)
    return refuse("Conv of " + std::to_string(xs.size() - 2) + " spatial dimensions");
  const size_t rank = xs.size() - 2;
  if (std::string why = symmetricPads(conv, rank, p.pads); !why.empty()) return refuse(why);
  p.strides = spatial(conv.attrs.getInts("strides", std::vector<int64_t>(rank, 1)), rank, 1);
  p.dilations = spatial(conv.attrs.getInts("dilations", std::vector<int64_t>(rank, 1)), rank, 1);
  p.groups = static_cast<int>(conv.attrs.getInt("group", 1));
  p.xDims = cudnnDims(xs);
  p.wDims = cudnnDims(g.value(p.w).type.shape);
  p.output = conv.outputs[0];
  p.yDims = cudnnDims(g.value(p.output).type.shape);
  const int64_t channels = g.value(p.output).type.shape[1];
  const size_t outRank = xs.size();
  if (conv.inputs.size() > 2 && conv.inputs[2] != kNoValue) {
    if (!g.value(conv.inputs[2]).isConstant()) return refuse("Conv bias that is not a constant");
    p.bias = conv.inputs[2];
  }
  // The epilogue: [Add(bias)] [Add(z)] [Relu], each at most once, in this order.
  size_t used = 1;
  for (NodeId next = soleConsumerIn(g, nodes, p.output); next != kNoNode;
       next = soleConsumerIn(g, nodes, p.output)) {
    const Node& n = g.node(next);
    if (n.op == "Relu" && !p.relu) {
      p.relu = true;
    } else if (n.op == "Add" && !p.relu && p.z == kNoValue) {
      const ValueId other = n.inputs[0] == p.output ? n.inputs[1] : n.inputs[0];
      if (p.bias == kNoValue && perChannel(g, other, channels, outRank)) {
        p.bias = other;
      } else if (floatStatic(g, other) &&
                 g.value(other).type.shape == g.value(p.output).type.shape) {
        p.z = other;  // the residual: a tensor of the output's shape
      } else {
        return refuse(
            "Add that is neither a per-channel bias nor a residual of the output's shape");
      }
    } else {
      return refuse(n.op + " after the convolution is not in cuDNN's fused form");
    }
    p.output = n.outputs[0];
    ++used;
  }
  if (used != static_cast<size_t>(nodes.count()))
    return refuse("nodes beyond convolution, bias, residual and ReLU");
  return p;
}

CudnnPlan planPool(const Graph& g, const Node& n) {
  CudnnPlan p;
  p.x = n.inputs[0];
  p.output = n.outputs[0];
  if (!floatStatic(g, p.x)) return refuse(n.op + " of non-float32 data");
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (n.outputs[k] != kNoValue && !g.value(n.outputs[k]).consumers.empty())
      return refuse("MaxPool's Indices output");
  const Shape& xs = g.value(p.x).type.shape;
  if (xs.size() < 3 || xs.size() > 5) return refuse(n.op + " of unsupported rank");
  const size_t rank = xs.size() - 2;
  p.xDims = cudnnDims(xs);
  p.yDims = cudnnDims(g.value(p.output).type.shape);
  const bool global = n.op.starts_with("Global");
  p.op = (n.op == "MaxPool" || n.op == "GlobalMaxPool") ? CudnnOp::MaxPool : CudnnOp::AveragePool;
  if (global) {
    p.window = std::vector<int>(p.xDims.begin() + 2, p.xDims.end());
    p.pads.assign(p.window.size(), 0);
    p.strides.assign(p.window.size(), 1);
    return p;
  }
  if (n.attrs.getInt("ceil_mode", 0) != 0) return refuse("ceil_mode");
  const auto dil = n.attrs.getInts("dilations", {});
  if (std::any_of(dil.begin(), dil.end(), [](int64_t d) { return d != 1; }))
    return refuse("dilated pooling");
  if (n.attrs.getInt("storage_order", 0) != 0) return refuse("storage_order");
  if (std::string why = symmetricPads(n, rank, p.pads); !why.empty()) return refuse(why);
  p.window = spatial(n.attrs.getInts("kernel_shape"), rank, 1);
  p.strides = spatial(n.attrs.getInts("strides", std::vector<int64_t>(rank, 1)), rank, 1);
  p.countIncludePad = n.attrs.getInt("count_include_pad", 0) != 0;
  return p;
}

CudnnPlan planSoftmax(const Graph& g, const Node& n) {
  CudnnPlan p;
  p.op = n.op == "Softmax" ? CudnnOp::Softmax : CudnnOp::LogSoftmax;
  p.x = n.inputs[0];
  p.output = n.outputs[0];
  if (!floatStatic(g, p.x)) return refuse(n.op + " of non-float32 data");
  const Shape& s = g.value(p.x).type.shape;
  int64_t axis = n.attrs.getInt("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(s.size());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < axis) outer *= s[static_cast<size_t>(d)];
    if (d > axis) inner *= s[static_cast<size_t>(d)];
  }
  // cuDNN's channel mode: softmax over C of [N, C, H, W] at each (n, h, w).
  p.xDims = {static_cast<int>(outer), static_cast<int>(s[static_cast<size_t>(axis)]),
             static_cast<int>(inner), 1};
  p.yDims = p.xDims;
  return p;
}

CudnnPlan planBatchNorm(const Graph& g, const Node& n) {
  CudnnPlan p;
  p.op = CudnnOp::BatchNorm;
  p.x = n.inputs[0];
  p.output = n.outputs[0];
  if (!floatStatic(g, p.x)) return refuse("BatchNormalization of non-float32 data");
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (n.outputs[k] != kNoValue && !g.value(n.outputs[k]).consumers.empty())
      return refuse("BatchNormalization in training mode");
  if (n.inputs.size() != 5) return refuse("BatchNormalization without its four constants");
  for (size_t k = 1; k < 5; ++k)
    if (!g.value(n.inputs[k]).isConstant() || !floatStatic(g, n.inputs[k]))
      return refuse("BatchNormalization whose statistics are not float32 constants");
  const Shape& s = g.value(p.x).type.shape;
  if (s.size() < 3 || s.size() > 5) return refuse("BatchNormalization of unsupported rank");
  p.xDims = cudnnDims(s);
  p.yDims = p.xDims;
  p.scale = n.inputs[1];
  p.shift = n.inputs[2];
  p.mean = n.inputs[3];
  p.var = n.inputs[4];
  p.epsilon = n.attrs.getFloat("epsilon", 1e-5f);
  return p;
}

std::string dims(const std::vector<int>& d) {
  std::string s;
  for (int v : d) s += (s.empty() ? "" : "x") + std::to_string(v);
  return s;
}

}  // namespace

bool isConvEpilogueOp(const std::string& op) { return op == "Add" || op == "Relu"; }

std::string CudnnPlan::toString() const {
  if (!refusal.empty()) return "refused: " + refusal;
  switch (op) {
    case CudnnOp::Conv: {
      std::string s = "conv" + std::to_string(xDims.size() - 2) + "d " + dims(xDims) + " k" +
                      dims(std::vector<int>(wDims.begin() + 2, wDims.end())) + " s" +
                      dims(strides) + " g" + std::to_string(groups);
      if (bias != kNoValue) s += " bias";
      if (z != kNoValue) s += " residual";
      if (relu) s += " relu";
      return s;
    }
    case CudnnOp::MaxPool:
      return "maxpool " + dims(xDims) + " k" + dims(window);
    case CudnnOp::AveragePool:
      return "avgpool " + dims(xDims) + " k" + dims(window);
    case CudnnOp::Softmax:
      return "softmax " + dims(xDims);
    case CudnnOp::LogSoftmax:
      return "logsoftmax " + dims(xDims);
    case CudnnOp::BatchNorm:
      return "batchnorm " + dims(xDims);
  }
  return "?";
}

CudnnPlan planCudnn(const Graph& g, const NodeSet& nodes) {
  const std::vector<NodeId> members = nodes.members();
  if (members.empty()) return refuse("empty group");
  // Descriptors (pads, Clip's bounds) are built from constants at plan time.
  if (std::string why = runtimeInputRefusal(g, members, "cuDNN"); !why.empty()) return refuse(why);
  const Node& first = g.node(members.front());
  if (first.op == "Conv") return planConv(g, nodes, first);
  if (members.size() != 1) return refuse("only a convolution fuses with what follows it");
  if (first.op == "MaxPool" || first.op == "AveragePool" || first.op == "GlobalAveragePool" ||
      first.op == "GlobalMaxPool")
    return planPool(g, first);
  if (first.op == "Softmax" || first.op == "LogSoftmax") return planSoftmax(g, first);
  if (first.op == "BatchNormalization") return planBatchNorm(g, first);
  return refuse("op " + first.op + " is not one cuDNN runs here");
}

}  // namespace collage::cudnn
