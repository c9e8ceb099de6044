// Internal to the native backend's lowering (native_lowering.h): the
// GroupCompiler and what it builds a pass with, shared by
//
//   native_lowering.cc      the driver: buffers, which values are
//                           materialised, the passes and steps, the kernel;
//                           instantiation (a value at coordinates), reshape
//                           maps and reductions as levels of the pass;
//   native_lowering_ops.cc  instNode: one handler per op family, found in
//                           a table by op name.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/native/native_pass.h"
#include "backends/native/native_steps.h"
#include "core/runtime/backend.h"

namespace collage::native::lowering {

// ---------------------------------------------------------------------------
// Coordinates of a value as functions of the pass's iteration coordinates.

struct Coord {
  Affine aff;
  // Gather: + idxMul * wrap(index[idxOff(p)]).
  bool ind = false;
  int32_t idxBuffer = -1;
  ElementType idxType = ElementType::Int64;
  Affine idxOff;
  int64_t idxDim = 0, idxMul = 1, idxCount = 0;
};
using CoordMap = std::vector<Coord>;


// Control flow of the lowering, caught by its driver. The two requests
// unwind an instantiation that recursed through every node between a
// pass's root and the value that cannot be inlined, to the one place that
// can act on them (buildPass refines the iteration space, compile
// materialises the value and starts over); a result type would have to be
// checked at every one of those calls.
struct Refusal {
  std::string reason;
};
struct MaterializeRequest {
  ValueId value;
};
struct NeedSplit {
  int dim;
  int64_t factor;
  ValueId fallback;  // materialised instead when the dim cannot be split
};
// A constant Pad read over a range that is part padding, part input: the
// pass's region is cut along root dim `origin` at `cuts` (relative to the
// region's start), so that in each piece the Pad reads either its input or
// its constant, never both (buildPass).
struct NeedCut {
  int origin;
  std::vector<int64_t> cuts;
  ValueId pad;  // materialised instead when the region cannot be cut
};

std::string label(const Node& node);

// The op families a pass computes, by ONNX name.
const std::map<std::string, Op>& unaryOps();
const std::map<std::string, Op>& binaryOps();
const std::set<std::string>& variadicOps();
const std::set<std::string>& viewOps();
const std::set<std::string>& reductionOps();

struct PDim {
  int64_t size;
  int origin;      // the root dim it comes from; -1 for a dim added for a reduction
  int64_t weight;  // its coefficient in that root coordinate
};

// A pass under construction: its iteration dims, and its program with
// common subexpressions shared (nodes, leaves and instantiations memoised).
struct PassBuilder {
  std::vector<PDim> dims;
  std::vector<int> inner;
  std::vector<int64_t> innerSizes;
  PassProgram prog;
  std::unordered_map<std::string, int32_t> nodeIds, leafIds, memo;
  ValueId defining = kNoValue;

  int32_t add(const IrNode& n);
  int32_t op(Op o, int32_t a, int32_t b = -1, int32_t c = -1, float p0 = 0, float p1 = 0);
  int32_t constant(float v);
  const IrNode& node(int32_t id) const { return prog.nodes[id]; }
  bool isConst(int32_t id, float v) const { return node(id).op == Op::Const && node(id).p0 == v; }
  int32_t leaf(Leaf l);
  // Which pass dims a coordinate map depends on.
  std::vector<bool> dependence(const CoordMap& m) const;
};

// The coordinates of an input of shape `in` broadcast to `out` (numpy
// rules): its size-1 dims read index 0.
CoordMap broadcastMap(const CoordMap& m, const Shape& out, const Shape& in);
// Size-1 dims of `shape` read index 0.
void normalize(CoordMap& m, const Shape& shape);

struct BufferDesc {
  enum Kind { Input, Output, Constant, Scratch } kind;
  int index = 0;
  Tensor tensor;  // Constant and Scratch
  TensorType type;
};

class NativeKernel : public Kernel {
 public:
  void run(const std::vector<const DLTensor*>& inputs, const std::vector<DLTensor*>& outputs) override;
  std::string describe() const;

