// The flex_flash forward kernel (mma.sync, sm_80+): one block of 4 warps per (query tile of 128
// rows, query head); each warp owns 32 query rows and runs the online softmax over the key tiles
// of its row tile's runs, Q resident in shared memory, K/V double-buffered by cp.async.
// Used by launch_*.cu through run_forward<T, D>.
// Rule: masking arithmetic only on partial tiles; rows that see nothing get O = 0, LSE = -inf.
#pragma once

#include "cuda_check.hpp"
#include "device.cuh"
#include "forward_sm90.cuh"
#include "kernels.hpp"

#include <cmath>

namespace lca_flex_flash::dev {

// F x 64 query rows a block (F = 2 by default, 1 where the mask's 64-row tiles save work): each
// warp owns F 16-row fragments (rows 16F w .. 16F w + 16F - 1), so every K and V fragment read
// from shared memory feeds F MMAs.
template <class T, int D, int F>
struct FwdSmem {
  static constexpr int kQBytes = F * SmemTile<T, D>::kBytes;  // 64 F rows
  static constexpr int kBytes = kQBytes + 4 * SmemTile<T, D>::kBytes;  // Q, K x2, V x2
};

template <class T, int D, int F>
__global__ void __launch_bounds__(128, 2) forward_kernel(const FwdParams p) {
  constexpr int kRows = 64 * F, kWarpRows = 16 * F;
  using M = Mma<T>;
  extern __shared__ __align__(128) char smem[];
  constexpr int kTileBytes = SmemTile<T, D>::kBytes;
  constexpr int kQBytes = FwdSmem<T, D, F>::kQBytes;
  // One SmemTile addressing covers all Q rows (rows 64..127 continue the same layout).
  const SmemTile<T, D> sq{smem};
  // Buffers by arithmetic, not by indexing an array of tiles (which would live in local memory).
  auto sk = [&](int b) { return SmemTile<T, D>{smem + kQBytes + b * kTileBytes}; };
  auto sv = [&](int b) { return SmemTile<T, D>{smem + kQBytes + (2 + b) * kTileBytes}; };

  const ForwardBlock blk = forward_block(blockIdx.x + int64_t{blockIdx.y} * gridDim.x, static_cast<int32_t>(gridDim.x),
                                         static_cast<int32_t>(gridDim.y), p.sched.heads_together);
  const int32_t q_tile = p.sched.order[blk.at];
  const int h = blk.head, hk = h / p.group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t q0 = int64_t{q_tile} * kRows;
  const T* q_base = static_cast<const T*>(p.q) + h * p.q_head;
  const T* k_base = static_cast<const T*>(p.k) + hk * p.k_head;
  const T* v_base = static_cast<const T*>(p.v) + hk * p.v_head;

#pragma unroll
  for (int f = 0; f < F; ++f) SmemTile<T, D>{smem + f * kTileBytes}.load_async(q_base, p.q_tok, q0 + f * kTile, p.seqlen_q);
  TileCursor cur(p.sched.runs, p.sched.run_offsets, q_tile);
  if (cur.valid()) {
    sk(0).load_async(k_base, p.k_tok, int64_t{cur.tile} * kTile, p.seqlen_k);
    sv(0).load_async(v_base, p.v_tok, int64_t{cur.tile} * kTile, p.seqlen_k);
  }
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  float o[F][D / 8][4];
#pragma unroll
  for (int f = 0; f < F; ++f)
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[f][n][0] = o[f][n][1] = o[f][n][2] = o[f][n][3] = 0.f;
  // Rows of this thread: fragment f, half r -> tile row kWarpRows * warp + 16 * f + g + 8 * r.
  float row_max[F][2], row_sum[F][2];
#pragma unroll
  for (int f = 0; f < F; ++f) row_max[f][0] = row_max[f][1] = -INFINITY, row_sum[f][0] = row_sum[f][1] = 0.f;

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
    float s[F][8][4];
#pragma unroll
    for (int f = 0; f < F; ++f)
#pragma unroll
      for (int n = 0; n < 8; ++n) s[f][n][0] = s[f][n][1] = s[f][n][2] = s[f][n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t qa[F][4];
#pragma unroll
      for (int f = 0; f < F; ++f) sq.a_frag(qa[f], warp * kWarpRows + 16 * f, ks * 16);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t kb[4];
        sk(buf).b_frag_nk(kb, np * 16, ks * 16);
#pragma unroll
        for (int f = 0; f < F; ++f) {
          M::run(s[f][2 * np], qa[f], kb[0], kb[1]);
          M::run(s[f][2 * np + 1], qa[f], kb[2], kb[3]);
        }
      }
    }
    if (mask >= 0) {
      const uint64_t* bits = p.sched.bits + int64_t{mask} * kRows + warp * kWarpRows + g;
#pragma unroll
      for (int f = 0; f < F; ++f) {
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
    for (int f = 0; f < F; ++f)
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
      uint32_t pa[F][4];
#pragma unroll
      for (int f = 0; f < F; ++f) {
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
        for (int f = 0; f < F; ++f) {
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
  for (int f = 0; f < F; ++f)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[f][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int64_t row = q0 + warp * kWarpRows + 16 * f + g + 8 * r;
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

template <class T, int D, int F>
void launch_forward_tiles(const FwdParams& p, cudaStream_t stream) {
  constexpr int smem = FwdSmem<T, D, F>::kBytes;
  LCA_FLEX_CUDA_CHECK(cudaFuncSetAttribute(forward_kernel<T, D, F>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>(p.sched.row_tiles), static_cast<unsigned>(p.heads_q));
  forward_kernel<T, D, F><<<grid, 128, smem, stream>>>(p);
  LCA_FLEX_CHECK_LAUNCH("flex_flash forward_kernel");
}

// The block's rows follow the schedule's tile rows (64, 128 or 192); 128-row tiles take the wgmma
// kernel on Hopper, and so do 64-row tiles where the group is even (the pair kernel) and 192-row
// tiles (three consumers: plan() builds them only where such a kernel runs).
inline bool forward_on_sm90(const FwdParams& p) {
  const bool sm90_rows = p.sched.tile_rows == kFwdRows || (p.sched.tile_rows == kTile && p.group % 2 == 0) ||
                         p.sched.tile_rows == 3 * kTile;
  return sm90_rows && sm90_available(p.forward);
}

// The kernel run_forward launches, by the "forward" option's value that forces it ("mma": the mma.sync kernel).
inline const char* forward_kernel_name(const FwdParams& p, int head_dim) {
  if (!forward_on_sm90(p)) return "mma";
  return sm90_forward_name(sm90_forward_kernel(p.forward, p.sched.tile_rows, p.sched.idle_share, p.sched.mean_tiles,
                                               p.sched.max_tiles, p.group, head_dim));
}

// How the forward run_forward launches makes its row sums (the "fwd_sum" option's values).
inline const char* forward_row_sums_name(const FwdParams& p, int head_dim) {
  if (!forward_on_sm90(p)) return "fadd";
  const Sm90FwdKernel k = sm90_forward_kernel(p.forward, p.sched.tile_rows, p.sched.idle_share, p.sched.mean_tiles,
                                              p.sched.max_tiles, p.group, head_dim);
  switch (sm90_forward_sum(p.sum, k, head_dim)) {
    case 1: return "mma";
    case 2: return "mma_beside";
    default: return "fadd";
  }
}

template <class T, int D>
void run_forward(const FwdParams& p, cudaStream_t stream) {
  static_assert(Sm90Layout<T, D>::kRows == kFwdRows);
  if (forward_on_sm90(p)) launch_forward_sm90<T, D>(p, stream);
  else if (p.sched.tile_rows == 3 * kTile)
    throw lca::Error(LCA_ERR_INTERNAL, "flex_flash: a 192-row forward schedule where the wgmma kernels do not run");
  else if (p.sched.tile_rows == 64) launch_forward_tiles<T, D, 1>(p, stream);
  else launch_forward_tiles<T, D, 2>(p, stream);
}

}  // namespace lca_flex_flash::dev
