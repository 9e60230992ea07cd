// vsa_triton: Video Sparse Attention's Triton kernels (fastvideo-kernel) as an lca kernel, through
// the embedded CPython interpreter that the PyTorch peers share. create() starts Python (once per
// process) and imports lca_vsa.py from the plugin's python/ folder; plan() refuses what VSA cannot
// run, turns the mask's block-sparse form into VSA's tile lists on the host (vsa_blocks) and hands
// them to a Python Plan, which compiles and autotunes the kernels for the shape outside the timed
// region; forward()/backward() wrap the host's buffers as DLPack capsules (no copy) and call the
// Plan on the host's stream.
#include "vsa_blocks.hpp"
#include "plugins/kernels/torch_common/python_peer.hpp"

#include <lca/lca.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#ifndef LCA_PEER_PYTHON
#define LCA_PEER_PYTHON "python3"
#endif

namespace lca_vsa {
namespace {

using namespace lca_torch;  // the embedded interpreter (torch_common/python_runtime.hpp)

using lca::Error;

class VsaTriton final : public lca::IKernel {
 public:
  explicit VsaTriton(const lca_host_info& host) : log_(host.log), log_ctx_(host.log_ctx) {
    try {
      const nlohmann::json config =
          nlohmann::json::parse(host.config_json && *host.config_json ? host.config_json : "{}");
      for (const auto& [key, value] : config.items())
        lca::require(key == "warm_backward" && value.is_boolean(), LCA_ERR_INVALID_ARGUMENT,
                     "vsa_triton: unknown option '" + key + "' (the one option is warm_backward: true or false)");
      warm_backward_ = config.value("warm_backward", true);
    } catch (const nlohmann::json::exception& e) {
      throw Error(LCA_ERR_INVALID_ARGUMENT, std::string("vsa_triton: bad config: ") + e.what());
    }
    PeerModule peer =
        import_peer_module(host, "vsa_triton", "lca_vsa", {"lca_vsa.py", "fastvideo_kernel_vsa/block_sparse_attn_triton.py"},
                           "import lca_vsa (torch, triton, VSA's kernels)", LCA_PEER_PYTHON);
    Gil gil;
    module_ = std::move(peer.module);
    log(2, "vsa_triton: Python " + std::string(Py_GetVersion()).substr(0, 6) + " from " + peer.python +
               ", VSA imported in " + std::to_string(peer.seconds) + " s");
  }
  ~VsaTriton() override {
    if (!module_) return;
    Gil gil;
    module_ = PyRef();
  }

  std::unique_ptr<lca::IPlan> plan(const lca_problem& p, const lca_mask& mask, const lca_exec& exec) override {
    const auto t0 = std::chrono::steady_clock::now();
    validate(p, mask);
    VsaBlocks b;
    try {
      b = build_vsa_blocks(mask);
    } catch (const Error& e) {
      throw Error(e.status(), std::string("vsa_triton: ") + e.what());
    }
    auto pl = std::make_unique<PythonPlan>(p, Layout::bhsd, "vsa_triton");
    pl->mask_summary = b.describe();
    pl->mask_build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    pl->create(module_.get(), exec, warm_backward_, [&](const PythonPlan::PutArg& put) {
      put("seqlen_q", PyLong_FromLongLong(p.seqlen_q));
      put("seqlen_k", PyLong_FromLongLong(p.seqlen_k));
      put("heads", PyLong_FromLong(p.heads_q));
      put("q_tiles", PyLong_FromLongLong(b.q_tiles));
      put("kv_tiles", PyLong_FromLongLong(b.kv_tiles));
      put("max_kv", PyLong_FromLong(b.max_kv));
      put("q2k_idx", bytes_of(b.q2k_idx));
      put("q2k_num", bytes_of(b.q2k_num));
      put("kv_sizes", bytes_of(b.kv_sizes));
    });
    pl->plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log(1, "vsa_triton: " + pl->mask_summary + "; plan " + std::to_string(pl->plan_ms) + " ms");
    return pl;
  }

  void forward(lca::IPlan& base, const lca_fwd_args& a, const lca_exec& /*exec*/) override {
    auto& pl = static_cast<PythonPlan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_fwd_args), LCA_ERR_INVALID_ARGUMENT, "vsa_triton: lca_fwd_args too small");
    check_thd(a.q, "q", p, p.seqlen_q);
    check_thd(a.k, "k", p, p.seqlen_k);
    check_thd(a.v, "v", p, p.seqlen_k);
    check_thd(a.o, "o", p, p.seqlen_q);
    check_lse(a.lse, p);
    pl.forward(a);
  }

