// cudnn_sdpa: cuDNN 9's fused flash attention through cudnn-frontend graphs. plan() recognises
// the mask (mask_form), builds (or reuses) the forward and backward graphs for the shape, and
// allocates workspace and the per-document index arrays; forward()/backward() only bind pointers
// and execute (plus one small LSE transpose for document masks).
#include "check.hpp"
#include "graphs.hpp"
#include "lse_layout.hpp"
#include "mask_form.hpp"

#include <lca/lca.hpp>

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lca_cudnn_sdpa {
namespace {

using lca::Error;

std::string shape_str(const lca_tensor& t) {
  return "{" + std::to_string(t.shape[0]) + ", " + std::to_string(t.shape[1]) + ", " +
         std::to_string(t.shape[2]) + "}";
}

// Dense THD: {tokens, heads, d} with strides {heads*d, d, 1}, as the graphs assume.
void check_thd(const lca_tensor& t, const char* name, int32_t dtype, int64_t tokens, int64_t heads, int64_t d) {
  lca::require(t.struct_size >= sizeof(lca_tensor), LCA_ERR_INVALID_ARGUMENT,
               std::string("cudnn_sdpa: ") + name + ": lca_tensor.struct_size too small");
  lca::require(t.dtype == dtype, LCA_ERR_INVALID_ARGUMENT,
               std::string("cudnn_sdpa: ") + name + " has dtype " + lca::dtype_name(t.dtype) + ", expected " +
                   lca::dtype_name(dtype));
  lca::require(t.shape[0] == tokens && t.shape[1] == heads && t.shape[2] == d, LCA_ERR_INVALID_ARGUMENT,
               std::string("cudnn_sdpa: ") + name + " has shape " + shape_str(t) + ", expected {" +
                   std::to_string(tokens) + ", " + std::to_string(heads) + ", " + std::to_string(d) + "}");
  lca::require(t.stride[0] == heads * d && t.stride[1] == d && t.stride[2] == 1, LCA_ERR_UNSUPPORTED,
               std::string("cudnn_sdpa: ") + name + " must be dense THD (strides {heads*d, d, 1})");
  lca::require(t.data != nullptr, LCA_ERR_INVALID_ARGUMENT, std::string("cudnn_sdpa: ") + name + " is null");
}

// LSE {heads, tokens, 1} fp32. Single sequences bind it directly, so it must be dense there.
void check_lse(const lca_tensor& t, int64_t heads, int64_t tokens, bool ragged) {
  lca::require(t.struct_size >= sizeof(lca_tensor) && t.dtype == LCA_DTYPE_F32 && t.shape[0] == heads &&
                   t.shape[1] == tokens && t.data != nullptr,
               LCA_ERR_INVALID_ARGUMENT,
               "cudnn_sdpa: lse must be fp32 {" + std::to_string(heads) + ", " + std::to_string(tokens) +
                   ", 1}, got " + shape_str(t));
  lca::require(ragged || (t.stride[0] == tokens && t.stride[1] == 1), LCA_ERR_UNSUPPORTED,
               "cudnn_sdpa: lse must be dense (strides {tokens, 1, 1})");
}

// Graphs for one GraphKey, shared by every plan of that key. The backward graph may be
// unsupported where the forward is not; then backward() reports why.
struct Graphs {
  BuiltGraph fwd, bwd;
  std::string bwd_error;
};

class SdpaPlan final : public lca::IPlan {
 public:
  lca_problem problem{};
  MaskForm form;
  GraphKey key;
  std::shared_ptr<const Graphs> graphs;
  DeviceBuffer index;          // seq_len (int32 x B), then offsets q, kv, stats ((B+1) each)
  DeviceBuffer workspace;      // max of the two graphs' workspaces
  DeviceBuffer stats_tokens;   // ragged only: LSE in cuDNN's {tokens, heads} layout
  void* seq_len = nullptr;
  void* offset_q = nullptr;
  void* offset_kv = nullptr;
  void* offset_stats = nullptr;

  void release(const lca_exec& /*exec*/) override {
    index.reset();
    workspace.reset();
    stats_tokens.reset();
  }
};

class CudnnSdpa final : public lca::IKernel {
 public:
  explicit CudnnSdpa(const lca_host_info& host) : log_(host.log), log_ctx_(host.log_ctx) {
    // Options: {"fwd_plan": n, "bwd_plan": n} pin cuDNN's n-th engine candidate (default: its
    // heuristic choice); meant for engine studies, not for normal runs. {"offsets": "int32"}: the
    // ragged offsets in 32 bits where they fit (default int64, always; see plan()).
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(host.config_json && *host.config_json ? host.config_json : "{}");
      fwd_plan_ = config.value("fwd_plan", -1);
      bwd_plan_ = config.value("bwd_plan", -1);
      const std::string offsets = config.value("offsets", std::string("int64"));
      lca::require(offsets == "int64" || offsets == "int32", LCA_ERR_INVALID_ARGUMENT,
                   "cudnn_sdpa: option 'offsets' = '" + offsets + "' is not one of: int64, int32");
      offsets32_ = offsets == "int32";
    } catch (const nlohmann::json::exception& e) {
      throw Error(LCA_ERR_INVALID_ARGUMENT, std::string("cudnn_sdpa: bad config: ") + e.what());
    }
  }
  ~CudnnSdpa() override {
    graphs_.clear();
    if (handle_ != nullptr) cudnnDestroy(handle_);
  }

  std::unique_ptr<lca::IPlan> plan(const lca_problem& p, const lca_mask& mask, const lca_exec& exec) override {
    validate(p, mask);
    lca::require(exec.allocator != nullptr, LCA_ERR_INVALID_ARGUMENT, "cudnn_sdpa: lca_exec.allocator is null");
    auto plan = std::make_unique<SdpaPlan>();
    plan->problem = p;
    plan->form = recognise(mask);
    const MaskForm& f = plan->form;
    log(1, "cudnn_sdpa: mask recognised as " + f.describe());
    const int64_t total = p.seqlen_q;

    GraphKey& k = plan->key;
    k.dtype = p.dtype;
    k.ragged = f.ragged();
    k.batch = f.num_docs();
    k.max_len = f.max_doc_len;
    k.total = total;
    k.heads_q = p.heads_q;
    k.heads_kv = p.heads_kv;
    k.head_dim = p.head_dim;
    k.scale = p.softmax_scale;
    k.left = f.left;
    k.right = f.right;
    // Ragged offsets in 64 bits even where every offset fits 32: with 32-bit offsets cuDNN 9.14's
    // backward returns wrong dK and dV (rel L2 0.99; dQ right) on packed documents at 128K tokens,
    // heads 64:8, d128 (largest element offset 2^30), and right ones at 64K; with 64-bit offsets
    // they pass at the same speed (H100, tools/dev/matrices/cudnn-ragged-128k.json: 364 / 360 and
    // 440 / 435 TFLOP/s on causal_document / full_document). Where the 32-bit form goes wrong in
    // between is not known, so it is used only when asked for.
    k.offsets64 = !offsets32_ || total * p.heads_q * p.head_dim > INT32_MAX;

    cudaStream_t stream = static_cast<cudaStream_t>(exec.stream);
    bind(stream);
    plan->graphs = graphs_for(k);

    const int64_t fwd_ws = plan->graphs->fwd.workspace;
    const int64_t bwd_ws = plan->graphs->bwd.graph ? plan->graphs->bwd.workspace : 0;
    const size_t ws = static_cast<size_t>(std::max(fwd_ws, bwd_ws));
    plan->workspace = DeviceBuffer(exec.allocator, ws, "cuDNN workspace");
    if (k.ragged) {
      plan->stats_tokens = DeviceBuffer(exec.allocator, sizeof(float) * total * p.heads_q, "ragged LSE");
      upload_index(*plan, exec, stream);
    }
    return plan;
  }

  void forward(lca::IPlan& base, const lca_fwd_args& a, const lca_exec& exec) override {
    auto& pl = static_cast<SdpaPlan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(a.struct_size >= sizeof(lca_fwd_args), LCA_ERR_INVALID_ARGUMENT,
                 "cudnn_sdpa: lca_fwd_args.struct_size too small");
    check_thd(a.q, "q", p.dtype, p.seqlen_q, p.heads_q, p.head_dim);
    check_thd(a.k, "k", p.dtype, p.seqlen_k, p.heads_kv, p.head_dim);
    check_thd(a.v, "v", p.dtype, p.seqlen_k, p.heads_kv, p.head_dim);
    check_thd(a.o, "o", p.dtype, p.seqlen_q, p.heads_q, p.head_dim);
    check_lse(a.lse, p.heads_q, p.seqlen_q, pl.key.ragged);
    cudaStream_t stream = static_cast<cudaStream_t>(exec.stream);
    bind(stream);

    void* stats = pl.key.ragged ? pl.stats_tokens.get() : a.lse.data;
    std::vector<int64_t> uids{kQ, kK, kV, kO, kStats};
    std::vector<void*> ptrs{a.q.data, a.k.data, a.v.data, a.o.data, stats};
    add_index(pl, uids, ptrs);
    execute(handle_, pl.graphs->fwd, uids.data(), ptrs.data(), static_cast<int>(uids.size()), pl.workspace.get());
    if (pl.key.ragged)
      lse_tokens_to_heads(static_cast<const float*>(stats), static_cast<float*>(a.lse.data), a.lse.stride[0],
                          a.lse.stride[1], p.seqlen_q, p.heads_q, stream);
  }

  void backward(lca::IPlan& base, const lca_bwd_args& a, const lca_exec& exec) override {
    auto& pl = static_cast<SdpaPlan&>(base);
    const lca_problem& p = pl.problem;
    lca::require(pl.graphs->bwd.graph != nullptr, LCA_ERR_UNSUPPORTED, pl.graphs->bwd_error);
    lca::require(a.struct_size >= sizeof(lca_bwd_args), LCA_ERR_INVALID_ARGUMENT,
                 "cudnn_sdpa: lca_bwd_args.struct_size too small");
    for (auto [t, name] : {std::pair{&a.q, "q"}, {&a.o, "o"}, {&a.d_o, "d_o"}, {&a.dq, "dq"}})
      check_thd(*t, name, p.dtype, p.seqlen_q, p.heads_q, p.head_dim);
    for (auto [t, name] : {std::pair{&a.k, "k"}, {&a.v, "v"}, {&a.dk, "dk"}, {&a.dv, "dv"}})
      check_thd(*t, name, p.dtype, p.seqlen_k, p.heads_kv, p.head_dim);
    check_lse(a.lse, p.heads_q, p.seqlen_q, pl.key.ragged);
    cudaStream_t stream = static_cast<cudaStream_t>(exec.stream);
    bind(stream);

    void* stats = a.lse.data;
    if (pl.key.ragged) {
      stats = pl.stats_tokens.get();
      lse_heads_to_tokens(static_cast<const float*>(a.lse.data), a.lse.stride[0], a.lse.stride[1],
                          static_cast<float*>(stats), p.seqlen_q, p.heads_q, stream);
    }
    std::vector<int64_t> uids{kQ, kK, kV, kO, kdO, kStats, kdQ, kdK, kdV};
    std::vector<void*> ptrs{a.q.data, a.k.data, a.v.data, a.o.data, a.d_o.data, stats,
                            a.dq.data, a.dk.data, a.dv.data};
    add_index(pl, uids, ptrs);
    execute(handle_, pl.graphs->bwd, uids.data(), ptrs.data(), static_cast<int>(uids.size()), pl.workspace.get());
  }

 private:
  static void validate(const lca_problem& p, const lca_mask& mask) {
    lca::require(p.struct_size >= sizeof(lca_problem), LCA_ERR_INVALID_ARGUMENT,
                 "cudnn_sdpa: lca_problem.struct_size too small");
    lca::require(p.device_type == LCA_DEVICE_CUDA, LCA_ERR_UNSUPPORTED, "cudnn_sdpa: runs on CUDA devices only");
    lca::require(p.dtype == LCA_DTYPE_BF16 || p.dtype == LCA_DTYPE_F16, LCA_ERR_UNSUPPORTED,
                 std::string("cudnn_sdpa: dtype ") + lca::dtype_name(p.dtype) + " unsupported (bf16, f16)");
    lca::require(p.head_dim > 0 && p.head_dim <= 256 && p.head_dim % 8 == 0, LCA_ERR_UNSUPPORTED,
                 "cudnn_sdpa: head_dim " + std::to_string(p.head_dim) + " unsupported (a multiple of 8 up to 256)");
    lca::require(p.heads_q > 0 && p.heads_kv > 0 && p.heads_q % p.heads_kv == 0, LCA_ERR_INVALID_ARGUMENT,
                 "cudnn_sdpa: heads_q must be a positive multiple of heads_kv");
    lca::require(p.seqlen_q == p.seqlen_k, LCA_ERR_UNSUPPORTED, "cudnn_sdpa: seqlen_q must equal seqlen_k");
    lca::require(p.seqlen_q > 0, LCA_ERR_INVALID_ARGUMENT, "cudnn_sdpa: empty problem");
    lca::require(mask.struct_size >= offsetof(lca_mask, block_sparse) && mask.seqlen_q == p.seqlen_q &&
                     mask.seqlen_k == p.seqlen_k,
                 LCA_ERR_INVALID_ARGUMENT, "cudnn_sdpa: the mask's size differs from the problem's");
  }

  // The handle is made on the first plan, on the device current then, and follows exec's stream.
  void bind(cudaStream_t stream) {
    int device = 0;
    LCA_CUDA_CHECK(cudaGetDevice(&device));
    if (handle_ == nullptr) {
      LCA_CUDNN_CHECK(cudnnCreate(&handle_));
      device_ = device;
      LCA_CUDNN_CHECK(cudnnSetStream(handle_, stream));
      stream_ = stream;
    }
    lca::require(device == device_, LCA_ERR_UNSUPPORTED,
                 "cudnn_sdpa: a kernel instance serves one device (made on " + std::to_string(device_) +
                     ", now " + std::to_string(device) + ")");
    if (stream != stream_) {
      LCA_CUDNN_CHECK(cudnnSetStream(handle_, stream));
      stream_ = stream;
    }
  }

  std::shared_ptr<const Graphs> graphs_for(const GraphKey& k) {
    const std::string key = k.str();
    if (auto it = graphs_.find(key); it != graphs_.end()) return it->second;
    auto g = std::make_shared<Graphs>();
    g->fwd = build_forward(handle_, k, fwd_plan_);  // an unsupported forward refuses the plan
    try {
      g->bwd = build_backward(handle_, k, bwd_plan_);
    } catch (const Error& e) {
      g->bwd_error = std::string("cudnn_sdpa: no backward for this cell: ") + e.what();
    }
    log(1, "cudnn_sdpa: cuDNN " + std::to_string(cudnnGetVersion()) + ", graphs for " + key + ": forward " +
               describe(g->fwd) + "; backward " + (g->bwd.graph ? describe(g->bwd) : g->bwd_error));
    graphs_.emplace(key, g);
    return g;
  }

  // Per-document lengths and element offsets of the packed tensors, uploaded once per plan.
  static void upload_index(SdpaPlan& pl, const lca_exec& exec, cudaStream_t stream) {
    const auto& docs = pl.form.doc_offsets;
    const int64_t b = pl.key.batch;
    const size_t off_size = pl.key.offsets64 ? 8 : 4;
    const size_t seq_bytes = (sizeof(int32_t) * b + 15) / 16 * 16;
    const size_t off_bytes = (off_size * (b + 1) + 15) / 16 * 16;
    std::vector<unsigned char> host(seq_bytes + 3 * off_bytes, 0);
    auto* seq = reinterpret_cast<int32_t*>(host.data());
    for (int64_t i = 0; i < b; ++i) seq[i] = static_cast<int32_t>(docs[i + 1] - docs[i]);
    const int64_t scale[3] = {int64_t{pl.key.heads_q} * pl.key.head_dim, int64_t{pl.key.heads_kv} * pl.key.head_dim,
                              pl.key.heads_q};
    for (int which = 0; which < 3; ++which) {
      unsigned char* base = host.data() + seq_bytes + which * off_bytes;
      for (int64_t i = 0; i <= b; ++i) {
        const int64_t v = docs[i] * scale[which];
        if (pl.key.offsets64) reinterpret_cast<int64_t*>(base)[i] = v;
        else reinterpret_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      }
    }
    pl.index = DeviceBuffer(exec.allocator, host.size(), "document lengths and offsets");
    auto* dev = static_cast<unsigned char*>(pl.index.get());
    LCA_CUDA_CHECK(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream));
    LCA_CUDA_CHECK(cudaStreamSynchronize(stream));  // `host` dies with this call
    pl.seq_len = dev;
    pl.offset_q = dev + seq_bytes;
    pl.offset_kv = dev + seq_bytes + off_bytes;
    pl.offset_stats = dev + seq_bytes + 2 * off_bytes;
  }

  static void add_index(const SdpaPlan& pl, std::vector<int64_t>& uids, std::vector<void*>& ptrs) {
    if (!pl.key.ragged) return;
    uids.insert(uids.end(), {kSeqLenQ, kSeqLenKv, kOffsetQ, kOffsetKv, kOffsetStats});
    ptrs.insert(ptrs.end(), {pl.seq_len, pl.seq_len, pl.offset_q, pl.offset_kv, pl.offset_stats});
  }

  void log(int32_t level, const std::string& message) const {
    if (log_ != nullptr) log_(log_ctx_, level, message.c_str());
  }

  int fwd_plan_ = -1, bwd_plan_ = -1;
  bool offsets32_ = false;
  lca_log_fn log_ = nullptr;
  void* log_ctx_ = nullptr;
  cudnnHandle_t handle_ = nullptr;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  std::map<std::string, std::shared_ptr<const Graphs>> graphs_;
};

}  // namespace
}  // namespace lca_cudnn_sdpa

LCA_EXPORT_KERNEL(lca_cudnn_sdpa::CudnnSdpa, "cudnn_sdpa", "0.1.0", true)