  // Layout hand-over (backend.h). An elementwise pass computes each element
  // from the same element of its inputs, so it runs as well over
  // channels-last memory (the layout oneDNN's int8 convolutions keep): a
  // group of elementwise ops only offers it for each input and output of its
  // full shape, and the passes are compiled again for the ones switched,
  // iterating in channels-last order when the result is stored so.
  std::optional<NativeLayout> nativeOutputLayout(size_t output) const override;
  std::optional<NativeLayout> nativeInputLayout(size_t input) const override;
  void useNativeOutputLayout(size_t output) override;
  void useNativeInputLayout(size_t input) override;
  bool layoutAgnostic() const override { return elementwise_; }

  std::vector<BufferDesc> buffers_;
  BufferTable table_;
  std::vector<std::unique_ptr<Step>> steps_;
  size_t inputCount_ = 0, outputCount_ = 0;
  std::string label_;
  // For compiling again in another layout: the request (its graph lives
  // until the Session or measurement has switched the layouts), whether the
  // group is elementwise only, and the values in channels last so far.
  KernelRequest request_;
  int threads_ = 0;
  bool elementwise_ = false;
  std::set<ValueId> channelsLast_;  // as handed over (the pass may be compiled otherwise)

  // An input handed over in the other layout than the pass iterates in (the
  // outputs'): copied into `scratch` in the pass's layout by a tiled
  // transpose before each run. Read in place, element by element with the
  // stride of the channels, it made a ReLU between two oneDNN convolutions
  // 11x slower than in plain memory (20.6 ms against 1.8 ms, a 25 MiB
  // tensor), while the optimizer charged it its plain cost.
  struct LayoutConversion {
    size_t input = 0;
    bool toChannelsLast = false;  // else from channels last to plain
    int64_t images = 0, channels = 0, spatial = 0;
    size_t elementBytes = 0;
    std::vector<unsigned char> scratch;
  };
  std::vector<LayoutConversion> conversions_;

 private:
  std::optional<NativeLayout> channelsLastOffer(ValueId v) const;
  void switchToChannelsLast(ValueId v);
};

// Strides of `shape` ([N, C, spatial...]) stored channels last.
std::vector<int64_t> channelsLastStrides(const Shape& shape);

class GroupCompiler {
 public:
  GroupCompiler(const KernelRequest& request, int threads, std::set<ValueId> channelsLast = {})
      : req_(request), g_(*request.graph), threads_(threads), channelsLast_(std::move(channelsLast)) {}

  std::unique_ptr<NativeKernel> compile();

 private:
  const Shape& shapeOf(ValueId v) const { return g_.value(v).type.shape; }
  ElementType typeOf(ValueId v) const { return g_.value(v).type.elementType; }
  bool isMember(NodeId n) const { return n != kNoNode && req_.nodes.contains(n); }

  int32_t addBuffer(BufferDesc d) {
    buffers_.push_back(std::move(d));
    return static_cast<int32_t>(buffers_.size() - 1);
  }
  void checkMembers();
  void bindBuffers();
  void materialize(ValueId v);
  void build();
  void buildRoot(ValueId v);
  void buildPass(ValueId root, ValueId defining, ValueId storeValue, int axis, int64_t offset);
  // [begin, end) of each root dim: the part of the root one pass computes.
  using Region = std::vector<std::pair<int64_t, int64_t>>;
  void buildRegion(ValueId root, ValueId defining, ValueId storeValue, int axis, int64_t offset,
                   const Region& region);

