// The flex_flash backward kernel for Hopper (sm_90a): one block of three warpgroups per (item of
// one or two key tiles of 128 keys, kv head), on the same backward schedule as the mma.sync
// kernel (backward.cuh). Warpgroup 0 produces: one thread loads a key tile's K and V once and then
// the Q and dO tiles (64 query rows) of every (query head of the group, query tile) by TMA into a
// two-stage ring, with each stage's tile, head and bitmask index for the consumers; warp 1 copies the
// matching LSE (log2 domain) and delta rows into shared memory. Warpgroups 1 and 2 consume, 64
// keys each, with dK and dV in registers over the whole group:
//   S^T = K Q^T, dP^T = V dO^T            wgmma, both operands in shared memory
//   P^T = exp2(S^T scale - LSE), dS^T = P^T (dP^T - delta), masked on partial tiles
//   dV += P^T dO, dK += dS^T Q            wgmma, P^T / dS^T from registers
//   dQ = dS K                             dS^T through shared memory (both warpgroups' keys),
//                                         each warpgroup one half of the head dim (d128), added
//                                         into the fp32 accumulator of run_backward
// By default (kTmaDq) the consumers issue dQ's GEMM before dV's and dK's and write dQ into a
// shared fp32 tile while those run; warp 2 of the producer adds the tile to the accumulator with
// TMA reduce-adds (one per 32 columns), so that the consumers issue no global atomics. The
// sm90_atomic variant (!kTmaDq, the default until v9) has each consumer thread add its dQ
// fragment with fp32 atomics instead.
// Where a consumer's 64 keys see nothing of a query tile (TileRun::halves: block-sparse masks of
// 64-token blocks), the skip kernel's consumer runs only its dQ GEMM, and both consumers' dQ GEMMs
// span the busy half's 64 keys; the other's GEMMs then have the tensor cores to themselves. That
// kernel loads K and V by 64-key blocks, so that a key tile's two halves may be any two blocks
// (a matched schedule, TileSchedule::key_blocks: blocks that see many of the same query tiles
// share a tile, and fewer iterations are half-idle).
// A block runs one item of the schedule (BwdItem, backward_items) for one kv head: one key tile
// or two, one after the other (K and V loaded again between them), each over its query tiles and
// the group's heads in the item's order (KeyTileWalk).
// Used by run_backward<T, D> (backward.cuh) unless the "backward" option is mma, where the GPU is sm_90 and
// the schedule has 128-key tiles.
// Rule: P is recomputed from the forward's LSE; masked cells give P = 0 and touch nothing.
#pragma once

#include "backward_common.cuh"
#include "cuda_check.hpp"
#include "device.cuh"
#include "device_sm90.cuh"
#include "kernels.hpp"
#include "tma_maps.hpp"

#include <cmath>
#include <string>

