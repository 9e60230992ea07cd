// Moves LSE between cuDNN's ragged stats layout {tokens, heads} and the ABI's {heads, tokens}.
// Used by the cudnn_sdpa kernel for document (ragged) masks only; single sequences need no copy.
// Rule: the token-major side is dense ({tokens, heads}, head stride 1); the ABI side takes its
// strides from the lca_tensor.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace lca_cudnn_sdpa {

// dst[h * head_stride + t * token_stride] = src[t * heads + h]
void lse_tokens_to_heads(const float* src, float* dst, int64_t head_stride, int64_t token_stride,
                         int64_t tokens, int64_t heads, cudaStream_t stream);

// dst[t * heads + h] = src[h * head_stride + t * token_stride]
void lse_heads_to_tokens(const float* src, int64_t head_stride, int64_t token_stride, float* dst,
                         int64_t tokens, int64_t heads, cudaStream_t stream);

}  // namespace lca_cudnn_sdpa
