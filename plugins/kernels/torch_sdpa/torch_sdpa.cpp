// torch_sdpa_*: the ATen operators behind torch.nn.functional.scaled_dot_product_attention, one
// backend per plugin, on the host's buffers and the host's stream.
//
// Why the backend operators and not scaled_dot_product_attention itself: the public function
// returns neither the log-sum-exp nor a backward that takes O and LSE, both of which the lca ABI
// needs. Its backends are public ATen operators (_scaled_dot_product_{flash,efficient,cudnn}_
// attention and their _backward), the very calls SDPA's dispatcher and autograd make; plan()
// asks SDPA's own dispatcher (_fused_sdp_choice, with only this backend enabled) whether it
// would run the cell, and refuses with the dispatcher's reasons when not.
//
// Inputs are zero-copy views of the host's THD buffers ([1, H, S, D] with strides
// {S*H*D, D, H*D, 1}, the layout SDPA's kernels take). The operators allocate their outputs (O,
// LSE, dQ/dK/dV) from torch's caching allocator; each call copies them into the host's buffers
// (one device copy per output, inside the timed region) and plan_info reports torch's peak.
#include "torch_sdpa.hpp"

#include "plugins/kernels/torch_common/row_intervals.hpp"

#include <lca/lca.hpp>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#ifndef LCA_TORCH_VERSION_STRING
#define LCA_TORCH_VERSION_STRING "unknown"
#endif

