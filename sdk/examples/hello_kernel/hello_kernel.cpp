// hello_kernel: a complete lca kernel plugin in one file. Exact attention on the CPU, forward
// only, f32, for masks made of FULL and CAUSAL slices (the full and causal patterns). It is
// deliberately plain: one thread, two passes over the keys of each query row.
#include <lca/lca.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

// plan() keeps what forward() needs: the problem and a copy of the mask's slices.
class HelloPlan final : public lca::IPlan {
 public:
  lca_problem problem{};
  std::vector<lca_slice> slices;
};

class HelloKernel final : public lca::IKernel {
 public:
  explicit HelloKernel(const lca_host_info& /*host*/) {}

  std::unique_ptr<lca::IPlan> plan(const lca_problem& p, const lca_mask& mask,
                                   const lca_exec& /*exec*/) override {
    lca::require(p.device_type == LCA_DEVICE_CPU, LCA_ERR_UNSUPPORTED, "hello_kernel: CPU only");
    lca::require(p.dtype == LCA_DTYPE_F32, LCA_ERR_UNSUPPORTED, "hello_kernel: f32 only");
    lca::require(p.heads_kv > 0 && p.heads_q % p.heads_kv == 0, LCA_ERR_INVALID_ARGUMENT,
                 "hello_kernel: heads_q must be a multiple of heads_kv");
    lca::require(mask.seqlen_q == p.seqlen_q && mask.seqlen_k == p.seqlen_k,
                 LCA_ERR_INVALID_ARGUMENT, "hello_kernel: mask and problem sizes differ");
    auto plan = std::make_unique<HelloPlan>();
    plan->problem = p;
    for (int64_t i = 0; i < mask.num_slices; ++i) {
      const lca_slice& s = mask.slices[i];
      lca::require(s.type == LCA_SLICE_FULL || s.type == LCA_SLICE_CAUSAL, LCA_ERR_UNSUPPORTED,
                   std::string("hello_kernel: slice type ") + lca::slice_type_name(s.type) +
                       " is not supported (FULL and CAUSAL only)");
      plan->slices.push_back(s);
    }
    return plan;
  }

  void forward(lca::IPlan& base, const lca_fwd_args& a, const lca_exec& /*exec*/) override {
    const auto& plan = static_cast<const HelloPlan&>(base);
    const lca_problem& p = plan.problem;
    const int64_t group = p.heads_q / p.heads_kv;
    auto at = [](const lca_tensor& t, int64_t token, int64_t head, int64_t d) -> float& {
      return static_cast<float*>(t.data)[token * t.stride[0] + head * t.stride[1] + d * t.stride[2]];
    };
    std::vector<float> scores(static_cast<size_t>(p.seqlen_k));
    std::vector<char> seen(static_cast<size_t>(p.seqlen_k));
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / group;
      for (int64_t q = 0; q < p.seqlen_q; ++q) {
        // Pass 1: scores of the keys this row sees, and their maximum.
        std::fill(seen.begin(), seen.end(), 0);
        float max_score = -std::numeric_limits<float>::infinity();
        for (const lca_slice& s : plan.slices) {
          int64_t first, last;
          lca::slice_row_range(s, q, &first, &last);
          for (int64_t k = first; k < last; ++k) {
            float dot = 0;
            for (int64_t d = 0; d < p.head_dim; ++d) dot += at(a.q, q, h, d) * at(a.k, k, hk, d);
            scores[k] = p.softmax_scale * dot;
            seen[k] = 1;
            max_score = std::max(max_score, scores[k]);
          }
        }
        // Pass 2: softmax-weighted sum of V; LSE = max + log(sum of exp).
        float sum = 0;
        for (int64_t d = 0; d < p.head_dim; ++d) at(a.o, q, h, d) = 0;
        for (int64_t k = 0; k < p.seqlen_k; ++k) {
          if (!seen[k]) continue;
          const float w = std::exp(scores[k] - max_score);
          sum += w;
          for (int64_t d = 0; d < p.head_dim; ++d) at(a.o, q, h, d) += w * at(a.v, k, hk, d);
        }
        for (int64_t d = 0; d < p.head_dim && sum > 0; ++d) at(a.o, q, h, d) /= sum;
        float* lse = static_cast<float*>(a.lse.data) + h * a.lse.stride[0] + q * a.lse.stride[1];
        *lse = sum > 0 ? max_score + std::log(sum) : -std::numeric_limits<float>::infinity();
      }
    }
  }
};

}  // namespace

LCA_EXPORT_KERNEL(HelloKernel, "hello_kernel", "0.1.0", /*has_backward=*/false)
