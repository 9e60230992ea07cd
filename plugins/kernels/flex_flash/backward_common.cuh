// Pieces shared by flex_flash's two backward kernels (mma.sync in backward.cuh, wgmma in
// backward_sm90.cuh): the walks over a key tile's query tiles across the GQA group, and the fp32
// dQ atomics.
#pragma once

#include "device.cuh"
#include "kernels.hpp"

namespace lca_flex_flash::dev {

constexpr float kLog2e = 1.4426950408889634f;

// The query tiles of every head of the group, in order.
struct GroupCursor {
  const DeviceSchedule* sched;
  int32_t key_tile, head, group;
  TileCursor tiles;
  __device__ __forceinline__ GroupCursor(const DeviceSchedule* s, int32_t kt, int32_t grp)
      : sched(s), key_tile(kt), head(0), group(grp), tiles(s->runs, s->run_offsets, kt) {
    if (!tiles.valid()) head = group;  // no query tile reaches this key tile
  }
  __device__ __forceinline__ bool valid() const { return head < group; }
  __device__ __forceinline__ void next() {
    tiles.next();
    if (!tiles.valid() && ++head < group) tiles = TileCursor(sched->runs, sched->run_offsets, key_tile);
  }
};

// The iterations of one key tile in the Hopper backward (BwdItem): its query tiles first to last
// or last to first, and the query heads of the group inner (every head's rows of a query tile
// before the next tile) or outer (every query tile of a head before the next head). The runs and
// the group size are passed in from the kernel's parameters rather than held: the warps that walk
// have 24 registers. With kWrap, a walk with heads outer goes on from its last head to its first:
// the caller counts its iterations (query tiles x group), so that a walk started in the middle
// (the second constructor) visits the same iterations, rotated.
struct KeyTileWalk {
  int32_t run, first_run, last_run, tile, head;
  bool descending, heads_inner;
  __device__ __forceinline__ KeyTileWalk(const TileRun* runs, const int32_t* offsets, int32_t key_tile, bool down,
                                         bool inner)
      : run(0),
        first_run(offsets[key_tile]),
        last_run(offsets[key_tile + 1] - 1),
        tile(0),
        head(0),
        descending(down),
        heads_inner(inner) {
    start(runs);
  }
  // The ascending walk with heads outer, started at tile at_tile of run at_run, head at_head.
  __device__ __forceinline__ KeyTileWalk(const int32_t* offsets, int32_t key_tile, int32_t at_run, int32_t at_tile,
                                         int32_t at_head)
      : run(at_run),
        first_run(offsets[key_tile]),
        last_run(offsets[key_tile + 1] - 1),
        tile(at_tile),
        head(at_head),
        descending(false),
        heads_inner(false) {}
  __device__ __forceinline__ bool valid() const { return first_run <= run && run <= last_run; }
  // Index of this tile's bitmask, or -1 when the tile is fully visible.
  __device__ __forceinline__ int32_t mask(const TileRun* runs) const {
    return runs[run].mask < 0 ? -1 : runs[run].mask + (tile - runs[run].begin);
  }
  template <bool kWrap = false>
  __device__ __forceinline__ void next(const TileRun* runs, int32_t group) {
    if (heads_inner && ++head < group) return;
    if (heads_inner) head = 0;
    if (descending) {
      if (--tile < runs[run].begin && --run >= first_run) tile = runs[run].end - 1;
    } else if (++tile >= runs[run].end && ++run <= last_run) {
      tile = runs[run].begin;
    }
    if constexpr (kWrap) {
      if (!heads_inner && !valid()) {
        if (++head == group) head = 0;
        start(runs);
      }
    } else if (!heads_inner && !valid() && ++head < group) {
      start(runs);
    }
  }

 private:
  __device__ __forceinline__ void start(const TileRun* runs) {
    run = descending ? last_run : first_run;
    if (valid()) tile = descending ? runs[run].end - 1 : runs[run].begin;
  }
};

// dst[0] += a, dst[1] += b atomically (one vector atomic on sm_90, two scalar ones before).
__device__ __forceinline__ void add_pair(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(a, b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// P^T and dS^T = P^T (dP^T - delta) in place over one thread's S^T and dP^T accumulators (the
// m16n8 layout, 8 query blocks: element 4 n + e is key row g + 8 (e >> 1), query column
// 8 n + 2 t4 + (e & 1)); w holds the two key rows' visibility bits, lse2 and delta the query
// tile's rows (LSE in the log2 domain).
// A thread's two columns of a block are adjacent: their LSE and delta are read as one 8-byte
// load each (lse2 and delta 8-byte aligned).
// kMasked: a partial tile, each value tested against its bit; a full tile (kMasked false: w is
// not read) skips the masking arithmetic (the bit test alone was 2 instructions a value in full's
// Hopper backward, ncu; commit bcfed58).
template <bool kMasked>
__device__ __forceinline__ void probs_and_ds(float* st, float* dpt, const uint64_t (&w)[2], int t4, float scale_log2,
                                             const float* lse2, const float* delta) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float2 l2 = *reinterpret_cast<const float2*>(lse2 + n * 8 + 2 * t4);
    const float2 dl = *reinterpret_cast<const float2*>(delta + n * 8 + 2 * t4);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = n * 8 + 2 * t4 + (e & 1);
      const bool visible = !kMasked || ((w[e >> 1] >> col) & 1u);
      const float prob = visible ? exp2f(st[4 * n + e] * scale_log2 - ((e & 1) ? l2.y : l2.x)) : 0.f;
      st[4 * n + e] = prob;
      dpt[4 * n + e] = prob * (dpt[4 * n + e] - ((e & 1) ? dl.y : dl.x));
    }
  }
}

}  // namespace lca_flex_flash::dev
