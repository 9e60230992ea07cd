// Test harness for the cpu_reference contract tests: host-side THD tensors in any dtype and
// strides, a counting host allocator, and calls into the plugin through the real C ABI.
// Used by test_forward.cpp, test_backward.cpp and test_errors.cpp.
// Rule: every Tensor handed to the plugin must outlive the call that reads or writes it.
#pragma once

#include "plugin_handle.hpp"

#include <lca/abi.h>
#include <lca/types.hpp>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace lca::test {

// A host tensor {s0, s1, s2} of `dtype`; element (a, b, c) at offset a*stride0 + b*stride1 + c*stride2.
class Tensor {
 public:
  Tensor() = default;
  Tensor(int32_t dtype, std::array<int64_t, 3> shape)
      : Tensor(dtype, shape, {shape[1] * shape[2], shape[2], 1}) {}
  Tensor(int32_t dtype, std::array<int64_t, 3> shape, std::array<int64_t, 3> stride)
      : dtype_(dtype), shape_(shape), stride_(stride) {
    int64_t span = 1;
    for (int i = 0; i < 3; ++i) span += (shape[i] - 1) * stride[i];
    bytes_.assign(static_cast<size_t>(std::max<int64_t>(span, 1)) * dtype_size(dtype), 0xff);
  }

  int32_t dtype() const { return dtype_; }
  const std::array<int64_t, 3>& shape() const { return shape_; }
  int64_t numel() const { return shape_[0] * shape_[1] * shape_[2]; }
  int64_t offset(int64_t a, int64_t b, int64_t c) const {
    return a * stride_[0] + b * stride_[1] + c * stride_[2];
  }
  double get(int64_t a, int64_t b, int64_t c) const {
    return load_as_double(bytes_.data(), dtype_, offset(a, b, c));
  }
  void set(int64_t a, int64_t b, int64_t c, double value) {
    store_from_double(bytes_.data(), dtype_, offset(a, b, c), value);
  }
  // Flat index in shape order, for comparisons.
  double at(int64_t flat) const {
    return get(flat / (shape_[1] * shape_[2]), flat / shape_[2] % shape_[1], flat % shape_[2]);
  }
  void set_at(int64_t flat, double value) {
    set(flat / (shape_[1] * shape_[2]), flat / shape_[2] % shape_[1], flat % shape_[2], value);
  }
  void fill_random(std::mt19937_64& rng, double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; i < numel(); ++i) set_at(i, u(rng));
  }
  lca_tensor view() {
    return lca_tensor{sizeof(lca_tensor), dtype_, bytes_.data(), {shape_[0], shape_[1], shape_[2]},
                      {stride_[0], stride_[1], stride_[2]}};
  }

 private:
  int32_t dtype_ = LCA_DTYPE_F32;
  std::array<int64_t, 3> shape_{0, 0, 0}, stride_{0, 0, 0};
  std::vector<unsigned char> bytes_;
};

// malloc/free that counts live blocks; can be told to refuse everything.
struct CountingAllocator {
  int64_t live = 0;
  int64_t calls = 0;
  bool refuse = false;
  lca_allocator abi{sizeof(lca_allocator), this, &alloc, &release};

  static lca_status alloc(void* ctx, size_t bytes, void** out) {
    auto* self = static_cast<CountingAllocator*>(ctx);
    ++self->calls;
    *out = self->refuse ? nullptr : std::malloc(bytes);
    if (*out == nullptr) return LCA_ERR_OUT_OF_MEMORY;
    ++self->live;
    return LCA_OK;
  }
  static void release(void* ctx, void* ptr) {
    auto* self = static_cast<CountingAllocator*>(ctx);
    --self->live;
    std::free(ptr);
  }
};

struct Problem {
  int64_t seqlen_q = 0, seqlen_k = 0;
  int32_t heads_q = 1, heads_kv = 1, head_dim = 16;
  int32_t dtype = LCA_DTYPE_F32;
  float softmax_scale = 0.25f;
  std::vector<lca_slice> slices;

  lca_problem abi(int32_t device = LCA_DEVICE_CPU) const {
    return lca_problem{sizeof(lca_problem), dtype, device, 0, seqlen_q, seqlen_k,
                       heads_q, heads_kv, head_dim, softmax_scale};
  }
  lca_mask mask() const {
    return lca_mask{sizeof(lca_mask), seqlen_q, seqlen_k, static_cast<int64_t>(slices.size()),
                    slices.data(), nullptr, 0, nullptr};
  }
  Tensor make_q() const { return Tensor(dtype, {seqlen_q, heads_q, head_dim}); }
  Tensor make_kv() const { return Tensor(dtype, {seqlen_k, heads_kv, head_dim}); }
  Tensor make_lse() const { return Tensor(LCA_DTYPE_F32, {heads_q, seqlen_q, 1}); }
};

inline const PluginHandle& reference_plugin() {
  static const PluginHandle handle("cpu_reference");
  return handle;
}

struct Outcome {
  lca_status status = LCA_OK;
  std::string message;
};

// One kernel instance (created with `config_json`) and one plan, through the C vtable.
class Kernel {
 public:
  explicit Kernel(const std::string& config_json = "{}", int32_t threads = 2)
      : vt_(reference_plugin().kernel()), config_(config_json) {
    host_ = lca_host_info{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr,
                          config_.c_str(), nullptr, nullptr};
    exec_ = lca_exec{sizeof(lca_exec), nullptr, &allocator.abi, threads};
    created = outcome(vt_.create(&host_, &kernel_));
  }
  ~Kernel() {
    if (plan_ != nullptr) vt_.destroy_plan(kernel_, plan_, &exec_);
    if (kernel_ != nullptr) vt_.destroy(kernel_);
  }
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  Outcome plan(const lca_problem& problem, const lca_mask& mask) {
    if (plan_ != nullptr) vt_.destroy_plan(kernel_, plan_, &exec_);
    plan_ = nullptr;
    return outcome(vt_.plan(kernel_, &problem, &mask, &exec_, &plan_));
  }
  Outcome plan(const Problem& p) {
    const lca_problem problem = p.abi();
    const lca_mask mask = p.mask();
    return plan(problem, mask);
  }
  Outcome forward(Tensor& q, Tensor& k, Tensor& v, Tensor& o, Tensor& lse) {
    const lca_fwd_args args{sizeof(lca_fwd_args), q.view(), k.view(), v.view(), o.view(), lse.view()};
    return outcome(vt_.forward(kernel_, plan_, &args, &exec_));
  }
  Outcome backward(Tensor& q, Tensor& k, Tensor& v, Tensor& o, Tensor& d_o, Tensor& lse,
                   Tensor& dq, Tensor& dk, Tensor& dv) {
    const lca_bwd_args args{sizeof(lca_bwd_args), q.view(),  k.view(),  v.view(),
                            o.view(),             d_o.view(), lse.view(), dq.view(),
                            dk.view(),            dv.view()};
    return outcome(vt_.backward(kernel_, plan_, &args, &exec_));
  }

  CountingAllocator allocator;
  Outcome created;

 private:
  Outcome outcome(lca_status status) const {
    return {status, status == LCA_OK ? std::string() : std::string(vt_.last_error())};
  }
  const lca_kernel_vtable& vt_;
  std::string config_;
  lca_host_info host_{};
  lca_exec exec_{};
  lca_kernel* kernel_ = nullptr;
  lca_plan* plan_ = nullptr;
};

}  // namespace lca::test
