// The cuDNN backend: convolutions with bias, residual and ReLU fused,
// pooling, softmax and batch normalisation (cudnn_plan.h), each one call of
// cuDNN 9's descriptor API (the "legacy" API, still shipped and documented
// in cuDNN 9, deprecated in favour of the graph API; cudnn_frontend, the
// graph API's C++ wrapper, is not available here).
#include <cudnn.h>

#include <memory>
#include <vector>

#include "backends/cuda_runtime/cuda_device.h"
#include "backends/cuda_runtime/cuda_device_runtime.h"
#include "backends/cuda_runtime/cuda_status.h"
#include "backends/cuda_runtime/device_kernel.h"
#include "backends/cudnn/cudnn_plan.h"
#include "core/patterns/pattern_rule.h"

namespace collage {

// The libraries it calls, checked before the device (backend_list.cc).
std::string cudnnUnavailableReason() {
  return cuda::unavailableReason({cuda::Library::Runtime, cuda::Library::Dnn});
}

namespace {

using cuda::cudart;
using cuda::cudnn;

using cuda::check;
using cudnn::CudnnOp;
using cudnn::CudnnPlan;

// One cuDNN handle per process (creating one needs the device).
cudnnHandle_t handle() {
  static cudnnHandle_t h = [] {
    cudnnHandle_t created = nullptr;
    check(cudnn().cudnnCreate(&created), "cudnnCreate");
    return created;
  }();
  return h;
}

std::vector<int> packedStrides(const std::vector<int>& dims) {
  std::vector<int> s(dims.size(), 1);
  for (int d = static_cast<int>(dims.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * dims[d + 1];
  return s;
}

// Owning wrappers of the descriptors a kernel keeps between runs.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  explicit TensorDesc(const std::vector<int>& dims) {
    check(cudnn().cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
    const std::vector<int> strides = packedStrides(dims);
    check(cudnn().cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, static_cast<int>(dims.size()),
                                             dims.data(), strides.data()),
          "cudnnSetTensorNdDescriptor");
  }
  ~TensorDesc() { cudnn().cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

// Where an operand comes from at run time: a kernel input or an uploaded constant.
struct Operand {
  int input = -1;
  cuda::DeviceBuffer constant;
  const void* resolve(const std::vector<const void*>& in) const {
    return input >= 0 ? in[static_cast<size_t>(input)] : constant.data();
  }
  static Operand of(const KernelRequest& r, ValueId v) {
    Operand o;
    for (size_t i = 0; i < r.inputs.size(); ++i)
      if (r.inputs[i] == v) o.input = static_cast<int>(i);
    if (o.input < 0) {
      COLLAGE_CHECK(r.graph->value(v).isConstant(), "cuDNN operand neither input nor constant");
      o.constant = cuda::DeviceBuffer::upload(*r.graph->value(v).constant);
    }
    return o;
  }
};

class ConvKernel : public cuda::DeviceKernel {
 public:
  ConvKernel(const KernelRequest& r, const CudnnPlan& p)
      : x_(p.xDims), y_(p.yDims), bias_(biasDims(p)) {
    xIn_ = Operand::of(r, p.x);
    w_ = Operand::of(r, p.w);
    if (p.bias != kNoValue) {
      b_ = Operand::of(r, p.bias);
    } else {  // the fused call always adds a bias: zeros
      b_.constant = cuda::DeviceBuffer(static_cast<size_t>(p.yDims[1]) * sizeof(float));
      check(cudart().cudaMemset(b_.constant.data(), 0, b_.constant.bytes()),
            "cudaMemset(zero bias)");
    }
    if (p.z != kNoValue) z_ = Operand::of(r, p.z);
    hasZ_ = p.z != kNoValue;
    check(cudnn().cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
    check(cudnn().cudnnSetFilterNdDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                             static_cast<int>(p.wDims.size()), p.wDims.data()),
          "cudnnSetFilterNdDescriptor");
    check(cudnn().cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    check(cudnn().cudnnSetConvolutionNdDescriptor(
              conv, static_cast<int>(p.pads.size()), p.pads.data(), p.strides.data(),
              p.dilations.data(), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "cudnnSetConvolutionNdDescriptor");
    check(cudnn().cudnnSetConvolutionGroupCount(conv, p.groups), "cudnnSetConvolutionGroupCount");
    // FP32 only: no TF32 tensor-core math behind the caller's back.
    check(cudnn().cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
    check(cudnn().cudnnCreateActivationDescriptor(&act), "cudnnCreateActivationDescriptor");
    check(cudnn().cudnnSetActivationDescriptor(
              act, p.relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY, CUDNN_PROPAGATE_NAN,
              0.0),
          "cudnnSetActivationDescriptor");
    if (p.relu) {
      algo_ = fastestAlgorithm();
    } else {
      // The fused call takes an identity activation with this algorithm only.
      algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    }
    size_t bytes = 0;
    check(cudnn().cudnnGetConvolutionForwardWorkspaceSize(handle(), x_.d, w, conv, y_.d, algo_,
                                                          &bytes),
          "cudnnGetConvolutionForwardWorkspaceSize");
    workspace_ = cuda::DeviceBuffer(bytes);
  }
  // The algorithm cuDNN measures fastest on this device for these shapes
  // (cudnnFind runs each one once, at compile time), among those in FP32
  // FMA math; the heuristic's first choice when none ran. The heuristic
  // alone (cudnnGet) ranks by a model of the device and often picks a
  // slower kernel at small batch sizes.
  cudnnConvolutionFwdAlgo_t fastestAlgorithm() {
    constexpr int kMax = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    int found = 0;
    check(cudnn().cudnnFindConvolutionForwardAlgorithm(handle(), x_.d, w, conv, y_.d, kMax, &found, perf),
          "cudnnFindConvolutionForwardAlgorithm");
    for (int i = 0; i < found; ++i)  // sorted by time
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH) return perf[i].algo;
    check(cudnn().cudnnGetConvolutionForwardAlgorithm_v7(handle(), x_.d, w, conv, y_.d, kMax, &found, perf),
          "cudnnGetConvolutionForwardAlgorithm_v7");
    for (int i = 0; i < found; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) return perf[i].algo;
    return CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  }

  ~ConvKernel() override {
    cudnn().cudnnDestroyFilterDescriptor(w);
    cudnn().cudnnDestroyConvolutionDescriptor(conv);
    cudnn().cudnnDestroyActivationDescriptor(act);
  }

 protected:
  void runOnDevice(const std::vector<const void*>& in, const std::vector<void*>& out,
                   cudaStream_t stream) override {
    check(cudnn().cudnnSetStream(handle(), stream), "cudnnSetStream");
    const float one = 1.0f, alpha2 = hasZ_ ? 1.0f : 0.0f;
    // Without a residual, z aliases y with alpha2 = 0, as cuDNN documents.
    check(cudnn().cudnnConvolutionBiasActivationForward(
              handle(), &one, x_.d, xIn_.resolve(in), w, w_.resolve(in), conv, algo_,
              workspace_.data(), workspace_.bytes(), &alpha2, y_.d, hasZ_ ? z_.resolve(in) : out[0],
              bias_.d, b_.resolve(in), act, y_.d, out[0]),
          "cudnnConvolutionBiasActivationForward");
  }

 private:
  static std::vector<int> biasDims(const CudnnPlan& p) {
    std::vector<int> d(p.yDims.size(), 1);
    d[1] = p.yDims[1];
    return d;
  }

  TensorDesc x_, y_, bias_;
  Operand xIn_, w_, b_, z_;
  bool hasZ_ = false;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  cudnnConvolutionFwdAlgo_t algo_{};
  cuda::DeviceBuffer workspace_;
};

// Pooling, softmax and batch normalisation: one input, one output.
class SingleOpKernel : public cuda::DeviceKernel {
 public:
  SingleOpKernel(const KernelRequest& r, const CudnnPlan& p)
      : plan_(p), x_(p.xDims), y_(p.yDims), channel_(channelDims(p)) {
    xIn_ = Operand::of(r, p.x);
    if (p.op == CudnnOp::MaxPool || p.op == CudnnOp::AveragePool) {
      check(cudnn().cudnnCreatePoolingDescriptor(&pool_), "cudnnCreatePoolingDescriptor");
      const cudnnPoolingMode_t mode = p.op == CudnnOp::MaxPool ? CUDNN_POOLING_MAX
                                      : p.countIncludePad
                                          ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                          : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
      check(cudnn().cudnnSetPoolingNdDescriptor(pool_, mode, CUDNN_PROPAGATE_NAN,
                                                static_cast<int>(p.window.size()), p.window.data(),
                                                p.pads.data(), p.strides.data()),
            "cudnnSetPoolingNdDescriptor");
    }
    if (p.op == CudnnOp::BatchNorm) {
      scale_ = Operand::of(r, p.scale);
      shift_ = Operand::of(r, p.shift);
      mean_ = Operand::of(r, p.mean);
      var_ = Operand::of(r, p.var);
    }
  }
  ~SingleOpKernel() override {
    if (pool_) cudnn().cudnnDestroyPoolingDescriptor(pool_);
  }

 protected:
  void runOnDevice(const std::vector<const void*>& in, const std::vector<void*>& out,
                   cudaStream_t stream) override {
    check(cudnn().cudnnSetStream(handle(), stream), "cudnnSetStream");
    const float one = 1.0f, zero = 0.0f;
    const void* x = xIn_.resolve(in);
    switch (plan_.op) {
      case CudnnOp::MaxPool:
      case CudnnOp::AveragePool:
        check(cudnn().cudnnPoolingForward(handle(), pool_, &one, x_.d, x, &zero, y_.d, out[0]),
              "cudnnPoolingForward");
        break;
      case CudnnOp::Softmax:
      case CudnnOp::LogSoftmax:
        check(
            cudnn().cudnnSoftmaxForward(
                handle(), plan_.op == CudnnOp::Softmax ? CUDNN_SOFTMAX_ACCURATE : CUDNN_SOFTMAX_LOG,
                CUDNN_SOFTMAX_MODE_CHANNEL, &one, x_.d, x, &zero, y_.d, out[0]),
            "cudnnSoftmaxForward");
        break;
      case CudnnOp::BatchNorm:
        check(cudnn().cudnnBatchNormalizationForwardInference(
                  handle(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_.d, x, y_.d, out[0], channel_.d,
                  scale_.resolve(in), shift_.resolve(in), mean_.resolve(in), var_.resolve(in),
                  std::max(plan_.epsilon, CUDNN_BN_MIN_EPSILON)),
              "cudnnBatchNormalizationForwardInference");
        break;
      case CudnnOp::Conv:
        break;  // ConvKernel's
    }
  }

 private:
  static std::vector<int> channelDims(const CudnnPlan& p) {
    std::vector<int> d(p.xDims.size(), 1);
    d[1] = p.xDims[1];
    return d;
  }

  CudnnPlan plan_;
  TensorDesc x_, y_, channel_;
  Operand xIn_, scale_, shift_, mean_, var_;
  cudnnPoolingDescriptor_t pool_ = nullptr;
};

class CudnnBackend : public Backend {
 public:
  std::string name() const override { return "cudnn"; }
  std::string version() const override {
    const std::string dnn = cuda::loadError(cuda::Library::Dnn).empty()
                                ? std::to_string(cudnn().cudnnGetVersion())
                                : std::string("missing");
    return "cuDNN " + dnn + " (" + cuda::currentGpuFingerprint().toString() + ")";
  }
  Device device() const override { return Device{DeviceType::CUDA, 0}; }
  DeviceRuntime* deviceRuntime() override { return &cuda::sharedDeviceRuntime(); }

  CompileResult compile(const KernelRequest& request) override {
    if (std::string why = cudnnUnavailableReason(); !why.empty()) return CompileResult::refuse(why);
    const CudnnPlan plan = cudnn::planCudnn(*request.graph, request.nodes);
    if (!plan.refusal.empty()) return CompileResult::refuse(plan.refusal);
    if (request.outputs.size() != 1 || request.outputs[0] != plan.output)
      return CompileResult::refuse("the call's result is not the group's only output");
    try {
      if (plan.op == CudnnOp::Conv)
        return CompileResult::ok(std::make_unique<ConvKernel>(request, plan));
      return CompileResult::ok(std::make_unique<SingleOpKernel>(request, plan));
    } catch (const Error& e) {
      return CompileResult::refuse(e.what());
    }
  }

  // Asks the plan: a node it runs alone is a seed, Add and Relu may follow
  // a convolution, a group fuses when it is one cuDNN call.
  std::shared_ptr<const PatternRule> codeRule() const override {
    class Rule : public PatternRule {
     public:
      std::string name() const override { return "cudnn"; }
      bool opRule(const Graph& g, NodeId n) const override {
        NodeSet one(g.numNodes());
        one.insert(n);
        return cudnn::planCudnn(g, one).refusal.empty();
      }
      bool memberRule(const Graph& g, NodeId n) const override {
        return cudnn::isConvEpilogueOp(g.node(n).op) || opRule(g, n);
      }
      std::optional<std::string> fusionRule(const Graph& g, const NodeSet& group, NodeId,
                                            NodeId) const override {
        const CudnnPlan p = cudnn::planCudnn(g, group);
        if (!p.refusal.empty()) return std::nullopt;
        return std::string("conv_bias_activation");
      }
    };
    return std::make_shared<Rule>();
  }
};

}  // namespace

std::unique_ptr<Backend> createCudnnBackend() { return std::make_unique<CudnnBackend>(); }

}  // namespace collage
