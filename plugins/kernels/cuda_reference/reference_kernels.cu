// Device code of cuda_reference: online softmax in fp32 over each query row's key ranges,
// and a race-free backward (dQ by query rows, dK/dV by key rows over their query ranges).
#include "cuda_check.hpp"
#include "reference_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace lca_cuda_reference {

namespace {

constexpr int kThreads = 256;

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ inline T from_float(float v);
template <> __device__ inline float from_float<float>(float v) { return v; }
template <> __device__ inline __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The row (t, h) of a view, read into per-lane registers: lane holds d = lane + 32 * c.
template <class T, int C>
__device__ inline void load_row(const View& v, int64_t t, int h, int dim, int lane, float (&out)[C]) {
  const T* base = static_cast<const T*>(v.data) + t * v.s0 + h * v.s1;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int d = lane + 32 * c;
    out[c] = d < dim ? to_float(base[d * v.s2]) : 0.0f;
  }
}

template <class T, int C>
__device__ inline void store_row(const View& v, int64_t t, int h, int dim, int lane, const float (&val)[C], float mul) {
  T* base = static_cast<T*>(v.data) + t * v.s0 + h * v.s1;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int d = lane + 32 * c;
    if (d < dim) base[d * v.s2] = from_float<T>(val[c] * mul);
  }
}

template <int C>
__device__ inline float dot_part(const float (&a)[C], const float (&b)[C]) {
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) s += a[c] * b[c];
  return s;
}

template <class T, int C>
__global__ void __launch_bounds__(kThreads) forward_kernel(FwdParams p) {
  const Shape& sh = p.shape;
  const int lane = threadIdx.x & 31;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (warp >= sh.seqlen_q * sh.heads_q) return;
  const int h = static_cast<int>(warp % sh.heads_q);  // neighbouring warps share K/V rows
  const int64_t qi = warp / sh.heads_q;
  const int g = h / (sh.heads_q / sh.heads_kv);
  float q[C], acc[C], kv[C];
  load_row<T, C>(p.q, qi, h, sh.head_dim, lane, q);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    q[c] *= sh.scale;
    acc[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t r = p.row_offsets[qi]; r < p.row_offsets[qi + 1]; ++r) {
    const int64_t k_end = p.row_ranges[2 * r + 1];
    for (int64_t k = p.row_ranges[2 * r]; k < k_end; ++k) {
      load_row<T, C>(p.k, k, g, sh.head_dim, lane, kv);
      const float s = warp_sum(dot_part(q, kv));
      const float m_new = fmaxf(m, s);
      const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
      const float pr = expf(s - m_new);
      load_row<T, C>(p.v, k, g, sh.head_dim, lane, kv);
      l = l * corr + pr;
#pragma unroll
      for (int c = 0; c < C; ++c) acc[c] = acc[c] * corr + pr * kv[c];
      m = m_new;
    }
  }
  const bool empty = l == 0.0f;
  store_row<T, C>(p.o, qi, h, sh.head_dim, lane, acc, empty ? 0.0f : 1.0f / l);
  if (lane == 0) p.lse.data[h * p.lse.s0 + qi * p.lse.s1] = empty ? -INFINITY : m + logf(l);
}

// dQ_i = scale * sum_j P_ij (dP_ij - delta_i) K_j, with delta_i = dO_i . O_i kept for dK/dV.
template <class T, int C>
__global__ void __launch_bounds__(kThreads) backward_dq_kernel(BwdParams p) {
  const Shape& sh = p.shape;
  const int lane = threadIdx.x & 31;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (warp >= sh.seqlen_q * sh.heads_q) return;
  const int h = static_cast<int>(warp % sh.heads_q);
  const int64_t qi = warp / sh.heads_q;
  const int g = h / (sh.heads_q / sh.heads_kv);
  float q[C], d_o[C], dq[C], kk[C], vv[C];
  load_row<T, C>(p.d_o, qi, h, sh.head_dim, lane, d_o);
  load_row<T, C>(p.o, qi, h, sh.head_dim, lane, q);  // O, briefly, for delta
  const float delta = warp_sum(dot_part(d_o, q));
  if (lane == 0) p.delta[h * sh.seqlen_q + qi] = delta;
  load_row<T, C>(p.q, qi, h, sh.head_dim, lane, q);
#pragma unroll
  for (int c = 0; c < C; ++c) dq[c] = 0.0f;
  const float lse = p.lse.data[h * p.lse.s0 + qi * p.lse.s1];
  if (lse != -INFINITY) {
    for (int64_t r = p.row_offsets[qi]; r < p.row_offsets[qi + 1]; ++r) {
      const int64_t k_end = p.row_ranges[2 * r + 1];
      for (int64_t k = p.row_ranges[2 * r]; k < k_end; ++k) {
        load_row<T, C>(p.k, k, g, sh.head_dim, lane, kk);
        load_row<T, C>(p.v, k, g, sh.head_dim, lane, vv);
        const float s = warp_sum(dot_part(q, kk)) * sh.scale;
        const float dp = warp_sum(dot_part(d_o, vv));
        const float ds = expf(s - lse) * (dp - delta);
#pragma unroll
        for (int c = 0; c < C; ++c) dq[c] += ds * kk[c];
      }
    }
  }
  store_row<T, C>(p.dq, qi, h, sh.head_dim, lane, dq, sh.scale);
}

