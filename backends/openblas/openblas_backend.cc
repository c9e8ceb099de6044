// The OpenBLAS backend (Debian's libopenblas, OpenMP build): Gemm, MatMul
// (batched and broadcast) and Conv (1D/2D/3D, grouped, dilated, strided,
// padded; im2col + sgemm, pointwise convs as a plain GEMM), each followed by
// an elementwise epilogue applied in one pass over the output.
//
// Lowering is generic over the group: its first node in topological order is
// the anchor; every later node is an epilogue step reading the values
// computed so far, constants and kernel inputs that broadcast to the anchor's
// output. Whatever does not fit that shape is refused with a reason naming
// the node, so the optimizer records the candidate as invalid.
#include <cblas.h>

#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "backends/openblas/openblas_epilogue.h"
#include "backends/openblas/openblas_kernels.h"
#include "core/runtime/backend.h"
#include "core/ops/conv_geometry.h"
#include "core/ops/op_helpers.h"
#include "core/ops/runtime_inputs.h"
#include "core/ir/threading.h"

namespace collage {

namespace openblas {
namespace {

// A reason to refuse, thrown inside the lowering and turned into a refusal.
struct Refusal {
  std::string reason;
};

[[noreturn]] void refuse(const Node& node, const std::string& why) {
  throw Refusal{nodeLabel(node) + why};
}

// Matrix dimensions and leading dimensions must fit cblas's 32-bit int.
void requireBlasInt(const Node& node, std::initializer_list<int64_t> values) {
  for (int64_t v : values)
    if (v > INT_MAX)
      refuse(node, "a matrix dimension of " + std::to_string(v) +
                       " exceeds OpenBLAS's 32-bit integer interface");
}

class Lowering {
 public:
  Lowering(const KernelRequest& request, int threads)
      : req_(request), g_(*request.graph), threads_(threads) {}

  std::unique_ptr<Kernel> lower() {
    members_ = req_.members();
    if (members_.empty()) throw Refusal{"the group is empty"};
    if (req_.outputs.empty()) throw Refusal{"the group " + req_.toString() + " has no outputs"};
    // The epilogue bakes its parameters (Clip's bounds) in at compile time.
    if (std::string why = runtimeInputRefusal(g_, members_, "OpenBLAS"); !why.empty())
      throw Refusal{why};
    for (NodeId n : members_) checkTypes(g_.node(n));

    const Node& anchor = g_.node(members_.front());
    if (anchor.outputs.empty() || anchor.outputs[0] == kNoValue)
      refuse(anchor, "the anchor has no output");
    shape_ = g_.value(anchor.outputs[0]).type.shape;
    epilogue_ = Epilogue(shape_);
    registerOf_[anchor.outputs[0]] = 0;

    // The anchor's own parameters; Gemm's C and Conv's bias become the first
    // epilogue step, so their broadcast costs nothing extra.
    std::optional<GemmParams> gemm;
    std::optional<MatMulParams> matmul;
    std::optional<ConvParams> conv;
    if (anchor.op == "Gemm")
      gemm = lowerGemm(anchor);
    else if (anchor.op == "MatMul")
      matmul = lowerMatMul(anchor);
    else if (anchor.op == "Conv")
      conv = lowerConv(anchor);
    else
      refuse(anchor,
             "OpenBLAS kernels start with Gemm, MatMul or Conv; this group's first node is a " +
                 anchor.op);

    for (size_t i = 1; i < members_.size(); ++i) lowerEpilogueNode(g_.node(members_[i]));

    for (size_t i = 0; i < req_.outputs.size(); ++i) {
      auto it = registerOf_.find(req_.outputs[i]);
      if (it == registerOf_.end())
        throw Refusal{"output '" + g_.value(req_.outputs[i]).name +
                      "' is not computed by the group"};
      if (epilogue_.outputOf(it->second) >= 0)
        throw Refusal{"output '" + g_.value(req_.outputs[i]).name + "' is listed twice"};
      epilogue_.markOutput(it->second, static_cast<int>(i));
    }
    // The anchor writes into one of the outputs, which the epilogue then
    // reads and overwrites tile by tile: its own output if it is one, else
    // the last step's, so that a plain chain runs in place.
    int anchorOutput = epilogue_.outputOf(0);
    if (anchorOutput < 0) anchorOutput = epilogue_.outputOf(epilogue_.numRegisters() - 1);
    if (anchorOutput < 0) anchorOutput = 0;

    std::string why;
    if (!epilogue_.finalize(threads_, &why)) throw Refusal{why};

    if (gemm)
      return std::make_unique<GemmKernel>(std::move(*gemm), std::move(epilogue_), anchorOutput,
                                          threads_);
    if (matmul)
      return std::make_unique<MatMulKernel>(std::move(*matmul), std::move(epilogue_), anchorOutput,
                                            threads_);
    return std::make_unique<ConvKernel>(std::move(*conv), std::move(epilogue_), anchorOutput,
                                        threads_);
  }

