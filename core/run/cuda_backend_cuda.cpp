// The CUDA backend: the measuring device allocator, one non-blocking stream, event timing,
// device-side random inputs and an L2 flush between timed repeats. Built only with CUDA.
#include "core/cuda/check.hpp"
#include "core/cuda/gpu.hpp"
#include "core/run/backend.hpp"

#include <cuda_runtime.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace lca::core {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device), allocator_((set_device(device), device)) {
    // Released blocks wait for their size's next request (DeviceAllocator), as the training
    // frameworks' caching allocators keep them, instead of a cudaMalloc and a cudaFree in every call
    // that allocates workspace (docs/DESIGN.md, Measurements). LCA_ALLOC_CACHE=0 turns it off.
    allocator_.set_caching(alloc_cache_enabled(std::getenv("LCA_ALLOC_CACHE")));
  }
  lca_device_type type() const override { return LCA_DEVICE_CUDA; }
  int device_index() const override { return device_; }
  std::string name() const override { return "cuda:" + std::to_string(device_); }
  const lca_allocator* allocator() override { return allocator_.abi(); }
  size_t current_bytes() const override { return allocator_.current_bytes(); }
  size_t peak_bytes() const override { return allocator_.peak_bytes(); }
  void reset_peak() override { allocator_.reset_peak(); }
  void* stream() override { return stream_.handle(); }

  void fill_random(void* ptr, int64_t count, int32_t dtype, uint64_t seed, float scale, uint64_t first) override {
    gpu::fill_random(ptr, count, dtype, seed, scale, stream_.handle(), first);
  }
  void poison(void* ptr, size_t bytes) override {
    LCA_CUDA_CHECK(cudaMemsetAsync(ptr, 0xFF, bytes, static_cast<cudaStream_t>(stream_.handle())));
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    LCA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_.handle())));
    stream_.synchronize();
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    LCA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_.handle())));
    stream_.synchronize();
  }
  void synchronize() override { stream_.synchronize(); }
  void flush_caches() override { gpu::flush_l2(stream_.handle()); }
  double time_ms(const std::function<void()>& fn) override {
    timer_.start(stream_.handle());
    fn();
    timer_.stop(stream_.handle());
    return timer_.elapsed_ms();
  }

 private:
  static int set_device(int device) {
    LCA_CUDA_CHECK(cudaSetDevice(device));
    return device;
  }
  int device_;
  gpu::DeviceAllocator allocator_;
  gpu::Stream stream_;
  gpu::EventTimer timer_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  const int count = gpu::device_count();
  if (device_index < 0 || device_index >= count)
    throw std::runtime_error("cuda:" + std::to_string(device_index) + " does not exist (" +
                             std::to_string(count) + " GPU(s) visible)");
  return std::make_unique<CudaBackend>(device_index);
}

int cuda_device_count() { return gpu::device_count(); }

int cuda_device_cc(int device_index) {
  const auto info = gpu::query(device_index);
  return info.cc_major * 10 + info.cc_minor;
}

}  // namespace lca::core