namespace lca_flex_flash::dev {

struct Sm90BwdMaps {
  CUtensorMap k, v, q, d_o;
  CUtensorMap dq;  // the fp32 accumulator (kTmaDq only)
};

template <class T, int D, bool kTmaDq = false>
struct Sm90BwdLayout {
  static constexpr int kKeys = 128;                  // keys a block (two consumers of 64)
  static constexpr int kHalves = D / 64;
  static constexpr int kKVBytes = kKeys * D * 2;     // K or V: [half][128 keys][128 B]
  static constexpr int kQBytes = kTile * D * 2;      // one Q or dO tile: [half][64 rows][128 B]
  static constexpr int kDsBytes = kKeys * kTile * 2; // dS^T: [128 keys][64 queries], swizzled
  static constexpr int kStages = 2;
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKVBytes;
  static constexpr int kQOffset = 2 * kKVBytes;                          // Q[stage]
  static constexpr int kDoOffset = kQOffset + kStages * kQBytes;        // dO[stage]
  static constexpr int kDsOffset = kDoOffset + kStages * kQBytes;       // dS[stage]
  static constexpr int kRowOffset = kDsOffset + kStages * kDsBytes;     // LSE2[stage], delta[stage]
  static constexpr int kDqOffset = kRowOffset + 2 * kStages * kTile * 4;  // 1024-aligned
  // dQ of one query tile (kTmaDq): fp32, [D / 32 column chunks][64 rows][128 B], swizzled.
  static constexpr int kDqChunkBytes = kTile * 128;
  static constexpr int kDqBytes = kTmaDq ? kTile * D * 4 : 0;
  // Each stage's query tile, query head (in the group), bitmask index (-1: full) and half bits
  // (TileRun::halves; the skip kernel only), written by the thread that loads Q and dO: the
  // consumers hold no walk of their own.
  static constexpr int kInfoOffset = kDqOffset + kDqBytes;
  // Where the block's walk starts (kRotate's rotated walks): run, tile, head.
  static constexpr int kStartOffset = kInfoOffset + kStages * 16;
  static constexpr int kBarOffset = kStartOffset + 16;
  static constexpr int kBars = 1 + 2 * kStages + 3;  // kv, full[S], empty[S], dq full / empty, kv empty
  static constexpr int kBytes = kBarOffset + 8 * kBars + 1024;
  static constexpr int kThreads = 384;
};

// kDvFirst (BwdParams::dv_first): dV += P^T dO issued before the dS^T stores and barrier, so that
// the tensor cores have work through them; then dQ, then dK. Only with kTmaDq.
template <class T, int D, bool kTmaDq, bool kSkipIdle, bool kRotate = kSkipIdle, bool kDvFirst = false>
__global__ void __launch_bounds__(384, 1)
    backward_sm90_kernel(const BwdParams p, const __grid_constant__ Sm90BwdMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Sm90BwdLayout<T, D, kTmaDq>;
  constexpr bool kSplitD = D == 128;  // dQ: d128, each consumer half the head dim; d64, consumer 0
  // kSkipIdle: a consumer skips the iterations where its 64 keys see nothing of the query tile
  // (TileRun::halves; block-sparse masks of 64-token blocks). The two consumers then meet at the
  // dS^T barrier from different instructions, which the .aligned bar.sync does not allow: that
  // kernel syncs with barrier.sync (sm90::named_sync_any).
  static_assert(kTmaDq || !kSkipIdle, "the idle skip needs the TMA dQ path");
  static_assert(kTmaDq || !kDvFirst, "dV first is a form of the TMA dQ path");
  auto ds_sync = [] {
    if constexpr (kSkipIdle) sm90::named_sync_any(1, 256);
    else sm90::named_sync(1, 256);
  };
  using M = Mma<T>;
  extern __shared__ __align__(1024) char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  char* const gbase = smem_raw + (base - smem_addr(smem_raw));  // the same bytes, generic address
  const uint32_t sk = base + L::kKOffset, sv = base + L::kVOffset;
  auto sq = [&](int b) { return base + L::kQOffset + b * L::kQBytes; };
  auto sdo = [&](int b) { return base + L::kDoOffset + b * L::kQBytes; };
  auto sds = [&](int b) { return base + L::kDsOffset + b * L::kDsBytes; };
  auto lse2 = [&](int b) { return reinterpret_cast<float*>(gbase + L::kRowOffset) + b * kTile; };
  auto delta = [&](int b) { return reinterpret_cast<float*>(gbase + L::kRowOffset) + (L::kStages + b) * kTile; };
  auto info = [&](int b) { return reinterpret_cast<int32_t*>(gbase + L::kInfoOffset) + 4 * b; };
  const uint32_t bar_kv = base + L::kBarOffset;
  auto full = [&](int b) { return bar_kv + 8u * (1 + b); };
  auto empty = [&](int b) { return bar_kv + 8u * (1 + L::kStages + b); };
  const uint32_t dq_full = bar_kv + 8u * (1 + 2 * L::kStages), dq_empty = dq_full + 8u, kv_empty = dq_empty + 8u;
  const uint32_t sdq = base + L::kDqOffset;

  // The block's item and kv head. Blocks go out in grid order (x fastest): groups of g kv heads
  // one after another, and in a group every kv head's first item, then every kv head's second ...
  // (g = 1: items x and kv head y, one kv head after another).
  const int32_t together = p.sched.kv_heads_together;
  const int32_t span = static_cast<int32_t>(gridDim.x) * together;
  // With first writers of dQ (p.dq_first), a block's place in that order is a ticket taken as it
  // starts, not its index: a block then waits only for blocks that started before it (running or
  // done), whatever order the GPU starts blocks in. The ticket follows the rotated walks' places.
  const bool first_writers = kTmaDq && !kSkipIdle && !kRotate && p.dq_first != nullptr;
  int32_t linear = static_cast<int32_t>(blockIdx.y * gridDim.x + blockIdx.x);
  if (first_writers) {
    int32_t* const ticket = reinterpret_cast<int32_t*>(gbase + L::kStartOffset) + 3;
    if (threadIdx.x == 0) *ticket = atomicAdd(p.sched.counter + p.heads_kv, 1);
    __syncthreads();
    linear = *ticket;
  }
  const BwdItem& item = p.sched.items[linear % span / together];
  const int hk = linear / span * together + linear % together;
  // sm90_atomic runs one tile a block (backward_pairing): with two, its consumers spill.
  const int parts = kTmaDq && item.tiles[1] >= 0 ? 2 : 1;
  // The item's fields by part, selected rather than indexed: an array indexed by a loop variable
  // would be copied to local memory.
  auto key_tile = [&](int part) { return part == 0 ? item.tiles[0] : item.tiles[1]; };
  // The skip kernel's K and V come in 64-key blocks (the launcher's maps have 64-row boxes): half j
  // of key tile t is block 2 t + j, or in a matched schedule (key_blocks) the block matched there.
  auto key_block = [&](int32_t t, int j) { return p.sched.key_blocks ? p.sched.key_blocks[2 * t + j] : 2 * t + j; };
  // kSkipIdle: a block of one key tile, walked up with heads outer, starts where the blocks of its
  // kv head that run now are, and goes round. Their iterations take more or less time with the
  // mask, so blocks that start after the first wave would otherwise start at the walk's beginning
  // while the others are anywhere in theirs, and read query tiles that have long left L2 (at 64K,
  // block_sparse's skip kernel ran at 0.79x the kernel without the skip, L2 hit rate 63% against
  // 91%; commit 41b6f94). Each block's TMA thread publishes its place, head * query tiles + query tile,
  // in p.sched.counter[hk] (zeroed a launch); a block reads it once, at its start.
  // kRotate: the same in the kernel without the skip ("backward": "sm90_rotate"; the skip
  // kernel always rotates).
  // A part of a split walk (BwdItem::slot) walks the runs of its own row tile (place_split_walks),
  // loads its key tile's K and V, and does not rotate.
  const bool rotate = kRotate && parts == 1 && (item.flags & (kWalkDown0 | kWalkHeadsInner)) == 0 && item.slot < 0;
  const int32_t q_tiles = static_cast<int32_t>((p.seqlen_q + kTile - 1) / kTile);
  const int32_t* const start = reinterpret_cast<const int32_t*>(gbase + L::kStartOffset);
  auto walk = [&](int part) {
    if (rotate) return KeyTileWalk(p.sched.run_offsets, key_tile(0), start[0], start[1], start[2]);
    return KeyTileWalk(p.sched.runs, p.sched.run_offsets, key_tile(part), (item.flags >> part) & kWalkDown0,
                       item.flags & kWalkHeadsInner);
  };
  // A walk's iterations: its query tiles times the group's heads. (Where walks may go round
  // (kRotate), the walkers count them; elsewhere they stop where the walk ends: counting costs
  // spills, their warps having 24 registers.)
  auto walk_length = [&](int part) { return (part == 0 ? item.query_tiles[0] : item.query_tiles[1]) * p.group; };
  // body(qw) for each iteration of part `part`'s walk, `it` counting the block's iterations: the
  // producer's three walkers (TMA thread, LSE and delta warp, dQ reducer) go through the same walk.
  auto walk_part = [&](int part, int& it, auto&& body) {
    KeyTileWalk qw = walk(part);
    for (int i = kRotate ? walk_length(part) : 0; kRotate ? i > 0 : qw.valid();
         --i, ++it, qw.template next<kRotate>(p.sched.runs, p.group))
      body(qw);
  };
  const int wg = threadIdx.x >> 7, warp_all = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    sm90::mbar_init(bar_kv, 1);
    for (int b = 0; b < L::kStages; ++b) {
      sm90::mbar_init(full(b), 1 + 32);  // the TMA thread (with its bytes) and warp 1's lanes
      sm90::mbar_init(empty(b), 2 * 128);
    }
    sm90::mbar_init(dq_full, kSplitD ? 2 * 128 : 128);  // the consumer threads that write dQ
    sm90::mbar_init(dq_empty, 1);                       // the reducing thread
    sm90::mbar_init(kv_empty, 2 * 128);                 // the consumers, done with a tile's K and V
    sm90::mbar_fence_init();
    if (rotate) {
      // The first iteration at or after the published place: the first run that ends past its
      // query tile (binary search), in its head, or else the walk's first in the next head.
      const int32_t place = *reinterpret_cast<volatile const int32_t*>(p.sched.counter + hk);
      int32_t head = place / q_tiles, tile = place % q_tiles;
      if (head >= p.group) {  // (only blocks of this kv head write it: never)
        head = 0;
        tile = 0;
      }
      const int32_t first = p.sched.run_offsets[key_tile(0)];
      int32_t lo = first, hi = p.sched.run_offsets[key_tile(0) + 1];
      const int32_t end = hi;
      while (lo < hi) {
        const int32_t mid = (lo + hi) / 2;
        if (p.sched.runs[mid].end > tile) hi = mid;
        else lo = mid + 1;
      }
      if (lo == end) {
        lo = first;
        tile = 0;
        if (++head == p.group) head = 0;
      }
      int32_t* const at = reinterpret_cast<int32_t*>(gbase + L::kStartOffset);
      at[0] = lo;
      at[1] = lo < end ? max(tile, p.sched.runs[lo].begin) : 0;  // (an empty walk is never stepped)
      at[2] = head;
    }
  }
  __syncthreads();

