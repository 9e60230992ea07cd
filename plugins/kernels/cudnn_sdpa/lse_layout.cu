#include "lse_layout.hpp"

#include "check.hpp"

namespace lca_cudnn_sdpa {
namespace {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;

// One 32 x 32 tile through shared memory so that both the read and the write are coalesced.
// to_heads: read {tokens, heads} dense, write {heads, tokens} strided; otherwise the reverse.
template <bool to_heads>
__global__ void transpose_lse(const float* __restrict__ src, float* __restrict__ dst, int64_t head_stride,
                              int64_t token_stride, int64_t tokens, int64_t heads) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * kTile;
  if constexpr (to_heads) {
    for (int r = threadIdx.y; r < kTile; r += kRowsPerPass) {  // r: token in tile, x: head
      const int64_t t = t0 + r, h = h0 + threadIdx.x;
      if (t < tokens && h < heads) tile[r][threadIdx.x] = src[t * heads + h];
    }
    __syncthreads();
    for (int r = threadIdx.y; r < kTile; r += kRowsPerPass) {  // r: head in tile, x: token
      const int64_t h = h0 + r, t = t0 + threadIdx.x;
      if (t < tokens && h < heads) dst[h * head_stride + t * token_stride] = tile[threadIdx.x][r];
    }
  } else {
    for (int r = threadIdx.y; r < kTile; r += kRowsPerPass) {  // r: head in tile, x: token
      const int64_t h = h0 + r, t = t0 + threadIdx.x;
      if (t < tokens && h < heads) tile[threadIdx.x][r] = src[h * head_stride + t * token_stride];
    }
    __syncthreads();
    for (int r = threadIdx.y; r < kTile; r += kRowsPerPass) {  // r: token in tile, x: head
      const int64_t t = t0 + r, h = h0 + threadIdx.x;
      if (t < tokens && h < heads) dst[t * heads + h] = tile[r][threadIdx.x];
    }
  }
}

dim3 grid_for(int64_t tokens, int64_t heads) {
  return dim3(static_cast<unsigned>((tokens + kTile - 1) / kTile), static_cast<unsigned>((heads + kTile - 1) / kTile));
}

}  // namespace

void lse_tokens_to_heads(const float* src, float* dst, int64_t head_stride, int64_t token_stride,
                         int64_t tokens, int64_t heads, cudaStream_t stream) {
  if (tokens == 0 || heads == 0) return;
  transpose_lse<true><<<grid_for(tokens, heads), dim3(kTile, kRowsPerPass), 0, stream>>>(
      src, dst, head_stride, token_stride, tokens, heads);
  LCA_CUDA_CHECK_LAUNCH("transpose_lse<to_heads>");
}

void lse_heads_to_tokens(const float* src, int64_t head_stride, int64_t token_stride, float* dst,
                         int64_t tokens, int64_t heads, cudaStream_t stream) {
  if (tokens == 0 || heads == 0) return;
  transpose_lse<false><<<grid_for(tokens, heads), dim3(kTile, kRowsPerPass), 0, stream>>>(
      src, dst, head_stride, token_stride, tokens, heads);
  LCA_CUDA_CHECK_LAUNCH("transpose_lse<to_tokens>");
}

}  // namespace lca_cudnn_sdpa
