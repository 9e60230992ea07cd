// DeviceAllocator: cudaMalloc/cudaFree with live/peak accounting, an optional limit and an optional
// cache of released blocks.
#include "core/cuda/check.hpp"
#include "core/cuda/gpu.hpp"

#include <algorithm>
#include <string>

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
  if (live_.empty() && cached_.empty()) return;
  int previous = 0;
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(device_);
  for (auto& [ptr, bytes] : live_) (void)cudaFree(ptr);  // leaked by a caller: give it back
  for (auto& [bytes, ptr] : cached_) (void)cudaFree(ptr);
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
  void* ptr = nullptr;
  if (auto hit = cached_.find(bytes); hit != cached_.end()) {
    ptr = hit->second;
    cached_.erase(hit);
    cached_total_ -= bytes;
  }
  DeviceScope scope(device_);
  cudaError_t err = ptr != nullptr ? cudaSuccess : cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation && !cached_.empty()) {
    (void)cudaGetLastError();
    trim_locked();  // the cache's blocks may be what the driver lacks
    err = cudaMalloc(&ptr, bytes);
  }
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
  const size_t bytes = it->second;
  current_ -= bytes;
  live_.erase(it);
  DeviceScope scope(device_);
  // Cached: the device synchronizes as cudaFree would (the ABI's free names no stream, so work
  // still reading the block may be on any stream), and the block waits for its size again.
  const cudaError_t err = caching_ ? cudaDeviceSynchronize() : cudaFree(ptr);
  if (caching_ && err == cudaSuccess) {
    cached_.emplace(bytes, ptr);
    cached_total_ += bytes;
  }
  if (err != cudaSuccess) {
    last_error_ = std::string(caching_ ? "cudaDeviceSynchronize" : "cudaFree") + " failed on release: " +
                  cudaGetErrorString(err);
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
  trim_locked();
}

void DeviceAllocator::trim() {
  std::lock_guard lock(mutex_);
  trim_locked();
}

void DeviceAllocator::trim_locked() {
  if (cached_.empty()) return;
  DeviceScope scope(device_);
  for (auto& [bytes, ptr] : cached_) LCA_CUDA_CHECK(cudaFree(ptr));
  cached_.clear();
  cached_total_ = 0;
}

void DeviceAllocator::set_caching(bool on) {
  std::lock_guard lock(mutex_);
  caching_ = on;
  if (!on) trim_locked();
}

size_t DeviceAllocator::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_total_;
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
