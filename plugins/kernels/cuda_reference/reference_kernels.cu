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

// All NH reductions interleaved, so that the shuffles of one do not wait on another's.
template <int N>
__device__ inline void warp_sum_n(float (&v)[N]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] += __shfl_xor_sync(0xffffffffu, v[j], o);
  }
}

// A warp owns one query row and NH query heads of one kv group: each K/V row it reads serves
// NH heads, and their NH reductions overlap. Warp order: row-major over (row, kv head, chunk),
// so that neighbouring warps walk the same keys.
struct RowHeads {
  int64_t qi;
  int g, h0, nh;
};

template <int NH>
__device__ inline bool row_heads(const Shape& sh, RowHeads* out) {
  const int group = sh.heads_q / sh.heads_kv;
  const int chunks = (group + NH - 1) / NH;
  const int64_t per_row = static_cast<int64_t>(sh.heads_kv) * chunks;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (warp >= sh.seqlen_q * per_row) return false;
  out->qi = warp / per_row;
  const int rest = static_cast<int>(warp % per_row);
  out->g = rest / chunks;
  out->h0 = out->g * group + (rest % chunks) * NH;
  out->nh = min(NH, out->g * group + group - out->h0);
  return true;
}

template <class T, int C, int NH>
__global__ void __launch_bounds__(kThreads) forward_kernel(FwdParams p) {
  const Shape& sh = p.shape;
  RowHeads w;
  if (!row_heads<NH>(sh, &w)) return;
  const int lane = threadIdx.x & 31;
  float q[NH][C], acc[NH][C], m[NH], l[NH], kv[C];
#pragma unroll
  for (int j = 0; j < NH; ++j) {
    if (j < w.nh) load_row<T, C>(p.q, w.qi, w.h0 + j, sh.head_dim, lane, q[j]);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      q[j][c] = j < w.nh ? q[j][c] * sh.scale : 0.0f;
      acc[j][c] = 0.0f;
    }
    m[j] = -INFINITY;
    l[j] = 0.0f;
  }
  for (int64_t r = p.row_offsets[w.qi]; r < p.row_offsets[w.qi + 1]; ++r) {
    const int64_t k_end = p.row_ranges[2 * r + 1];
    for (int64_t k = p.row_ranges[2 * r]; k < k_end; ++k) {
      load_row<T, C>(p.k, k, w.g, sh.head_dim, lane, kv);
      float s[NH];
#pragma unroll
      for (int j = 0; j < NH; ++j) s[j] = dot_part<C>(q[j], kv);
      warp_sum_n(s);
      load_row<T, C>(p.v, k, w.g, sh.head_dim, lane, kv);
#pragma unroll
      for (int j = 0; j < NH; ++j) {
        const float m_new = fmaxf(m[j], s[j]);
        const float corr = expf(m[j] - m_new);  // 0 on the first key (m = -inf)
        const float pr = expf(s[j] - m_new);
        l[j] = l[j] * corr + pr;
#pragma unroll
        for (int c = 0; c < C; ++c) acc[j][c] = acc[j][c] * corr + pr * kv[c];
        m[j] = m_new;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NH; ++j) {
    if (j >= w.nh) continue;
    const bool empty = l[j] == 0.0f;
    store_row<T, C>(p.o, w.qi, w.h0 + j, sh.head_dim, lane, acc[j], empty ? 0.0f : 1.0f / l[j]);
    if (lane == 0) p.lse.data[(w.h0 + j) * p.lse.s0 + w.qi * p.lse.s1] = empty ? -INFINITY : m[j] + logf(l[j]);
  }
}

// dQ_i = scale * sum_j P_ij (dP_ij - delta_i) K_j, with delta_i = dO_i . O_i kept for dK/dV.
template <class T, int C, int NH>
__global__ void __launch_bounds__(kThreads) backward_dq_kernel(BwdParams p) {
  const Shape& sh = p.shape;
  RowHeads w;
  if (!row_heads<NH>(sh, &w)) return;
  const int lane = threadIdx.x & 31;
  float q[NH][C], d_o[NH][C], dq[NH][C], delta[NH], lse[NH], kk[C], vv[C];
#pragma unroll
  for (int j = 0; j < NH; ++j) {
    const int h = w.h0 + j;
    if (j < w.nh) {
      load_row<T, C>(p.d_o, w.qi, h, sh.head_dim, lane, d_o[j]);
      load_row<T, C>(p.o, w.qi, h, sh.head_dim, lane, kk);  // O, briefly, for delta
      load_row<T, C>(p.q, w.qi, h, sh.head_dim, lane, q[j]);
      lse[j] = p.lse.data[h * p.lse.s0 + w.qi * p.lse.s1];
    } else {
#pragma unroll
      for (int c = 0; c < C; ++c) d_o[j][c] = kk[c] = q[j][c] = 0.0f;
      lse[j] = -INFINITY;
    }
    delta[j] = dot_part<C>(d_o[j], kk);
#pragma unroll
    for (int c = 0; c < C; ++c) dq[j][c] = 0.0f;
  }
  warp_sum_n(delta);
  if (lane < NH && lane < w.nh) {
#pragma unroll
    for (int j = 0; j < NH; ++j)
      if (j == lane) p.delta[(w.h0 + j) * sh.seqlen_q + w.qi] = delta[j];
  }
  for (int64_t r = p.row_offsets[w.qi]; r < p.row_offsets[w.qi + 1]; ++r) {
    const int64_t k_end = p.row_ranges[2 * r + 1];
    for (int64_t k = p.row_ranges[2 * r]; k < k_end; ++k) {
      load_row<T, C>(p.k, k, w.g, sh.head_dim, lane, kk);
      load_row<T, C>(p.v, k, w.g, sh.head_dim, lane, vv);
      float red[2 * NH];  // scores, then dP
#pragma unroll
      for (int j = 0; j < NH; ++j) {
        red[j] = dot_part<C>(q[j], kk);
        red[NH + j] = dot_part<C>(d_o[j], vv);
      }
      warp_sum_n(red);
#pragma unroll
      for (int j = 0; j < NH; ++j) {
        const float ds = lse[j] == -INFINITY ? 0.0f : expf(red[j] * sh.scale - lse[j]) * (red[NH + j] - delta[j]);
#pragma unroll
        for (int c = 0; c < C; ++c) dq[j][c] += ds * kk[c];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NH; ++j)
    if (j < w.nh) store_row<T, C>(p.dq, w.qi, w.h0 + j, sh.head_dim, lane, dq[j], sh.scale);
}

// dV_j = sum_{h in group, i} P_ij dO_i;  dK_j = scale * sum P_ij (dP_ij - delta_i) Q_i.
// One warp per (key row, kv head); kU query rows at a time so that 2 kU reductions overlap.
template <class T, int C>
__global__ void __launch_bounds__(kThreads) backward_dkv_kernel(BwdParams p) {
  constexpr int kU = 4;
  const Shape& sh = p.shape;
  const int lane = threadIdx.x & 31;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (warp >= sh.seqlen_k * sh.heads_kv) return;
  const int g = static_cast<int>(warp % sh.heads_kv);
  const int64_t kj = warp / sh.heads_kv;
  const int group = sh.heads_q / sh.heads_kv;
  float kk[C], vv[C], q[kU][C], d_o[kU][C], dk[C], dv[C];
  load_row<T, C>(p.k, kj, g, sh.head_dim, lane, kk);
  load_row<T, C>(p.v, kj, g, sh.head_dim, lane, vv);
#pragma unroll
  for (int c = 0; c < C; ++c) dk[c] = dv[c] = 0.0f;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t r = p.col_offsets[kj]; r < p.col_offsets[kj + 1]; ++r) {
      const int64_t q_end = p.col_ranges[2 * r + 1];
      for (int64_t qi = p.col_ranges[2 * r]; qi < q_end; qi += kU) {
        const int n = q_end - qi < kU ? static_cast<int>(q_end - qi) : kU;
        float red[2 * kU];  // scores, then dP
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          if (u < n) {
            load_row<T, C>(p.q, qi + u, h, sh.head_dim, lane, q[u]);
            load_row<T, C>(p.d_o, qi + u, h, sh.head_dim, lane, d_o[u]);
          } else {
#pragma unroll
            for (int c = 0; c < C; ++c) q[u][c] = d_o[u][c] = 0.0f;
          }
          red[u] = dot_part<C>(q[u], kk);
          red[kU + u] = dot_part<C>(d_o[u], vv);
        }
        warp_sum_n(red);
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          if (u >= n) continue;
          const float lse = p.lse.data[h * p.lse.s0 + (qi + u) * p.lse.s1];
          const float pr = expf(red[u] * sh.scale - lse);
          const float ds = pr * (red[kU + u] - p.delta[h * sh.seqlen_q + qi + u]);
#pragma unroll
          for (int c = 0; c < C; ++c) {
            dv[c] += pr * d_o[u][c];
            dk[c] += ds * q[u][c];
          }
        }
      }
    }
  }
  store_row<T, C>(p.dk, kj, g, sh.head_dim, lane, dk, sh.scale);
  store_row<T, C>(p.dv, kj, g, sh.head_dim, lane, dv, 1.0f);
}