  if (wg == 0) {
    sm90::regs_dec<24>();
    if (warp_all == 0 && lane == 0) {
      int it = 0;
      for (int part = 0; part < parts; ++part) {
        // The second tile's K and V once the consumers are done with the first's.
        if (part > 0) sm90::mbar_wait(kv_empty, (part - 1) & 1);
        const int32_t tile = item.slot >= 0 ? p.split_tiles[item.slot] : key_tile(part);
        sm90::mbar_arrive_expect_tx(bar_kv, 2 * L::kKVBytes);
        if constexpr (kSkipIdle) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int32_t key0 = key_block(tile, j) * kTile;
#pragma unroll
            for (int half = 0; half < L::kHalves; ++half) {
              const uint32_t at = half * (L::kKeys * 128) + j * (kTile * 128);
              sm90::tma_load_3d(sk + at, &maps.k, 64 * half, hk, key0, bar_kv);
              sm90::tma_load_3d(sv + at, &maps.v, 64 * half, hk, key0, bar_kv);
            }
          }
        } else {
          const int32_t key0 = tile * L::kKeys;
#pragma unroll
          for (int half = 0; half < L::kHalves; ++half) {
            sm90::tma_load_3d(sk + half * (L::kKeys * 128), &maps.k, 64 * half, hk, key0, bar_kv);
            sm90::tma_load_3d(sv + half * (L::kKeys * 128), &maps.v, 64 * half, hk, key0, bar_kv);
          }
        }
        walk_part(part, it, [&](const KeyTileWalk& qw) {
          const int b = it % L::kStages;
          if (it >= L::kStages) sm90::mbar_wait(empty(b), ((it / L::kStages) - 1) & 1);
          const int hq = hk * p.group + qw.head;
          const int32_t row0 = qw.tile * kTile;
          if (rotate) *reinterpret_cast<volatile int32_t*>(p.sched.counter + hk) = qw.head * q_tiles + qw.tile;
          info(b)[0] = qw.tile;
          info(b)[1] = qw.head;
          info(b)[2] = qw.mask(p.sched.runs);
          if constexpr (kSkipIdle) info(b)[3] = p.sched.runs[qw.run].halves;  // read by the skip only
          sm90::mbar_arrive_expect_tx(full(b), 2 * L::kQBytes);  // releases the info too
#pragma unroll
          for (int half = 0; half < L::kHalves; ++half) {
            sm90::tma_load_3d(sq(b) + half * (kTile * 128), &maps.q, 64 * half, hq, row0, full(b));
            sm90::tma_load_3d(sdo(b) + half * (kTile * 128), &maps.d_o, 64 * half, hq, row0, full(b));
          }
        });
      }
    } else if (warp_all == 1) {
      // LSE (times log2 e) and delta of the tile's 64 query rows; rows past the end see nothing.
      int it = 0;
      for (int part = 0; part < parts; ++part) {
        walk_part(part, it, [&](const KeyTileWalk& qw) {
          const int b = it % L::kStages;
          if (it >= L::kStages) sm90::mbar_wait(empty(b), ((it / L::kStages) - 1) & 1);
          const int hq = hk * p.group + qw.head;
          const int64_t row0 = int64_t{qw.tile} * kTile;
          const float* lse = p.lse + hq * p.lse_head + row0 * p.lse_tok;
          const float* dlt = p.delta + hq * p.seqlen_q + row0;
          const int64_t rows = p.seqlen_q - row0;
#pragma unroll
          for (int i = lane; i < kTile; i += 32) {
            const bool valid = i < rows;
            lse2(b)[i] = valid ? lse[i * p.lse_tok] * kLog2e : INFINITY;
            delta(b)[i] = valid ? dlt[i] : 0.f;
          }
          sm90::mbar_arrive(full(b));
        });
      }
    } else if (kTmaDq && warp_all == 2 && lane == 0) {
      // The reducer: each query tile's dQ, once the consumers have written it, added to the
      // accumulator; the buffer is free again as soon as TMA has read it. Where this block is the
      // tile's first writer (p.dq_first) it stores instead, and once the store is done marks the
      // (tile, head) ready for this call; where another block is, it waits for that mark (before the
      // consumers' tile, so usually while they compute it) and then adds.
      int it = 0;
      for (int part = 0; part < parts; ++part) {
        walk_part(part, it, [&](const KeyTileWalk& qw) {
          const int hq = hk * p.group + qw.head;
          const int32_t row0 = qw.tile * kTile;
          bool store = false;
          if (first_writers) {
            const int32_t writer = p.dq_first[qw.tile];
            store = writer == key_tile(part);
            if (writer >= 0 && !store) sm90::wait_flag(p.dq_ready + int64_t{hq} * q_tiles + qw.tile, p.dq_call);
          }
          sm90::mbar_wait(dq_full, it & 1);
#pragma unroll
          for (int chunk = 0; chunk < D / 32; ++chunk) {
            if (store) sm90::tma_store_3d(&maps.dq, sdq + chunk * L::kDqChunkBytes, 32 * chunk, hq, row0);
            else sm90::tma_reduce_add_3d(&maps.dq, sdq + chunk * L::kDqChunkBytes, 32 * chunk, hq, row0);
          }
          sm90::bulk_commit();
          sm90::bulk_wait_read<0>();
          sm90::mbar_arrive(dq_empty);
          if (store) {
            sm90::bulk_wait<0>();
            sm90::set_flag(p.dq_ready + int64_t{hq} * q_tiles + qw.tile, p.dq_call);
          }
        });
      }
      sm90::bulk_wait<0>();
    }
    return;
  }

  sm90::regs_inc<240>();
  // Keys 64 c .. 64 c + 63 of the tile. In the skip kernel c goes through redux.sync, which ptxas
  // takes as warp-uniform: its descriptors then sit in uniform registers (block_sparse +3-4%); in
  // the other kernel the same made full and causal ~2% slower (A/B, commit 118db5f).
  const int c = kSkipIdle ? static_cast<int>(__reduce_min_sync(0xffffffffu, wg - 1)) : wg - 1;
  const int warp = warp_all & 3, g = lane >> 2, t4 = lane & 3;
  const int key0 = 64 * c + 16 * warp;  // this warp's first key in the tile (rows g, g + 8)

  const bool writes_dq = kSplitD || c == 0;  // d128: each warpgroup half the head dim; d64: warpgroup 0
  // dQ = dS K over kSteps x 16 of the block's keys, from key `from` on, one wgmma group; the dS^T
  // rows of those keys must be in shared memory.
  auto issue_dq_keys = [&]<int kSteps>(float (&dq)[32], int b, int from) {
    const uint64_t ds_desc = sm90::desc_plus(sm90::smem_desc(sds(b), 8192, 1024), from * 128);
    const uint64_t kd_desc = sm90::desc_plus(
        sm90::smem_desc(sk + (kSplitD ? c : 0) * (L::kKeys * 128), L::kKeys * 128, 1024), from * 128);
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks)
      sm90::WgmmaSS<T, 64>::template run<1, 1>(dq, sm90::desc_plus(ds_desc, ks * 16 * 128),
                                               sm90::desc_plus(kd_desc, ks * 16 * 128), ks > 0);
    sm90::wgmma_commit();
  };
  // dQ over the block's 128 keys; in the skip kernel, where one half's 64 keys see nothing of the
  // query tile (halves: the stage's TileRun::halves), over the other half's only, whose dS^T alone
  // is written.
  auto issue_dq = [&](float (&dq)[32], int b, int halves) {
    if constexpr (kSkipIdle) {
      if (halves & (kIdleHalf | (kIdleHalf << 1))) {
        issue_dq_keys.template operator()<4>(dq, b, (halves & kIdleHalf) ? 64 : 0);
        return;
      }
    }
    issue_dq_keys.template operator()<L::kKeys / 16>(dq, b, 0);
  };
  // kTmaDq: dq holds query rows 16 warp + g (+ 8) and head-dim columns 64 c + 8 n + 2 t4 (+1):
  // into the shared tile (rows past the end too: the reduce-add skips them), once the reducer has
  // read the previous tile's; then the reducer is told.
  auto store_dq = [&](const float (&dq)[32], int at) {
    if (at > 0) sm90::mbar_wait(dq_empty, (at - 1) & 1);
    char* tile = gbase + L::kDqOffset;
    // The skip kernel: in store n, lanes t4 = 2, 3 write column block n ^ 2 (16 columns away: unit
    // ^ 4 of the same 128-byte row) while lanes t4 = 0, 1 write block n, so that the 8 lanes of a
    // row pair in a half-warp write 8 different 16-byte units: with block n everywhere two rows'
    // lanes meet in each unit, a 2-way bank conflict on every store (ncu). block_sparse's backward
    // +2.4-3.3%; in the other kernels the 32 selects it takes cost full's 64K backward 1.3% (commit bcfed58).
    const bool flip = kSkipIdle && t4 >= 2;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int col = (kSplitD ? 64 * c : 0) + 8 * n + 2 * t4;  // block n's column; flip: col ^ 16
      const int unit = ((col & 31) >> 2) ^ (flip ? 4 : 0);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = 16 * warp + g + 8 * r;
        const int m = 4 * (n ^ 2) + 2 * r, k = 4 * n + 2 * r;
        *reinterpret_cast<float2*>(tile + (col >> 5) * L::kDqChunkBytes + row * 128 + ((unit ^ (row & 7)) << 4) +
                                   (col & 3) * 4) = flip ? make_float2(dq[m], dq[m + 1]) : make_float2(dq[k], dq[k + 1]);
      }
    }
    sm90::fence_proxy_async();
    sm90::mbar_arrive(dq_full);
  };

  int it = 0;
  for (int part = 0; part < parts; ++part) {
    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

    sm90::mbar_wait(bar_kv, part & 1);
    const int iterations = walk_length(part);
    // Waits for iteration `at`'s loads; then whether this warpgroup's 64 keys see nothing of its
    // query tile (kSkipIdle). The warp leaves the wait converged: the branch on the answer holds
    // .aligned wgmmas.
    auto idle_at = [&](int at) {
      const int b = at % L::kStages;
      sm90::mbar_wait(full(b), (at / L::kStages) & 1);
      if constexpr (kSkipIdle) {
        __syncwarp();
        return ((info(b)[3] >> c) & kIdleHalf) != 0;
      } else {
        return false;
      }
    };
    // Each iteration busy or (kSkipIdle) idle for this warpgroup. (ptxas 13.0 keeps both
    // branches' wgmmas asynchronous, no C75xx; a busy loop and an idle loop inside one loop spilled
    // 236 bytes.)
    for (int i = 0; i < iterations; ++i, ++it) {
      if (!idle_at(it)) {
        const int b = it % L::kStages;

        // S^T = K Q^T and dP^T = V dO^T: 64 keys x 64 queries, K-major operands in shared memory.
        // Each operand's descriptor is made once a tile; a k-step's is that plus its byte offset
        // (sm90::desc_plus): one add per wgmma operand instead of a mask, shift and or.
        const uint64_t k_desc = sm90::smem_desc(sk + 64 * c * 128, 16, 1024);
        const uint64_t v_desc = sm90::smem_desc(sv + 64 * c * 128, 16, 1024);
        const uint64_t q_desc = sm90::smem_desc(sq(b), 16, 1024), do_desc = sm90::smem_desc(sdo(b), 16, 1024);
        float st[32], dpt[32];
        sm90::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          const uint32_t kv_off = (ks >> 2) * (L::kKeys * 128) + (ks & 3) * 32;
          const uint32_t q_off = (ks >> 2) * (kTile * 128) + (ks & 3) * 32;
          sm90::WgmmaSS<T, 64>::template run<0, 0>(st, sm90::desc_plus(k_desc, kv_off), sm90::desc_plus(q_desc, q_off),
                                                   ks > 0);
        }
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          const uint32_t kv_off = (ks >> 2) * (L::kKeys * 128) + (ks & 3) * 32;
          const uint32_t q_off = (ks >> 2) * (kTile * 128) + (ks & 3) * 32;
          sm90::WgmmaSS<T, 64>::template run<0, 0>(dpt, sm90::desc_plus(v_desc, kv_off),
                                                   sm90::desc_plus(do_desc, q_off), ks > 0);
        }
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::fence_regs(st);
        sm90::fence_regs(dpt);

        // P^T and dS^T (key rows g: e = 0, 1; g + 8: e = 2, 3; query column 8 n + 2 t4 + (e & 1)).
        // The bitmask words are read after the wait: read between the commit and the wait, ptxas
        // serialized the kernel's wgmmas (C7517 / C7519).
        // A full tile (mask -1) skips the masking arithmetic.
        if (const int32_t mask = info(b)[2]; mask >= 0) {
          const uint64_t* bits = p.sched.bits + int64_t{mask} * L::kKeys + key0 + g;
          const uint64_t w[2] = {bits[0], bits[8]};
          probs_and_ds<true>(st, dpt, w, t4, p.scale_log2, lse2(b), delta(b));
        } else {
          const uint64_t w[2] = {};
          probs_and_ds<false>(st, dpt, w, t4, p.scale_log2, lse2(b), delta(b));
        }
        uint32_t pa[4][4], da[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            pa[kk][j] = M::pack(st[8 * kk + 2 * j], st[8 * kk + 2 * j + 1]);
            da[kk][j] = M::pack(dpt[8 * kk + 2 * j], dpt[8 * kk + 2 * j + 1]);
          }
        }
        // dV += P^T dO and dK += dS^T Q: B N-major (head dim contiguous), halves kTile rows apart.
        auto issue_dv = [&] {
          const uint64_t do_desc_n = sm90::smem_desc(sdo(b), kTile * 128, 1024);
          sm90::wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
            sm90::WgmmaRS<T, D>::template run<1>(dv, pa[kk], sm90::desc_plus(do_desc_n, kk * 16 * 128), 1);
        };
        // `fence`: false where dV's wgmmas, fenced, went just before in the same group.
        auto issue_dk = [&](bool fence) {
          const uint64_t q_desc_n = sm90::smem_desc(sq(b), kTile * 128, 1024);
          if (fence) sm90::wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
            sm90::WgmmaRS<T, D>::template run<1>(dk, da[kk], sm90::desc_plus(q_desc_n, kk * 16 * 128), 1);
        };
        if constexpr (kDvFirst) {
          issue_dv();
          sm90::wgmma_commit();
        }
        // dS^T to shared memory as [key][query], 128-byte swizzled: the M-major A operand of dQ.
        {
          char* ds = gbase + L::kDsOffset + b * L::kDsBytes;
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              // da[kk][j] holds query columns 16 kk + 8 (j >> 1) + 2 t4 (+1) of key row g + 8 (j & 1).
              const int key = key0 + g + 8 * (j & 1), query = 16 * kk + 8 * (j >> 1) + 2 * t4;
              *reinterpret_cast<uint32_t*>(ds + key * 128 + (((query >> 3) ^ (key & 7)) << 4) + (query & 7) * 2) =
                  da[kk][j];
            }
        }
        // dV and dK as one wgmma group.
        auto issue_dv_dk = [&] {
          issue_dv();
          issue_dk(false);
          sm90::wgmma_commit();
        };
        if constexpr (kTmaDq) {
          // dQ first, then dV and dK: the dQ tile goes to shared memory while the tensor cores run
          // dV and dK. kDvFirst: dV's group is in flight already (issued above), dK goes alone;
          // groups in order dV, dQ, dK, so that waiting for all but the newest is dV and dQ.
          sm90::fence_proxy_async();
          ds_sync();
          float dq[32];
          if (writes_dq) issue_dq(dq, b, kSkipIdle ? info(b)[3] : 0);
          if constexpr (kDvFirst) {
            issue_dk(true);
            sm90::wgmma_commit();
          } else {
            issue_dv_dk();
          }
          if (writes_dq) {
            // d128: wait for dQ's group alone (the older one). d64, where only warpgroup 0 computes
            // dQ, waits for both: with the branch around dQ's group, ptxas serialized every wgmma
            // of that kernel (C7514) when dQ was read while dV and dK were still in flight.
            if constexpr (kSplitD) sm90::wgmma_wait<1>();
            else sm90::wgmma_wait<0>();
            sm90::fence_regs(dq);
            store_dq(dq, it);
          }
          sm90::wgmma_wait<0>();
        } else {
          issue_dv_dk();

          // dQ once both warpgroups' dS^T are in shared memory.
          sm90::fence_proxy_async();
          sm90::named_sync(1, 256);
          if (writes_dq) {
            float dq[32];
            issue_dq(dq, b, 0);
            sm90::wgmma_wait<0>();
            sm90::fence_regs(dq);
            // dq holds query rows 16 warp + g (+ 8) and head-dim columns 64 c + 8 n + 2 t4 (+1).
            const int hq = hk * p.group + info(b)[1];
            const int64_t row_a = int64_t{info(b)[0]} * kTile + 16 * warp + g, row_b = row_a + 8;
            const int col0 = (kSplitD ? 64 * c : 0) + 2 * t4;
            float* acc_a = p.dq_accum + (row_a * p.heads_q + hq) * D + col0;
            float* acc_b = p.dq_accum + (row_b * p.heads_q + hq) * D + col0;
#pragma unroll
            for (int n = 0; n < 8; ++n) {
              if (row_a < p.seqlen_q) add_pair(acc_a + n * 8, dq[4 * n], dq[4 * n + 1]);
              if (row_b < p.seqlen_q) add_pair(acc_b + n * 8, dq[4 * n + 2], dq[4 * n + 3]);
            }
          } else {
            sm90::wgmma_wait<0>();
          }
        }
        sm90::fence_regs(dk);
        sm90::fence_regs(dv);
        sm90::mbar_arrive(empty(b));
      } else if constexpr (kSkipIdle) {
        // This warpgroup's keys see nothing of the query tile: no S^T, dP^T, dV or dK, and no dS^T:
        // both warpgroups' dQ GEMMs run over the other warpgroup's 64 keys only (each its half of
        // the head dim).
        const int b = it % L::kStages;
        ds_sync();
        if (writes_dq) {
          float dq[32];
          issue_dq(dq, b, info(b)[3]);
          sm90::wgmma_wait<0>();
          sm90::fence_regs(dq);
          store_dq(dq, it);
        }
        sm90::mbar_arrive(empty(b));
      }
    }
    // Every wgmma of the tile has completed (each iteration ends waiting for all): K and V may be
    // overwritten by the next tile's.
    sm90::mbar_arrive(kv_empty);

    // dK (scaled) and dV of this warp's keys; a part of a split walk adds them into its slot's fp32
    // accumulator (every key of the tile: kv_kernel converts those within seqlen_k).
    if (item.slot >= 0) {
      float* dk_acc = p.dkv_accum + ((int64_t{item.slot} * p.heads_kv + hk) * L::kKeys) * D;
      float* dv_acc = dk_acc + dkv_accum_floats(p.split_count, p.heads_kv, D);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = key0 + g + 8 * r;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          const int col = n * 8 + 2 * t4;
          add_pair(dk_acc + key * D + col, dk[4 * n + 2 * r] * p.scale, dk[4 * n + 2 * r + 1] * p.scale);
          add_pair(dv_acc + key * D + col, dv[4 * n + 2 * r], dv[4 * n + 2 * r + 1]);
        }
      }
      continue;
    }
    T* dk_base = static_cast<T*>(p.dk) + hk * p.dk_head;
    T* dv_base = static_cast<T*>(p.dv) + hk * p.dv_head;
    // The tile's first key (the skip kernel: as if this warpgroup's block were its half c).
    const int64_t k0 = kSkipIdle ? int64_t{key_block(key_tile(part), c)} * kTile - 64 * c
                                 : int64_t{key_tile(part)} * L::kKeys;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t key = k0 + key0 + g + 8 * r;
      if (key >= p.seqlen_k) continue;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        const int col = n * 8 + 2 * t4;
        *reinterpret_cast<uint32_t*>(dk_base + key * p.dk_tok + col) =
            M::pack(dk[4 * n + 2 * r] * p.scale, dk[4 * n + 2 * r + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dv_base + key * p.dv_tok + col) = M::pack(dv[4 * n + 2 * r], dv[4 * n + 2 * r + 1]);
      }
    }
  }