namespace lca_torch_sdpa {
namespace {

using lca::Error;

const char* plugin_name(Backend b) {
  switch (b) {
    case Backend::flash: return "torch_sdpa_flash";
    case Backend::efficient: return "torch_sdpa_efficient";
    default: return "torch_sdpa_cudnn";
  }
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::flash: return "flash_attention (FlashAttention-2)";
    case Backend::efficient: return "efficient_attention (memory-efficient, CUTLASS)";
    default: return "cudnn_attention (cuDNN fused attention)";
  }
}

at::SDPBackend sdp_backend(Backend b) {
  switch (b) {
    case Backend::flash: return at::SDPBackend::flash_attention;
    case Backend::efficient: return at::SDPBackend::efficient_attention;
    default: return at::SDPBackend::cudnn_attention;
  }
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

#define LCA_CUDA_CHECK(call)                                                                        \
  do {                                                                                              \
    const cudaError_t lca_err_ = (call);                                                            \
    if (lca_err_ != cudaSuccess)                                                                    \
      throw ::lca::Error(LCA_ERR_DEVICE, std::string("CUDA error ") + cudaGetErrorName(lca_err_) + \
                                             " in " #call " at " __FILE__ ":" + std::to_string(__LINE__)); \
  } while (0)

// Runs f, turning torch's exceptions into lca::Error with the plugin's name and one line.
template <class F>
auto torch_call(Backend b, const char* what, F&& f) {
  try {
    return f();
  } catch (const c10::OutOfMemoryError& e) {
    throw Error(LCA_ERR_OUT_OF_MEMORY, std::string(plugin_name(b)) + ": " + what + ": torch ran out of device memory: " +
                                           first_line(e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    throw Error(LCA_ERR_DEVICE, std::string(plugin_name(b)) + ": " + what + ": " + first_line(e.what_without_backtrace()));
  }
}

// Collects torch's warnings (the dispatcher explains its refusals through them).
struct WarningCollector final : c10::WarningHandler {
  std::vector<std::string> messages;
  void process(const c10::Warning& w) override { messages.push_back(first_line(w.msg())); }
};

// SDPA's own backend flags, set to exactly one backend for the dispatcher's answer.
class OnlyBackend {
 public:
  explicit OnlyBackend(Backend b) {
    auto& ctx = at::globalContext();
    saved_ = {ctx.userEnabledFlashSDP(), ctx.userEnabledMemEfficientSDP(), ctx.userEnabledCuDNNSDP(),
              ctx.userEnabledMathSDP()};
    ctx.setSDPUseFlash(b == Backend::flash);
    ctx.setSDPUseMemEfficient(b == Backend::efficient);
    ctx.setSDPUseCuDNN(b == Backend::cudnn);
    ctx.setSDPUseMath(false);
  }
  ~OnlyBackend() {
    auto& ctx = at::globalContext();
    ctx.setSDPUseFlash(saved_[0]);
    ctx.setSDPUseMemEfficient(saved_[1]);
    ctx.setSDPUseCuDNN(saved_[2]);
    ctx.setSDPUseMath(saved_[3]);
  }
  OnlyBackend(const OnlyBackend&) = delete;
  OnlyBackend& operator=(const OnlyBackend&) = delete;

 private:
  std::array<bool, 4> saved_{};
};

c10::ScalarType scalar_type(int32_t dtype) {
  return dtype == LCA_DTYPE_BF16 ? at::kBFloat16 : dtype == LCA_DTYPE_F16 ? at::kHalf : at::kFloat;
}

class SdpaPlan final : public lca::IPlan {
 public:
  lca_problem problem{};
  bool causal = false;
  bool expand_kv = false;      // GQA by repeating K/V heads (the backend takes equal head counts)
  c10::DeviceIndex device = 0;
  std::string dispatcher_note; // what SDPA's dispatcher said
  at::Tensor philox_seed, philox_offset;  // from the last forward (unused without dropout)
  int lse_dims = 0;            // of the backend's LSE, from the last forward (0: none yet)
  int64_t forwards = 0, backwards = 0;
  double plan_ms = 0;
  Backend backend = Backend::flash;

  void release(const lca_exec& /*exec*/) override {
    philox_seed = at::Tensor();
    philox_offset = at::Tensor();
    // Cached blocks would otherwise stay reserved for the cells of other kernels to trip over.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

  std::string info() const override {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    nlohmann::json j{{"library", std::string("torch ") + LCA_TORCH_VERSION_STRING},
                     {"backend", backend_name(backend)},
                     {"mask", causal ? "causal" : "full"},
                     {"gqa", problem.heads_q == problem.heads_kv ? "none" : expand_kv ? "K/V heads repeated in each call" : "native"},
                     {"torch_peak_bytes", stats.allocated_bytes[aggregate].peak},
                     {"outputs", "allocated by torch, copied into lca's buffers inside the timed call"},
                     {"plan_ms_in_plugin", plan_ms}};
    if (!dispatcher_note.empty()) j["dispatcher"] = dispatcher_note;
    if (backend == Backend::cudnn) {
      // The cuDNN torch was built against and the one the process loaded (the first libcudnn.so.9
      // in the process wins: with cudnn_sdpa loaded first, that is the system's).
      const auto& hooks = at::detail::getCUDAHooks();
      j["cudnn_built"] = hooks.versionCuDNN();
      j["cudnn_loaded"] = hooks.versionRuntimeCuDNN();
    }
    return j.dump();
  }
};

class SdpaKernel final : public lca::IKernel {
 public:
  SdpaKernel(const lca_host_info& host, Backend backend) : backend_(backend), log_(host.log), log_ctx_(host.log_ctx) {}

  std::unique_ptr<lca::IPlan> plan(const lca_problem& p, const lca_mask& mask, const lca_exec& exec) override {
    const auto t0 = std::chrono::steady_clock::now();
    validate(p);
    std::string why;
    const lca_torch::DenseForm form = lca_torch::dense_form(mask, &why);
    lca::require(form != lca_torch::DenseForm::other, LCA_ERR_UNSUPPORTED,
                 name() + ": runs full and causal masks only (SDPA's is_causal flag): " + why);
    auto plan = std::make_unique<SdpaPlan>();
    plan->problem = p;
    plan->backend = backend_;
    plan->causal = form == lca_torch::DenseForm::causal;
    plan->device = static_cast<c10::DeviceIndex>(p.device_index);
    torch_call(backend_, "plan", [&] {
      c10::cuda::CUDAGuard device_guard(plan->device);
      c10::cuda::CUDAStreamGuard stream_guard(stream_of(exec, plan->device));
      choose_gqa(*plan);  // grad mode on: the dispatcher's rules for training apply
      c10::cuda::CUDACachingAllocator::resetPeakStats(plan->device);
    });
    plan->plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log(1, name() + ": torch " LCA_TORCH_VERSION_STRING ", " + lca_torch::dense_form_name(form) + ", heads " +
               std::to_string(p.heads_q) + ":" + std::to_string(p.heads_kv) +
               (p.heads_q == p.heads_kv ? "" : plan->expand_kv ? " (K/V heads repeated)" : " (native GQA)"));
    return plan;
  }

  void forward(lca::IPlan& base, const lca_fwd_args& a, const lca_exec& exec) override {
    auto& pl = static_cast<SdpaPlan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_fwd_args), LCA_ERR_INVALID_ARGUMENT, name() + ": lca_fwd_args too small");
    check_thd(a.q, "q", p, p.seqlen_q, p.heads_q);
    check_thd(a.k, "k", p, p.seqlen_k, p.heads_kv);
    check_thd(a.v, "v", p, p.seqlen_k, p.heads_kv);
    check_thd(a.o, "o", p, p.seqlen_q, p.heads_q);
    check_lse(a.lse, p);
    torch_call(backend_, "forward", [&] {
      c10::cuda::CUDAGuard device_guard(pl.device);
      c10::cuda::CUDAStreamGuard stream_guard(stream_of(exec, pl.device));
      c10::NoGradGuard no_grad;
      const at::Tensor q = view(a.q, p.heads_q), o = view(a.o, p.heads_q);
      at::Tensor k = view(a.k, p.heads_kv), v = view(a.v, p.heads_kv);
      if (pl.expand_kv) {
        k = repeat_heads(k, p.heads_q / p.heads_kv);
        v = repeat_heads(v, p.heads_q / p.heads_kv);
      }
      auto [out, lse] = run_forward(pl, q, k, v);
      o.copy_(out);
      pl.lse_dims = static_cast<int>(lse.dim());
      const int64_t s = p.seqlen_q;
      // flash: {1, H, S}; efficient: {1, H, S rounded up to 32}; cuDNN: {1, H, S, 1}.
      const at::Tensor rows = lse.dim() == 4 ? lse.select(3, 0) : lse;
      lse_view(a.lse, p.heads_q).copy_(rows.narrow(2, 0, s));
      ++pl.forwards;
    });
  }

  void backward(lca::IPlan& base, const lca_bwd_args& a, const lca_exec& exec) override {
    auto& pl = static_cast<SdpaPlan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_bwd_args), LCA_ERR_INVALID_ARGUMENT, name() + ": lca_bwd_args too small");
    for (auto [t, n] : {std::pair{&a.q, "q"}, {&a.o, "o"}, {&a.d_o, "d_o"}, {&a.dq, "dq"}})
      check_thd(*t, n, p, p.seqlen_q, p.heads_q);
    for (auto [t, n] : {std::pair{&a.k, "k"}, {&a.v, "v"}, {&a.dk, "dk"}, {&a.dv, "dv"}})
      check_thd(*t, n, p, p.seqlen_k, p.heads_kv);
    check_lse(a.lse, p);
    torch_call(backend_, "backward", [&] {
      c10::cuda::CUDAGuard device_guard(pl.device);
      c10::cuda::CUDAStreamGuard stream_guard(stream_of(exec, pl.device));
      c10::NoGradGuard no_grad;
      const int64_t group = p.heads_q / p.heads_kv;
      const at::Tensor q = view(a.q, p.heads_q), o = view(a.o, p.heads_q), d_o = view(a.d_o, p.heads_q);
      at::Tensor k = view(a.k, p.heads_kv), v = view(a.v, p.heads_kv);
      if (pl.expand_kv) {
        k = repeat_heads(k, group);
        v = repeat_heads(v, group);
      }
      auto [dq, dk, dv] = run_backward(pl, q, k, v, o, d_o, backend_lse(pl, a.lse));
      view(a.dq, p.heads_q).copy_(dq);
      if (pl.expand_kv) {
        sum_groups(dk, group, view(a.dk, p.heads_kv));
        sum_groups(dv, group, view(a.dv, p.heads_kv));
      } else {
        view(a.dk, p.heads_kv).copy_(dk);
        view(a.dv, p.heads_kv).copy_(dv);
      }
      ++pl.backwards;
    });
  }

 private:
  std::string name() const { return plugin_name(backend_); }

  void validate(const lca_problem& p) const {
    lca::require(p.struct_size >= sizeof(lca_problem), LCA_ERR_INVALID_ARGUMENT, name() + ": lca_problem too small");
    lca::require(p.device_type == LCA_DEVICE_CUDA, LCA_ERR_UNSUPPORTED, name() + ": runs on CUDA devices only");
    lca::require(p.dtype == LCA_DTYPE_BF16 || p.dtype == LCA_DTYPE_F16, LCA_ERR_UNSUPPORTED,
                 name() + ": dtype " + lca::dtype_name(p.dtype) + " unsupported (bf16, f16)");
    lca::require(p.head_dim > 0 && p.head_dim <= 256 && p.head_dim % 8 == 0, LCA_ERR_UNSUPPORTED,
                 name() + ": head_dim " + std::to_string(p.head_dim) + " unsupported (a multiple of 8 up to 256)");
    lca::require(p.heads_q > 0 && p.heads_kv > 0 && p.heads_q % p.heads_kv == 0, LCA_ERR_INVALID_ARGUMENT,
                 name() + ": heads_q must be a positive multiple of heads_kv");
    lca::require(p.seqlen_q > 0 && p.seqlen_q == p.seqlen_k, LCA_ERR_UNSUPPORTED,
                 name() + ": seqlen_q must equal seqlen_k and be positive");
  }

  void check_thd(const lca_tensor& t, const char* what, const lca_problem& p, int64_t tokens, int64_t heads) const {
    const int64_t d = p.head_dim;
    lca::require(t.struct_size >= sizeof(lca_tensor) && t.data != nullptr && t.dtype == p.dtype &&
                     t.shape[0] == tokens && t.shape[1] == heads && t.shape[2] == d && t.stride[2] == 1 &&
                     t.stride[1] == d && t.stride[0] == heads * d,
                 LCA_ERR_INVALID_ARGUMENT,
                 name() + ": " + what + " must be a dense THD " + lca::dtype_name(p.dtype) + " tensor {" +
                     std::to_string(tokens) + ", " + std::to_string(heads) + ", " + std::to_string(d) + "}");
  }

  void check_lse(const lca_tensor& t, const lca_problem& p) const {
    lca::require(t.struct_size >= sizeof(lca_tensor) && t.dtype == LCA_DTYPE_F32 && t.data != nullptr &&
                     t.shape[0] == p.heads_q && t.shape[1] == p.seqlen_q,
                 LCA_ERR_INVALID_ARGUMENT,
                 name() + ": lse must be fp32 {" + std::to_string(p.heads_q) + ", " + std::to_string(p.seqlen_q) + ", 1}");
  }

  static c10::cuda::CUDAStream stream_of(const lca_exec& exec, c10::DeviceIndex device) {
    return c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(exec.stream), device);
  }

  // [1, H, S, D] over the host's THD buffer, no copy.
  at::Tensor view(const lca_tensor& t, int64_t heads) const {
    const int64_t s = t.shape[0], d = t.shape[2];
    return at::from_blob(t.data, {1, heads, s, d}, {s * t.stride[0], t.stride[1], t.stride[0], t.stride[2]},
                         at::TensorOptions().dtype(scalar_type(t.dtype)).device(at::kCUDA, current_device()));
  }
  // [1, H, S] over the host's LSE {H, S, 1}.
  at::Tensor lse_view(const lca_tensor& t, int64_t heads) const {
    const int64_t s = t.shape[1];
    return at::from_blob(t.data, {1, heads, s}, {heads * t.stride[0], t.stride[0], t.stride[1]},
                         at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, current_device()));
  }
  static c10::DeviceIndex current_device() {
    int device = 0;
    LCA_CUDA_CHECK(cudaGetDevice(&device));
    return static_cast<c10::DeviceIndex>(device);
  }

