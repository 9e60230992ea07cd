// cuda_naive: the paper's "Naive" row. Per query head it materialises the full fp32 score
// matrix (seqlen_q x seqlen_k) and the probabilities in the input dtype, through the host's
// allocator, so memory grows as S^2 and an allocator refusal is an E cell, not a crash.
#include "cuda_check.hpp"
#include "naive_kernels.hpp"

#include <lca/kernel.hpp>
#include <lca/slice_ranges.hpp>
#include <lca/types.hpp>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

namespace lca_cuda_naive {

namespace {

using lca::require;
using lca::build_range_lists;
using lca::validate_mask;

constexpr size_t kCublasWorkspace = size_t{32} << 20;

// Waits for the stream when the scope ends, so that workspace freed after it is idle.
struct StreamDrain {
  void* stream;
  ~StreamDrain() { (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream)); }
};

cudaDataType cuda_type(int32_t dtype) { return dtype == LCA_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F; }

class NaivePlan final : public lca::IPlan {
 public:
  lca_problem problem{};
  DeviceBuffer row_offsets, row_ranges, cublas_ws;
  cublasHandle_t handle = nullptr;
  ~NaivePlan() override {
    if (handle != nullptr) (void)cublasDestroy(handle);
  }
  void release(const lca_exec& exec) override {
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(exec.stream));
    row_offsets.reset();
    row_ranges.reset();
    cublas_ws.reset();
  }
  RowRanges rows() const { return RowRanges{row_offsets.as<int64_t>(), row_ranges.as<int64_t>()}; }

  // Row-major C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C, fp32 accumulation.
  // cuBLAS is column-major, so it computes C^T = op(B)^T op(A)^T over the same storage.
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
            cudaDataType ta, int64_t lda, const void* b, cudaDataType tb, int64_t ldb, float beta, void* c,
            cudaDataType tc, int64_t ldc) const {
    LCA_NAIVE_CUBLAS_CHECK(cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                        static_cast<int>(m), static_cast<int>(k), &alpha, b, tb,
                                        static_cast<int>(ldb), a, ta, static_cast<int>(lda), &beta, c, tc,
                                        static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
};

void check_tensor(const lca_tensor& t, const char* name, int32_t dtype, int64_t tokens, int64_t heads, int64_t dim) {
  require(t.data != nullptr, LCA_ERR_INVALID_ARGUMENT, std::string(name) + ": null data");
  require(t.dtype == dtype, LCA_ERR_INVALID_ARGUMENT, std::string(name) + ": dtype " + lca::dtype_name(t.dtype));
  require(t.shape[0] == tokens && t.shape[1] == heads && t.shape[2] == dim, LCA_ERR_INVALID_ARGUMENT,
          std::string(name) + ": shape does not match the problem");
  require(t.stride[2] == 1 && t.stride[0] >= dim && t.stride[0] < (int64_t{1} << 31),
          LCA_ERR_UNSUPPORTED, std::string(name) + ": cuda_naive needs contiguous head_dim and a token stride "
                                                   "that cuBLAS takes as a leading dimension");
}

// Address of (token 0, head h, dim 0).
const void* head_ptr(const lca_tensor& t, int h) {
  return static_cast<const char*>(t.data) + static_cast<int64_t>(h) * t.stride[1] * lca::dtype_size(t.dtype);
}
void* head_ptr_mut(const lca_tensor& t, int h) { return const_cast<void*>(head_ptr(t, h)); }

void check_lse(const lca_tensor& t, const lca_problem& pr) {
  require(t.data != nullptr && t.dtype == LCA_DTYPE_F32 && t.shape[0] == pr.heads_q && t.shape[1] == pr.seqlen_q,
          LCA_ERR_INVALID_ARGUMENT, "lse: expected fp32 {heads_q, seqlen_q, 1}");
}

}  // namespace

class CudaNaive final : public lca::IKernel {
 public:
  explicit CudaNaive(const lca_host_info&) {}

