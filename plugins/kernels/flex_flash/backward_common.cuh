// Pieces shared by flex_flash's two backward kernels (mma.sync in backward.cuh, wgmma in
// backward_sm90.cuh): the walk over a key tile's query tiles across the GQA group, and the fp32
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

// dst[0] += a, dst[1] += b atomically (one vector atomic on sm_90, two scalar ones before).
__device__ __forceinline__ void add_pair(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(a, b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

}  // namespace lca_flex_flash::dev