  // The backend's LSE layout from the host's {H, S}: efficient wants S rounded up to 32, padded
  // with +inf (its backward reads the padding); cuDNN a trailing dimension of 1.
  at::Tensor backend_lse(const SdpaPlan& pl, const lca_tensor& t) const {
    at::Tensor lse = lse_view(t, pl.problem.heads_q);
    if (backend_ == Backend::efficient) {
      const int64_t s = pl.problem.seqlen_q, padded = (s + 31) / 32 * 32;
      return padded == s ? lse.contiguous()
                         : at::constant_pad_nd(lse, {0, padded - s}, std::numeric_limits<double>::infinity());
    }
    if (backend_ == Backend::cudnn && pl.lse_dims != 3) return lse.unsqueeze(3);
    return lse;
  }

  // THD-laid-out copy of K or V with each head repeated `group` times: [1, H*group, S, D].
  static at::Tensor repeat_heads(const at::Tensor& kv, int64_t group) {
    const int64_t h = kv.size(1), s = kv.size(2), d = kv.size(3);
    at::Tensor out = at::empty({1, s, h * group, d}, kv.options());
    out.view({1, s, h, group, d}).copy_(kv.transpose(1, 2).unsqueeze(3).expand({1, s, h, group, d}));
    return out.transpose(1, 2);
  }
  // dK of repeated heads -> dK of the original heads (sum over each group), into `into`.
  static void sum_groups(const at::Tensor& grad, int64_t group, const at::Tensor& into) {
    const int64_t hq = grad.size(1), s = grad.size(2), d = grad.size(3);
    const at::Tensor g = grad.transpose(1, 2).reshape({1, s, hq / group, group, d});
    at::Tensor thd = into.transpose(1, 2);  // [1, S, Hkv, D] over the host buffer
    at::sum_out(thd, g, {3});
  }