  std::unique_ptr<lca::IPlan> plan(const lca_problem& pr, const lca_mask& mask, const lca_exec& exec) override {
    require(pr.device_type == LCA_DEVICE_CUDA, LCA_ERR_UNSUPPORTED, "cuda_naive runs on CUDA devices only");
    require(pr.dtype == LCA_DTYPE_BF16 || pr.dtype == LCA_DTYPE_F16, LCA_ERR_UNSUPPORTED,
            std::string("cuda_naive: dtype ") + lca::dtype_name(pr.dtype) + " (bf16, f16)");
    require(pr.heads_q > 0 && pr.heads_kv > 0 && pr.heads_q % pr.heads_kv == 0, LCA_ERR_INVALID_ARGUMENT,
            "heads_q must be a positive multiple of heads_kv");
    require(pr.head_dim > 0, LCA_ERR_INVALID_ARGUMENT, "head_dim must be positive");
    require(pr.seqlen_q > 0 && pr.seqlen_k > 0 && pr.seqlen_q < (int64_t{1} << 31) && pr.seqlen_k < (int64_t{1} << 31),
            LCA_ERR_UNSUPPORTED, "cuda_naive: sequence lengths must be in 1..2^31-1");
    validate_mask(mask, pr.seqlen_q, pr.seqlen_k);
    auto plan = std::make_unique<NaivePlan>();
    plan->problem = pr;
    const auto rows = build_range_lists(mask, /*by_query=*/true);
    auto stream = static_cast<cudaStream_t>(exec.stream);
    plan->row_offsets = DeviceBuffer(exec.allocator, rows.offsets.size() * sizeof(int64_t), "row offsets");
    plan->row_ranges = DeviceBuffer(exec.allocator, rows.ranges.size() * sizeof(int64_t), "row ranges");
    LCA_NAIVE_CUDA_CHECK(cudaMemcpyAsync(plan->row_offsets.as<void>(), rows.offsets.data(),
                                         rows.offsets.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
    if (!rows.ranges.empty())
      LCA_NAIVE_CUDA_CHECK(cudaMemcpyAsync(plan->row_ranges.as<void>(), rows.ranges.data(),
                                           rows.ranges.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
    plan->cublas_ws = DeviceBuffer(exec.allocator, kCublasWorkspace, "cuBLAS workspace");
    LCA_NAIVE_CUBLAS_CHECK(cublasCreate(&plan->handle));
    LCA_NAIVE_CUBLAS_CHECK(cublasSetWorkspace(plan->handle, plan->cublas_ws.as<void>(), kCublasWorkspace));
    LCA_NAIVE_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors die here
    return plan;
  }

  void forward(lca::IPlan& base, const lca_fwd_args& a, const lca_exec& exec) override {
    auto& plan = static_cast<NaivePlan&>(base);
    const lca_problem& pr = plan.problem;
    check_tensor(a.q, "q", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_tensor(a.k, "k", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_tensor(a.v, "v", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_tensor(a.o, "o", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_lse(a.lse, pr);
    const size_t cells = static_cast<size_t>(pr.seqlen_q) * static_cast<size_t>(pr.seqlen_k);
    DeviceBuffer scores(exec.allocator, cells * sizeof(float), "the fp32 score matrix (seqlen_q x seqlen_k)");
    DeviceBuffer probs(exec.allocator, cells * lca::dtype_size(pr.dtype), "the probability matrix");
    StreamDrain drain{exec.stream};  // destroyed before the buffers
    LCA_NAIVE_CUBLAS_CHECK(cublasSetStream(plan.handle, static_cast<cudaStream_t>(exec.stream)));
    const cudaDataType t = cuda_type(pr.dtype);
    const int group = pr.heads_q / pr.heads_kv;
    auto* lse = static_cast<float*>(a.lse.data);
    for (int h = 0; h < pr.heads_q; ++h) {
      const int g = h / group;
      plan.gemm(false, true, pr.seqlen_q, pr.seqlen_k, pr.head_dim, pr.softmax_scale, head_ptr(a.q, h), t,
                a.q.stride[0], head_ptr(a.k, g), t, a.k.stride[0], 0.0f, scores.as<void>(), CUDA_R_32F, pr.seqlen_k);
      launch_masked_softmax(scores.as<float>(), probs.as<void>(), pr.dtype, lse + h * a.lse.stride[0],
                            a.lse.stride[1], plan.rows(), pr.seqlen_q, pr.seqlen_k, exec.stream);
      plan.gemm(false, false, pr.seqlen_q, pr.head_dim, pr.seqlen_k, 1.0f, probs.as<void>(), t, pr.seqlen_k,
                head_ptr(a.v, g), t, a.v.stride[0], 0.0f, head_ptr_mut(a.o, h), t, a.o.stride[0]);
    }
  }

  void backward(lca::IPlan& base, const lca_bwd_args& a, const lca_exec& exec) override {
    auto& plan = static_cast<NaivePlan&>(base);
    const lca_problem& pr = plan.problem;
    check_tensor(a.q, "q", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_tensor(a.k, "k", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_tensor(a.v, "v", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_tensor(a.o, "o", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_tensor(a.d_o, "d_o", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_tensor(a.dq, "dq", pr.dtype, pr.seqlen_q, pr.heads_q, pr.head_dim);
    check_tensor(a.dk, "dk", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_tensor(a.dv, "dv", pr.dtype, pr.seqlen_k, pr.heads_kv, pr.head_dim);
    check_lse(a.lse, pr);
    const size_t cells = static_cast<size_t>(pr.seqlen_q) * static_cast<size_t>(pr.seqlen_k);
    const size_t kv_elems = static_cast<size_t>(pr.seqlen_k) * pr.head_dim;
    DeviceBuffer scores(exec.allocator, cells * sizeof(float), "the fp32 score matrix (seqlen_q x seqlen_k)");
    DeviceBuffer probs(exec.allocator, cells * lca::dtype_size(pr.dtype), "the probability matrix");
    DeviceBuffer dk_acc(exec.allocator, kv_elems * sizeof(float), "the fp32 dK accumulator");
    DeviceBuffer dv_acc(exec.allocator, kv_elems * sizeof(float), "the fp32 dV accumulator");
    DeviceBuffer delta(exec.allocator, pr.seqlen_q * sizeof(float), "delta (dO . O)");
    StreamDrain drain{exec.stream};
    LCA_NAIVE_CUBLAS_CHECK(cublasSetStream(plan.handle, static_cast<cudaStream_t>(exec.stream)));
    const cudaDataType t = cuda_type(pr.dtype);
    const int group = pr.heads_q / pr.heads_kv;
    const auto* lse = static_cast<const float*>(a.lse.data);
    const int64_t sq = pr.seqlen_q, sk = pr.seqlen_k, d = pr.head_dim;
    for (int g = 0; g < pr.heads_kv; ++g) {
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const float beta = h == g * group ? 0.0f : 1.0f;  // accumulate dK/dV over the group
        launch_delta(head_ptr(a.d_o, h), head_ptr(a.o, h), a.d_o.stride[0], a.o.stride[0], pr.dtype,
                     delta.as<float>(), sq, pr.head_dim, exec.stream);
        plan.gemm(false, true, sq, sk, d, pr.softmax_scale, head_ptr(a.q, h), t, a.q.stride[0], head_ptr(a.k, g), t,
                  a.k.stride[0], 0.0f, scores.as<void>(), CUDA_R_32F, sk);
        launch_probs_from_lse(scores.as<float>(), probs.as<void>(), pr.dtype, lse + h * a.lse.stride[0],
                              a.lse.stride[1], plan.rows(), sq, sk, exec.stream);
        // dV += P^T dO
        plan.gemm(true, false, sk, d, sq, 1.0f, probs.as<void>(), t, sk, head_ptr(a.d_o, h), t, a.d_o.stride[0],
                  beta, dv_acc.as<void>(), CUDA_R_32F, d);
        // dP = dO V^T (into the score buffer), then dS = P (dP - delta) scale (into probs)
        plan.gemm(false, true, sq, sk, d, 1.0f, head_ptr(a.d_o, h), t, a.d_o.stride[0], head_ptr(a.v, g), t,
                  a.v.stride[0], 0.0f, scores.as<void>(), CUDA_R_32F, sk);
        launch_dscores(probs.as<void>(), scores.as<float>(), delta.as<float>(), pr.dtype, pr.softmax_scale, sq,
                       sk, exec.stream);
        // dQ = dS K; dK += dS^T Q
        plan.gemm(false, false, sq, d, sk, 1.0f, probs.as<void>(), t, sk, head_ptr(a.k, g), t, a.k.stride[0], 0.0f,
                  head_ptr_mut(a.dq, h), t, a.dq.stride[0]);
        plan.gemm(true, false, sk, d, sq, 1.0f, probs.as<void>(), t, sk, head_ptr(a.q, h), t, a.q.stride[0], beta,
                  dk_acc.as<void>(), CUDA_R_32F, d);
      }
      launch_convert(dk_acc.as<float>(), head_ptr_mut(a.dk, g), a.dk.stride[0], pr.dtype, sk, pr.head_dim,
                     exec.stream);
      launch_convert(dv_acc.as<float>(), head_ptr_mut(a.dv, g), a.dv.stride[0], pr.dtype, sk, pr.head_dim,
                     exec.stream);
    }
  }
};

}  // namespace lca_cuda_naive

LCA_EXPORT_KERNEL(lca_cuda_naive::CudaNaive, "cuda_naive", "0.1.0", true)
