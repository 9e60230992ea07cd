// lca::core::gpu in a build without CUDA: no devices, and everything else refuses loudly.
#if !defined(LCA_HAVE_CUDA)
#include "core/cuda/gpu.hpp"

#include <stdexcept>

namespace lca::core::gpu {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) + ": lca was built without CUDA");
}
}  // namespace

int device_count() { return 0; }
GpuInfo query(int) { no_cuda("gpu::query"); }

DeviceAllocator::DeviceAllocator(int device, size_t limit_bytes) : device_(device), limit_(limit_bytes) {
  no_cuda("gpu::DeviceAllocator");
}
DeviceAllocator::~DeviceAllocator() = default;
lca_status DeviceAllocator::allocate(size_t, void** out) {
  *out = nullptr;
  return LCA_ERR_UNSUPPORTED;
}
void DeviceAllocator::release(void*) {}
size_t DeviceAllocator::current_bytes() const { return 0; }
size_t DeviceAllocator::peak_bytes() const { return 0; }
void DeviceAllocator::reset_peak() {}
void DeviceAllocator::trim() {}
void DeviceAllocator::set_caching(bool) {}
size_t DeviceAllocator::cached_bytes() const { return 0; }
void DeviceAllocator::set_limit(size_t) {}
size_t DeviceAllocator::limit() const { return limit_; }
std::string DeviceAllocator::last_error() const { return "built without CUDA"; }

Stream::Stream() { no_cuda("gpu::Stream"); }
Stream::~Stream() = default;
void Stream::synchronize() const {}

EventTimer::EventTimer() { no_cuda("gpu::EventTimer"); }
EventTimer::~EventTimer() = default;
void EventTimer::start(void*) {}
void EventTimer::stop(void*) {}
float EventTimer::elapsed_ms() const { return 0; }

void fill_random(void*, int64_t, int32_t, uint64_t, float, void*, uint64_t) { no_cuda("gpu::fill_random"); }
void flush_l2(void*) { no_cuda("gpu::flush_l2"); }
Ceilings measure_ceilings(int) { no_cuda("gpu::measure_ceilings"); }

}  // namespace lca::core::gpu
#endif