  std::tuple<at::Tensor, at::Tensor> run_forward(SdpaPlan& pl, const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v) const {
    const double scale = pl.problem.softmax_scale;
    switch (backend_) {
      case Backend::flash: {
        auto r = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, pl.causal, false, scale);
        pl.philox_seed = std::get<6>(r);
        pl.philox_offset = std::get<7>(r);
        return {std::get<0>(r), std::get<1>(r)};
      }
      case Backend::efficient: {
        auto r = at::_scaled_dot_product_efficient_attention(q, k, v, std::nullopt, true, 0.0, pl.causal, scale);
        pl.philox_seed = std::get<2>(r);
        pl.philox_offset = std::get<3>(r);
        return {std::get<0>(r), std::get<1>(r)};
      }
      default: {
        auto r = at::_scaled_dot_product_cudnn_attention(q, k, v, std::nullopt, true, 0.0, pl.causal, false, scale);
        pl.philox_seed = std::get<6>(r);
        pl.philox_offset = std::get<7>(r);
        return {std::get<0>(r), std::get<1>(r)};
      }
    }
  }

  std::tuple<at::Tensor, at::Tensor, at::Tensor> run_backward(SdpaPlan& pl, const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v, const at::Tensor& o,
                                                              const at::Tensor& d_o, const at::Tensor& lse) const {
    const double scale = pl.problem.softmax_scale;
    const int64_t s = pl.problem.seqlen_q;
    // Without dropout the random-state tensors are not read; a backward before any forward
    // still needs defined ones.
    if (!pl.philox_seed.defined()) {
      pl.philox_seed = at::zeros({1}, q.options().dtype(at::kLong));
      pl.philox_offset = at::zeros({1}, q.options().dtype(at::kLong));
    }
    switch (backend_) {
      case Backend::flash:
        return at::_scaled_dot_product_flash_attention_backward(d_o, q, k, v, o, lse, at::Tensor(), at::Tensor(), s, s,
                                                                0.0, pl.causal, pl.philox_seed, pl.philox_offset, scale);
      case Backend::efficient: {
        auto r = at::_scaled_dot_product_efficient_attention_backward(
            d_o, q, k, v, at::Tensor(), o, lse, pl.philox_seed, pl.philox_offset, 0.0, {true, true, true, false},
            pl.causal, scale);
        return {std::get<0>(r), std::get<1>(r), std::get<2>(r)};
      }
      default:
        return at::_scaled_dot_product_cudnn_attention_backward(d_o, q, k, v, o, lse, pl.philox_seed, pl.philox_offset,
                                                                at::Tensor(), at::Tensor(), at::Tensor(), s, s, 0.0,
                                                                pl.causal, scale);
    }
  }

  // Asks SDPA's dispatcher, with only this backend enabled, whether it runs the cell: K/V as
  // given (native GQA) first, then with K/V heads repeated. The efficient backend's kernels take
  // equal head counts (its backward checks so), so GQA there always repeats K/V, as SDPA's
  // math path does.
  void choose_gqa(SdpaPlan& pl) const {
    const lca_problem& p = pl.problem;
    const bool gqa = p.heads_q != p.heads_kv;
    std::string refusal;
    if (!gqa || backend_ != Backend::efficient) {
      if (dispatcher_accepts(p, pl.causal, p.heads_kv, &refusal)) return;
      if (!gqa) throw Error(LCA_ERR_UNSUPPORTED, name() + ": SDPA would not run this cell on its backend: " + refusal);
    }
    std::string expanded_refusal;
    if (dispatcher_accepts(p, pl.causal, p.heads_q, &expanded_refusal)) {
      pl.expand_kv = true;
      pl.dispatcher_note = refusal.empty() ? "" : "native GQA refused (" + refusal + "); K/V heads repeated";
      return;
    }
    throw Error(LCA_ERR_UNSUPPORTED, name() + ": SDPA would not run this cell on its backend: " + expanded_refusal);
  }

  // _fused_sdp_choice on tensors of the cell's shapes and strides (views of a small buffer:
  // the dispatcher reads shapes, strides, dtypes and devices, never data).
  bool dispatcher_accepts(const lca_problem& p, bool causal, int64_t heads_kv, std::string* why) const {
    const int64_t s = p.seqlen_q, d = p.head_dim;
    const auto opts = at::TensorOptions().dtype(scalar_type(p.dtype)).device(at::kCUDA, current_device());
    const at::Tensor anchor = at::empty({64}, opts);
    auto shaped = [&](int64_t h) {
      at::Tensor t = at::from_blob(anchor.data_ptr(), {1, h, s, d}, {s * h * d, d, h * d, 1}, opts);
      t.set_requires_grad(true);  // as in training: some backends limit head dims with gradients
      return t;
    };
    const at::Tensor q = shaped(p.heads_q), k = shaped(heads_kv), v = shaped(heads_kv);
    WarningCollector warnings;
    int64_t choice = -1;
    {
      c10::WarningUtils::WarningHandlerGuard guard(&warnings);
      OnlyBackend only(backend_);
      try {
        choice = at::_fused_sdp_choice(q, k, v, std::nullopt, 0.0, causal, static_cast<double>(p.softmax_scale),
                                       p.heads_q != heads_kv);
      } catch (const c10::Error& e) {
        warnings.messages.push_back(first_line(e.what_without_backtrace()));
      }
    }
    if (choice == static_cast<int64_t>(sdp_backend(backend_))) return true;
    std::string text;
    for (const auto& m : warnings.messages) {
      // The dispatcher explains every backend; the others are off on purpose.
      if (m.find("disabled") != std::string::npos || m.find("not used because") != std::string::npos ||
          m.find("No available kernel") != std::string::npos)
        continue;
      text += (text.empty() ? "" : "; ") + m;
    }
    *why = text.empty() ? "the dispatcher chose backend " + std::to_string(choice) : text;
    return false;
  }

  void log(int32_t level, const std::string& message) const {
    if (log_ != nullptr) log_(log_ctx_, level, message.c_str());
  }

  Backend backend_;
  lca_log_fn log_ = nullptr;
  void* log_ctx_ = nullptr;
};

}  // namespace

std::unique_ptr<lca::IKernel> make_kernel(const lca_host_info& host, Backend backend) {
  // LibTorch is not made to be unloaded and loaded again in one process (its static operator
  // registrations and CUDA state outlive a dlclose), so once used, this plugin and with it
  // LibTorch stay loaded, as they do in lcahost, which holds every library for the whole run.
  static const bool pinned = [] {
    Dl_info self{};
    return dladdr(reinterpret_cast<void*>(&make_kernel), &self) != 0 && self.dli_fname != nullptr &&
           dlopen(self.dli_fname, RTLD_NOW | RTLD_NODELETE | RTLD_NOLOAD) != nullptr;
  }();
  (void)pinned;
  return std::make_unique<SdpaKernel>(host, backend);
}

}  // namespace lca_torch_sdpa
