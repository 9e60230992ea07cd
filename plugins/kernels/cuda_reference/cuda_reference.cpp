// cuda_reference: the GPU checking reference. Simple and obviously correct (fp32 arithmetic,
// no tensor cores, O(S) extra memory), any slice mask, GQA, any lca_tensor strides, fwd + bwd.
#include "cuda_check.hpp"
#include "reference_kernels.hpp"

#include <lca/kernel.hpp>
#include <lca/slice_ranges.hpp>
#include <lca/types.hpp>

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace lca_cuda_reference {

namespace {

using lca::require;

DeviceBuffer upload(const std::vector<int64_t>& host, const lca_exec& exec, const char* what) {
  DeviceBuffer buf(exec.allocator, host.size() * sizeof(int64_t), what);
  if (!host.empty())
    LCA_REF_CUDA_CHECK(cudaMemcpyAsync(buf.as<void>(), host.data(), host.size() * sizeof(int64_t),
                                       cudaMemcpyHostToDevice, static_cast<cudaStream_t>(exec.stream)));
  return buf;
}

class ReferencePlan final : public lca::IPlan {
 public:
  lca_problem problem{};
  DeviceBuffer row_offsets, row_ranges, col_offsets, col_ranges, delta;
  void release(const lca_exec&) override {
    row_offsets.reset();
    row_ranges.reset();
    col_offsets.reset();
    col_ranges.reset();
    delta.reset();
  }
};

void check_tensor(const lca_tensor& t, const char* name, int32_t dtype, int64_t tokens, int64_t heads,
                  int64_t dim) {
  require(t.data != nullptr, LCA_ERR_INVALID_ARGUMENT, std::string(name) + ": null data");
  require(t.dtype == dtype, LCA_ERR_INVALID_ARGUMENT,
          std::string(name) + ": dtype " + lca::dtype_name(t.dtype) + ", expected " + lca::dtype_name(dtype));
  require(t.shape[0] == tokens && t.shape[1] == heads && t.shape[2] == dim, LCA_ERR_INVALID_ARGUMENT,
          std::string(name) + ": shape {" + std::to_string(t.shape[0]) + "," + std::to_string(t.shape[1]) +
              "," + std::to_string(t.shape[2]) + "}, expected {" + std::to_string(tokens) + "," +
              std::to_string(heads) + "," + std::to_string(dim) + "}");
}

View view_of(const lca_tensor& t) { return View{t.data, t.stride[0], t.stride[1], t.stride[2]}; }

LseView lse_view_of(const lca_tensor& t, const lca_problem& pr) {
  check_tensor(t, "lse", LCA_DTYPE_F32, pr.heads_q, pr.seqlen_q, 1);
  return LseView{static_cast<float*>(t.data), t.stride[0], t.stride[1]};
}

Shape shape_of(const lca_problem& pr) {
  return Shape{pr.dtype, pr.seqlen_q, pr.seqlen_k, pr.heads_q, pr.heads_kv, pr.head_dim, pr.softmax_scale};
}

}  // namespace

class CudaReference final : public lca::IKernel {
 public:
  explicit CudaReference(const lca_host_info&) {}

  std::unique_ptr<lca::IPlan> plan(const lca_problem& pr, const lca_mask& mask, const lca_exec& exec) override {
    require(pr.device_type == LCA_DEVICE_CUDA, LCA_ERR_UNSUPPORTED, "cuda_reference runs on CUDA devices only");
    require(pr.dtype == LCA_DTYPE_F32 || pr.dtype == LCA_DTYPE_F16 || pr.dtype == LCA_DTYPE_BF16,
            LCA_ERR_UNSUPPORTED, std::string("cuda_reference: dtype ") + lca::dtype_name(pr.dtype));
    require(pr.heads_q > 0 && pr.heads_kv > 0 && pr.heads_q % pr.heads_kv == 0, LCA_ERR_INVALID_ARGUMENT,
            "heads_q must be a positive multiple of heads_kv");
    require(pr.head_dim > 0 && pr.head_dim <= kMaxHeadDim, LCA_ERR_UNSUPPORTED,
            "cuda_reference: head_dim " + std::to_string(pr.head_dim) + " (1..256)");
    require(pr.seqlen_q >= 0 && pr.seqlen_k >= 0, LCA_ERR_INVALID_ARGUMENT, "negative sequence length");
    lca::validate_mask(mask, pr.seqlen_q, pr.seqlen_k);
    auto plan = std::make_unique<ReferencePlan>();
    plan->problem = pr;
    const lca::RangeLists rows = lca::build_range_lists(mask, /*by_query=*/true);
    const lca::RangeLists cols = lca::build_range_lists(mask, /*by_query=*/false);
    plan->row_offsets = upload(rows.offsets, exec, "row offsets");
    plan->row_ranges = upload(rows.ranges, exec, "row ranges");
    plan->col_offsets = upload(cols.offsets, exec, "column offsets");
    plan->col_ranges = upload(cols.ranges, exec, "column ranges");
    plan->delta = DeviceBuffer(exec.allocator, sizeof(float) * pr.heads_q * pr.seqlen_q, "delta (dO . O)");
    // The host vectors die here: the copies must have landed.
    LCA_REF_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(exec.stream)));
    return plan;
  }

  void forward(lca::IPlan& base, const lca_fwd_args& a, const lca_exec& exec) override {
    auto& plan = static_cast<ReferencePlan&>(base);
    const lca_problem& pr = plan.problem;
    check_tensor(a.q, "q", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_tensor(a.k, "k", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_tensor(a.v, "v", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_tensor(a.o, "o", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    FwdParams p;
    p.shape = shape_of(pr);
    p.q = view_of(a.q);
    p.k = view_of(a.k);
    p.v = view_of(a.v);
    p.o = view_of(a.o);
    p.lse = lse_view_of(a.lse, pr);
    p.row_offsets = plan.row_offsets.as<int64_t>();
    p.row_ranges = plan.row_ranges.as<int64_t>();
    launch_forward(p, exec.stream);
  }

  void backward(lca::IPlan& base, const lca_bwd_args& a, const lca_exec& exec) override {
    auto& plan = static_cast<ReferencePlan&>(base);
    const lca_problem& pr = plan.problem;
    check_tensor(a.q, "q", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_tensor(a.k, "k", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_tensor(a.v, "v", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_tensor(a.o, "o", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_tensor(a.d_o, "d_o", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_tensor(a.dq, "dq", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_tensor(a.dk, "dk", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_tensor(a.dv, "dv", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    BwdParams p;
    p.shape = shape_of(pr);
    p.q = view_of(a.q);
    p.k = view_of(a.k);
    p.v = view_of(a.v);
    p.o = view_of(a.o);
    p.d_o = view_of(a.d_o);
    p.dq = view_of(a.dq);
    p.dk = view_of(a.dk);
    p.dv = view_of(a.dv);
    p.lse = lse_view_of(a.lse, pr);
    p.row_offsets = plan.row_offsets.as<int64_t>();
    p.row_ranges = plan.row_ranges.as<int64_t>();
    p.col_offsets = plan.col_offsets.as<int64_t>();
    p.col_ranges = plan.col_ranges.as<int64_t>();
    p.delta = plan.delta.as<float>();
    launch_backward(p, exec.stream);
  }
};

}  // namespace lca_cuda_reference

LCA_EXPORT_KERNEL(lca_cuda_reference::CudaReference, "cuda_reference", "0.1.0", true)
