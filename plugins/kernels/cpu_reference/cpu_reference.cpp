// cpu_reference: exact masked attention on the CPU, the reference every other kernel is checked
// against. Validation lives here; the arithmetic in attention.cpp; mask indexing in
// slice_index.cpp.
#include "attention.hpp"
#include "slice_index.hpp"

#include <lca/lca.hpp>
#include <lca/parallel.hpp>
#include <lca/slice_ranges.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <memory>
#include <string>

namespace lca::cpu_reference {
namespace {

std::string shape_str(int64_t a, int64_t b, int64_t c) {
  return "{" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + "}";
}

void fail_if(bool bad, lca_status status, const std::string& message) {
  if (bad) throw Error(status, "cpu_reference: " + message);
}

Accumulate parse_config(const char* config_json) {
  const std::string text = config_json ? config_json : "{}";
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text.empty() ? "{}" : text);
  } catch (const nlohmann::json::exception& e) {
    fail_if(true, LCA_ERR_INVALID_ARGUMENT, std::string("config is not valid JSON: ") + e.what());
  }
  fail_if(!config.is_object(), LCA_ERR_INVALID_ARGUMENT, "config must be a JSON object");
  for (const auto& [key, value] : config.items())
    fail_if(key != "accumulate", LCA_ERR_INVALID_ARGUMENT,
            "unknown option '" + key + "' (cpu_reference takes: accumulate = f32 | f64)");
  if (!config.contains("accumulate")) return Accumulate::f32;
  const auto& acc = config["accumulate"];
  if (acc == "f32" || acc == "fp32") return Accumulate::f32;
  if (acc == "f64" || acc == "fp64") return Accumulate::f64;
  fail_if(true, LCA_ERR_INVALID_ARGUMENT,
          "config \"accumulate\" must be \"f32\" or \"f64\", got " + acc.dump());
  return Accumulate::f32;
}

Shape validate_problem(const lca_problem& p) {
  fail_if(p.struct_size < sizeof(lca_problem), LCA_ERR_INVALID_ARGUMENT,
          "lca_problem.struct_size is smaller than this plugin's lca_problem");
  fail_if(p.device_type != LCA_DEVICE_CPU, LCA_ERR_UNSUPPORTED,
          "runs on the CPU only (problem.device_type = " + std::to_string(p.device_type) + ")");
  fail_if(dtype_size(p.dtype) == 0, LCA_ERR_UNSUPPORTED,
          "unsupported dtype " + std::to_string(p.dtype));
  fail_if(p.seqlen_q < 0 || p.seqlen_k < 0, LCA_ERR_INVALID_ARGUMENT, "negative sequence length");
  fail_if(p.heads_q <= 0 || p.heads_kv <= 0, LCA_ERR_INVALID_ARGUMENT,
          "heads_q and heads_kv must be positive");
  fail_if(p.heads_q % p.heads_kv != 0, LCA_ERR_INVALID_ARGUMENT,
          "heads_q (" + std::to_string(p.heads_q) + ") must be a multiple of heads_kv (" +
              std::to_string(p.heads_kv) + ")");
  fail_if(p.head_dim <= 0, LCA_ERR_INVALID_ARGUMENT, "head_dim must be positive");
  fail_if(!std::isfinite(p.softmax_scale), LCA_ERR_INVALID_ARGUMENT, "softmax_scale is not finite");
  // Every tensor's extent must be a size: a product past 64 bits means the host's buffers are not
  // what the shapes say (out of memory to the host, never a write past their end here).
  const size_t es = dtype_size(p.dtype);
  checked_product("cpu_reference: q/o bytes (seqlen_q x heads_q x head_dim x dtype size)", p.seqlen_q, p.heads_q,
                  p.head_dim, es);
  checked_product("cpu_reference: k/v bytes (seqlen_k x heads_kv x head_dim x dtype size)", p.seqlen_k, p.heads_kv,
                  p.head_dim, es);
  checked_product("cpu_reference: lse bytes (heads_q x seqlen_q x 4)", p.heads_q, p.seqlen_q, sizeof(float));
  return Shape{p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim, p.softmax_scale, p.dtype};
}

void validate_mask(const lca_mask& m, const Shape& sh) {
  fail_if(m.struct_size < offsetof(lca_mask, block_sparse), LCA_ERR_INVALID_ARGUMENT,
          "lca_mask.struct_size too small");
  try {
    lca::validate_mask(m, sh.seqlen_q, sh.seqlen_k);
  } catch (const Error& e) {
    fail_if(true, e.status(), e.what());
  }
}

