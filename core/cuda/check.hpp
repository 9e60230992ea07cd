// Checking macros for the host's CUDA code: every runtime call, kernel launch and cuBLAS call.
// Used by core/cuda and by any core/ source compiled only with CUDA.
// Rule: no CUDA call goes unchecked; failures throw std::runtime_error naming call, file, line.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace lca::core::gpu::detail {

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(err) + " (" +
                           cudaGetErrorString(err) + ") in " + call + " at " + file + ":" +
                           std::to_string(line));
}

[[noreturn]] inline void throw_cublas(cublasStatus_t st, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("cuBLAS error ") + std::to_string(static_cast<int>(st)) +
                           " in " + call + " at " + file + ":" + std::to_string(line));
}

}  // namespace lca::core::gpu::detail

#define LCA_CUDA_CHECK(call)                                                      \
  do {                                                                            \
    const cudaError_t lca_err_ = (call);                                          \
    if (lca_err_ != cudaSuccess)                                                  \
      ::lca::core::gpu::detail::throw_cuda(lca_err_, #call, __FILE__, __LINE__);  \
  } while (0)

// After every <<<...>>> launch: reports launch-configuration errors at the launch site.
#define LCA_CUDA_CHECK_LAUNCH(what)                                               \
  do {                                                                            \
    const cudaError_t lca_err_ = cudaGetLastError();                              \
    if (lca_err_ != cudaSuccess)                                                  \
      ::lca::core::gpu::detail::throw_cuda(lca_err_, what, __FILE__, __LINE__);   \
  } while (0)

#define LCA_CUBLAS_CHECK(call)                                                    \
  do {                                                                            \
    const cublasStatus_t lca_st_ = (call);                                        \
    if (lca_st_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::lca::core::gpu::detail::throw_cublas(lca_st_, #call, __FILE__, __LINE__); \
  } while (0)
