// The flex_flash forward kernel (mma.sync, sm_80+): one block of 4 warps per (query tile of 128
// rows, query head); each warp owns 32 query rows and runs the online softmax over the key tiles
// of its row tile's runs, Q resident in shared memory, K/V double-buffered by cp.async.
// Used by launch_*.cu through run_forward<T, D>.
// Rule: masking arithmetic only on partial tiles; rows that see nothing get O = 0, LSE = -inf.
#pragma once

#include "cuda_check.hpp"
#include "device.cuh"
#include "kernels.hpp"

#include <cmath>

namespace lca_flex_flash::dev {

// kFwdRows (128) query rows a block: each warp owns two 16-row fragments (rows 32w .. 32w + 31),
// so every K and V fragment read from shared memory feeds two MMAs.
template <class T, int D>
struct FwdSmem {
  static constexpr int kQBytes = 2 * SmemTile<T, D>::kBytes;  // 128 rows
  static constexpr int kBytes = kQBytes + 4 * SmemTile<T, D>::kBytes;  // Q, K x2, V x2
};

template <class T, int D>
__global__ void __launch_bounds__(128, 2) forward_kernel(const FwdParams p) {
  using M = Mma<T>;
  extern __shared__ __align__(128) char smem[];
  constexpr int kTileBytes = SmemTile<T, D>::kBytes;
  constexpr int kQBytes = FwdSmem<T, D>::kQBytes;
  // One SmemTile addressing covers all 128 Q rows (rows 64..127 continue the same layout).
  const SmemTile<T, D> sq{smem};
  // Buffers by arithmetic, not by indexing an array of tiles (which would live in local memory).
  auto sk = [&](int b) { return SmemTile<T, D>{smem + kQBytes + b * kTileBytes}; };
  auto sv = [&](int b) { return SmemTile<T, D>{smem + kQBytes + (2 + b) * kTileBytes}; };

  const int32_t q_tile = p.sched.order[blockIdx.x];
  const int h = blockIdx.y, hk = h / p.group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t q0 = int64_t{q_tile} * kFwdRows;
  const T* q_base = static_cast<const T*>(p.q) + h * p.q_head;
  const T* k_base = static_cast<const T*>(p.k) + hk * p.k_head;
  const T* v_base = static_cast<const T*>(p.v) + hk * p.v_head;

  sq.load_async(q_base, p.q_tok, q0, p.seqlen_q);
  SmemTile<T, D>{smem + kTileBytes}.load_async(q_base, p.q_tok, q0 + kTile, p.seqlen_q);
  TileCursor cur(p.sched.runs, p.sched.run_offsets, q_tile);
  if (cur.valid()) {
    sk(0).load_async(k_base, p.k_tok, int64_t{cur.tile} * kTile, p.seqlen_k);
    sv(0).load_async(v_base, p.v_tok, int64_t{cur.tile} * kTile, p.seqlen_k);
  }
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  float o[2][D / 8][4];
#pragma unroll
  for (int f = 0; f < 2; ++f)
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[f][n][0] = o[f][n][1] = o[f][n][2] = o[f][n][3] = 0.f;
  // Rows of this thread: fragment f, half r -> tile row 32 * warp + 16 * f + g + 8 * r.
  float row_max[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
  float row_sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};

  int buf = 0;
  while (cur.valid()) {
    const int32_t mask = cur.mask();
    TileCursor nxt = cur;
    nxt.next();
    if (nxt.valid()) {
      sk(buf ^ 1).load_async(k_base, p.k_tok, int64_t{nxt.tile} * kTile, p.seqlen_k);
      sv(buf ^ 1).load_async(v_base, p.v_tok, int64_t{nxt.tile} * kTile, p.seqlen_k);
    }
    cp_async_commit();

    // S = Q K^T for this warp's 32 rows x 64 keys.
    float s[2][8][4];
#pragma unroll
    for (int f = 0; f < 2; ++f)
#pragma unroll
      for (int n = 0; n < 8; ++n) s[f][n][0] = s[f][n][1] = s[f][n][2] = s[f][n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t qa[2][4];
      sq.a_frag(qa[0], warp * 32, ks * 16);
      sq.a_frag(qa[1], warp * 32 + 16, ks * 16);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t kb[4];
        sk(buf).b_frag_nk(kb, np * 16, ks * 16);
#pragma unroll
        for (int f = 0; f < 2; ++f) {
          M::run(s[f][2 * np], qa[f], kb[0], kb[1]);
          M::run(s[f][2 * np + 1], qa[f], kb[2], kb[3]);
        }
      }
    }
    if (mask >= 0) {
      const uint64_t* bits = p.sched.bits + int64_t{mask} * kFwdRows + warp * 32 + g;
#pragma unroll
      for (int f = 0; f < 2; ++f) {
        const uint64_t w[2] = {bits[16 * f], bits[16 * f + 8]};
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (!((w[e >> 1] >> (n * 8 + 2 * t4 + (e & 1))) & 1u)) s[f][n][e] = -INFINITY;
      }
    }
    // Online softmax in the log2 domain; a thread holds rows g (e = 0, 1) and g + 8 (e = 2, 3)
    // of each fragment.
#pragma unroll
    for (int f = 0; f < 2; ++f)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; ++n) mx = fmaxf(mx, fmaxf(s[f][n][2 * r], s[f][n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(row_max[f][r], mx * p.scale_log2);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = exp2f(row_max[f][r] - m_use);
        row_max[f][r] = m_new;
        row_sum[f][r] *= alpha;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          o[f][n][2 * r] *= alpha;
          o[f][n][2 * r + 1] *= alpha;
        }
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          s[f][n][2 * r] = exp2f(fmaf(s[f][n][2 * r], p.scale_log2, -m_use));
          s[f][n][2 * r + 1] = exp2f(fmaf(s[f][n][2 * r + 1], p.scale_log2, -m_use));
          row_sum[f][r] += s[f][n][2 * r] + s[f][n][2 * r + 1];
        }
      }
    // O += P V: the S accumulators of key blocks 2kk, 2kk+1 are the A fragment of k-step kk.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[2][4];
#pragma unroll
      for (int f = 0; f < 2; ++f) {
        pa[f][0] = M::pack(s[f][2 * kk][0], s[f][2 * kk][1]);
        pa[f][1] = M::pack(s[f][2 * kk][2], s[f][2 * kk][3]);
        pa[f][2] = M::pack(s[f][2 * kk + 1][0], s[f][2 * kk + 1][1]);
        pa[f][3] = M::pack(s[f][2 * kk + 1][2], s[f][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vb[4];
        sv(buf).b_frag_kn(vb, kk * 16, dp * 16);
#pragma unroll
        for (int f = 0; f < 2; ++f) {
          M::run(o[f][2 * dp], pa[f], vb[0], vb[1]);
          M::run(o[f][2 * dp + 1], pa[f], vb[2], vb[3]);
        }
      }
    }
    cp_async_wait_all();
    __syncthreads();
    buf ^= 1;
    cur = nxt;
  }