#else
  __trap();  // launched only where the device code was built for sm_90a (see sm90_device)
#endif
}

// Which backward runs on an sm_90 GPU, from the "backward" option (BackwardChoice, options.hpp): "sm90" (the default: this kernel
// with dQ through TMA reduce-adds, 1.25-1.3x sm90_atomic's rate on an H100, commit 754bb8c),
// "sm90_atomic" (this kernel with dQ through fp32 atomics, one key tile a block), "sm90_unpaired"
// (the default kernel with one key tile a block, for A/B runs), "sm90_paired" (the default kernel
// with no pair split: the tests' small problems take the two-tile path) or "mma" (the portable
// mma.sync kernel); "sm90_skip" / "sm90_noskip": the default kernel with / without the idle skip
// on every mask (kSkipIdle; the default skips where kIdleShareForSkip says; "sm90_noskip" rotates
// no walk either); "sm90_rotate": the kernel without the skip on every mask, its plain walks
// rotated as the skip kernel's are (kRotate), which the default does only for plain walks of about
// one length longer than kPlainSkipWalkLimit (default_sm90_rotate_backward: full at 64K and beyond,
// block_sparse past the skip kernel's limit); on shorter walks it loses (commit f57293c: sliding_window 1-6%,
// global_sliding at 64K-128K 3-4%; its walkers count their iterations, and spill 32 bytes).
inline bool sm90_backward_available(BackwardChoice v) { return v != BackwardChoice::mma && sm90_device(); }

