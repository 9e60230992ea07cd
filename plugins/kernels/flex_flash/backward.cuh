// The flex_flash backward kernels (mma.sync, sm_80+). The main kernel runs one block of 8 warps
// per (key tile of kBwdKeys = 128 rows, or 64 with 4 warps where the mask wants, kv head): each warp owns 16 keys and accumulates their dK and dV in
// registers over every query head of the group and every query tile of its key tile's runs
// (Q, dO, LSE and delta double-buffered); dQ goes through shared memory (dS) and fp32 atomics.
// A pre-pass computes delta = rowsum(dO * O), a post-pass scales dQ into the output dtype.
// Used by launch_*.cu through run_backward<T, D>, which takes the wgmma kernel of
// backward_sm90.cuh instead on Hopper, unless the "backward" option is mma.
// Rule: P is recomputed from the forward's LSE; masked cells give P = 0 and touch nothing.
#pragma once

#include "backward_common.cuh"
#include "backward_sm90.cuh"
#include "cuda_check.hpp"
#include "device.cuh"
#include "kernels.hpp"

#include <cmath>

namespace lca_flex_flash::dev {

template <class T, int D, int kBwdKeys>
struct BwdSmem {
  static constexpr int kTileBytes = SmemTile<T, D>::kBytes;  // 64 rows
  static constexpr int kKeyBytes = (kBwdKeys / kTile) * kTileBytes;
  static constexpr int kQOffset = 2 * kKeyBytes;  // K, V (kBwdKeys rows each), then Q x2, dO x2
  static constexpr int kDsOffset = kQOffset + 4 * kTileBytes;
  static constexpr int kRowOffset = kDsOffset + kTile * kBwdKeys * int(sizeof(T));  // dS: 64 x kBwdKeys
  static constexpr int kBytes = kRowOffset + 4 * kTile * int(sizeof(float));  // LSE x2, delta x2
};

template <class T, int D>
__device__ __forceinline__ void load_query_side(const BwdParams& p, const SmemTile<T, D>& sq,
                                                const SmemTile<T, D>& sdo, float* lse2, float* delta,
                                                int hq, int64_t row0) {
  sq.load_async(static_cast<const T*>(p.q) + hq * p.q_head, p.q_tok, row0, p.seqlen_q);
  sdo.load_async(static_cast<const T*>(p.d_o) + hq * p.do_head, p.do_tok, row0, p.seqlen_q);
  if (threadIdx.x < kTile) {
    const int64_t row = row0 + threadIdx.x;
    const bool valid = row < p.seqlen_q;
    lse2[threadIdx.x] = valid ? p.lse[hq * p.lse_head + row * p.lse_tok] * kLog2e : INFINITY;
    delta[threadIdx.x] = valid ? p.delta[hq * p.seqlen_q + row] : 0.f;
  }
}

template <class T, int D, int kBwdKeys>
__global__ void __launch_bounds__(kBwdKeys * 2, 1) backward_kernel(const BwdParams p) {
  using M = Mma<T>;
  using S = BwdSmem<T, D, kBwdKeys>;
  constexpr int kDSplit = kBwdKeys / 64;  // warps per 16 query rows in dQ = dS K
  extern __shared__ __align__(128) char smem[];
  // K and V hold kBwdKeys rows each: consecutive 64-row tiles address as one (the swizzle
  // depends on the row's low bits only).
  const SmemTile<T, D> sk{smem}, sv{smem + S::kKeyBytes};
  // Buffers by arithmetic, not by indexing arrays of pointers (which would live in local memory).
  auto sq = [&](int b) { return SmemTile<T, D>{smem + S::kQOffset + b * S::kTileBytes}; };
  auto sdo = [&](int b) { return SmemTile<T, D>{smem + S::kQOffset + (2 + b) * S::kTileBytes}; };
  const SmemTile<T, kBwdKeys> sds{smem + S::kDsOffset};  // dS as 64 query rows x kBwdKeys keys
  float* rows = reinterpret_cast<float*>(smem + S::kRowOffset);
  auto lse2 = [&](int b) { return rows + b * kTile; };
  auto delta = [&](int b) { return rows + (2 + b) * kTile; };

  const int32_t k_tile = p.sched.order[blockIdx.x];
  const int hk = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t k0 = int64_t{k_tile} * kBwdKeys;

  for (int part = 0; part < kBwdKeys / kTile; ++part) {
    SmemTile<T, D>{sk.base + part * S::kTileBytes}.load_async(static_cast<const T*>(p.k) + hk * p.k_head, p.k_tok,
                                                              k0 + part * kTile, p.seqlen_k);
    SmemTile<T, D>{sv.base + part * S::kTileBytes}.load_async(static_cast<const T*>(p.v) + hk * p.v_head, p.v_tok,
                                                              k0 + part * kTile, p.seqlen_k);
  }
  GroupCursor cur(&p.sched, k_tile, p.group);
  if (cur.valid())
    load_query_side(p, sq(0), sdo(0), lse2(0), delta(0), hk * p.group + cur.head, int64_t{cur.tiles.tile} * kTile);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;

  int buf = 0;
  while (cur.valid()) {
    const int32_t mask = cur.tiles.mask();
    const int hq = hk * p.group + cur.head;
    const int64_t q0 = int64_t{cur.tiles.tile} * kTile;
    GroupCursor nxt = cur;
    nxt.next();
    if (nxt.valid())
      load_query_side(p, sq(buf ^ 1), sdo(buf ^ 1), lse2(buf ^ 1), delta(buf ^ 1), hk * p.group + nxt.head,
                      int64_t{nxt.tiles.tile} * kTile);
    cp_async_commit();

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x 64 queries.
    float pt[8][4], dpt[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) pt[n][e] = dpt[n][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t ka[4], va[4];
      sk.a_frag(ka, warp * 16, ks * 16);
      sv.a_frag(va, warp * 16, ks * 16);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t qb[4], ob[4];
        sq(buf).b_frag_nk(qb, np * 16, ks * 16);
        sdo(buf).b_frag_nk(ob, np * 16, ks * 16);
        M::run(pt[2 * np], ka, qb[0], qb[1]);
        M::run(pt[2 * np + 1], ka, qb[2], qb[3]);
        M::run(dpt[2 * np], va, ob[0], ob[1]);
        M::run(dpt[2 * np + 1], va, ob[2], ob[3]);
      }
    }
    // P^T from the forward's LSE, then dS^T = P^T (dP^T - delta); key rows g and g + 8.
    // A full tile (mask -1) skips the masking arithmetic.
    if (mask >= 0) {
      const uint64_t* bits = p.sched.bits + int64_t{mask} * kBwdKeys + warp * 16 + g;
      const uint64_t w[2] = {bits[0], bits[8]};
      probs_and_ds<true>(&pt[0][0], &dpt[0][0], w, t4, p.scale_log2, lse2(buf), delta(buf));
    } else {
      const uint64_t w[2] = {};
      probs_and_ds<false>(&pt[0][0], &dpt[0][0], w, t4, p.scale_log2, lse2(buf), delta(buf));
    }
    // dV += P^T dO and dK += dS^T Q: the accumulators of query blocks 2kk, 2kk+1 are the A
    // fragment of k-step kk.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t pa[4] = {M::pack(pt[2 * kk][0], pt[2 * kk][1]), M::pack(pt[2 * kk][2], pt[2 * kk][3]),
                              M::pack(pt[2 * kk + 1][0], pt[2 * kk + 1][1]),
                              M::pack(pt[2 * kk + 1][2], pt[2 * kk + 1][3])};
      const uint32_t da[4] = {M::pack(dpt[2 * kk][0], dpt[2 * kk][1]), M::pack(dpt[2 * kk][2], dpt[2 * kk][3]),
                              M::pack(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                              M::pack(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t ob[4], qb[4];
        sdo(buf).b_frag_kn(ob, kk * 16, dp * 16);
        sq(buf).b_frag_kn(qb, kk * 16, dp * 16);
        M::run(dv[2 * dp], pa, ob[0], ob[1]);
        M::run(dv[2 * dp + 1], pa, ob[2], ob[3]);
        M::run(dk[2 * dp], da, qb[0], qb[1]);
        M::run(dk[2 * dp + 1], da, qb[2], qb[3]);
      }
    }
    // dS (queries x keys) to shared memory for dQ = dS K.
    T* ds = reinterpret_cast<T*>(sds.base);
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = warp * 16 + g + 8 * (e >> 1), query = n * 8 + 2 * t4 + (e & 1);
        ds[swizzled(query, key / 8, kBwdKeys / 8) * 8 + key % 8] = M::from_float(dpt[n][e]);
      }
    __syncthreads();
    // dQ = dS K for the 64 query rows: warp w takes rows 16 (w % 4) .. +15 and a 1/kDSplit
    // share of the head dim, summed over the block's kBwdKeys keys, into the fp32 accumulator.
    {
      constexpr int kWidth = D / kDSplit;
      const int qrow = 16 * (warp & 3), dhalf = (warp >> 2) * kWidth;
      float acc[kWidth / 8][4];
#pragma unroll
      for (int n = 0; n < kWidth / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < kBwdKeys / 16; ++ks) {
        uint32_t dsa[4];
        sds.a_frag(dsa, qrow, ks * 16);
#pragma unroll
        for (int dp = 0; dp < kWidth / 16; ++dp) {
          uint32_t kb[4];
          sk.b_frag_kn(kb, ks * 16, dhalf + dp * 16);
          M::run(acc[2 * dp], dsa, kb[0], kb[1]);
          M::run(acc[2 * dp + 1], dsa, kb[2], kb[3]);
        }
      }
      const int64_t row_a = q0 + qrow + g, row_b = row_a + 8;
      float* acc_a = p.dq_accum + (row_a * p.heads_q + hq) * D + dhalf + 2 * t4;
      float* acc_b = p.dq_accum + (row_b * p.heads_q + hq) * D + dhalf + 2 * t4;
#pragma unroll
      for (int n = 0; n < kWidth / 8; ++n) {
        if (row_a < p.seqlen_q) add_pair(acc_a + n * 8, acc[n][0], acc[n][1]);
        if (row_b < p.seqlen_q) add_pair(acc_b + n * 8, acc[n][2], acc[n][3]);
      }
    }
    cp_async_wait_all();
    __syncthreads();
    buf ^= 1;
    cur = nxt;
  }

  // dK (scaled) and dV of this warp's keys.
  T* dk_base = static_cast<T*>(p.dk) + hk * p.dk_head;
  T* dv_base = static_cast<T*>(p.dv) + hk * p.dv_head;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key = k0 + warp * 16 + g + 8 * r;
    if (key >= p.seqlen_k) continue;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int col = n * 8 + 2 * t4;
      *reinterpret_cast<uint32_t*>(dk_base + key * p.dk_tok + col) =
          M::pack(dk[n][2 * r] * p.scale, dk[n][2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv_base + key * p.dv_tok + col) = M::pack(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

// The two passes around the backward's main kernel read or write every query row of every head
// (at 16K, 64 heads, head_dim 128: O and dO 268 MB each, the fp32 dQ accumulator 537 MB), so on a
// sparse mask they are a large part of its time. Each moves 16 bytes an access, D / 8 lanes a
// (query row, head), and divides in 32 bits (plan() keeps seqlen_q x heads_q below 2^31).
// (Until v16: one element a thread, three 64-bit divisions each, and a separate memset; the
// three took ~1.1 ms at 16K beside a 5.1 ms sliding_window main kernel. commit 04d6400.)
template <int D>
struct RowLanes {
  static constexpr int kLanes = D / 8;             // 8 elements (16 bytes of T) a lane
  static constexpr int kRowsPerBlock = 256 / kLanes;
  // The (query row x heads_q + head) of this lane's group, and the lane's 8 columns.
  static __device__ __forceinline__ uint32_t pair() { return blockIdx.x * kRowsPerBlock + threadIdx.x / kLanes; }
  static __device__ __forceinline__ int col() { return 8 * (threadIdx.x % kLanes); }
  static __device__ __forceinline__ void row_head(uint32_t pair, int heads, uint32_t& row, uint32_t& head) {
    row = pair / static_cast<uint32_t>(heads);
    head = pair - row * static_cast<uint32_t>(heads);
  }
  static unsigned blocks(int64_t pairs) { return static_cast<unsigned>((pairs + kRowsPerBlock - 1) / kRowsPerBlock); }
};

// delta[h][q] = sum_d dO[q, h, d] * O[q, h, d], and the row's fp32 dQ accumulator set to zero
// (the main kernels add into it), except in query tiles that have a first writer (p.dq_first),
// whose store comes first.
template <class T, int D>
__global__ void __launch_bounds__(256) prepare_kernel(const BwdParams p) {
  using R = RowLanes<D>;
  const uint32_t pairs = static_cast<uint32_t>(p.seqlen_q) * static_cast<uint32_t>(p.heads_q);
  const uint32_t pair = R::pair();
  if (pair >= pairs) return;  // whole groups: a group's lanes share the pair
  uint32_t row, h;
  R::row_head(pair, p.heads_q, row, h);
  const int col = R::col();
  const uint4 o = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.o) + row * p.o_tok + h * p.o_head + col);
  const uint4 d_o =
      *reinterpret_cast<const uint4*>(static_cast<const T*>(p.d_o) + row * p.do_tok + h * p.do_head + col);
  if (p.dq_first == nullptr || p.dq_first[row / kTile] < 0) {
    float4* acc = reinterpret_cast<float4*>(p.dq_accum + int64_t{pair} * D + col);
    acc[0] = acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const uint32_t ow[4] = {o.x, o.y, o.z, o.w}, dw[4] = {d_o.x, d_o.y, d_o.z, d_o.w};
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = Mma<T>::unpack(ow[i]), b = Mma<T>::unpack(dw[i]);
    sum += a.x * b.x + a.y * b.y;
  }
  // The group's kLanes lanes are adjacent and aligned within the warp.
  const int lane = threadIdx.x & 31;
  const uint32_t group = (R::kLanes == 32 ? 0xffffffffu : ((1u << R::kLanes) - 1u)) << (lane & ~(R::kLanes - 1));
#pragma unroll
  for (int off = R::kLanes / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(group, sum, off);
  if (col == 0) p.delta[int64_t{h} * p.seqlen_q + row] = sum;
}

// Eight fp32 values from src (32-byte aligned) times scale, as eight T: one lane's piece of a row in
// the passes that convert the fp32 accumulators (dq_kernel, kv_kernel).
template <class T>
__device__ __forceinline__ uint4 pack8(const float* src, float scale) {
  const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
  return make_uint4(Mma<T>::pack(a.x * scale, a.y * scale), Mma<T>::pack(a.z * scale, a.w * scale),
                    Mma<T>::pack(b.x * scale, b.y * scale), Mma<T>::pack(b.z * scale, b.w * scale));
}

// dQ = scale * accumulator, in the output dtype.
template <class T, int D>
__global__ void __launch_bounds__(256) dq_kernel(const BwdParams p) {
  using R = RowLanes<D>;
  const uint32_t pair = R::pair();
  if (pair >= static_cast<uint32_t>(p.seqlen_q) * static_cast<uint32_t>(p.heads_q)) return;
  uint32_t row, h;
  R::row_head(pair, p.heads_q, row, h);
  const int col = R::col();
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dq) + row * p.dq_tok + h * p.dq_head + col) =
      pack8<T>(p.dq_accum + int64_t{pair} * D + col, p.scale);
}