  void backward(lca::IPlan& base, const lca_bwd_args& a, const lca_exec& /*exec*/) override {
    auto& pl = static_cast<PythonPlan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_bwd_args), LCA_ERR_INVALID_ARGUMENT, "vsa_triton: lca_bwd_args too small");
    for (auto [t, n] : {std::pair{&a.q, "q"}, {&a.o, "o"}, {&a.d_o, "d_o"}, {&a.dq, "dq"}}) check_thd(*t, n, p, p.seqlen_q);
    for (auto [t, n] : {std::pair{&a.k, "k"}, {&a.v, "v"}, {&a.dk, "dk"}, {&a.dv, "dv"}}) check_thd(*t, n, p, p.seqlen_k);
    check_lse(a.lse, p);
    pl.backward(a);
  }

 private:
  // What the manifest declares, checked again here (a caller other than lcahost may ask), and
  // what only the problem shows.
  static void validate(const lca_problem& p, const lca_mask& mask) {
    lca::require(p.struct_size >= sizeof(lca_problem), LCA_ERR_INVALID_ARGUMENT, "vsa_triton: lca_problem too small");
    lca::require(p.device_type == LCA_DEVICE_CUDA, LCA_ERR_UNSUPPORTED, "vsa_triton: runs on CUDA devices only");
    lca::require(p.dtype == LCA_DTYPE_BF16, LCA_ERR_UNSUPPORTED,
                 std::string("vsa_triton: dtype ") + lca::dtype_name(p.dtype) +
                     " unsupported (bf16 only: VSA's Triton kernels round P and dS to bf16)");
    lca::require(p.head_dim == 64 || p.head_dim == 128, LCA_ERR_UNSUPPORTED,
                 "vsa_triton: head_dim " + std::to_string(p.head_dim) + " unsupported (64, 128)");
    lca::require(p.heads_q > 0 && p.heads_kv > 0, LCA_ERR_INVALID_ARGUMENT, "vsa_triton: heads must be positive");
    lca::require(p.heads_q == p.heads_kv, LCA_ERR_UNSUPPORTED,
                 "vsa_triton: no GQA (heads " + std::to_string(p.heads_q) + ":" + std::to_string(p.heads_kv) +
                     "): VSA's kernels read K and V of the query's own head");
    const double want = 1.0 / std::sqrt(static_cast<double>(p.head_dim));
    lca::require(std::abs(p.softmax_scale / want - 1.0) < 1e-6, LCA_ERR_UNSUPPORTED,
                 "vsa_triton: softmax scale " + std::to_string(p.softmax_scale) +
                     " unsupported (VSA fixes it at 1/sqrt(head_dim))");
    lca::require(p.seqlen_q > 0 && p.seqlen_k > 0 && mask.seqlen_q == p.seqlen_q && mask.seqlen_k == p.seqlen_k,
                 LCA_ERR_INVALID_ARGUMENT, "vsa_triton: the mask's size differs from the problem's");
  }

  static void check_thd(const lca_tensor& t, const char* what, const lca_problem& p, int64_t tokens) {
    const int64_t d = p.head_dim, heads = p.heads_q;
    lca::require(t.struct_size >= sizeof(lca_tensor) && t.data != nullptr && t.dtype == p.dtype &&
                     t.shape[0] == tokens && t.shape[1] == heads && t.shape[2] == d && t.stride[2] == 1 &&
                     t.stride[1] == d && t.stride[0] == heads * d,
                 LCA_ERR_INVALID_ARGUMENT,
                 std::string("vsa_triton: ") + what + " must be a dense THD " + lca::dtype_name(p.dtype) + " tensor {" +
                     std::to_string(tokens) + ", " + std::to_string(heads) + ", " + std::to_string(d) + "}");
  }

  static void check_lse(const lca_tensor& t, const lca_problem& p) {
    lca::require(t.struct_size >= sizeof(lca_tensor) && t.dtype == LCA_DTYPE_F32 && t.data != nullptr &&
                     t.shape[0] == p.heads_q && t.shape[1] == p.seqlen_q && t.stride[0] == p.seqlen_q &&
                     t.stride[1] == 1,
                 LCA_ERR_INVALID_ARGUMENT,
                 "vsa_triton: lse must be dense fp32 {" + std::to_string(p.heads_q) + ", " + std::to_string(p.seqlen_q) +
                     ", 1}");
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
}  // namespace lca_vsa

LCA_EXPORT_KERNEL(lca_vsa::VsaTriton, "vsa_triton", "0.1.0", true)