// Whether a matched backward schedule (TileSchedule::key_blocks), which runs the skip kernel, may run
// under the "backward" option v: absent, sm90 or sm90_skip (backward_match gives the others none).
inline bool variant_runs_matched(BackwardChoice v) {
  return v == BackwardChoice::sm90_auto || v == BackwardChoice::sm90 || v == BackwardChoice::sm90_skip;
}

template <class T, int D, bool kTmaDq, bool kSkipIdle = false, bool kRotate = kSkipIdle, bool kDvFirst = false>
void launch_backward_sm90_variant(const BwdParams& p, const Sm90BwdMaps& maps, cudaStream_t stream) {
  using L = Sm90BwdLayout<T, D, kTmaDq>;
  LCA_FLEX_CUDA_CHECK(cudaFuncSetAttribute(backward_sm90_kernel<T, D, kTmaDq, kSkipIdle, kRotate, kDvFirst>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes));
  const dim3 grid(static_cast<unsigned>(p.sched.item_count), static_cast<unsigned>(p.heads_kv));
  backward_sm90_kernel<T, D, kTmaDq, kSkipIdle, kRotate, kDvFirst><<<grid, L::kThreads, L::kBytes, stream>>>(p, maps);
  LCA_FLEX_CHECK_LAUNCH("flex_flash backward_sm90_kernel");
}

