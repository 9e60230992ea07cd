// torch_sdpa_{flash,efficient,cudnn}: PyTorch's scaled_dot_product_attention restricted to one
// backend each, as lca kernels. This header is the face the three entry points see: it names no
// torch type, so each entry compiles in a moment; torch lives in torch_sdpa.cpp.
// Rule: one backend per kernel instance; the instance serves one device.
#pragma once

#include <lca/kernel.hpp>

#include <memory>

namespace lca_torch_sdpa {

enum class Backend { flash, efficient, cudnn };

// The implementation, made per kernel instance (throws lca::Error).
std::unique_ptr<lca::IKernel> make_kernel(const lca_host_info& host, Backend backend);

// What LCA_EXPORT_KERNEL needs: a class constructible from lca_host_info. B picks the backend.
template <Backend B>
class Peer final : public lca::IKernel {
 public:
  explicit Peer(const lca_host_info& host) : impl_(make_kernel(host, B)) {}
  std::unique_ptr<lca::IPlan> plan(const lca_problem& p, const lca_mask& m, const lca_exec& e) override {
    return impl_->plan(p, m, e);
  }
  void forward(lca::IPlan& plan, const lca_fwd_args& a, const lca_exec& e) override { impl_->forward(plan, a, e); }
  void backward(lca::IPlan& plan, const lca_bwd_args& a, const lca_exec& e) override { impl_->backward(plan, a, e); }

 private:
  std::unique_ptr<lca::IKernel> impl_;
};

}  // namespace lca_torch_sdpa
