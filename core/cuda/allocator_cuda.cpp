// DeviceAllocator: cudaMalloc/cudaFree with live/peak accounting and an optional limit.
#include "core/cuda/check.hpp"
#include "core/cuda/gpu.hpp"

#include <algorithm>

namespace lca::core::gpu {

namespace {

// Makes `device` current for the scope and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    LCA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) LCA_CUDA_CHECK(cudaSetDevice(device));
    switched_ = previous_ != device;
  }
  ~DeviceScope() {
    if (switched_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool switched_ = false;
};

lca_status abi_alloc(void* ctx, size_t bytes, void** out) {
  if (out == nullptr) return LCA_ERR_INVALID_ARGUMENT;
  try {
    return static_cast<DeviceAllocator*>(ctx)->allocate(bytes, out);
  } catch (...) {
    *out = nullptr;
    return LCA_ERR_DEVICE;
  }
}

void abi_free(void* ctx, void* ptr) {
  try {
    static_cast<DeviceAllocator*>(ctx)->release(ptr);
  } catch (...) {
    // A failing cudaFree leaves nothing a plugin could do; the allocator keeps the message.
  }
}

}  // namespace

DeviceAllocator::DeviceAllocator(int device, size_t limit_bytes) : device_(device), limit_(limit_bytes) {
  abi_.struct_size = sizeof(lca_allocator);
  abi_.ctx = this;
  abi_.alloc = &abi_alloc;
  abi_.free = &abi_free;
}

DeviceAllocator::~DeviceAllocator() {
  std::lock_guard lock(mutex_);
  if (live_.empty()) return;
  int previous = 0;
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(device_);
  for (auto& [ptr, bytes] : live_) (void)cudaFree(ptr);  // leaked by a caller: give it back
  (void)cudaSetDevice(previous);
}

lca_status DeviceAllocator::allocate(size_t bytes, void** out) {
  *out = nullptr;
  if (bytes == 0) return LCA_OK;
  std::lock_guard lock(mutex_);
  if (limit_ != 0 && current_ + bytes > limit_) {
    last_error_ = "allocator limit: " + std::to_string(bytes) + " bytes asked, " +
                  std::to_string(current_) + " live, limit " + std::to_string(limit_);
    return LCA_ERR_OUT_OF_MEMORY;
  }
  DeviceScope scope(device_);
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so that later calls do not see it
    last_error_ = std::string("cudaMalloc of ") + std::to_string(bytes) + " bytes failed: " +
                  cudaGetErrorString(err);
    return err == cudaErrorMemoryAllocation ? LCA_ERR_OUT_OF_MEMORY : LCA_ERR_DEVICE;
  }
  live_.emplace(ptr, bytes);
  current_ += bytes;
  peak_ = std::max(peak_, current_);
  *out = ptr;
  return LCA_OK;
}

void DeviceAllocator::release(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    last_error_ = "release of a pointer this allocator did not hand out";
    return;
  }
  current_ -= it->second;
  live_.erase(it);
  DeviceScope scope(device_);
  const cudaError_t err = cudaFree(ptr);
  if (err != cudaSuccess) {
    last_error_ = std::string("cudaFree failed: ") + cudaGetErrorString(err);
    LCA_CUDA_CHECK(err);
  }
}

size_t DeviceAllocator::current_bytes() const {
  std::lock_guard lock(mutex_);
  return current_;
}

size_t DeviceAllocator::peak_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = current_;
}

void DeviceAllocator::set_limit(size_t limit_bytes) {
  std::lock_guard lock(mutex_);
  limit_ = limit_bytes;
}

size_t DeviceAllocator::limit() const {
  std::lock_guard lock(mutex_);
  return limit_;
}

std::string DeviceAllocator::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

}  // namespace lca::core::gpu
