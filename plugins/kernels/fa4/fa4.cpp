// fa4: FlashAttention-4 (flash-attn-4 on the CUTLASS CuTe DSL, Hopper kernels) as an lca kernel,
// through the embedded CPython interpreter shared with torch_flex. create() starts Python and
// imports lca_fa4.py (which imports FA4 from the site folder the options or LCA_FA4_SITE name);
// plan() reads the mask as documents plus full / causal / a window (fa4_mask), and the Python
// Plan compiles and warms up FA4 forward and backward for the shape outside the timed region
// (compile times in plan_info); forward()/backward() wrap the host's buffers as DLPack capsules
// (no copy) and call FA4 on the host's stream, writing straight into lca's O, LSE, dQ, dK, dV.
#include "fa4_mask.hpp"
#include "plugins/kernels/torch_common/python_runtime.hpp"

#include <lca/lca.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#ifndef LCA_FA4_PYTHON
#define LCA_FA4_PYTHON "python3"
#endif

namespace lca_fa4 {
namespace {

using namespace lca_torch;  // the embedded interpreter (torch_common/python_runtime.hpp)

using lca::Error;

// One tensor role of a call as the Python side last saw it, so that unchanged buffers are
// passed as None and the wrapped tensor is reused (less Python work inside the timed call).
struct Bound {
  void* data = nullptr;
  std::array<int64_t, 3> shape{}, stride{};
  bool same(const lca_tensor& t) const {
    return data == t.data && shape == std::array<int64_t, 3>{t.shape[0], t.shape[1], t.shape[2]} &&
           stride == std::array<int64_t, 3>{t.stride[0], t.stride[1], t.stride[2]};
  }
  void set(const lca_tensor& t) {
    data = t.data;
    shape = {t.shape[0], t.shape[1], t.shape[2]};
    stride = {t.stride[0], t.stride[1], t.stride[2]};
  }
};

enum Role { kQ, kK, kV, kO, kLse, kDo, kDq, kDk, kDv, kRoles };

class Fa4Plan final : public lca::IPlan {
 public:
  lca_problem problem{};
  PyRef plan;  // lca_fa4.Plan
  std::string mask_summary;
  double mask_build_ms = 0, plan_ms = 0;
  std::array<Bound, kRoles> bound{};

  ~Fa4Plan() override {
    if (!plan) return;
    Gil gil;
    plan = PyRef();
  }
  void release(const lca_exec& /*exec*/) override {
    if (!plan) return;
    Gil gil;
    PyRef r(PyObject_CallMethod(plan.get(), "close", nullptr));
    if (!r) PyErr_Clear();  // release() cannot fail; the objects go below all the same
    plan = PyRef();
  }
  std::string info() const override {
    if (!plan) return {};
    Gil gil;
    PyRef text(checked(PyObject_CallMethod(plan.get(), "info_json", nullptr), "plan info"));
    const char* s = PyUnicode_AsUTF8(text.get());
    if (s == nullptr) throw_python_error("plan info");
    nlohmann::json j = nlohmann::json::parse(s);
    j["mask"] = mask_summary;
    j["mask_build_ms"] = mask_build_ms;
    j["plan_ms_in_plugin"] = plan_ms;
    return j.dump();
  }