  // Instantiation: the program node computing value v at coordinates m.
  int32_t inst(PassBuilder& pb, ValueId v, CoordMap m);
  int32_t instNode(PassBuilder& pb, NodeId n, size_t k, const CoordMap& m, ValueId v);
  int32_t leafFromMap(PassBuilder& pb, ValueId v, const CoordMap& m, const Shape& layout);
  CoordMap reshapeMap(PassBuilder& pb, const CoordMap& m, const Shape& out, const Shape& in,
                      ValueId input);
  int32_t reduce(PassBuilder& pb, Op kind, const Shape& inShape, const std::vector<bool>& reduced,
                 CoordMap kept, const std::function<int32_t(const CoordMap&)>& child, ValueId owner,
                 bool mean);

  // ---- instNode's handlers, one per op family (native_lowering_ops.cc).
  // Each gives the program node computing output `at.k` of `at.node` at
  // coordinates `at.m`.
  struct NodeAt {
    const Node& node;
    size_t k;           // which output of the node
    const CoordMap& m;  // the output's coordinates
    ValueId v;          // the output
  };
  using Handler = int32_t (GroupCompiler::*)(PassBuilder& pb, const NodeAt& at);
  static const std::unordered_map<std::string, Handler>& handlers();
  // Input i at the output's coordinates, broadcast (numpy rules) to its shape.
  CoordMap broadcastInput(const NodeAt& at, size_t i) const;
  int32_t arg(PassBuilder& pb, const NodeAt& at, size_t i);
  // Elementwise.
  int32_t instUnary(PassBuilder& pb, const NodeAt& at);
  int32_t instBinary(PassBuilder& pb, const NodeAt& at);
  int32_t instVariadic(PassBuilder& pb, const NodeAt& at);
  int32_t instWhere(PassBuilder& pb, const NodeAt& at);
  int32_t instCast(PassBuilder& pb, const NodeAt& at);
  int32_t instIdentity(PassBuilder& pb, const NodeAt& at);
  int32_t instDropout(PassBuilder& pb, const NodeAt& at);
  // QuantizeLinear and DequantizeLinear as float arithmetic.
  int32_t quantParam(PassBuilder& pb, const NodeAt& at, size_t i, const Shape& data);
  int32_t instQuantize(PassBuilder& pb, const NodeAt& at);
  int32_t instDequantize(PassBuilder& pb, const NodeAt& at);
  // Layout ops: index arithmetic on the coordinates.
  int32_t instTranspose(PassBuilder& pb, const NodeAt& at);
  int32_t instReshape(PassBuilder& pb, const NodeAt& at);
  int32_t instSlice(PassBuilder& pb, const NodeAt& at);
  int32_t instExpand(PassBuilder& pb, const NodeAt& at);
  int32_t instSplit(PassBuilder& pb, const NodeAt& at);
  int32_t instGather(PassBuilder& pb, const NodeAt& at);
  int32_t instConcat(PassBuilder& pb, const NodeAt& at);
  int32_t instPad(PassBuilder& pb, const NodeAt& at);
  // Reductions and the ops written as them.
  int32_t instReduce(PassBuilder& pb, const NodeAt& at);
  int32_t instSoftmax(PassBuilder& pb, const NodeAt& at);
  int32_t instNormalization(PassBuilder& pb, const NodeAt& at);
  int32_t instBatchNorm(PassBuilder& pb, const NodeAt& at);
  int32_t instGlobalPool(PassBuilder& pb, const NodeAt& at);

  const KernelRequest& req_;
  const Graph& g_;
  int threads_;
  std::set<ValueId> channelsLast_;  // kernel inputs and outputs stored channels last
  // The strides `v`'s buffer is read or written with, viewed as `layout`.
  std::vector<int64_t> bufferStrides(ValueId v, const Shape& layout) const;
  std::vector<NodeId> members_;
  std::map<NodeId, bool> inline_;
  std::vector<BufferDesc> buffers_;
  std::map<ValueId, int32_t> bufferOf_;
  std::set<ValueId> materialized_;
  std::vector<std::unique_ptr<Step>> steps_;
  std::set<NodeId> stepped_;
};

}  // namespace collage::native::lowering