  // Finish: row sums across the 4 threads of a row, normalise, write O and LSE.
  T* o_base = static_cast<T*>(p.o) + h * p.o_head;
#pragma unroll
  for (int f = 0; f < 2; ++f)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[f][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int64_t row = q0 + warp * 32 + 16 * f + g + 8 * r;
      if (row >= p.seqlen_q) continue;
      T* dst = o_base + row * p.o_tok + 2 * t4;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(dst + n * 8) = M::pack(o[f][n][2 * r] * inv, o[f][n][2 * r + 1] * inv);
      if (t4 == 0)
        p.lse[h * p.lse_head + row * p.lse_tok] =
            sum > 0.f ? (row_max[f][r] + log2f(sum)) * 0.69314718055994531f : -INFINITY;
    }
}

template <class T, int D>
void run_forward(const FwdParams& p, cudaStream_t stream) {
  constexpr int smem = FwdSmem<T, D>::kBytes;
  LCA_FLEX_CUDA_CHECK(cudaFuncSetAttribute(forward_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>(p.sched.row_tiles), static_cast<unsigned>(p.heads_q));
  forward_kernel<T, D><<<grid, 128, smem, stream>>>(p);
  LCA_FLEX_CHECK_LAUNCH("flex_flash forward_kernel");
}

}  // namespace lca_flex_flash::dev
