// Harness for the cudnn_sdpa GPU tests and benchmark: allocators for lca_exec (device and host),
// RAII over a kernel and its plans through the C ABI, device and host THD tensors, and errors.
// Used by test_cudnn_sdpa.cpp and bench_cudnn_sdpa.cpp.
// Rule: a Kernel must outlive its Plans, and the PluginHandle must outlive the Kernel.
#pragma once

#include "plugin_handle.hpp"

#include <lca/abi.h>
#include <lca/types.hpp>

#include <cuda_runtime_api.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace lca::test {

inline void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

inline bool has_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// cudaMalloc / malloc behind lca_allocator, counting the bytes live and their peak.
struct Allocator {
  bool device = true;
  size_t live = 0, peak = 0;
  std::vector<std::pair<void*, size_t>> blocks;
  lca_allocator abi{sizeof(lca_allocator), this, &alloc, &release};

  explicit Allocator(bool on_device) : device(on_device) {}
  static lca_status alloc(void* ctx, size_t bytes, void** out) {
    auto* self = static_cast<Allocator*>(ctx);
    *out = nullptr;
    if (self->device ? cudaMalloc(out, bytes) != cudaSuccess : (*out = std::malloc(bytes)) == nullptr) {
      *out = nullptr;
      return LCA_ERR_OUT_OF_MEMORY;
    }
    self->blocks.emplace_back(*out, bytes);
    self->live += bytes;
    self->peak = std::max(self->peak, self->live);
    return LCA_OK;
  }
  static void release(void* ctx, void* ptr) {
    auto* self = static_cast<Allocator*>(ctx);
    for (size_t i = 0; i < self->blocks.size(); ++i)
      if (self->blocks[i].first == ptr) {
        self->live -= self->blocks[i].second;
        self->blocks.erase(self->blocks.begin() + static_cast<long>(i));
        break;
      }
    if (self->device) cudaFree(ptr);
    else std::free(ptr);
  }
};

// A kernel instance and its plans through the real C ABI.
class Kernel {
 public:
  Kernel(const PluginHandle& plugin, const char* config_json, lca_log_fn log = nullptr)
      : vt_(plugin.kernel()) {
    const std::string dir = plugin_dir().string();
    lca_host_info info{sizeof(lca_host_info), LCA_ABI_VERSION, dir.c_str(), nullptr, config_json, log, nullptr};
    if (vt_.create(&info, &kernel_) != LCA_OK) throw std::runtime_error(std::string("create: ") + vt_.last_error());
  }
  ~Kernel() { vt_.destroy(kernel_); }
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  // A plan, or nullptr with status and message.
  struct Plan {
    const Kernel* owner = nullptr;
    lca_plan* plan = nullptr;
    const lca_exec* exec = nullptr;
    lca_status status = LCA_OK;
    std::string message;
    Plan() = default;
    Plan(Plan&& o) noexcept : owner(o.owner), plan(o.plan), exec(o.exec), status(o.status), message(o.message) {
      o.plan = nullptr;
    }
    ~Plan() {
      if (plan != nullptr) owner->vt_.destroy_plan(owner->kernel_, plan, exec);
    }
  };

  Plan plan(const lca_problem& problem, const lca_mask& mask, const lca_exec& exec) const {
    Plan p;
    p.owner = this;
    p.exec = &exec;
    p.status = vt_.plan(kernel_, &problem, &mask, &exec, &p.plan);
    if (p.status != LCA_OK) p.message = vt_.last_error();
    return p;
  }
  void forward(const Plan& p, const lca_fwd_args& a, const lca_exec& exec) const {
    if (vt_.forward(kernel_, p.plan, &a, &exec) != LCA_OK)
      throw std::runtime_error(std::string("forward: ") + vt_.last_error());
  }
  void backward(const Plan& p, const lca_bwd_args& a, const lca_exec& exec) const {
    if (vt_.backward(kernel_, p.plan, &a, &exec) != LCA_OK)
      throw std::runtime_error(std::string("backward: ") + vt_.last_error());
  }

 private:
  const lca_kernel_vtable& vt_;
  lca_kernel* kernel_ = nullptr;
};

// A dense {s0, s1, s2} tensor on the device (or, with host storage, in f32 on the host).
class Tensor {
 public:
  Tensor(int32_t dtype, std::array<int64_t, 3> shape, bool on_device)
      : dtype_(dtype), shape_(shape), device_(on_device) {
    const size_t bytes = static_cast<size_t>(numel()) * dtype_size(dtype);
    if (device_) {
      cuda_ok(cudaMalloc(&data_, std::max<size_t>(bytes, 1)), "cudaMalloc");
      cuda_ok(cudaMemset(data_, 0xff, bytes), "cudaMemset");  // NaN in every float type
    } else {
      host_.assign(std::max<size_t>(bytes, 1), 0xff);
      data_ = host_.data();
    }
  }
  ~Tensor() {
    if (device_) cudaFree(data_);
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  int64_t numel() const { return shape_[0] * shape_[1] * shape_[2]; }
  void* data() const { return data_; }
  int32_t dtype() const { return dtype_; }
  lca_tensor view() const {
    return lca_tensor{sizeof(lca_tensor), dtype_, data_, {shape_[0], shape_[1], shape_[2]},
                      {shape_[1] * shape_[2], shape_[2], 1}};
  }
  // All values as double (copied from the device when needed).
  std::vector<double> values() const {
    std::vector<unsigned char> bytes(static_cast<size_t>(numel()) * dtype_size(dtype_));
    if (device_) cuda_ok(cudaMemcpy(bytes.data(), data_, bytes.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    else std::copy(host_.begin(), host_.begin() + static_cast<long>(bytes.size()), bytes.begin());
    std::vector<double> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[i] = load_as_double(bytes.data(), dtype_, i);
    return out;
  }
  // Host tensors only: set from values (converted to this tensor's dtype).
  void assign(const std::vector<double>& v) {
    for (int64_t i = 0; i < numel(); ++i) store_from_double(host_.data(), dtype_, i, v[i]);
  }

 private:
  int32_t dtype_;
  std::array<int64_t, 3> shape_;
  bool device_;
  void* data_ = nullptr;
  std::vector<unsigned char> host_;
};

// ||a - b|| / ||b||; infinity when anything is not finite.
inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace lca::test
