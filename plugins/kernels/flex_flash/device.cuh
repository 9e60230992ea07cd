// Warp-level building blocks of flex_flash on sm_80+: cp.async tile loads into XOR-swizzled
// shared memory, ldmatrix fragment loads and the m16n8k16 tensor-core MMA (bf16 / f16 in, fp32
// accumulate). Used by the forward and backward kernels only.
// Rule: a shared tile is kTile rows of D elements, addressed only through swizzled(); fragment
// helpers assume the lane layouts of PTX's mma.m16n8k16 (see the comments at each).
#pragma once

#include "schedule.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace lca_flex_flash::dev {

template <class T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
  // Two packed values (low half first) as floats.
  static __device__ __forceinline__ float2 unpack(uint32_t w) {
    __nv_bfloat162 v;
    memcpy(&v, &w, sizeof(w));
    return __bfloat1622float2(v);
  }
};

template <>
struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ float2 unpack(uint32_t w) {
    __half2 v;
    memcpy(&v, &w, sizeof(w));
    return __half22float2(v);
  }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte chunk `chunk` of row `row` in a tile whose rows hold `chunks` chunks: the chunk index
// is XORed with the row's low three bits, so that the 8 rows an ldmatrix phase reads fall in
// 8 different bank groups.
__device__ __forceinline__ int swizzled(int row, int chunk, int chunks) {
  return row * chunks + (chunk ^ (row & 7));
}

// Copies 16 bytes global -> shared, or writes 16 zero bytes when !valid.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// One row's visibility word of a partial tile, seen by the thread whose columns in the m16n8 (and
// wgmma accumulator) layout are 8 n + 2 t4 + b (b = 0, 1): shifted right by 2 t4 once, so that each
// of its columns is a bit at a constant place, 8 n + b. In the Hopper forward ptxas then tests two
// values with one R2P (a 64-bit shift by each column's place cost ~3.6 instructions a value; commit bcfed58).
struct ThreadBits {
  uint32_t lo, hi;
  __device__ __forceinline__ ThreadBits(uint64_t word, int t4) {
    const uint64_t w = word >> (2 * t4);
    lo = static_cast<uint32_t>(w);
    hi = static_cast<uint32_t>(w >> 32);
  }
  // Whether column 8 n + 2 t4 + b is visible, place = 8 n + b (a constant once unrolled).
  __device__ __forceinline__ bool operator[](int place) const {
    return ((place < 32 ? lo : hi) >> (place & 31)) & 1u;
  }
};

// A tile of kTile rows x D elements of T in shared memory (swizzled 16-byte chunks).
template <class T, int D>
struct SmemTile {
  static constexpr int kChunks = D * int(sizeof(T)) / 16;
  static constexpr int kBytes = kTile * D * int(sizeof(T));
  char* base;

  // Rows [row0, row0 + kTile) of a THD tensor at one head; rows >= rows_valid become zeros.
  __device__ __forceinline__ void load_async(const T* head_base, int64_t token_stride, int64_t row0,
                                             int64_t rows_valid) const {
    for (int i = threadIdx.x; i < kTile * kChunks; i += blockDim.x) {
      const int r = i / kChunks, c = i % kChunks;
      const bool valid = row0 + r < rows_valid;
      const T* src = head_base + (valid ? (row0 + r) * token_stride + c * (16 / int(sizeof(T))) : 0);
      cp_async16(smem_addr(base + swizzled(r, c, kChunks) * 16), src, valid);
    }
  }

