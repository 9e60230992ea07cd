// fa4: FlashAttention-4 (flash-attn-4 on the CUTLASS CuTe DSL, Hopper kernels) as an lca kernel,
// through the embedded CPython interpreter shared with torch_flex. create() starts Python and
// imports lca_fa4.py (which imports FA4 from the site folder the options or LCA_FA4_SITE name);
// plan() reads the mask as documents plus full / causal / a window (fa4_mask), and the Python
// Plan compiles and warms up FA4 forward and backward for the shape outside the timed region
// (compile times in plan_info); forward()/backward() wrap the host's buffers as DLPack capsules
// (no copy) and call FA4 on the host's stream, writing straight into lca's O, LSE, dQ, dK, dV.
#include "fa4_mask.hpp"
#include "plugins/kernels/torch_common/python_peer.hpp"

#include <lca/lca.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#ifndef LCA_PEER_PYTHON
#define LCA_PEER_PYTHON "python3"
#endif

namespace lca_fa4 {
namespace {

using namespace lca_torch;  // the embedded interpreter (torch_common/python_runtime.hpp)

using lca::Error;

class Fa4 final : public lca::IKernel {
 public:
  explicit Fa4(const lca_host_info& host) : log_(host.log), log_ctx_(host.log_ctx) {
    std::string site;
    try {
      const nlohmann::json config =
          nlohmann::json::parse(host.config_json && *host.config_json ? host.config_json : "{}");
      for (const auto& [key, value] : config.items())
        lca::require(key == "site" || key == "warm_backward", LCA_ERR_INVALID_ARGUMENT,
                     "fa4: unknown option '" + key + "' (site, warm_backward)");
      warm_backward_ = config.value("warm_backward", true);
      site = config.value("site", std::string());
    } catch (const nlohmann::json::exception& e) {
      throw Error(LCA_ERR_INVALID_ARGUMENT, std::string("fa4: bad config: ") + e.what());
    }
    // Where FA4 lives is the machine's business, like the interpreter: an environment
    // variable serves when no option names it.
    const char* site_env = std::getenv("LCA_FA4_SITE");
    if (site.empty() && site_env != nullptr) site = site_env;
    const auto t0 = std::chrono::steady_clock::now();
    PeerModule peer = import_peer_module(host, "fa4", "lca_fa4", {"lca_fa4.py"}, "fa4: import lca_fa4", LCA_PEER_PYTHON);
    const std::string& python = peer.python;
    Gil gil;
    module_ = std::move(peer.module);
    PyRef library(PyObject_CallMethod(module_.get(), "load", "s", site.c_str()));
    if (!library) {
      const std::string from = site.empty() ? "the interpreter's own path (no site folder given)" : site;
      try {
        throw_python_error("fa4: import flash_attn.cute from " + from);
      } catch (const Error& e) {
        throw Error(LCA_ERR_INVALID_ARGUMENT,
                    std::string(e.what()) +
                        "; tools/fetch_fa4.sh prepares a site folder, named by the option {\"site\": DIR} or "
                        "LCA_FA4_SITE (plugins/kernels/fa4/README.md)");
      }
    }
    const char* text = PyUnicode_AsUTF8(library.get());
    log(2, "fa4: " + std::string(text ? text : "?") + " from " + (site.empty() ? python : site) + ", imported in " +
               std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) + " s");
  }
  ~Fa4() override {
    if (!module_) return;
    Gil gil;
    module_ = PyRef();
  }

  std::unique_ptr<lca::IPlan> plan(const lca_problem& p, const lca_mask& mask, const lca_exec& exec) override {
    const auto t0 = std::chrono::steady_clock::now();
    validate(p, mask);
    Fa4Mask f;
    try {
      f = build_fa4_mask(mask);
    } catch (const Error& e) {
      throw Error(e.status(), std::string("fa4: ") + e.what());
    }
    auto pl = std::make_unique<PythonPlan>(p, Layout::thd, "fa4");
    pl->mask_summary = f.describe();
    pl->mask_build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    pl->create(module_.get(), exec, warm_backward_, [&](const PythonPlan::PutArg& put) {
      put("seqlen", PyLong_FromLongLong(p.seqlen_q));
      put("heads_q", PyLong_FromLong(p.heads_q));
      put("heads_kv", PyLong_FromLong(p.heads_kv));
      if (f.varlen()) {
        put("cu_seqlens", PyBytes_FromStringAndSize(reinterpret_cast<const char*>(f.cu_seqlens.data()),
                                                    static_cast<Py_ssize_t>(f.cu_seqlens.size() * sizeof(int32_t))));
      } else {
        Py_INCREF(Py_None);
        put("cu_seqlens", Py_None);
      }
      put("max_doc", PyLong_FromLongLong(f.max_doc));
      put("form", PyUnicode_FromString(form_name(f.form)));
      put("window_left", PyLong_FromLongLong(f.window_left));
      put("window_right", PyLong_FromLongLong(f.window_right));
    });
    pl->plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log(1, "fa4: " + pl->mask_summary + "; plan " + std::to_string(pl->plan_ms) + " ms");
    return pl;
  }