  // A role's argument: None when the same buffer as last time, else a fresh capsule over it,
  // in lca's own layout (THD {S, H, D}; LSE {H, S}).
  PyObject* arg(Role role, const lca_tensor& t, bool is_lse) {
    if (bound[role].same(t)) Py_RETURN_NONE;
    PyObject* capsule = nullptr;
    if (is_lse) {
      const int64_t shape[2] = {t.shape[0], t.shape[1]};
      const int64_t strides[2] = {t.stride[0], t.stride[1]};
      capsule = dlpack_capsule(t.data, LCA_DTYPE_F32, problem.device_index, 2, shape, strides);
    } else {
      capsule = dlpack_capsule(t.data, t.dtype, problem.device_index, 3, t.shape, t.stride);
    }
    bound[role].set(t);
    return capsule;
  }
  // After a failed call the Python side may hold fewer tensors than `bound` says: start over.
  void forget_bound() { bound = {}; }
};

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
    const char* env = std::getenv("LCA_TORCH_PYTHON");
    const std::string python = env && *env ? env : LCA_FA4_PYTHON;
    const std::filesystem::path module_dir = std::filesystem::path(host.plugin_dir ? host.plugin_dir : ".") / "python";
    lca::require(std::filesystem::exists(module_dir / "lca_fa4.py"), LCA_ERR_INVALID_ARGUMENT,
                 "fa4: " + (module_dir / "lca_fa4.py").string() +
                     " is missing; rebuild (it is copied beside the plugin) or reinstall");
    const auto t0 = std::chrono::steady_clock::now();
    start_python(python, module_dir.string());
    Gil gil;
    module_ = PyRef(checked(PyImport_ImportModule("lca_fa4"), "fa4: import lca_fa4 with " + python));
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
    auto pl = std::make_unique<Fa4Plan>();
    pl->problem = p;
    pl->mask_summary = f.describe();
    pl->mask_build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    {
      Gil gil;
      PyRef kwargs(checked(PyDict_New(), "kwargs"));
      auto put = [&](const char* key, PyObject* value) {
        PyRef v(checked(value, key));
        if (PyDict_SetItemString(kwargs.get(), key, v.get()) != 0) throw_python_error(key);
      };
      put("device", PyLong_FromLong(p.device_index));
      put("stream", PyLong_FromUnsignedLongLong(reinterpret_cast<uintptr_t>(exec.stream)));
      put("seqlen", PyLong_FromLongLong(p.seqlen_q));
      put("heads_q", PyLong_FromLong(p.heads_q));
      put("heads_kv", PyLong_FromLong(p.heads_kv));
      put("head_dim", PyLong_FromLong(p.head_dim));
      put("dtype", PyUnicode_FromString(lca::dtype_name(p.dtype)));
      put("scale", PyFloat_FromDouble(p.softmax_scale));
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
      put("warm_backward", PyBool_FromLong(warm_backward_));
      PyRef cls(checked(PyObject_GetAttrString(module_.get(), "Plan"), "lca_fa4.Plan"));
      PyRef args(checked(PyTuple_New(0), "args"));
      pl->plan = PyRef(checked(PyObject_Call(cls.get(), args.get(), kwargs.get()), "fa4: plan"));
    }
    pl->plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log(1, "fa4: " + pl->mask_summary + "; plan " + std::to_string(pl->plan_ms) + " ms");
    return pl;
  }

  void forward(lca::IPlan& base, const lca_fwd_args& a, const lca_exec& /*exec*/) override {
    auto& pl = static_cast<Fa4Plan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_fwd_args), LCA_ERR_INVALID_ARGUMENT, "fa4: lca_fwd_args too small");
    check_thd(a.q, "q", p, p.heads_q);
    check_thd(a.k, "k", p, p.heads_kv);
    check_thd(a.v, "v", p, p.heads_kv);
    check_thd(a.o, "o", p, p.heads_q);
    check_lse(a.lse, p);
    Gil gil;
    PyRef q, k, v, o, lse;
    try {
      q = PyRef(pl.arg(kQ, a.q, false));
      k = PyRef(pl.arg(kK, a.k, false));
      v = PyRef(pl.arg(kV, a.v, false));
      o = PyRef(pl.arg(kO, a.o, false));
      lse = PyRef(pl.arg(kLse, a.lse, true));
    } catch (...) {
      pl.forget_bound();
      throw;
    }
    PyRef r(PyObject_CallMethod(pl.plan.get(), "forward", "OOOOO", q.get(), k.get(), v.get(), o.get(), lse.get()));
    if (!r) {
      pl.forget_bound();
      throw_python_error("fa4: forward");
    }
  }

  void backward(lca::IPlan& base, const lca_bwd_args& a, const lca_exec& /*exec*/) override {
    auto& pl = static_cast<Fa4Plan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_bwd_args), LCA_ERR_INVALID_ARGUMENT, "fa4: lca_bwd_args too small");
    for (auto [t, n] : {std::pair{&a.q, "q"}, {&a.o, "o"}, {&a.d_o, "d_o"}, {&a.dq, "dq"}}) check_thd(*t, n, p, p.heads_q);
    for (auto [t, n] : {std::pair{&a.k, "k"}, {&a.v, "v"}, {&a.dk, "dk"}, {&a.dv, "dv"}}) check_thd(*t, n, p, p.heads_kv);
    check_lse(a.lse, p);
    Gil gil;
    std::array<PyRef, 9> t;
    try {
      const std::array<std::pair<Role, const lca_tensor*>, 9> roles{{{kQ, &a.q}, {kK, &a.k}, {kV, &a.v}, {kO, &a.o},
                                                                     {kDo, &a.d_o}, {kLse, &a.lse}, {kDq, &a.dq},
                                                                     {kDk, &a.dk}, {kDv, &a.dv}}};
      for (size_t i = 0; i < roles.size(); ++i) t[i] = PyRef(pl.arg(roles[i].first, *roles[i].second, roles[i].first == kLse));
    } catch (...) {
      pl.forget_bound();
      throw;
    }
    PyRef r(PyObject_CallMethod(pl.plan.get(), "backward", "OOOOOOOOO", t[0].get(), t[1].get(), t[2].get(),
                                t[3].get(), t[4].get(), t[5].get(), t[6].get(), t[7].get(), t[8].get()));
    if (!r) {
      pl.forget_bound();
      throw_python_error("fa4: backward");
    }
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
