// The CUDA libraries, opened with dlopen the first time a backend needs one.
//
// The build links none of them. An installed Collage Studio (the .deb, the
// Python module) must start on a machine without the CUDA toolkit, where a
// linked libcudart would stop the dynamic loader before main(); and a
// missing library must be reported by the backend that needs it ("backend
// 'cudnn' needs libcudnn.so.9, which did not load: ...").
//
// Each library's entry points are a table of pointers typed from its own
// header (decltype of the declared function), so a call site reads
// `cudart().cudaMalloc(&p, n)` and the compiler still checks every argument.
// Adding a call: its name in the library's list below.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nvrtc.h>

#include <string>
#include <vector>

namespace collage::cuda {

#define COLLAGE_CUDART_ENTRY_POINTS(X)                                                             \
  X(cudaGetDeviceCount)                                                                            \
  X(cudaGetErrorName) X(cudaGetErrorString) X(cudaRuntimeGetVersion) X(cudaDriverGetVersion)       \
      X(cudaGetDeviceProperties) X(cudaDeviceGetAttribute) X(cudaMalloc) X(cudaFree) X(cudaMemcpy) \
          X(cudaMemcpyAsync) X(cudaMemset) X(cudaStreamSynchronize) X(cudaLaunchKernel)            \
              X(cudaLibraryLoadData) X(cudaLibraryGetKernel) X(cudaLibraryUnload)

#define COLLAGE_CUBLASLT_ENTRY_POINTS(X)                                                           \
  X(cublasLtGetVersion)                                                                            \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulDescCreate)               \
      X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) \
          X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)                       \
              X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                 \
                  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic)

#define COLLAGE_CUDNN_ENTRY_POINTS(X)                                                              \
  X(cudnnGetVersion)                                                                               \
  X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)                          \
      X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensorNdDescriptor) \
          X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor)                           \
              X(cudnnSetFilterNdDescriptor) X(cudnnCreateConvolutionDescriptor)                    \
                  X(cudnnDestroyConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)          \
                      X(cudnnSetConvolutionMathType) X(cudnnSetConvolutionGroupCount)              \
                          X(cudnnCreateActivationDescriptor) X(cudnnDestroyActivationDescriptor)   \
                              X(cudnnSetActivationDescriptor) X(cudnnCreatePoolingDescriptor)      \
                                  X(cudnnDestroyPoolingDescriptor) X(cudnnSetPoolingNdDescriptor)  \
                                      X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnFindConvolutionForwardAlgorithm) \
                                          X(cudnnGetConvolutionForwardWorkspaceSize)               \
                                              X(cudnnConvolutionBiasActivationForward)             \
                                                  X(cudnnPoolingForward) X(cudnnSoftmaxForward)    \
                                                      X(cudnnBatchNormalizationForwardInference)

#define COLLAGE_NVRTC_ENTRY_POINTS(X)                                                        \
  X(nvrtcVersion)                                                                            \
  X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram) X(nvrtcCompileProgram) \
      X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetPTXSize) X(nvrtcGetPTX)

#define COLLAGE_CUDA_ENTRY_POINT_MEMBER(name) decltype(&::name) name = nullptr;
struct RuntimeApi {
  COLLAGE_CUDART_ENTRY_POINTS(COLLAGE_CUDA_ENTRY_POINT_MEMBER)
};
struct BlasLtApi {
  COLLAGE_CUBLASLT_ENTRY_POINTS(COLLAGE_CUDA_ENTRY_POINT_MEMBER)
};
struct DnnApi {
  COLLAGE_CUDNN_ENTRY_POINTS(COLLAGE_CUDA_ENTRY_POINT_MEMBER)
};
struct RtcApi {
  COLLAGE_NVRTC_ENTRY_POINTS(COLLAGE_CUDA_ENTRY_POINT_MEMBER)
};
#undef COLLAGE_CUDA_ENTRY_POINT_MEMBER

enum class Library { Runtime, BlasLt, Dnn, Rtc };

// The file each library is opened as: the soname of the major version the
// build compiled against ("libcudnn.so.9"), found by the loader's search
// path (the executables' RUNPATH names the toolkit's folder they were built
// with; LD_LIBRARY_PATH and ldconfig's cache otherwise), or in the folder
// COLLAGE_CUDA_LIBRARY_DIR names when it is set.
std::string libraryFile(Library library);

// Empty when the library is loaded (or loads now); else why not, naming the
// file: "libcudnn.so.9 did not load (libcudnn.so.9: cannot open shared
// object file: No such file or directory)". Tried once per process.
const std::string& loadError(Library library);

// The first load error among `needed`, or empty: what a backend reports as
// the reason it cannot run.
std::string missingLibrary(const std::vector<Library>& needed);

// The loaded entry points. An Error with loadError() when the library did
// not load; every listed entry point exists once it has.
const RuntimeApi& cudart();
const BlasLtApi& cublasLt();
const DnnApi& cudnn();
const RtcApi& nvrtc();

}  // namespace collage::cuda
