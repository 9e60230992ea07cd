// The CPU backend: malloc with byte accounting, steady-clock timing.
#include "core/run/backend.hpp"

#include <lca/types.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace lca::core {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(size_t limit) : limit_(limit) {
    alloc_ = lca_allocator{sizeof(lca_allocator), this, &CpuBackend::do_alloc, &CpuBackend::do_free};
  }
  ~CpuBackend() override {
    for (auto& [p, n] : sizes_) std::free(p);
  }
  lca_device_type type() const override { return LCA_DEVICE_CPU; }
  std::string name() const override { return "cpu"; }
  const lca_allocator* allocator() override { return &alloc_; }
  size_t current_bytes() const override { return current_; }
  size_t peak_bytes() const override { return peak_; }
  void reset_peak() override { peak_ = current_; }
  void* stream() override { return nullptr; }

  void fill_random(void* ptr, int64_t count, int32_t dtype, uint64_t seed, float scale, uint64_t first) override {
    for (int64_t i = 0; i < count; ++i)
      lca::store_from_double(ptr, dtype, i, scale * random_uniform(seed, first + static_cast<uint64_t>(i)));
  }
  void poison(void* ptr, size_t bytes) override { std::memset(ptr, 0xFF, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}
  double time_ms(const std::function<void()>& fn) override {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  }

 private:
  static lca_status do_alloc(void* ctx, size_t bytes, void** out) {
    auto* self = static_cast<CpuBackend*>(ctx);
    *out = nullptr;
    std::lock_guard<std::mutex> lock(self->mutex_);
    if (self->limit_ > 0 && self->current_ + bytes > self->limit_) return LCA_ERR_OUT_OF_MEMORY;
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) return LCA_ERR_OUT_OF_MEMORY;
    self->sizes_[p] = bytes;
    self->current_ += bytes;
    self->peak_ = std::max(self->peak_, self->current_);
    *out = p;
    return LCA_OK;
  }
  static void do_free(void* ctx, void* ptr) {
    if (ptr == nullptr) return;
    auto* self = static_cast<CpuBackend*>(ctx);
    std::lock_guard<std::mutex> lock(self->mutex_);
    auto it = self->sizes_.find(ptr);
    if (it == self->sizes_.end()) return;  // not ours: ignore rather than corrupt the count
    self->current_ -= it->second;
    self->sizes_.erase(it);
    std::free(ptr);
  }

  size_t limit_;
  size_t current_ = 0;
  size_t peak_ = 0;
  std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;
  lca_allocator alloc_{};
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(size_t limit_bytes) {
  return std::make_unique<CpuBackend>(limit_bytes);
}

bool alloc_cache_enabled(const char* value) {
  if (value == nullptr || std::string(value) == "1") return true;
  if (std::string(value) == "0") return false;
  throw std::invalid_argument(std::string("LCA_ALLOC_CACHE='") + value +
                              "': use 1 (keep released device blocks for their size's next request; the default) "
                              "or 0 (a cudaFree at each release)");
}

#ifndef LCA_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int) {
  throw std::runtime_error("this lcahost was built without CUDA; rebuild where nvcc is found");
}
int cuda_device_count() { return 0; }
int cuda_device_cc(int) { return 0; }
#endif

}  // namespace lca::core
