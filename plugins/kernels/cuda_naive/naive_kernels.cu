// Device code of cuda_naive's elementwise and row-wise steps (the GEMMs are cuBLAS's).
#include "cuda_check.hpp"
#include "naive_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace lca_cuda_naive {

namespace {

constexpr int kThreads = 256;

__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ inline T from_float(float v);
template <> __device__ inline __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Block-wide reduction; every thread gets the result. `max` selects max, else sum.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // shared may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = kMax ? -INFINITY : 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) v = kMax ? fmaxf(v, shared[w]) : v + shared[w];
  return v;
}

// One block per query row. kFromLse: probabilities from the given LSE instead of a softmax.
template <class T, bool kFromLse>
__global__ void __launch_bounds__(kThreads) row_probs_kernel(const float* scores, T* probs, float* lse,
                                                             int64_t lse_stride, RowRanges rows, int64_t seqlen_k) {
  __shared__ float shared[kThreads / 32];
  const int64_t i = blockIdx.x;
  const float* s_row = scores + i * seqlen_k;
  T* p_row = probs + i * seqlen_k;
  const int64_t r0 = rows.offsets[i], r1 = rows.offsets[i + 1];
  float row_max, inv_sum;
  if constexpr (kFromLse) {
    row_max = lse[i * lse_stride];
    inv_sum = 1.0f;
  } else {
    float m = -INFINITY;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t k = rows.ranges[2 * r] + threadIdx.x; k < rows.ranges[2 * r + 1]; k += kThreads)
        m = fmaxf(m, s_row[k]);
    row_max = block_reduce<true>(m, shared);
    float sum = 0.0f;
    if (row_max != -INFINITY) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t k = rows.ranges[2 * r] + threadIdx.x; k < rows.ranges[2 * r + 1]; k += kThreads)
          sum += expf(s_row[k] - row_max);
    }
    sum = block_reduce<false>(sum, shared);
    inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (threadIdx.x == 0) lse[i * lse_stride] = sum > 0.0f ? row_max + logf(sum) : -INFINITY;
  }
  for (int64_t k = threadIdx.x; k < seqlen_k; k += kThreads) p_row[k] = from_float<T>(0.0f);
  __syncthreads();  // the zeros land before the visible cells overwrite them
  if (row_max == -INFINITY) return;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t k = rows.ranges[2 * r] + threadIdx.x; k < rows.ranges[2 * r + 1]; k += kThreads)
      p_row[k] = from_float<T>(expf(s_row[k] - row_max) * inv_sum);
}

// One warp per row.
template <class T>
__global__ void delta_kernel(const T* d_o, const T* o, int64_t do_rs, int64_t o_rs, float* delta, int64_t rows,
                             int dim) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (i >= rows) return;
  const int lane = threadIdx.x & 31;
  float s = 0.0f;
  for (int d = lane; d < dim; d += 32) s += to_float(d_o[i * do_rs + d]) * to_float(o[i * o_rs + d]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) delta[i] = s;
}

template <class T>
__global__ void dscores_kernel(T* probs, const float* dp, const float* delta, float scale, int64_t rows,
                               int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const float p = to_float(probs[idx]);
    probs[idx] = from_float<T>(p * (dp[idx] - delta[idx / cols]) * scale);
  }
}

template <class T>
__global__ void convert_kernel(const float* src, T* out, int64_t row_stride, int64_t tokens, int dim) {
  const int64_t n = tokens * dim;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * kThreads)
    out[(idx / dim) * row_stride + idx % dim] = from_float<T>(src[idx]);
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

template <class F>
void by_dtype(int32_t dtype, F&& f) {
  if (dtype == LCA_DTYPE_BF16) f.template operator()<__nv_bfloat16>();
  else if (dtype == LCA_DTYPE_F16) f.template operator()<__half>();
  else throw lca::Error(LCA_ERR_UNSUPPORTED, "cuda_naive: dtype must be bf16 or f16");
}

}  // namespace

void launch_masked_softmax(const float* scores, void* probs, int32_t dtype, float* lse, int64_t lse_stride,
                           RowRanges rows, int64_t seqlen_q, int64_t seqlen_k, void* stream) {
  if (seqlen_q == 0) return;
  by_dtype(dtype, [&]<class T>() {
    row_probs_kernel<T, false><<<static_cast<unsigned>(seqlen_q), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        scores, static_cast<T*>(probs), lse, lse_stride, rows, seqlen_k);
    LCA_NAIVE_CHECK_LAUNCH("row_probs_kernel<softmax>");
  });
}

void launch_probs_from_lse(const float* scores, void* probs, int32_t dtype, const float* lse,
                           int64_t lse_stride, RowRanges rows, int64_t seqlen_q, int64_t seqlen_k, void* stream) {
  if (seqlen_q == 0) return;
  by_dtype(dtype, [&]<class T>() {
    row_probs_kernel<T, true><<<static_cast<unsigned>(seqlen_q), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        scores, static_cast<T*>(probs), const_cast<float*>(lse), lse_stride, rows, seqlen_k);
    LCA_NAIVE_CHECK_LAUNCH("row_probs_kernel<from_lse>");
  });
}

void launch_delta(const void* d_o, const void* o, int64_t do_row_stride, int64_t o_row_stride, int32_t dtype,
                  float* delta, int64_t seqlen_q, int32_t head_dim, void* stream) {
  if (seqlen_q == 0) return;
  by_dtype(dtype, [&]<class T>() {
    const auto blocks = static_cast<unsigned>((seqlen_q + kThreads / 32 - 1) / (kThreads / 32));
    delta_kernel<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(d_o), static_cast<const T*>(o), do_row_stride, o_row_stride, delta, seqlen_q, head_dim);
    LCA_NAIVE_CHECK_LAUNCH("delta_kernel");
  });
}

void launch_dscores(void* probs, const float* dp, const float* delta, int32_t dtype, float scale,
                    int64_t seqlen_q, int64_t seqlen_k, void* stream) {
  by_dtype(dtype, [&]<class T>() {
    dscores_kernel<T><<<grid_for(seqlen_q * seqlen_k), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<T*>(probs), dp, delta, scale, seqlen_q, seqlen_k);
    LCA_NAIVE_CHECK_LAUNCH("dscores_kernel");
  });
}

void launch_convert(const float* src, void* out, int64_t row_stride, int32_t dtype, int64_t tokens,
                    int32_t head_dim, void* stream) {
  by_dtype(dtype, [&]<class T>() {
    convert_kernel<T><<<grid_for(tokens * head_dim), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        src, static_cast<T*>(out), row_stride, tokens, head_dim);
    LCA_NAIVE_CHECK_LAUNCH("convert_kernel");
  });
}

}  // namespace lca_cuda_naive
