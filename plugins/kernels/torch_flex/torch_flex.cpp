// torch_flex: PyTorch FlexAttention as an lca kernel, through an embedded CPython interpreter.
// create() starts Python (once per process) and imports lca_torch_flex.py from the plugin's
// python/ folder; plan() digests the slices on the host (flex_mask) and hands them to a Python
// Plan, which builds the BlockMask and compiles and warms up flex for the shape, outside the
// timed region (compile times come back through plan_info); forward()/backward() wrap the
// host's buffers as DLPack capsules (no copy) and call the Plan on the host's stream.
#include "flex_mask.hpp"
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

namespace lca_torch_flex {
namespace {

using namespace lca_torch;  // the embedded interpreter (torch_common/python_runtime.hpp)

using lca::Error;

class TorchFlex final : public lca::IKernel {
 public:
  explicit TorchFlex(const lca_host_info& host) : log_(host.log), log_ctx_(host.log_ctx) {
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(host.config_json && *host.config_json ? host.config_json : "{}");
      warm_backward_ = config.value("warm_backward", true);
      max_intervals_ = config.value("max_intervals", 16);
    } catch (const nlohmann::json::exception& e) {
      throw Error(LCA_ERR_INVALID_ARGUMENT, std::string("torch_flex: bad config: ") + e.what());
    }
    PeerModule peer = import_peer_module(host, "torch_flex", "lca_torch_flex", {"lca_torch_flex.py"},
                                         "import lca_torch_flex (and torch)", LCA_PEER_PYTHON);
    Gil gil;
    module_ = std::move(peer.module);
    log(2, "torch_flex: Python " + std::string(Py_GetVersion()).substr(0, 6) + " from " + peer.python +
               ", torch imported in " + std::to_string(peer.seconds) + " s");
  }
  ~TorchFlex() override {
    if (!module_) return;
    Gil gil;
    module_ = PyRef();
  }

  std::unique_ptr<lca::IPlan> plan(const lca_problem& p, const lca_mask& mask, const lca_exec& exec) override {
    const auto t0 = std::chrono::steady_clock::now();
    validate(p, mask);
    FlexMask f;
    try {
      f = build_flex_mask(mask, max_intervals_);
    } catch (const Error& e) {
      throw Error(e.status(), std::string("torch_flex: ") + e.what());
    }
    auto pl = std::make_unique<PythonPlan>(p, Layout::bhsd, "torch_flex");
    pl->mask_summary = f.describe();
    pl->mask_build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    pl->create(module_.get(), exec, warm_backward_, [&](const PythonPlan::PutArg& put) {
      put("seqlen_q", PyLong_FromLongLong(p.seqlen_q));
      put("seqlen_k", PyLong_FromLongLong(p.seqlen_k));
      put("heads_q", PyLong_FromLong(p.heads_q));
      put("heads_kv", PyLong_FromLong(p.heads_kv));
      put("block", PyLong_FromLong(f.block));
      put("q_blocks", PyLong_FromLongLong(f.q_blocks));
      put("kv_blocks", PyLong_FromLongLong(f.kv_blocks));
      put("kind", PyUnicode_FromString(f.kind == FlexMask::Kind::table ? "table" : "intervals"));
      put("width", PyLong_FromLong(f.width));
      put("lo", bytes_of(f.lo));
      put("hi", bytes_of(f.hi));
      put("table", bytes_of(f.table));
      put("table_block_q", PyLong_FromLong(f.table_block_q));
      put("table_block_k", PyLong_FromLong(f.table_block_k));
      put("table_rows", PyLong_FromLongLong(f.table_rows));
      put("table_cols", PyLong_FromLongLong(f.table_cols));
      put("kv_num", bytes_of(f.kv_num));
      put("kv_idx", bytes_of(f.kv_idx));
      put("full_num", bytes_of(f.full_num));
      put("full_idx", bytes_of(f.full_idx));
    });
    pl->plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log(1, "torch_flex: " + pl->mask_summary + "; plan " + std::to_string(pl->plan_ms) + " ms");
    return pl;
  }