  void forward(lca::IPlan& base, const lca_fwd_args& a, const lca_exec& /*exec*/) override {
    auto& pl = static_cast<PythonPlan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_fwd_args), LCA_ERR_INVALID_ARGUMENT, "fa4: lca_fwd_args too small");
    check_thd(a.q, "q", p, p.heads_q);
    check_thd(a.k, "k", p, p.heads_kv);
    check_thd(a.v, "v", p, p.heads_kv);
    check_thd(a.o, "o", p, p.heads_q);
    check_lse(a.lse, p);
    pl.forward(a);
  }

  void backward(lca::IPlan& base, const lca_bwd_args& a, const lca_exec& /*exec*/) override {
    auto& pl = static_cast<PythonPlan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_bwd_args), LCA_ERR_INVALID_ARGUMENT, "fa4: lca_bwd_args too small");
    for (auto [t, n] : {std::pair{&a.q, "q"}, {&a.o, "o"}, {&a.d_o, "d_o"}, {&a.dq, "dq"}}) check_thd(*t, n, p, p.heads_q);
    for (auto [t, n] : {std::pair{&a.k, "k"}, {&a.v, "v"}, {&a.dk, "dk"}, {&a.dv, "dv"}}) check_thd(*t, n, p, p.heads_kv);
    check_lse(a.lse, p);
    pl.backward(a);
  }

 private:
  static void validate(const lca_problem& p, const lca_mask& mask) {
    lca::require(p.struct_size >= sizeof(lca_problem), LCA_ERR_INVALID_ARGUMENT, "fa4: lca_problem too small");
    lca::require(p.device_type == LCA_DEVICE_CUDA, LCA_ERR_UNSUPPORTED, "fa4: runs on CUDA devices only");
    lca::require(p.dtype == LCA_DTYPE_BF16 || p.dtype == LCA_DTYPE_F16, LCA_ERR_UNSUPPORTED,
                 std::string("fa4: dtype ") + lca::dtype_name(p.dtype) + " unsupported (bf16, f16)");
    const int32_t d = p.head_dim;
    lca::require(d >= 8 && d <= 256 && d % 8 == 0, LCA_ERR_UNSUPPORTED,
                 "fa4: head_dim " + std::to_string(d) + " unsupported (FA4 on sm90: a multiple of 8 from 8 to 256)");
    lca::require(p.heads_q > 0 && p.heads_kv > 0 && p.heads_q % p.heads_kv == 0, LCA_ERR_INVALID_ARGUMENT,
                 "fa4: heads_q must be a positive multiple of heads_kv");
    lca::require(p.seqlen_q > 0 && p.seqlen_k > 0 && mask.seqlen_q == p.seqlen_q && mask.seqlen_k == p.seqlen_k,
                 LCA_ERR_INVALID_ARGUMENT, "fa4: the mask's size differs from the problem's");
  }

  static void check_thd(const lca_tensor& t, const char* what, const lca_problem& p, int64_t heads) {
    const int64_t d = p.head_dim, tokens = p.seqlen_q;
    lca::require(t.struct_size >= sizeof(lca_tensor) && t.data != nullptr && t.dtype == p.dtype &&
                     t.shape[0] == tokens && t.shape[1] == heads && t.shape[2] == d && t.stride[2] == 1 &&
                     t.stride[1] == d && t.stride[0] == heads * d,
                 LCA_ERR_INVALID_ARGUMENT,
                 std::string("fa4: ") + what + " must be a dense THD " + lca::dtype_name(p.dtype) + " tensor {" +
                     std::to_string(tokens) + ", " + std::to_string(heads) + ", " + std::to_string(d) + "}");
  }

  // FA4 writes LSE itself, rows contiguous.
  static void check_lse(const lca_tensor& t, const lca_problem& p) {
    lca::require(t.struct_size >= sizeof(lca_tensor) && t.dtype == LCA_DTYPE_F32 && t.data != nullptr &&
                     t.shape[0] == p.heads_q && t.shape[1] == p.seqlen_q && t.stride[1] == 1 &&
                     t.stride[0] >= p.seqlen_q,
                 LCA_ERR_INVALID_ARGUMENT,
                 "fa4: lse must be fp32 {" + std::to_string(p.heads_q) + ", " + std::to_string(p.seqlen_q) +
                     ", 1} with contiguous rows");
  }

  void log(int32_t level, const std::string& message) const {
    if (log_ != nullptr) log_(log_ctx_, level, message.c_str());
  }

  PyRef module_;
  bool warm_backward_ = true;
  lca_log_fn log_ = nullptr;
  void* log_ctx_ = nullptr;
};

}  // namespace
}  // namespace lca_fa4

LCA_EXPORT_KERNEL(lca_fa4::Fa4, "fa4", "0.1.0", true)