 private:
  void checkTypes(const Node& node) {
    auto check = [&](ValueId v) {
      if (v == kNoValue) return;
      const TensorType& t = g_.value(v).type;
      if (t.elementType != ElementType::Float32)
        refuse(node, "'" + g_.value(v).name + "' is " +
                         std::string(elementTypeName(t.elementType)) +
                         "; OpenBLAS kernels compute float32 only");
    };
    for (ValueId v : node.inputs) check(v);
    for (ValueId v : node.outputs) check(v);
  }

  const Shape& shapeOf(ValueId v) const { return g_.value(v).type.shape; }

  // Where the kernel finds a value read from outside the group.
  OperandSource sourceOf(const Node& node, ValueId v) const {
    const Value& val = g_.value(v);
    if (val.isConstant()) return OperandSource::ofConstant(val.constant->clone());
    for (size_t i = 0; i < req_.inputs.size(); ++i)
      if (req_.inputs[i] == v) return OperandSource::ofInput(static_cast<int>(i));
    refuse(node, "input '" + val.name + "' is neither a constant nor an input of the group");
  }

  int operandFor(const Node& node, OperandSource source, const Shape& shape,
                 const std::string& what) {
    const int k = epilogue_.addOperand(std::move(source), shape);
    if (k < 0)
      refuse(node, what + " " + shapeToString(shape) + " does not broadcast to the output " +
                       shapeToString(shape_));
    return k;
  }

  // ---- anchors ----

  GemmParams lowerGemm(const Node& node) {
    if (node.inputs.size() < 2 || node.inputs[0] == kNoValue || node.inputs[1] == kNoValue)
      refuse(node, "needs inputs A and B");
    const Shape& a = shapeOf(node.inputs[0]);
    const Shape& b = shapeOf(node.inputs[1]);
    if (a.size() != 2 || b.size() != 2) refuse(node, "A and B must be matrices");
    GemmParams p;
    p.transA = node.attrs.getInt("transA", 0) != 0;
    p.transB = node.attrs.getInt("transB", 0) != 0;
    p.alpha = node.attrs.getFloat("alpha", 1.0f);
    const float beta = node.attrs.getFloat("beta", 1.0f);
    p.M = p.transA ? a[1] : a[0];
    p.K = p.transA ? a[0] : a[1];
    p.N = p.transB ? b[0] : b[1];
    if ((p.transB ? b[1] : b[0]) != p.K) refuse(node, "inner dimensions of op(A) and op(B) differ");
    if (shape_ != Shape{p.M, p.N})
      refuse(node, "output shape " + shapeToString(shape_) + " is not MxN");
    p.lda = a[1];
    p.ldb = b[1];
    requireBlasInt(node, {p.M, p.N, p.K, p.lda, p.ldb});
    p.a = sourceOf(node, node.inputs[0]);
    p.b = sourceOf(node, node.inputs[1]);

    const bool hasC = node.inputs.size() > 2 && node.inputs[2] != kNoValue;
    if (hasC && beta != 0.0f) {
      const ValueId c = node.inputs[2];
      const Value& cv = g_.value(c);
      if (cv.isConstant()) {
        // beta * C once, at compile time.
        Tensor scaled = cv.constant->clone();
        float* d = scaled.data<float>();
        for (int64_t i = 0; i < scaled.numElements(); ++i) d[i] *= beta;
        const int k =
            operandFor(node, OperandSource::ofConstant(std::move(scaled)), cv.type.shape, "C");
        epilogue_.addStep(EpilogueOp::Add, {Epilogue::Arg::reg(0), Epilogue::Arg::operand(k)});
      } else {
        const int k = operandFor(node, sourceOf(node, c), cv.type.shape, "C");
        epilogue_.addStep(beta == 1.0f ? EpilogueOp::Add : EpilogueOp::AddScaled,
                          {Epilogue::Arg::reg(0), Epilogue::Arg::operand(k)}, beta);
      }
      registerOf_[node.outputs[0]] = epilogue_.numRegisters() - 1;
    }
    return p;
  }