  // A fragment (16 rows x 16 columns at row0, col0) of a row-major operand stored here.
  __device__ __forceinline__ void a_frag(uint32_t (&a)[4], int row0, int col0) const {
    const int lane = threadIdx.x & 31;
    const int row = row0 + (lane & 7) + 8 * ((lane >> 3) & 1);
    const int chunk = col0 / 8 + (lane >> 4);
    ldmatrix_x4(a, smem_addr(base + swizzled(row, chunk, kChunks) * 16));
  }
  // B fragments of two n8 blocks (rows n0..n0+15 here are the n index, columns k0..k0+15 the
  // k index: the "col" operand of S = Q K^T). b[0], b[1]: block n0; b[2], b[3]: block n0 + 8.
  __device__ __forceinline__ void b_frag_nk(uint32_t (&b)[4], int n0, int k0) const {
    const int lane = threadIdx.x & 31;
    const int row = n0 + (lane & 7) + 8 * (lane >> 4);
    const int chunk = k0 / 8 + ((lane >> 3) & 1);
    ldmatrix_x4(b, smem_addr(base + swizzled(row, chunk, kChunks) * 16));
  }
  // B fragments of two n8 blocks when rows here are the k index and columns the n index (V in
  // O = P V): transposed loads. b[0], b[1]: block n0; b[2], b[3]: block n0 + 8.
  __device__ __forceinline__ void b_frag_kn(uint32_t (&b)[4], int k0, int n0) const {
    const int lane = threadIdx.x & 31;
    const int row = k0 + (lane & 7) + 8 * ((lane >> 3) & 1);
    const int chunk = n0 / 8 + (lane >> 4);
    ldmatrix_x4_trans(b, smem_addr(base + swizzled(row, chunk, kChunks) * 16));
  }
};

// Walks the (run, column tile) pairs of one row tile in order.
struct TileCursor {
  const TileRun* runs;
  int32_t run, run_end, tile;

  __device__ __forceinline__ TileCursor(const TileRun* all, const int32_t* offsets, int32_t row_tile)
      : runs(all), run(offsets[row_tile]), run_end(offsets[row_tile + 1]), tile(0) {
    if (run < run_end) tile = runs[run].begin;
  }
  __device__ __forceinline__ bool valid() const { return run < run_end; }
  // Index of this tile's bitmask, or -1 when the tile is fully visible.
  __device__ __forceinline__ int32_t mask() const {
    return runs[run].mask < 0 ? -1 : runs[run].mask + (tile - runs[run].begin);
  }
  __device__ __forceinline__ void next() {
    if (++tile >= runs[run].end && ++run < run_end) tile = runs[run].begin;
  }
};

// TileCursor's walk with the current run's fields held in registers (three more than
// TileCursor), for the Hopper forward's consumers, which look at the cursor between every two
// tiles. The backward keeps TileCursor: its consumers have no registers to spare (ptxas spills).
struct CachedTileCursor {
  const TileRun* runs;
  int32_t run, run_end, tile;
  int32_t end = 0, mask_base = 0;  // the current run's end; its first tile's bitmask minus its begin
  int32_t halves = 0;              // the current run's TileRun::halves
  bool partial = false;            // whether the current run's tiles have bitmasks

  __device__ __forceinline__ CachedTileCursor(const TileRun* all, const int32_t* offsets, int32_t row_tile)
      : runs(all), run(offsets[row_tile]), run_end(offsets[row_tile + 1]), tile(0) {
    if (run < run_end) enter();
  }
  // The same walk from runs [run, run_end) of a row tile, the first of them given (read by
  // another thread: the persistent forward's producer passes it through shared memory).
  __device__ __forceinline__ CachedTileCursor(const TileRun* all, int32_t first_run, int32_t end_run,
                                              const TileRun& first)
      : runs(all), run(first_run), run_end(end_run), tile(0) {
    if (run < run_end) enter(first);
  }
  __device__ __forceinline__ bool valid() const { return run < run_end; }
  // Index of this tile's bitmask, or -1 when the tile is fully visible.
  __device__ __forceinline__ int32_t mask() const { return partial ? mask_base + tile : -1; }
  // The same for rows 64 h .. 64 h + 63 of the tile (128-row tiles): -1 also where they see every
  // column of a partial tile.
  __device__ __forceinline__ int32_t mask(int h) const {
    return partial && !((halves >> h) & kFullHalf) ? mask_base + tile : -1;
  }
  // Whether rows 64 h .. 64 h + 63 of this tile see nothing (128-row tiles).
  __device__ __forceinline__ bool idle(int h) const { return (halves >> h) & kIdleHalf; }
  __device__ __forceinline__ void next() {
    if (++tile >= end && ++run < run_end) enter();
  }

 private:
  // The run's fields are read once, when the cursor enters it: the loop that walks the tiles then
  // waits on no global load between two tiles of a run.
  __device__ __forceinline__ void enter() { enter(runs[run]); }
  __device__ __forceinline__ void enter(const TileRun& r) {
    tile = r.begin;
    end = r.end;
    partial = r.mask >= 0;
    mask_base = r.mask - r.begin;
    halves = r.halves;
  }
};

}  // namespace lca_flex_flash::dev