// Registers per lane follow head_dim (C = head_dim / 32, at least 2) and the heads a warp
// serves follow the group size (NH, at most 4 when C = 8 to stay clear of spills).
template <class T, class F>
void with_config(int head_dim, int group, F&& f) {
  auto heads = [&]<int C>() {
    if (group >= 8 && C < 8) f.template operator()<T, C, 8>();
    else if (group >= 4) f.template operator()<T, C, 4>();
    else if (group >= 2) f.template operator()<T, C, 2>();
    else f.template operator()<T, C, 1>();
  };
  if (head_dim <= 64) heads.template operator()<2>();
  else if (head_dim <= 128) heads.template operator()<4>();
  else heads.template operator()<8>();
}

unsigned blocks_for(int64_t warps) {
  return static_cast<unsigned>((warps + kThreads / 32 - 1) / (kThreads / 32));
}

int64_t row_warps(const Shape& sh, int nh) {
  const int group = sh.heads_q / sh.heads_kv;
  return sh.seqlen_q * sh.heads_kv * ((group + nh - 1) / nh);
}

template <class T, int C, int NH>
void forward_t(const FwdParams& p, cudaStream_t s) {
  const int64_t warps = row_warps(p.shape, NH);
  if (warps == 0) return;
  forward_kernel<T, C, NH><<<blocks_for(warps), kThreads, 0, s>>>(p);
  LCA_REF_CHECK_LAUNCH("forward_kernel");
}