// The kernel the Hopper backward runs the schedule with (sm90_backward_for, kernels.hpp).
inline Sm90Backward sm90_backward_kernel(const BwdParams& p) {
  return sm90_backward_for(p.backward, p.sched.idle_share, p.sched.mean_tiles * p.group, p.sched.plain_walks,
                           p.sched.alike_walks, p.sched.key_blocks != nullptr, span_places(p.sched.mean_span, p.group),
                           p.sched.range_walks);
}

// Whether the first writers of dQ (BwdParams::dq_first) run; elsewhere every tile is zeroed and added
// into.
inline bool sm90_dq_first_runs(const BwdParams& p) {
  return p.dq_first != nullptr && dq_first_runs_in(p.backward, sm90_backward_kernel(p));
}

// Whether dV goes first (BwdParams::dv_first): the same kernels as the first writers of dQ.
inline bool sm90_dv_first_runs(const BwdParams& p) {
  return p.dv_first && dq_first_runs_in(p.backward, sm90_backward_kernel(p));
}

template <class T, int D>
void launch_backward_sm90(const BwdParams& p, cudaStream_t stream) {
  using L = Sm90BwdLayout<T, D>;
  const BackwardChoice v = p.backward;
  // A matched schedule (key_blocks: plan() makes one only for the default or sm90_skip) runs the
  // skip kernel, the one that loads K and V by 64-key blocks.
  if (p.sched.key_blocks != nullptr && (!variant_runs_matched(v) || p.split_count > 0))
    throw lca::Error(LCA_ERR_INTERNAL, "flex_flash: a matched backward schedule outside the skip kernel");
  const Sm90Backward kernel = sm90_backward_kernel(p);
  if (p.dq_first != nullptr && !sm90_dq_first_runs(p))
    throw lca::Error(LCA_ERR_INTERNAL, "flex_flash: dQ's first writers outside the kernel without the skip");
  const uint32_t kv_rows = kernel == Sm90Backward::skip ? kTile : L::kKeys;
  Sm90BwdMaps maps{};
  maps.k = make_thd_map<T>(p.k, D, p.heads_kv, p.seqlen_k, p.k_head, p.k_tok, kv_rows, "k");
  maps.v = make_thd_map<T>(p.v, D, p.heads_kv, p.seqlen_k, p.v_head, p.v_tok, kv_rows, "v");
  maps.q = make_thd_map<T>(p.q, D, p.heads_q, p.seqlen_q, p.q_head, p.q_tok, kTile, "q");
  maps.d_o = make_thd_map<T>(p.d_o, D, p.heads_q, p.seqlen_q, p.do_head, p.do_tok, kTile, "d_o");
  if (v == BackwardChoice::sm90_atomic) {
    launch_backward_sm90_variant<T, D, false>(p, maps, stream);
  } else {
    maps.dq = make_dq_accum_map(p.dq_accum, D, p.heads_q, p.seqlen_q, kTile);
    // The places the rotated walks start from, and the first writers' block ticket, zeroed a launch.
    if (kernel != Sm90Backward::noskip || p.dq_first != nullptr)
      LCA_FLEX_CUDA_CHECK(cudaMemsetAsync(p.sched.counter, 0, sizeof(int32_t) * (p.heads_kv + 1), stream));
    switch (kernel) {
      case Sm90Backward::skip: return launch_backward_sm90_variant<T, D, true, true>(p, maps, stream);
      case Sm90Backward::rotate: return launch_backward_sm90_variant<T, D, true, false, true>(p, maps, stream);
      case Sm90Backward::noskip:
        if (sm90_dv_first_runs(p)) return launch_backward_sm90_variant<T, D, true, false, false, true>(p, maps, stream);
        return launch_backward_sm90_variant<T, D, true, false>(p, maps, stream);
    }
  }
}

}  // namespace lca_flex_flash::dev