// dV_j = sum_{h in group, i} P_ij dO_i;  dK_j = scale * sum P_ij (dP_ij - delta_i) Q_i.
template <class T, int C>
__global__ void __launch_bounds__(kThreads) backward_dkv_kernel(BwdParams p) {
  const Shape& sh = p.shape;
  const int lane = threadIdx.x & 31;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (warp >= sh.seqlen_k * sh.heads_kv) return;
  const int g = static_cast<int>(warp % sh.heads_kv);
  const int64_t kj = warp / sh.heads_kv;
  const int group = sh.heads_q / sh.heads_kv;
  float kk[C], vv[C], q[C], d_o[C], dk[C], dv[C];
  load_row<T, C>(p.k, kj, g, sh.head_dim, lane, kk);
  load_row<T, C>(p.v, kj, g, sh.head_dim, lane, vv);
#pragma unroll
  for (int c = 0; c < C; ++c) dk[c] = dv[c] = 0.0f;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t r = p.col_offsets[kj]; r < p.col_offsets[kj + 1]; ++r) {
      const int64_t q_end = p.col_ranges[2 * r + 1];
      for (int64_t qi = p.col_ranges[2 * r]; qi < q_end; ++qi) {
        load_row<T, C>(p.q, qi, h, sh.head_dim, lane, q);
        load_row<T, C>(p.d_o, qi, h, sh.head_dim, lane, d_o);
        const float s = warp_sum(dot_part(q, kk)) * sh.scale;
        const float dp = warp_sum(dot_part(d_o, vv));
        const float lse = p.lse.data[h * p.lse.s0 + qi * p.lse.s1];
        const float pr = expf(s - lse);
        const float ds = pr * (dp - p.delta[h * sh.seqlen_q + qi]);
#pragma unroll
        for (int c = 0; c < C; ++c) {
          dv[c] += pr * d_o[c];
          dk[c] += ds * q[c];
        }
      }
    }
  }
  store_row<T, C>(p.dk, kj, g, sh.head_dim, lane, dk, sh.scale);
  store_row<T, C>(p.dv, kj, g, sh.head_dim, lane, dv, 1.0f);
}

// Registers per lane follow head_dim: C = ceil(head_dim / 32) rounded up to 1, 2, 4 or 8.
template <class T, class F>
void with_chunks(int head_dim, F&& f) {
  if (head_dim <= 32) f.template operator()<T, 1>();
  else if (head_dim <= 64) f.template operator()<T, 2>();
  else if (head_dim <= 128) f.template operator()<T, 4>();
  else f.template operator()<T, 8>();
}

unsigned blocks_for(int64_t warps) {
  return static_cast<unsigned>((warps + kThreads / 32 - 1) / (kThreads / 32));
}

template <class T, int C>
void forward_t(const FwdParams& p, cudaStream_t s) {
  const int64_t warps = p.shape.seqlen_q * p.shape.heads_q;
  if (warps == 0) return;
  forward_kernel<T, C><<<blocks_for(warps), kThreads, 0, s>>>(p);
  LCA_REF_CHECK_LAUNCH("forward_kernel");
}

template <class T, int C>
void backward_t(const BwdParams& p, cudaStream_t s) {
  const int64_t q_warps = p.shape.seqlen_q * p.shape.heads_q;
  const int64_t k_warps = p.shape.seqlen_k * p.shape.heads_kv;
  if (q_warps > 0) {
    backward_dq_kernel<T, C><<<blocks_for(q_warps), kThreads, 0, s>>>(p);
    LCA_REF_CHECK_LAUNCH("backward_dq_kernel");
  }
  if (k_warps > 0) {  // reads delta written by the dQ kernel: same stream, so ordered
    backward_dkv_kernel<T, C><<<blocks_for(k_warps), kThreads, 0, s>>>(p);
    LCA_REF_CHECK_LAUNCH("backward_dkv_kernel");
  }
}

}  // namespace

void launch_forward(const FwdParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (p.shape.dtype) {
    case LCA_DTYPE_F32: with_chunks<float>(p.shape.head_dim, [&]<class T, int C>() { forward_t<T, C>(p, s); }); break;
    case LCA_DTYPE_F16: with_chunks<__half>(p.shape.head_dim, [&]<class T, int C>() { forward_t<T, C>(p, s); }); break;
    case LCA_DTYPE_BF16: with_chunks<__nv_bfloat16>(p.shape.head_dim, [&]<class T, int C>() { forward_t<T, C>(p, s); }); break;
    default: throw lca::Error(LCA_ERR_UNSUPPORTED, "cuda_reference: dtype must be f32, f16 or bf16");
  }
}

void launch_backward(const BwdParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (p.shape.dtype) {
    case LCA_DTYPE_F32: with_chunks<float>(p.shape.head_dim, [&]<class T, int C>() { backward_t<T, C>(p, s); }); break;
    case LCA_DTYPE_F16: with_chunks<__half>(p.shape.head_dim, [&]<class T, int C>() { backward_t<T, C>(p, s); }); break;
    case LCA_DTYPE_BF16: with_chunks<__nv_bfloat16>(p.shape.head_dim, [&]<class T, int C>() { backward_t<T, C>(p, s); }); break;
    default: throw lca::Error(LCA_ERR_UNSUPPORTED, "cuda_reference: dtype must be f32, f16 or bf16");
  }
}

}  // namespace lca_cuda_reference