  MatMulParams lowerMatMul(const Node& node) {
    if (node.inputs.size() != 2 || node.inputs[0] == kNoValue || node.inputs[1] == kNoValue)
      refuse(node, "needs inputs A and B");
    const Shape& a = shapeOf(node.inputs[0]);
    const Shape& b = shapeOf(node.inputs[1]);
    if (a.empty() || b.empty()) refuse(node, "operands must have rank >= 1");
    MatMulParams p;
    p.M = a.size() >= 2 ? a[a.size() - 2] : 1;
    p.K = a.back();
    p.N = b.size() >= 2 ? b.back() : 1;
    const int64_t kb = b.size() >= 2 ? b[b.size() - 2] : b[0];
    if (kb != p.K)
      refuse(node, "inner dimensions differ: " + shapeToString(a) + " x " + shapeToString(b));

    // Batch dimensions, right-aligned and broadcast.
    Shape batchA(a.begin(), a.end() - std::min<size_t>(a.size(), 2));
    Shape batchB(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
    const size_t rank = std::max(batchA.size(), batchB.size());
    batchA.insert(batchA.begin(), rank - batchA.size(), 1);
    batchB.insert(batchB.begin(), rank - batchB.size(), 1);
    Shape batch(rank);
    for (size_t i = 0; i < rank; ++i) {
      if (batchA[i] != batchB[i] && batchA[i] != 1 && batchB[i] != 1)
        refuse(node, "batch dimensions of " + shapeToString(a) + " and " + shapeToString(b) +
                         " do not broadcast");
      batch[i] = batchA[i] == 1 ? batchB[i] : batchA[i];
    }
    const int64_t count = numElements(batch);
    if (numElements(shape_) != count * p.M * p.N)
      refuse(node, "output shape " + shapeToString(shape_) + " does not match the operands");
    requireBlasInt(node, {p.M, p.N, p.K});

    if (numElements(batchB) == 1) {
      // One weight matrix for every row of A (a Linear layer): one sgemm.
      p.fold = true;
      p.foldedRows = numElements(batchA) * p.M;
      requireBlasInt(node, {p.foldedRows});
    } else {
      const std::vector<int64_t> stridesA = stridesOf(batchA), stridesB = stridesOf(batchB);
      std::vector<int64_t> index(rank, 0);
      for (int64_t i = 0; i < count; ++i) {
        int64_t ia = 0, ib = 0;
        for (size_t d = 0; d < rank; ++d) {
          if (batchA[d] != 1) ia += index[d] * stridesA[d];
          if (batchB[d] != 1) ib += index[d] * stridesB[d];
        }
        p.matrixA.push_back(ia);
        p.matrixB.push_back(ib);
        for (size_t d = rank; d-- > 0;) {
          if (++index[d] < batch[d]) break;
          index[d] = 0;
        }
      }
      p.parallelBatch = spreadOverThreads(count);
    }
    p.a = sourceOf(node, node.inputs[0]);
    p.b = sourceOf(node, node.inputs[1]);
    return p;
  }

  // Whether `items` independent products are better run one per thread
  // (single-threaded sgemm each) than one after the other with threaded
  // sgemm: when there are enough of them to keep every thread equally busy.
  bool spreadOverThreads(int64_t items) const {
    return threads_ > 1 && items >= threads_ && (items % threads_ == 0 || items >= 4 * threads_);
  }

  ConvParams lowerConv(const Node& node) {
    if (node.inputs.size() < 2 || node.inputs[0] == kNoValue || node.inputs[1] == kNoValue)
      refuse(node, "needs inputs X and W");
    const Shape& x = shapeOf(node.inputs[0]);
    const Shape& w = shapeOf(node.inputs[1]);
    if (x.size() < 3 || x.size() > 5)
      refuse(node, "input " + shapeToString(x) + ": OpenBLAS convs have 1 to 3 spatial dimensions");
    ConvGeometry geo;
    try {
      geo = ConvGeometry::conv(node, x, w);
    } catch (const Error& e) {
      throw Refusal{e.what()};
    }
    if (geo.outputShape() != shape_)
      refuse(node, "output shape " + shapeToString(shape_) + " differs from the geometry's " +
                       shapeToString(geo.outputShape()));
    ConvParams p;
    p.pointwise = geo.isPointwise();
    p.geometry = geo.expandedTo(3);
    p.inPerGroup = geo.inChannels / geo.group;
    p.outPerGroup = geo.outChannels / geo.group;
    p.kernelSize = geo.kernelSize();
    p.inSpatial = geo.inputSpatialSize();
    p.outSpatial = geo.outputSpatialSize();
    requireBlasInt(node, {p.outPerGroup, p.outSpatial, p.inPerGroup * p.kernelSize});
    p.parallelItems = spreadOverThreads(geo.batch * geo.group);
    p.x = sourceOf(node, node.inputs[0]);
    p.w = sourceOf(node, node.inputs[1]);

    if (node.inputs.size() > 2 && node.inputs[2] != kNoValue) {
      // Bias [M] read as [M, 1, ..., 1] against the output [N, M, spatial...].
      Shape biasShape(1 + geo.spatialRank(), 1);
      biasShape[0] = geo.outChannels;
      if (numElements(shapeOf(node.inputs[2])) != geo.outChannels)
        refuse(node, "bias " + shapeToString(shapeOf(node.inputs[2])) + " must have " +
                         std::to_string(geo.outChannels) + " values");
      const int k = operandFor(node, sourceOf(node, node.inputs[2]), biasShape, "bias");
      epilogue_.addStep(EpilogueOp::Add, {Epilogue::Arg::reg(0), Epilogue::Arg::operand(k)});
      registerOf_[node.outputs[0]] = epilogue_.numRegisters() - 1;
    }
    return p;
  }

  // ---- epilogue ----

  void lowerEpilogueNode(const Node& node) {
    int produced = 0;
    for (ValueId v : node.outputs) produced += v != kNoValue;
    if (produced != 1 || node.outputs[0] == kNoValue)
      refuse(node, "an epilogue node must have exactly one output");
    const ValueId out = node.outputs[0];
    if (shapeOf(out) != shape_)
      refuse(node, "its result " + g_.value(out).type.toString() +
                       " is not the anchor's output shape " + shapeToString(shape_) +
                       "; an OpenBLAS epilogue is elementwise over that output");

    static const std::map<std::string, EpilogueOp> kBinary = {{"Add", EpilogueOp::Add},
                                                              {"Sub", EpilogueOp::Sub},
                                                              {"Mul", EpilogueOp::Mul},
                                                              {"Div", EpilogueOp::Div}};
    static const std::map<std::string, EpilogueOp> kUnary = {
        {"Relu", EpilogueOp::Relu},
        {"LeakyRelu", EpilogueOp::LeakyRelu},
        {"Clip", EpilogueOp::Clip},
        {"Sigmoid", EpilogueOp::Sigmoid},
        {"Tanh", EpilogueOp::Tanh},
        {"HardSwish", EpilogueOp::HardSwish},
        {"HardSigmoid", EpilogueOp::HardSigmoid},
        {"Elu", EpilogueOp::Elu},
        {"Erf", EpilogueOp::Erf},
        {"Gelu", EpilogueOp::Gelu},
        {"Identity", EpilogueOp::Identity},
    };
    EpilogueOp op;
    size_t arity;
    if (auto it = kBinary.find(node.op); it != kBinary.end()) {
      op = it->second;
      arity = 2;
    } else if (auto jt = kUnary.find(node.op); jt != kUnary.end()) {
      op = jt->second;
      arity = 1;
    } else {
      refuse(node,
             "not an elementwise op that OpenBLAS kernels can apply to a product's output "
             "(they take Add, Sub, Mul, Div, Relu, LeakyRelu, Clip, Sigmoid, Tanh, HardSwish, "
             "HardSigmoid, Elu, Erf, Gelu, Identity)");
    }
    if (node.inputs.size() != arity) refuse(node, "expects " + std::to_string(arity) + " inputs");

    float p0 = 0.0f, p1 = 0.0f;
    const float inf = std::numeric_limits<float>::infinity();
    switch (op) {
      case EpilogueOp::LeakyRelu:
        p0 = node.attrs.getFloat("alpha", 0.01f);
        break;
      case EpilogueOp::Elu:
        p0 = node.attrs.getFloat("alpha", 1.0f);
        break;
      case EpilogueOp::Clip:
        p0 = node.attrs.getFloat("min", -inf);
        p1 = node.attrs.getFloat("max", inf);
        break;
      case EpilogueOp::HardSigmoid:
        p0 = node.attrs.getFloat("alpha", 0.2f);
        p1 = node.attrs.getFloat("beta", 0.5f);
        break;
      case EpilogueOp::Gelu: {
        const std::string mode = node.attrs.getString("approximate", "none");
        if (mode == "tanh")
          op = EpilogueOp::GeluTanh;
        else if (mode != "none")
          refuse(node, "approximate = '" + mode + "' is not a Gelu form");
        break;
      }
      default:
        break;
    }

    std::vector<Epilogue::Arg> args;
    for (ValueId v : node.inputs) {
      if (v == kNoValue) refuse(node, "an epilogue input is absent");
      if (auto it = registerOf_.find(v); it != registerOf_.end()) {
        args.push_back(Epilogue::Arg::reg(it->second));
      } else {
        const Value& val = g_.value(v);
        if (val.producer != kNoNode && req_.nodes.contains(val.producer))
          refuse(node, "reads '" + val.name +
                           "', which the group computes but not as an elementwise value");
        args.push_back(Epilogue::Arg::operand(
            operandFor(node, sourceOf(node, v), val.type.shape, "operand '" + val.name + "'")));
      }
    }
    registerOf_[out] = epilogue_.addStep(op, std::move(args), p0, p1);
  }

  const KernelRequest& req_;
  const Graph& g_;
  int threads_;
  std::vector<NodeId> members_;
  Shape shape_;
  Epilogue epilogue_;
  std::map<ValueId, int> registerOf_;
};

// Whether the lowering accepts a group (on one thread; the kernel is dropped).
bool lowers(const KernelRequest& request) {
  try {
    Lowering(request, 1).lower();
    return true;
  } catch (const Refusal&) {
    return false;
  } catch (const Error&) {
    return false;
  }
}

// What OpenBLAS runs, as a pattern rule the generator expands on any graph:
// Gemm, MatMul or Conv, then any elementwise epilogue over its output (a
// bias, a per-channel scale and shift, an activation written as one op or
// as several, a residual). The rule asks the lowering that compile() uses,
// so it generates exactly the groups that compile.
class OpenBlasPatternRule final : public PatternRule {
 public:
  std::string name() const override { return "openblas"; }
  bool opRule(const Graph& graph, NodeId node) const override {
    const std::string& op = graph.node(node).op;
    return (op == "Gemm" || op == "MatMul" || op == "Conv") &&
           lowers(KernelRequest::of(graph, NodeSet::of(graph.numNodes(), {node})));
  }
  bool memberRule(const Graph& graph, NodeId node) const override {
    const OpKind kind = registryOpKind(graph.node(node).op);
    return kind == OpKind::ElemWise || kind == OpKind::Broadcast;
  }
  std::optional<std::string> fusionRule(const Graph& graph, const NodeSet& group, NodeId,
                                        NodeId) const override {
    if (!lowers(KernelRequest::of(graph, group))) return std::nullopt;
    return std::string("epilogue");
  }
};

class OpenBlasBackend : public Backend {
 public:
  std::shared_ptr<const PatternRule> codeRule() const override { return rule_; }