  void forward(lca::IPlan& base, const lca_fwd_args& a, const lca_exec& /*exec*/) override {
    auto& pl = static_cast<PythonPlan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_fwd_args), LCA_ERR_INVALID_ARGUMENT, "torch_flex: lca_fwd_args too small");
    check_thd(a.q, "q", p, p.seqlen_q, p.heads_q);
    check_thd(a.k, "k", p, p.seqlen_k, p.heads_kv);
    check_thd(a.v, "v", p, p.seqlen_k, p.heads_kv);
    check_thd(a.o, "o", p, p.seqlen_q, p.heads_q);
    check_lse(a.lse, p);
    pl.forward(a);
  }

  void backward(lca::IPlan& base, const lca_bwd_args& a, const lca_exec& /*exec*/) override {
    auto& pl = static_cast<PythonPlan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_bwd_args), LCA_ERR_INVALID_ARGUMENT, "torch_flex: lca_bwd_args too small");
    for (auto [t, n] : {std::pair{&a.q, "q"}, {&a.o, "o"}, {&a.d_o, "d_o"}, {&a.dq, "dq"}})
      check_thd(*t, n, p, p.seqlen_q, p.heads_q);
    for (auto [t, n] : {std::pair{&a.k, "k"}, {&a.v, "v"}, {&a.dk, "dk"}, {&a.dv, "dv"}})
      check_thd(*t, n, p, p.seqlen_k, p.heads_kv);
    check_lse(a.lse, p);
    pl.backward(a);
  }

 private:
  static void validate(const lca_problem& p, const lca_mask& mask) {
    lca::require(p.struct_size >= sizeof(lca_problem), LCA_ERR_INVALID_ARGUMENT, "torch_flex: lca_problem too small");
    lca::require(p.device_type == LCA_DEVICE_CUDA, LCA_ERR_UNSUPPORTED, "torch_flex: runs on CUDA devices only");
    lca::require(p.dtype == LCA_DTYPE_BF16 || p.dtype == LCA_DTYPE_F16, LCA_ERR_UNSUPPORTED,
                 std::string("torch_flex: dtype ") + lca::dtype_name(p.dtype) + " unsupported (bf16, f16)");
    const int32_t d = p.head_dim;
    lca::require(d >= 16 && d <= 256 && (d & (d - 1)) == 0, LCA_ERR_UNSUPPORTED,
                 "torch_flex: head_dim " + std::to_string(d) + " unsupported (a power of two from 16 to 256)");
    lca::require(p.heads_q > 0 && p.heads_kv > 0 && p.heads_q % p.heads_kv == 0, LCA_ERR_INVALID_ARGUMENT,
                 "torch_flex: heads_q must be a positive multiple of heads_kv");
    lca::require(p.seqlen_q > 0 && p.seqlen_k > 0 && mask.seqlen_q == p.seqlen_q && mask.seqlen_k == p.seqlen_k,
                 LCA_ERR_INVALID_ARGUMENT, "torch_flex: the mask's size differs from the problem's");
  }

  static void check_thd(const lca_tensor& t, const char* what, const lca_problem& p, int64_t tokens, int64_t heads) {
    const int64_t d = p.head_dim;
    lca::require(t.struct_size >= sizeof(lca_tensor) && t.data != nullptr && t.dtype == p.dtype &&
                     t.shape[0] == tokens && t.shape[1] == heads && t.shape[2] == d && t.stride[2] == 1 &&
                     t.stride[1] == d && t.stride[0] == heads * d,
                 LCA_ERR_INVALID_ARGUMENT,
                 std::string("torch_flex: ") + what + " must be a dense THD " + lca::dtype_name(p.dtype) + " tensor {" +
                     std::to_string(tokens) + ", " + std::to_string(heads) + ", " + std::to_string(d) + "}");
  }

  static void check_lse(const lca_tensor& t, const lca_problem& p) {
    lca::require(t.struct_size >= sizeof(lca_tensor) && t.dtype == LCA_DTYPE_F32 && t.data != nullptr &&
                     t.shape[0] == p.heads_q && t.shape[1] == p.seqlen_q,
                 LCA_ERR_INVALID_ARGUMENT,
                 "torch_flex: lse must be fp32 {" + std::to_string(p.heads_q) + ", " + std::to_string(p.seqlen_q) + ", 1}");
  }

  void log(int32_t level, const std::string& message) const {
    if (log_ != nullptr) log_(log_ctx_, level, message.c_str());
  }

  PyRef module_;
  bool warm_backward_ = true;
  int32_t max_intervals_ = 16;
  lca_log_fn log_ = nullptr;
  void* log_ctx_ = nullptr;
};

}  // namespace
}  // namespace lca_torch_flex

LCA_EXPORT_KERNEL(lca_torch_flex::TorchFlex, "torch_flex", "0.1.0", true)
