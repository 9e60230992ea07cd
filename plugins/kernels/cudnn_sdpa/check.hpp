// Error checking for the cudnn_sdpa plugin: CUDA runtime, cuDNN and cudnn-frontend calls, and
// device buffers from the host's allocator.
// Rule: every CUDA / cuDNN / frontend call goes through a macro here, so a failure becomes an
// lca::Error that names the call, the file and the line (plugins may not include core/).
#pragma once

#include <lca/abi.h>
#include <lca/error.hpp>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>
#include <utility>

namespace lca_cudnn_sdpa {

inline std::string where(const char* call, const char* file, int line) {
  return std::string(" in ") + call + " at " + file + ":" + std::to_string(line);
}

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  const lca_status status = err == cudaErrorMemoryAllocation ? LCA_ERR_OUT_OF_MEMORY : LCA_ERR_DEVICE;
  throw lca::Error(status, std::string("cudnn_sdpa: CUDA error ") + cudaGetErrorName(err) + " (" +
                               cudaGetErrorString(err) + ")" + where(call, file, line));
}

[[noreturn]] inline void throw_cudnn(cudnnStatus_t st, const char* call, const char* file, int line) {
  throw lca::Error(LCA_ERR_DEVICE, std::string("cudnn_sdpa: cuDNN error ") + cudnnGetErrorString(st) +
                                       where(call, file, line));
}

}  // namespace lca_cudnn_sdpa

#define LCA_CUDA_CHECK(call)                                                       \
  do {                                                                             \
    const cudaError_t lca_err_ = (call);                                           \
    if (lca_err_ != cudaSuccess)                                                   \
      ::lca_cudnn_sdpa::throw_cuda(lca_err_, #call, __FILE__, __LINE__);           \
  } while (0)

// After a kernel launch: a bad configuration shows up in cudaGetLastError.
#define LCA_CUDA_CHECK_LAUNCH(what) LCA_CUDA_CHECK(cudaGetLastError())

#define LCA_CUDNN_CHECK(call)                                                      \
  do {                                                                             \
    const cudnnStatus_t lca_st_ = (call);                                          \
    if (lca_st_ != CUDNN_STATUS_SUCCESS)                                           \
      ::lca_cudnn_sdpa::throw_cudnn(lca_st_, #call, __FILE__, __LINE__);           \
  } while (0)

// cudnn-frontend returns error_t; `status` says what a failure means to the host (a graph the
// library refuses to build is UNSUPPORTED, a failed execution is DEVICE).
#define LCA_FE_CHECK(call, status)                                                 \
  do {                                                                             \
    auto lca_fe_ = (call);                                                         \
    if (!lca_fe_.is_good())                                                        \
      throw ::lca::Error((status), std::string("cudnn_sdpa: cudnn-frontend: ") +   \
                                       lca_fe_.get_message() +                     \
                                       ::lca_cudnn_sdpa::where(#call, __FILE__, __LINE__)); \
  } while (0)

namespace lca_cudnn_sdpa {

// Device memory from the host's allocator; the allocator outlives the buffer (it lives in the
// exec the plan was made with, and the plan frees its buffers in release()).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const lca_allocator* allocator, size_t bytes, const char* what) : allocator_(allocator) {
    if (bytes == 0) return;
    const lca_status st = allocator->alloc(allocator->ctx, bytes, &ptr_);
    if (st != LCA_OK || ptr_ == nullptr) {
      ptr_ = nullptr;
      throw lca::Error(st == LCA_OK ? LCA_ERR_OUT_OF_MEMORY : st,
                       std::string("cudnn_sdpa: the allocator refused ") + std::to_string(bytes) +
                           " bytes for " + what);
    }
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : allocator_(o.allocator_), ptr_(std::exchange(o.ptr_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      allocator_ = o.allocator_;
      ptr_ = std::exchange(o.ptr_, nullptr);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  void reset() {
    if (ptr_ != nullptr) allocator_->free(allocator_->ctx, ptr_);
    ptr_ = nullptr;
  }
  void* get() const { return ptr_; }

 private:
  const lca_allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
};

}  // namespace lca_cudnn_sdpa