  std::string name() const override { return "openblas"; }
  // Part of the measurement database's key: the library's configuration plus
  // the revision of our epilogue, bumped when its speed changes so that old
  // measurements are not reused (2: vectorised erf/tanh/sigmoid).
  std::string version() const override {
    std::string config = openblas_get_config();
    while (!config.empty() && config.back() == ' ') config.pop_back();
    return config + " (epilogue 2)";
  }
  Device device() const override { return Device{DeviceType::CPU, 0}; }
  BackendKind kind() const override { return BackendKind::OpLibrary; }

  CompileResult compile(const KernelRequest& request) override {
    if (request.graph == nullptr) return CompileResult::refuse("the request has no graph");
    const int threads = threadCount();
    openblas_set_num_threads(threads);
    try {
      return CompileResult::ok(Lowering(request, threads).lower());
    } catch (const Refusal& r) {
      return CompileResult::refuse(r.reason);
    } catch (const Error& e) {
      // A malformed attribute or shape: the group cannot run here.
      return CompileResult::refuse(e.what());
    }
  }

 private:
  std::shared_ptr<const PatternRule> rule_ = std::make_shared<OpenBlasPatternRule>();
};

}  // namespace
}  // namespace openblas

std::unique_ptr<Backend> createOpenBlasBackend() {
  return std::make_unique<openblas::OpenBlasBackend>();
}

}  // namespace collage