// dK and dV of the split tiles (split_long_walks) from their fp32 accumulators, in the output dtype
// (dK is scaled already). One lane group a (slot, kv head, key of the tile), as RowLanes.
template <class T, int D>
__global__ void __launch_bounds__(256) kv_kernel(const BwdParams p) {
  using R = RowLanes<D>;
  const uint32_t pair = R::pair();  // (slot x heads_kv + kv head) x kBwdKeys + key in the tile
  if (pair >= static_cast<uint32_t>(p.split_count) * static_cast<uint32_t>(p.heads_kv) * kBwdKeys) return;
  const uint32_t key_in = pair % kBwdKeys, slot_head = pair / kBwdKeys;
  const uint32_t hk = slot_head % static_cast<uint32_t>(p.heads_kv), slot = slot_head / static_cast<uint32_t>(p.heads_kv);
  const int64_t key = int64_t{p.split_tiles[slot]} * kBwdKeys + key_in;
  if (key >= p.seqlen_k) return;
  const int col = R::col();
  const float* dk = p.dkv_accum + int64_t{pair} * D + col;
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dk) + key * p.dk_tok + hk * p.dk_head + col) = pack8<T>(dk, 1.f);
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dv) + key * p.dv_tok + hk * p.dv_head + col) =
      pack8<T>(dk + dkv_accum_floats(p.split_count, p.heads_kv, D), 1.f);
}