void check_tensor(const lca_tensor& t, const char* name, int32_t dtype, int64_t s0, int64_t s1,
                  int64_t s2) {
  fail_if(t.struct_size < sizeof(lca_tensor), LCA_ERR_INVALID_ARGUMENT,
          std::string(name) + ": lca_tensor.struct_size too small");
  fail_if(t.dtype != dtype, LCA_ERR_INVALID_ARGUMENT,
          std::string(name) + " has dtype " + dtype_name(t.dtype) + ", expected " + dtype_name(dtype));
  fail_if(t.shape[0] != s0 || t.shape[1] != s1 || t.shape[2] != s2, LCA_ERR_INVALID_ARGUMENT,
          std::string(name) + " has shape " + shape_str(t.shape[0], t.shape[1], t.shape[2]) +
              ", expected " + shape_str(s0, s1, s2));
  fail_if(t.data == nullptr && s0 * s1 * s2 > 0, LCA_ERR_INVALID_ARGUMENT,
          std::string(name) + " has null data");
}

// Host memory from lca_exec::allocator for the duration of one call.
class Workspace {
 public:
  Workspace(const lca_exec& exec, size_t bytes) : allocator_(exec.allocator) {
    fail_if(allocator_ == nullptr, LCA_ERR_INVALID_ARGUMENT, "lca_exec.allocator is null");
    if (bytes == 0) return;
    const lca_status status = allocator_->alloc(allocator_->ctx, bytes, &data_);
    if (status != LCA_OK || data_ == nullptr) {
      data_ = nullptr;
      throw Error(LCA_ERR_OUT_OF_MEMORY, "cpu_reference: allocator refused " +
                                             std::to_string(bytes) + " bytes of workspace");
    }
  }
  ~Workspace() {
    if (data_ != nullptr) allocator_->free(allocator_->ctx, data_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data() const { return data_; }

 private:
  const lca_allocator* allocator_;
  void* data_ = nullptr;
};

class Plan final : public IPlan {
 public:
  Plan(const Shape& shape, const lca_mask& mask) : shape(shape), index(mask) {}
  Shape shape;
  SliceIndex index;
};

class CpuReference final : public IKernel {
 public:
  explicit CpuReference(const lca_host_info& host) : accumulate_(parse_config(host.config_json)) {}

  std::unique_ptr<IPlan> plan(const lca_problem& problem, const lca_mask& mask,
                              const lca_exec& /*exec*/) override {
    const Shape shape = validate_problem(problem);
    validate_mask(mask, shape);
    return std::make_unique<Plan>(shape, mask);
  }

  void forward(IPlan& base, const lca_fwd_args& a, const lca_exec& exec) override {
    const Plan& plan = static_cast<const Plan&>(base);
    const Shape& sh = plan.shape;
    fail_if(a.struct_size < sizeof(lca_fwd_args), LCA_ERR_INVALID_ARGUMENT,
            "lca_fwd_args.struct_size too small");
    check_tensor(a.q, "q", sh.dtype, sh.seqlen_q, sh.heads_q, sh.head_dim);
    check_tensor(a.k, "k", sh.dtype, sh.seqlen_k, sh.heads_kv, sh.head_dim);
    check_tensor(a.v, "v", sh.dtype, sh.seqlen_k, sh.heads_kv, sh.head_dim);
    check_tensor(a.o, "o", sh.dtype, sh.seqlen_q, sh.heads_q, sh.head_dim);
    check_tensor(a.lse, "lse", LCA_DTYPE_F32, sh.heads_q, sh.seqlen_q, 1);
    const int threads = resolve_threads(exec.num_threads);
    Workspace ws(exec, forward_workspace_bytes(sh, accumulate_, threads));
    attention_forward(sh, plan.index, a, accumulate_, threads, ws.data());
  }

  void backward(IPlan& base, const lca_bwd_args& a, const lca_exec& exec) override {
    const Plan& plan = static_cast<const Plan&>(base);
    const Shape& sh = plan.shape;
    fail_if(a.struct_size < sizeof(lca_bwd_args), LCA_ERR_INVALID_ARGUMENT,
            "lca_bwd_args.struct_size too small");
    for (auto [t, name] : {std::pair{&a.q, "q"}, {&a.o, "o"}, {&a.d_o, "d_o"}, {&a.dq, "dq"}})
      check_tensor(*t, name, sh.dtype, sh.seqlen_q, sh.heads_q, sh.head_dim);
    for (auto [t, name] : {std::pair{&a.k, "k"}, {&a.v, "v"}, {&a.dk, "dk"}, {&a.dv, "dv"}})
      check_tensor(*t, name, sh.dtype, sh.seqlen_k, sh.heads_kv, sh.head_dim);
    check_tensor(a.lse, "lse", LCA_DTYPE_F32, sh.heads_q, sh.seqlen_q, 1);
    const int threads = resolve_threads(exec.num_threads);
    Workspace ws(exec, backward_workspace_bytes(sh, accumulate_, threads));
    attention_backward(sh, plan.index, a, accumulate_, threads, ws.data());
  }

 private:
  Accumulate accumulate_;
};

}  // namespace
}  // namespace lca::cpu_reference

LCA_EXPORT_KERNEL(lca::cpu_reference::CpuReference, "cpu_reference", "0.1.0", true)
