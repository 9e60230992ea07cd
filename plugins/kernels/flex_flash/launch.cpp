// Dispatch from (dtype, head dim) to the instantiation in its launch_*.cu.
#include "kernels.hpp"

#include <lca/error.hpp>
#include <lca/types.hpp>

#include <string>

namespace lca_flex_flash {

namespace {
[[noreturn]] void unsupported(int32_t dtype, int32_t head_dim) {
  throw lca::Error(LCA_ERR_UNSUPPORTED, std::string("flex_flash: no kernel for ") + lca::dtype_name(dtype) +
                                            " with head_dim " + std::to_string(head_dim) +
                                            " (bf16/f16, head_dim 64 or 128)");
}
}  // namespace

void launch_forward(int32_t dtype, int32_t head_dim, const FwdParams& p, void* stream) {
  if (dtype == LCA_DTYPE_BF16 && head_dim == 64) return forward_impl<LCA_DTYPE_BF16, 64>(p, stream);
  if (dtype == LCA_DTYPE_BF16 && head_dim == 128) return forward_impl<LCA_DTYPE_BF16, 128>(p, stream);
  if (dtype == LCA_DTYPE_F16 && head_dim == 64) return forward_impl<LCA_DTYPE_F16, 64>(p, stream);
  if (dtype == LCA_DTYPE_F16 && head_dim == 128) return forward_impl<LCA_DTYPE_F16, 128>(p, stream);
  unsupported(dtype, head_dim);
}

void launch_backward(int32_t dtype, int32_t head_dim, const BwdParams& p, void* stream) {
  if (dtype == LCA_DTYPE_BF16 && head_dim == 64) return backward_impl<LCA_DTYPE_BF16, 64>(p, stream);
  if (dtype == LCA_DTYPE_BF16 && head_dim == 128) return backward_impl<LCA_DTYPE_BF16, 128>(p, stream);
  if (dtype == LCA_DTYPE_F16 && head_dim == 64) return backward_impl<LCA_DTYPE_F16, 64>(p, stream);
  if (dtype == LCA_DTYPE_F16 && head_dim == 128) return backward_impl<LCA_DTYPE_F16, 128>(p, stream);
  unsupported(dtype, head_dim);
}

}  // namespace lca_flex_flash
