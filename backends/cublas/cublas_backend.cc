// The cuBLAS backends: MatMul and Gemm groups (matmul_plan.h) as one
// cublasLtMatmul each, with the bias and activation in its epilogue.
//
// Two backends, one per math mode, so the measurement decides between them
// like between any two libraries, and a plan says which one it chose:
//
//   cublas       CUBLAS_COMPUTE_32F            IEEE fp32 products
//   cublas_tf32  CUBLAS_COMPUTE_32F_FAST_TF32  inputs rounded to TF32 (10-bit
//                mantissa) on tensor cores; results differ from fp32 by
//                about 1e-3 relative, growing with sqrt(k)
//
// The tolerance each is checked with is mathModeTolerance() (cublas_math_mode.h).
#include <cublasLt.h>

#include <memory>

#include "backends/cublas/cublas_math_mode.h"
#include "backends/cublas/matmul_plan.h"
#include "backends/cuda_runtime/cuda_device.h"
#include "backends/cuda_runtime/cuda_device_runtime.h"
#include "backends/cuda_runtime/cuda_status.h"
#include "backends/cuda_runtime/device_kernel.h"
#include "core/patterns/pattern_rule.h"

namespace collage {

// The libraries it calls, checked before the device (backend_list.cc).
std::string cublasUnavailableReason() {
  return cuda::unavailableReason({cuda::Library::Runtime, cuda::Library::BlasLt});
}

namespace {

using cuda::cublasLt;

using cublas::Epilogue;
using cublas::MatmulPlan;
using cuda::check;

constexpr size_t kWorkspaceBytes = 32u << 20;  // what cuBLASLt's heuristics may use

cublasLtEpilogue_t toLt(Epilogue e) {
  switch (e) {
    case Epilogue::None:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::Bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::Relu:
      return CUBLASLT_EPILOGUE_RELU;
    case Epilogue::ReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::Gelu:
      return CUBLASLT_EPILOGUE_GELU;
    case Epilogue::GeluBias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// One cuBLASLt handle per process (creating one needs the device).
cublasLtHandle_t ltHandle() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    check(cublasLt().cublasLtCreate(&h), "cublasLtCreate");
    return h;
  }();
  return handle;
}

// A column-major layout (rows x cols, leading dimension ld) with a strided batch.
cublasLtMatrixLayout_t layout(uint64_t rows, uint64_t cols, int64_t ld, int64_t batch,
                              int64_t batchStride) {
  cublasLtMatrixLayout_t l = nullptr;
  check(cublasLt().cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, rows, cols, ld),
        "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    check(cublasLt().cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                      sizeof count),
          "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT");
    check(cublasLt().cublasLtMatrixLayoutSetAttribute(
              l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batchStride, sizeof batchStride),
          "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
  }
  return l;
}

// Where each operand comes from at run time: a kernel input (by position)
// or a constant uploaded at compile time.
struct Operand {
  int input = -1;
  cuda::DeviceBuffer constant;
  const void* resolve(const std::vector<const void*>& inputs) const {
    return input >= 0 ? inputs[static_cast<size_t>(input)] : constant.data();
  }
};

class LtMatmulKernel : public cuda::DeviceKernel {
 public:
  LtMatmulKernel(const KernelRequest& r, const MatmulPlan& p, cublasComputeType_t compute)
      : plan_(p), workspace_(kWorkspaceBytes) {
    operand(r, p.a, a_);
    operand(r, p.b, b_);
    if (p.c != kNoValue) operand(r, p.c, c_);
    if (p.bias != kNoValue) operand(r, p.bias, bias_);
    check(cublasLt().cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F),
          "cublasLtMatmulDescCreate");
    // Swapped operands (matmul_plan.h): the library's A is our B, its B our A.
    const cublasOperation_t opB = p.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opA = p.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLt().cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &opB,
                                                    sizeof opB),
          "TRANSA");
    check(cublasLt().cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &opA,
                                                    sizeof opA),
          "TRANSB");
    const cublasLtEpilogue_t epilogue = toLt(p.epilogue);
    check(cublasLt().cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                    sizeof epilogue),
          "CUBLASLT_MATMUL_DESC_EPILOGUE");
    // Stored shapes read column-major: B is [k,n] (or [n,k] with transB),
    // seen as n x k (k x n); A likewise; D^T is n x m.
    ltA_ = p.transB ? layout(p.k, p.n, p.ldb, p.batch, p.batchStrideB)
                    : layout(p.n, p.k, p.ldb, p.batch, p.batchStrideB);
    ltB_ = p.transA ? layout(p.m, p.k, p.lda, p.batch, p.batchStrideA)
                    : layout(p.k, p.m, p.lda, p.batch, p.batchStrideA);
    ltD_ = layout(p.n, p.m, p.n, p.batch, p.m * p.n);
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLt().cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    check(cublasLt().cublasLtMatmulPreferenceSetAttribute(pref,
                                                          CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &kWorkspaceBytes, sizeof kWorkspaceBytes),
          "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES");
    if (bias_.constant.data() || bias_.input >= 0) {
      // The heuristic checks the bias pointer's alignment: any device
      // allocation's will do, the real one is set before each call.
      const void* any = workspace_.data();
      check(cublasLt().cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &any, sizeof any),
            "CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLt().cublasLtMatmulAlgoGetHeuristic(
        ltHandle(), desc_, ltA_, ltB_, ltD_, ltD_, pref, 1, &result, &found);
    cublasLt().cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0)
      throw Error("cuBLASLt has no algorithm for " + p.toString());
    algo_ = result.algo;
  }

  ~LtMatmulKernel() override {
    if (ltA_) cublasLt().cublasLtMatrixLayoutDestroy(ltA_);
    if (ltB_) cublasLt().cublasLtMatrixLayoutDestroy(ltB_);
    if (ltD_) cublasLt().cublasLtMatrixLayoutDestroy(ltD_);
    if (desc_) cublasLt().cublasLtMatmulDescDestroy(desc_);
  }

 protected:
  void runOnDevice(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                   cudaStream_t stream) override {
    if (plan_.bias != kNoValue) {
      const void* bias = bias_.resolve(inputs);
      check(cublasLt().cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof bias),
            "CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    }
    const bool withC = plan_.c != kNoValue;
    const float beta = withC ? plan_.beta : 0.0f;
    check(cublasLt().cublasLtMatmul(ltHandle(), desc_, &plan_.alpha, b_.resolve(inputs), ltA_,
                                    a_.resolve(inputs), ltB_, &beta,
                                    withC ? c_.resolve(inputs) : outputs[0], ltD_, outputs[0], ltD_,
                                    &algo_, workspace_.data(), workspace_.bytes(), stream),
          "cublasLtMatmul");
  }

 private:
  static void operand(const KernelRequest& r, ValueId v, Operand& out) {
    for (size_t i = 0; i < r.inputs.size(); ++i)
      if (r.inputs[i] == v) {
        out.input = static_cast<int>(i);
        return;
      }
    COLLAGE_CHECK(r.graph->value(v).isConstant(), "matmul operand neither input nor constant");
    out.constant = cuda::DeviceBuffer::upload(*r.graph->value(v).constant);
  }

  MatmulPlan plan_;
  Operand a_, b_, c_, bias_;
  cuda::DeviceBuffer workspace_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t ltA_ = nullptr, ltB_ = nullptr, ltD_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

class CublasBackend : public Backend {
 public:
  explicit CublasBackend(cublas::MathMode mode) : mode_(mode) {}

  std::string name() const override { return cublas::backendName(mode_); }
  std::string version() const override {
    const std::string lt = cuda::loadError(cuda::Library::BlasLt).empty()
                               ? std::to_string(cublasLt().cublasLtGetVersion())
                               : std::string("missing");
    return "cuBLASLt " + lt + " " + cublas::mathModeName(mode_) + " (" +
           cuda::currentGpuFingerprint().toString() + ")";
  }
  Device device() const override { return Device{DeviceType::CUDA, 0}; }
  std::optional<Tolerance> reducedPrecisionTolerance() const override {
    if (mode_ == cublas::MathMode::Fp32) return std::nullopt;
    return cublas::mathModeTolerance(mode_);
  }
  DeviceRuntime* deviceRuntime() override { return &cuda::sharedDeviceRuntime(); }

  CompileResult compile(const KernelRequest& request) override {
    if (std::string why = cublasUnavailableReason(); !why.empty())
      return CompileResult::refuse(why);
    const MatmulPlan plan = cublas::planMatmul(*request.graph, request.nodes);
    if (!plan.refusal.empty()) return CompileResult::refuse(plan.refusal);
    if (request.outputs.size() != 1 || request.outputs[0] != plan.output)
      return CompileResult::refuse("the product's result is not the group's only output");
    try {
      return CompileResult::ok(
          std::make_unique<LtMatmulKernel>(request, plan, cublas::computeType(mode_)));
    } catch (const Error& e) {
      return CompileResult::refuse(e.what());
    }
  }

  // Asks the plan itself: a MatMul or Gemm it maps is a seed; Add, Relu and
  // Gelu may follow it; a group fuses when it is one cuBLASLt call.
  std::shared_ptr<const PatternRule> codeRule() const override {
    class Rule : public PatternRule {
     public:
      explicit Rule(std::string name) : name_(std::move(name)) {}
      std::string name() const override { return name_; }
      bool opRule(const Graph& g, NodeId n) const override {
        NodeSet one(g.numNodes());
        one.insert(n);
        return cublas::planMatmul(g, one).refusal.empty();
      }
      bool memberRule(const Graph& g, NodeId n) const override {
        const std::string& op = g.node(n).op;
        return op == "Add" || op == "Relu" || op == "Gelu" || opRule(g, n);
      }
      std::optional<std::string> fusionRule(const Graph& g, const NodeSet& group, NodeId,
                                            NodeId) const override {
        const MatmulPlan p = cublas::planMatmul(g, group);
        if (!p.refusal.empty()) return std::nullopt;
        return "matmul_" + cublas::epilogueName(p.epilogue);
      }

     private:
      std::string name_;
    };
    return std::make_shared<Rule>(name());
  }

 private:
  cublas::MathMode mode_;
};

}  // namespace

std::unique_ptr<Backend> createCublasBackend() {
  return std::make_unique<CublasBackend>(cublas::MathMode::Fp32);
}
std::unique_ptr<Backend> createCublasTf32Backend() {
  return std::make_unique<CublasBackend>(cublas::MathMode::Tf32);
}

}  // namespace collage