// The Hopper kernel runs 128-key schedules; the mma.sync kernel the rest.
inline bool backward_on_sm90(const BwdParams& p) {
  return p.sched.tile_rows == kBwdKeys && sm90_backward_available(p.backward);
}

// Whether dQ's first writers run: only where the kernel that runs has them (elsewhere every tile is
// zeroed and added into).
inline bool backward_dq_first_runs(const BwdParams& p) {
  return p.dq_first != nullptr && backward_on_sm90(p) && sm90_dq_first_runs(p);
}

// Whether dV is issued before the dS^T barrier (BwdParams::dv_first): in the Hopper kernel without
// the skip or rotation, dQ through TMA.
inline bool backward_dv_first_runs(const BwdParams& p) {
  return p.dv_first && backward_on_sm90(p) && sm90_dv_first_runs(p);
}

// The kernel run_backward launches, by the "backward" option's value that forces it ("mma": the
// mma.sync kernel).
inline const char* backward_kernel_name(const BwdParams& p) {
  if (!backward_on_sm90(p)) return "mma";
  if (p.backward == BackwardChoice::sm90_atomic) return "sm90_atomic";
  switch (sm90_backward_kernel(p)) {
    case Sm90Backward::skip: return "sm90_skip";
    case Sm90Backward::rotate: return "sm90_rotate";
    case Sm90Backward::noskip: return "sm90_noskip";
  }
  return "?";
}

