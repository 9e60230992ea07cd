// flex_flash kernels for bf16, head dim 128 (one file per instantiation: parallel builds).
#include "backward.cuh"
#include "forward.cuh"

namespace lca_flex_flash {

template <>
void forward_impl<LCA_DTYPE_BF16, 128>(const FwdParams& p, void* stream) {
  dev::run_forward<__nv_bfloat16, 128>(p, static_cast<cudaStream_t>(stream));
}
template <>
void backward_impl<LCA_DTYPE_BF16, 128>(const BwdParams& p, void* stream) {
  dev::run_backward<__nv_bfloat16, 128>(p, static_cast<cudaStream_t>(stream));
}

}  // namespace lca_flex_flash