template <class T, int C, int NH>
void backward_t(const BwdParams& p, cudaStream_t s) {
  const int64_t q_warps = row_warps(p.shape, NH);
  const int64_t k_warps = p.shape.seqlen_k * p.shape.heads_kv;
  if (q_warps > 0) {
    backward_dq_kernel<T, C, NH><<<blocks_for(q_warps), kThreads, 0, s>>>(p);
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
    case LCA_DTYPE_F32: with_config<float>(p.shape.head_dim, p.shape.heads_q / p.shape.heads_kv, [&]<class T, int C, int NH>() { forward_t<T, C, NH>(p, s); }); break;
    case LCA_DTYPE_F16: with_config<__half>(p.shape.head_dim, p.shape.heads_q / p.shape.heads_kv,
                                           [&]<class T, int C, int NH>() { forward_t<T, C, NH>(p, s); }); break;
    case LCA_DTYPE_BF16: with_config<__nv_bfloat16>(p.shape.head_dim, p.shape.heads_q / p.shape.heads_kv,
                                           [&]<class T, int C, int NH>() { forward_t<T, C, NH>(p, s); }); break;
    default: throw lca::Error(LCA_ERR_UNSUPPORTED, "cuda_reference: dtype must be f32, f16 or bf16");
  }
}

void launch_backward(const BwdParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (p.shape.dtype) {
    case LCA_DTYPE_F32: with_config<float>(p.shape.head_dim, p.shape.heads_q / p.shape.heads_kv,
                                           [&]<class T, int C, int NH>() { backward_t<T, C, NH>(p, s); }); break;
    case LCA_DTYPE_F16: with_config<__half>(p.shape.head_dim, p.shape.heads_q / p.shape.heads_kv,
                                           [&]<class T, int C, int NH>() { backward_t<T, C, NH>(p, s); }); break;
    case LCA_DTYPE_BF16: with_config<__nv_bfloat16>(p.shape.head_dim, p.shape.heads_q / p.shape.heads_kv,
                                           [&]<class T, int C, int NH>() { backward_t<T, C, NH>(p, s); }); break;
    default: throw lca::Error(LCA_ERR_UNSUPPORTED, "cuda_reference: dtype must be f32, f16 or bf16");
  }
}

}  // namespace lca_cuda_reference