template <class T, int D>
void run_backward(const BwdParams& params, cudaStream_t stream) {
  static_assert(Sm90BwdLayout<T, D>::kKeys == kBwdKeys);
  const unsigned row_blocks = RowLanes<D>::blocks(params.seqlen_q * params.heads_q);
  const bool hopper = backward_on_sm90(params);
  BwdParams p = params;
  if (!backward_dq_first_runs(p)) p.dq_first = nullptr;
  prepare_kernel<T, D><<<row_blocks, 256, 0, stream>>>(p);
  LCA_FLEX_CHECK_LAUNCH("flex_flash prepare_kernel");
  const dim3 grid(static_cast<unsigned>(p.sched.row_tiles), static_cast<unsigned>(p.heads_kv));
  if (hopper) {
    // The split walks' parts add their dK and dV into zeroed fp32 accumulators (plan() splits only
    // on 128-key schedules: the Hopper kernel's).
    if (p.split_count > 0)
      LCA_FLEX_CUDA_CHECK(cudaMemsetAsync(
          p.dkv_accum, 0, 2 * sizeof(float) * static_cast<size_t>(dkv_accum_floats(p.split_count, p.heads_kv, D)),
          stream));
    launch_backward_sm90<T, D>(p, stream);
    dq_kernel<T, D><<<row_blocks, 256, 0, stream>>>(p);
    LCA_FLEX_CHECK_LAUNCH("flex_flash dq_kernel");
    if (p.split_count > 0) {
      kv_kernel<T, D><<<RowLanes<D>::blocks(int64_t{p.split_count} * p.heads_kv * kBwdKeys), 256, 0, stream>>>(p);
      LCA_FLEX_CHECK_LAUNCH("flex_flash kv_kernel");
    }
    return;
  }
  // The block's keys follow the backward schedule's tile rows (128, or 64 where that computes
  // clearly fewer cells).
  if (p.sched.tile_rows == 64) {
    constexpr int smem = BwdSmem<T, D, 64>::kBytes;
    LCA_FLEX_CUDA_CHECK(
        cudaFuncSetAttribute(backward_kernel<T, D, 64>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    backward_kernel<T, D, 64><<<grid, 128, smem, stream>>>(p);
  } else {
    constexpr int smem = BwdSmem<T, D, 128>::kBytes;
    LCA_FLEX_CUDA_CHECK(
        cudaFuncSetAttribute(backward_kernel<T, D, 128>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    backward_kernel<T, D, 128><<<grid, 256, smem, stream>>>(p);
  }
  LCA_FLEX_CHECK_LAUNCH("flex_flash backward_kernel");
  dq_kernel<T, D><<<row_blocks, 256, 0, stream>>>(p);
  LCA_FLEX_CHECK_LAUNCH("flex_flash dq_kernel");
}

}  // namespace lca_flex_flash::dev
