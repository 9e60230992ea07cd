// Checking for flex_flash's CUDA calls and launches, and its device buffers from the host's
// allocator. Used by every source of this plugin (plugins may not include core/).
// Rule: every CUDA call and every launch goes through a macro here; failures become lca::Error.
#pragma once

#include <lca/abi.h>
#include <lca/error.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

namespace lca_flex_flash {

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  throw lca::Error(LCA_ERR_DEVICE, std::string("CUDA error ") + cudaGetErrorName(err) + " (" +
                                       cudaGetErrorString(err) + ") in " + call + " at " + file + ":" +
                                       std::to_string(line));
}

// Device memory from the host's allocator (which outlives it), freed with the object.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const lca_allocator* allocator, size_t bytes, const char* what) : allocator_(allocator) {
    if (bytes == 0) return;
    const lca_status st = allocator->alloc(allocator->ctx, bytes, &ptr_);
    if (st != LCA_OK || ptr_ == nullptr) {
      ptr_ = nullptr;
      char gib[32];
      std::snprintf(gib, sizeof gib, "%.2f", bytes / double(1ull << 30));
      throw lca::Error(st == LCA_OK ? LCA_ERR_OUT_OF_MEMORY : st,
                       std::string("flex_flash: the allocator refused ") + gib + " GiB for " + what);
    }
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : allocator_(o.allocator_), ptr_(o.ptr_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      allocator_ = o.allocator_;
      ptr_ = o.ptr_;
      o.ptr_ = nullptr;
    }
    return *this;
  }
  void reset() {
    if (ptr_ != nullptr) allocator_->free(allocator_->ctx, ptr_);
    ptr_ = nullptr;
  }
  bool empty() const { return ptr_ == nullptr; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  const lca_allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
};

}  // namespace lca_flex_flash

#define LCA_FLEX_CUDA_CHECK(call)                                                   \
  do {                                                                              \
    const cudaError_t lca_err_ = (call);                                            \
    if (lca_err_ != cudaSuccess) ::lca_flex_flash::throw_cuda(lca_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define LCA_FLEX_CHECK_LAUNCH(what)                                                 \
  do {                                                                              \
    const cudaError_t lca_err_ = cudaGetLastError();                                \
    if (lca_err_ != cudaSuccess) ::lca_flex_flash::throw_cuda(lca_err_, what, __FILE__, __LINE__); \
  } while (0)
