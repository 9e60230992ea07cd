// The flex_flash forward kernel for Hopper (sm_90a): one block of three warpgroups per (query
// tile of 128 rows, query head). Warpgroup 0 is the producer: one thread loads Q once and then the
// K and V tiles of the row tile's runs by TMA into a ring of stages, each stage guarded by
// mbarriers (full: TMA landed; empty: both consumers done with it). Warpgroups 1 and 2 are the
// consumers, 64 query rows each, Q held in registers: S = Q K^T and O += P V are warpgroup MMAs
// (wgmma, A from registers), the online softmax and the partial-tile masking run between them;
// in the overlap variant the S of tile j is issued beside the P V of tile j - 1, so that the
// softmax of tile j runs while the tensor cores do P V; in the pingpong variant the two consumers
// also take turns to issue their GEMMs (named barriers), so that one's softmax runs while the
// other's GEMMs are on the tensor cores; in the k128 variant a step is 128 keys (two schedule
// tiles) and S = Q K^T takes Q from shared memory, halving the per-step costs per key; in the
// persistent variant a block an SM walks row tiles one after another (Q double-buffered, K and V
// in rings of their own), and the first S of a row tile is issued beside the last P V of the one
// before, so that a short row tile (a sliding window's) no longer pays its Q load, a lone S and
// softmax, a lone P V and a block launch; in the pair variant (overlapped steps on 64-row tiles:
// 128 keys a step, any two of the row tile's 64-key tiles, or 64 in sm90_pair64) the two consumers
// take the same 64 query rows of two heads that share K and V, so that a mask that changes within
// 128 rows (block_sparse's 64-token blocks) leaves neither with idle tiles; at head dim 64 the k128
// variant runs three consumers on 192-row tiles (sm90_k128_wg3, 160 registers a
// consumer thread), whose steps are short enough that two consumers leave the tensor cores idle
// between their softmaxes; at head dim 128 the 64-key skipping variant runs three consumers too
// (sm90_overlap_wg3: S 32, P 16 and O 64 registers fit the 160, Q read from shared memory), where
// a sliding window's row tiles are short.
// Used by launch_*.cu through run_forward<T, D> (forward.cuh) unless the "forward" option is mma, where
// the GPU is sm_90 and the schedule has 128-row tiles, 64-row tiles and an even group (pair), or
// 192-row tiles (three consumers).
// Rule: the same tile order as the mma.sync kernel (TileCursor); masking only on partial tiles;
// rows that see nothing get O = 0, LSE = -inf (the row tiles that see nothing by empty_rows_kernel,
// outside the kernels' grids). Split-KV (FwdParams::part_of): the grid kernels and the persistent
// one write a split row tile's parts apart, combine_parts_kernel merges them; not the pair kernel.
#pragma once

#include "cuda_check.hpp"
#include "device.cuh"
#include "device_sm90.cuh"
#include "kernels.hpp"
#include "tma_maps.hpp"

#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

namespace lca_flex_flash::dev {

// The three TMA descriptors of one launch (passed by value as a __grid_constant__ parameter).
struct Sm90Maps {
  CUtensorMap q, k, v;
  CUtensorMap o;  // boxes of 64 rows (one consumer's); made where o_tma
  bool o_tma;     // O's pointer and strides allow TMA (16-byte multiples): O leaves through it
};

// Stages: K/V tiles in flight. The overlapped kernel releases tile j - 1's stage only in the
// middle of step j, so it needs 3 for the load of tile j + 1 to have a step to land. The 64-key
// kernel that skips idle tiles (kSkip) takes as many as fit (forward_stages).
// Keys: keys a step, 64 (one schedule tile) or 128 (two schedule tiles, each loaded by its own
// TMA boxes into one half of the step's rows, so they need not be adjacent).
// Consumers: consumer warpgroups of 64 query rows each, 2 (128-row tiles) or 3 (192-row tiles:
// the 128-key kernel at head dim 64, sm90_k128_wg3; the 64-key skipping one at 128, sm90_overlap_wg3).
template <class T, int D, int Stages = 2, int Keys = kTile, int Consumers = 2>
struct Sm90Layout {
  static constexpr int kRows = 64 * Consumers;          // query rows a block (a consumer's 64 each)
  static constexpr int kKeys = Keys;
  static constexpr int kSubs = Keys / kTile;            // schedule tiles a step
  static constexpr int kHalves = D / 64;                // 128-byte column halves of a row
  static constexpr int kQBytes = kRows * D * 2;         // Q: [half][128 rows][128 B]
  static constexpr int kKVBytes = Keys * D * 2;         // one step's K or V: [half][Keys rows][128 B]
  static constexpr int kStages = Stages;
  static constexpr int kKOffset = kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBars = 1 + 3 * kStages;         // q, full_k[S], full_v[S], empty[S]
  static constexpr int kBytes = kBarOffset + 8 * kBars + 1024;  // + slack to align the base to 1024
  static constexpr int kThreads = 128 * (1 + Consumers);
  static constexpr int kKStages = 0, kVStages = 0, kItemOffset = 0;  // the persistent layout's (none)
};

// Whether a variant's consumers skip the tiles where their 64 rows see nothing (TileRun::halves):
// the 64-key overlapped kernel, not pingpong (whose turns need both consumers on every tile).
template <bool kOverlap, bool kPingpong, int kKeys>
constexpr bool forward_skips() {
  return kOverlap && !kPingpong && kKeys == kTile;
}

// The shared memory a block may take on the H100.
constexpr int kSm90SmemBytes = 227 * 1024;

// A variant's stages. The skipping kernel takes as many as kSm90SmemBytes hold, up to 8: its
// consumers are a tile or more apart wherever their rows' tiles differ (block-sparse masks), and a
// consumer keeps its S beside the P V of its last tile across up to kStages - 2 idle tiles.
template <class T, int D, bool kOverlap, bool kPingpong, int kKeys, int kConsumers = 2>
constexpr int forward_stages() {
  if (!forward_skips<kOverlap, kPingpong, kKeys>()) return kOverlap ? 3 : 2;
  using One = Sm90Layout<T, D, 1, kKeys, kConsumers>;
  constexpr int per_stage = Sm90Layout<T, D, 2, kKeys, kConsumers>::kBytes - One::kBytes;  // K, V and their barriers
  const int fit = (kSm90SmemBytes - (One::kBytes - per_stage)) / per_stage;
  return fit < 8 ? fit : 8;
}

// A variant's layout, with its stages.
template <class T, int D, bool kOverlap, bool kPingpong, int kKeys, int kConsumers = 2>
using Sm90VariantLayout =
    Sm90Layout<T, D, forward_stages<T, D, kOverlap, kPingpong, kKeys, kConsumers>(), kKeys, kConsumers>;

// What the persistent forward's producer tells the consumers of the row tile in a Q buffer: which
// one (q_tile -1: the block has no more), and its runs, the first one whole, so that the
// consumers start its walk without a global load.
struct PersistentSlot {
  int32_t q_tile, head, run, run_end;
  TileRun first;
  int32_t place, unused[3];  // split-KV's place of the row tile's part (FwdParams::part_of), or -1
};
static_assert(sizeof(PersistentSlot) == 48);

// The persistent forward (kPersistent: 128-key overlapped steps, a block an SM walking row tiles
// one after another): two Q buffers, so that the next row tile's Q lands while this one's steps
// run and O of the last tile leaves through its own buffer; K and V in rings of their own, K's
// stage free once its S is done (2 stages), V's once its P V is (3), the same lead on each load as
// the 3-stage ring of the other kernels. A Q buffer's slot (PersistentSlot) names the row tile
// and head loaded there.
template <class T, int D>
struct Sm90PersistentLayout {
  static constexpr int kRows = 128;
  static constexpr int kKeys = 2 * kTile;
  static constexpr int kSubs = 2;
  static constexpr int kHalves = D / 64;
  static constexpr int kQBytes = kRows * D * 2;
  static constexpr int kKVBytes = kKeys * D * 2;
  static constexpr int kKStages = 2, kVStages = 3;
  static constexpr int kStages = 0;  // the other layouts' K-and-V stages (none)
  static constexpr int kKOffset = 2 * kQBytes;
  static constexpr int kVOffset = kKOffset + kKStages * kKVBytes;
  static constexpr int kBarOffset = kVOffset + kVStages * kKVBytes;
  static constexpr int kBars = 4 + 2 * kKStages + 2 * kVStages;  // q_full[2], q_empty[2], k_full/empty, v_full/empty
  static constexpr int kItemOffset = kBarOffset + 8 * kBars;  // PersistentSlot[2]
  static constexpr int kBytes = kItemOffset + 2 * int{sizeof(PersistentSlot)} + 1024;
  static constexpr int kThreads = 384;
};

// A place in a ring of N stages: the stage and the phase of its barriers.
template <int N>
struct RingSlot {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void next() {
    if (++stage == N) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// A step's schedule tile that does not exist (the odd last tile of a row tile in a 128-key step):
// its keys are loaded again from the step's previous tile and masked out entirely.
constexpr int32_t kAbsentTile = -2;

// kSum (the "fwd_sum" option, options.hpp): how the softmax's row sums are made. 0: by FADD in the
// softmax (two a key pair of a thread's rows). 1: by the tensor cores, P times a block of ones
// (an m64n8 wgmma a k-step beside P V, into osum), which leaves the softmax 64 fewer FP32
// instructions a thread a 128-key step, and gives each thread its rows' whole sums (no shuffles in
// the finish). 2: that, with the softmax beside the P V at head dim 64 too (kSoftmaxBesidePv).
template <class T, int D, bool kOverlap, bool kPingpong, int kKeys = kTile, bool kPersistent = false,
          bool kPair = false, int kConsumers = 2, int kSum = 0>
__global__ void __launch_bounds__(128 * (1 + kConsumers), 1)
    forward_sm90_kernel(const FwdParams p, const __grid_constant__ Sm90Maps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = std::conditional_t<kPersistent, Sm90PersistentLayout<T, D>,
                               Sm90VariantLayout<T, D, kOverlap, kPingpong, kKeys, kConsumers>>;
  static_assert(kKeys == kTile || (kKeys == 2 * kTile && kOverlap), "128-key steps: overlap kernels only");
  static_assert(!kPersistent || (kOverlap && !kPingpong && kKeys == 2 * kTile),
                "persistent: the 128-key overlap kernel");
  static_assert(!kPair || (kOverlap && !kPingpong && !kPersistent), "pair: an overlap kernel, 64 or 128 keys a step");
  // Three consumers (192-row tiles): the 128-key overlap kernel at head dim 64, the 64-key one
  // (which skips a consumer's idle tiles) at 128. Their registers: 160 a consumer thread
  // (3 x 128 x 160 + 128 x 24 of the producer <= 64K), which hold head dim 64's S (64), P (32) and
  // O (32), or head dim 128's in 64-key steps (S 32, P 16, O 64; Q in shared memory), not head dim
  // 128's in 128-key steps.
  static_assert(kConsumers == 2 || (kConsumers == 3 && kOverlap && !kPingpong &&
                                    (D == 64 ? kKeys == 2 * kTile : kKeys == kTile) && !kPersistent && !kPair),
                "three consumers: the 128-key overlap kernel at head dim 64, the 64-key one at 128");
  // 128-key steps take S = Q K^T with Q from shared memory (SS): Q's 32 registers would not fit
  // beside S (64), P (32) and O (64) of the wider step.
  // So do three consumers (160 registers a thread).
  constexpr bool kQInSmem = kKeys > kTile || kConsumers == 3;
  constexpr bool kSkip = forward_skips<kOverlap, kPingpong, kKeys>() && !kPair;
  // Rows of a schedule tile: the pair kernel's two consumers take the same 64 rows of two heads.
  constexpr int kTileRows = kPair ? kTile : L::kRows;
  // The overlapped loops run a step's softmax beside the P V of the step before only if ptxas is
  // kept from placing that P V's wait above the softmax (sm90::wait_below). At head dim 128 that
  // gained 2-4% (full, causal, documents at 16K-64K; the windows' persistent kernel ±1%); at 64,
  // where the S and the P V are half as long and the two consumers' softmaxes and GEMMs already
  // take turns, it lost 1-2% (commit 4bf0f72).
  constexpr bool kSumMma = kSum > 0;
  constexpr bool kSoftmaxBesidePv = D == 128 || kSum == 2;
  using M = Mma<T>;
  extern __shared__ __align__(1024) char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the 128-byte swizzle repeats every 1024 bytes
  const uint32_t sq = base, sk = base + L::kKOffset, sv = base + L::kVOffset;
  const uint32_t bar_q = base + L::kBarOffset;
  // Barriers of the other kernels (stage s holds K and V of a step).
  auto full_k = [&](int s) { return bar_q + 8u * (1 + s); };
  auto full_v = [&](int s) { return bar_q + 8u * (1 + L::kStages + s); };
  auto empty = [&](int s) { return bar_q + 8u * (1 + 2 * L::kStages + s); };
  // Barriers of the persistent kernel (Q buffer b, K stage s, V stage s).
  auto q_full = [&](int b) { return bar_q + 8u * b; };
  auto q_empty = [&](int b) { return bar_q + 8u * (2 + b); };
  auto pk_full = [&](int s) { return bar_q + 8u * (4 + s); };
  auto pk_empty = [&](int s) { return bar_q + 8u * (4 + L::kKStages + s); };
  auto pv_full = [&](int s) { return bar_q + 8u * (4 + 2 * L::kKStages + s); };
  auto pv_empty = [&](int s) { return bar_q + 8u * (4 + 2 * L::kKStages + L::kVStages + s); };
  // The block of ones of kSumMma's row sums: one 1024-byte swizzle atom after the layout's
  // bytes (forward_smem_bytes), eight K-major rows of 64 ones; every k-step reads it whole.
  const uint32_t ones = base + static_cast<uint32_t>((L::kBytes - 1024 + 1023) / 1024 * 1024);
  volatile PersistentSlot* slots =
      reinterpret_cast<volatile PersistentSlot*>(smem_raw + (base - raw) + L::kItemOffset);

  // The row tile and head of the block (persistent: of the tile being computed; pair: the first
  // of its two heads, and then each consumer's own).
  const ForwardBlock blk = kPersistent ? ForwardBlock{0, 0}
                                       : forward_block(blockIdx.x + int64_t{blockIdx.y} * gridDim.x,
                                                       static_cast<int32_t>(gridDim.x),
                                                       static_cast<int32_t>(gridDim.y),
                                                       kPair ? p.sched.heads_together / 2 : p.sched.heads_together);
  int32_t q_tile = kPersistent ? 0 : p.sched.order[blk.at];
  // Split-KV (FwdParams::part_of; the persistent kernel's producer reads it per row tile): the
  // schedule's row tile q_tile is a part of row tile row_tile, whose Q it loads; where place >= 0
  // its O and LSE go to the parts' fp32 buffers (finish_part). The cursors walk the part's runs
  // (q_tile).
  const bool split = !kPersistent && !kPair && p.part_of != nullptr;
  const int32_t row_tile = split ? p.part_of[2 * q_tile] : q_tile;
  int32_t place = split ? p.part_of[2 * q_tile + 1] : -1;  // (persistent: the tile being computed's)
  int h = kPersistent ? 0 : (kPair ? 2 : 1) * blk.head;
  const int wg = threadIdx.x >> 7;
  if (threadIdx.x == 0) {
    if constexpr (kPersistent) {
      for (int b = 0; b < 2; ++b) {
        sm90::mbar_init(q_full(b), 1);
        sm90::mbar_init(q_empty(b), 2);  // each consumer's first thread, once its O has left the buffer
      }
      for (int s = 0; s < L::kKStages; ++s) {
        sm90::mbar_init(pk_full(s), 1);
        sm90::mbar_init(pk_empty(s), 2 * 128);
      }
      for (int s = 0; s < L::kVStages; ++s) {
        sm90::mbar_init(pv_full(s), 1);
        sm90::mbar_init(pv_empty(s), 2 * 128);
      }
    } else {
      sm90::mbar_init(bar_q, 1);
      for (int s = 0; s < L::kStages; ++s) {
        sm90::mbar_init(full_k(s), 1);
        sm90::mbar_init(full_v(s), 1);
        sm90::mbar_init(empty(s), kConsumers * 128);
      }
    }
    sm90::mbar_fence_init();
  }
  if constexpr (kSumMma) {
    if (threadIdx.x < 256) sm90::st_shared_u32(ones + 4 * threadIdx.x, Mma<T>::pack(1.f, 1.f));
    sm90::fence_proxy_async();  // read by the wgmma unit after the barrier
  }
  __syncthreads();

  // Producers: the schedule tiles of the step at cur, moving cur past them (an absent second tile
  // repeats the one before: its keys are loaded again, finite values under a zero P, and the same
  // byte count on the barriers); a row tile's Q, and one step's K or V boxes, into dst, completing
  // on bar.
  auto step_tiles = [&](TileCursor& cur, int32_t& tile, int32_t (&tiles)[L::kSubs]) {
#pragma unroll
    for (int sub = 0; sub < L::kSubs; ++sub) {
      if (cur.valid()) {
        tile = cur.tile;
        cur.next();
      }
      tiles[sub] = tile;
    }
  };
  // A row tile's Q into dst: one box of kRows rows, or (pair) one 64-row box of heads head and
  // head + 1 each, into the rows of the consumer that computes it (maps.q has 64-row boxes there).
  auto load_q_tile = [&](uint32_t dst, int head, int32_t tile_row, uint32_t bar) {
    sm90::mbar_arrive_expect_tx(bar, L::kQBytes);
#pragma unroll
    for (int box = 0; box < (kPair ? 2 : 1); ++box)
#pragma unroll
      for (int half = 0; half < L::kHalves; ++half)
        sm90::tma_load_3d(dst + half * (L::kRows * 128) + box * (64 * 128), &maps.q, 64 * half, head + box,
                          tile_row * kTileRows, bar);
  };
  auto load_step = [&](const CUtensorMap* map, uint32_t dst, int head_kv, const int32_t (&tiles)[L::kSubs],
                       uint32_t bar) {
#pragma unroll
    for (int half = 0; half < L::kHalves; ++half)
#pragma unroll
      for (int sub = 0; sub < L::kSubs; ++sub)
        sm90::tma_load_3d(dst + half * (kKeys * 128) + sub * (kTile * 128), map, 64 * half, head_kv,
                          tiles[sub] * kTile, bar);
  };
  if (wg == 0) {
    // Producer: one thread issues every copy; the others give their registers to the consumers.
    sm90::regs_dec<24>();
    if constexpr (kPersistent) {
      // The persistent kernel's: the block's row tiles, its own first and then from the launch's
      // counter, in the order the grid of the other kernels runs them (row tiles longest first,
      // heads outer), each one's Q into the next buffer once its last user is done with it, then
      // its steps' K and V into their rings.
      if (threadIdx.x == 0) {
        sm90::tma_prefetch_map(&maps.q);
        sm90::tma_prefetch_map(&maps.k);
        sm90::tma_prefetch_map(&maps.v);
        const int busy = p.sched.busy_tiles, items = busy * p.heads_q;
        int step = 0;  // the block's steps so far: K's and V's ring places
        for (int n = 0;; ++n) {
          const int b = n & 1;
          if (n >= 2) sm90::mbar_wait(q_empty(b), ((n >> 1) - 1) & 1);
          // The first row tile is the block's own (the grid has no more blocks than busy items),
          // the rest come from the counter: no block starts without one. (A block that took none
          // wrote the end into its first slot at once; compute-sanitizer's racecheck flagged that
          // hand-over in 3 of 6 runs, though the mbarrier orders it.)
          const int item =
              n == 0 ? static_cast<int>(blockIdx.x) : static_cast<int>(gridDim.x) + atomicAdd(p.sched.counter, 1);
          if (item >= items) {
            slots[b].q_tile = -1;
            sm90::mbar_arrive(q_full(b));
            break;
          }
          // Only row tiles with runs: launch_forward_sm90_persistent writes the others' rows.
          const ForwardBlock at = forward_block(item, busy, p.heads_q, p.sched.heads_together);
          const int32_t part_tile = p.sched.order[at.at];  // the schedule's (a part, where split)
          const int32_t tile_row = p.part_of ? p.part_of[2 * part_tile] : part_tile;
          const int head = at.head, head_kv = head / p.group;
          TileCursor cur(p.sched.runs, p.sched.run_offsets, part_tile);
          slots[b].q_tile = tile_row;
          slots[b].place = p.part_of ? p.part_of[2 * part_tile + 1] : -1;
          slots[b].head = head;
          slots[b].run = cur.run;
          slots[b].run_end = cur.run_end;
          const TileRun first = p.sched.runs[cur.run];
          slots[b].first.begin = first.begin;
          slots[b].first.end = first.end;
          slots[b].first.mask = first.mask;
          slots[b].first.halves = first.halves;
          load_q_tile(sq + b * L::kQBytes, head, tile_row, q_full(b));
          int32_t tile = 0;
          while (cur.valid()) {
            int32_t tiles[L::kSubs];
            step_tiles(cur, tile, tiles);
            const int ks = step % L::kKStages, vs = step % L::kVStages;
            if (step >= L::kKStages) sm90::mbar_wait(pk_empty(ks), ((step / L::kKStages) - 1) & 1);
            sm90::mbar_arrive_expect_tx(pk_full(ks), L::kKVBytes);
            load_step(&maps.k, sk + ks * L::kKVBytes, head_kv, tiles, pk_full(ks));
            if (step >= L::kVStages) sm90::mbar_wait(pv_empty(vs), ((step / L::kVStages) - 1) & 1);
            sm90::mbar_arrive_expect_tx(pv_full(vs), L::kKVBytes);
            load_step(&maps.v, sv + vs * L::kKVBytes, head_kv, tiles, pv_full(vs));
            ++step;
          }
        }
      }
    } else {
      const int hk = h / p.group;
      if (threadIdx.x == 0) {
        sm90::tma_prefetch_map(&maps.k);
        sm90::tma_prefetch_map(&maps.v);
        load_q_tile(sq, h, row_tile, bar_q);
        TileCursor cur(p.sched.runs, p.sched.run_offsets, q_tile);
        int32_t tile = 0;
        for (int it = 0; cur.valid(); ++it) {
          const int s = it % L::kStages;
          if (it >= L::kStages) sm90::mbar_wait(empty(s), ((it / L::kStages) - 1) & 1);
          int32_t tiles[L::kSubs];
          step_tiles(cur, tile, tiles);
          sm90::mbar_arrive_expect_tx(full_k(s), L::kKVBytes);
          load_step(&maps.k, sk + s * L::kKVBytes, hk, tiles, full_k(s));
          sm90::mbar_arrive_expect_tx(full_v(s), L::kKVBytes);
          load_step(&maps.v, sv + s * L::kKVBytes, hk, tiles, full_v(s));
        }
      }
    }
    return;
  }

  // Consumers: warpgroup c owns query rows 64 c .. 64 c + 63 of the tile (pair: the tile's 64
  // rows of head h + c, in the same place of the Q buffer); warp w of it rows
  // 16 w .. 16 w + 15 (the wgmma row layout), and a thread rows g and g + 8 of those.
  sm90::regs_inc<kConsumers == 3 ? 160 : 240>();
  const int c = __reduce_min_sync(0xffffffffu, wg - 1);  // uniform to ptxas: descriptors in uniform registers
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int row0 = 64 * c + 16 * warp;  // first row of this warp in the Q buffer
  // ... and in the schedule tile (pair: both consumers' rows are the tile's, of heads h and h + 1).
  const int tile_row0 = kPair ? 16 * warp : row0;
  if constexpr (kPair) h += c;

  // Q -> registers: the A fragments of the D / 16 k-steps of S = Q K^T. With head_dim 64,
  // ptxas 13.0 gives Q's registers to other values inside the tile loop (the next iteration then
  // reads P as Q; tools/dev/check_wgmma_regs.py finds it in the SASS), so that kernel loads Q
  // again at every tile: 4 ldmatrix a warp, from shared memory that stays put.
  constexpr bool kReloadQ = D == 64 && !kQInSmem;
  uint32_t qa[D / 16][4];  // unused (and dropped) where Q stays in shared memory
  auto load_q = [&] {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const int row = row0 + (lane & 7) + 8 * ((lane >> 3) & 1);
      const int chunk = 2 * ks + (lane >> 4);  // 16-byte chunk of the row, 0 .. D / 8 - 1
      const uint32_t addr = sq + (chunk >> 3) * (L::kRows * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
      ldmatrix_x4(qa[ks], addr);
    }
  };
  if constexpr (!kPersistent) {
    sm90::mbar_wait(bar_q, 0);
    if constexpr (!kReloadQ && !kQInSmem) load_q();
  }

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  // kSumMma: the row sums as an m64n8 accumulator (d[0], d[1] row g, d[2], d[3] row g + 8; all
  // columns alike), rescaled and retired with O.
  float osum[4] = {0.f, 0.f, 0.f, 0.f};
  auto fence_o = [&] {
    sm90::fence_regs(o);
    if constexpr (kSumMma) sm90::fence_regs(osum);
  };
  // The row sums of the finish: kSumMma's, once the last P V is retired.
  auto take_sums = [&] {
    if constexpr (kSumMma) {
      row_sum[0] = osum[0];
      row_sum[1] = osum[2];
    }
  };
  constexpr float kSlack = 8.f;  // log2 units: see softmax
  float sc[kKeys / 2];         // S of the current step, then P in fp32
  uint32_t pa[kKeys / 16][4];  // P as the A operand of O += P V

  // S = Q K^T (64 rows x kKeys keys a warpgroup; K is K-major: head dim contiguous), issued and
  // committed, not waited for.
  // The descriptors of stage 0's K and V tiles; a stage's are these plus its offset. Q's (SS form
  // only): this consumer's 64 rows of the [half][128 rows][128 B] tile.
  const uint64_t k_desc0 = sm90::smem_desc(sk, 16, 1024), v_desc0 = sm90::smem_desc(sv, kKeys * 128, 1024);
  const uint64_t q_desc = sm90::smem_desc(sq + c * (64 * 128), 16, 1024);
  // q_buffer: the persistent kernel's Q buffer (0 or 1).
  auto issue_s = [&](int s, int q_buffer = 0) {
    if constexpr (kReloadQ) load_q();
    const uint64_t k_desc = sm90::desc_plus(k_desc0, s * L::kKVBytes);
    const uint64_t q_desc_b = sm90::desc_plus(q_desc, q_buffer * L::kQBytes);
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t offset = (ks >> 2) * (kKeys * 128) + (ks & 3) * 32;
      if constexpr (kQInSmem) {
        const uint32_t q_offset = (ks >> 2) * (L::kRows * 128) + (ks & 3) * 32;
        sm90::WgmmaSS<T, kKeys>::template run<0, 0>(sc, sm90::desc_plus(q_desc_b, q_offset),
                                                    sm90::desc_plus(k_desc, offset), ks > 0);
      } else {
        sm90::WgmmaRS<T, kKeys>::template run<0>(sc, qa[ks], sm90::desc_plus(k_desc, offset), ks > 0);
      }
    }
    sm90::wgmma_commit();
  };
  // O += P V (V is N-major: head dim contiguous along N; 64-column halves lie kKeys rows apart),
  // issued and committed.
  const uint64_t ones_desc = sm90::smem_desc(ones, 16, 1024);
  auto issue_pv = [&](int s) {
    const uint64_t v_desc = sm90::desc_plus(v_desc0, s * L::kKVBytes);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      sm90::WgmmaRS<T, D>::template run<1>(o, pa[kk], sm90::desc_plus(v_desc, kk * 16 * 128), 1);
      if constexpr (kSumMma) sm90::WgmmaRS<T, 8>::template run<0>(osum, pa[kk], ones_desc, 1);
    }
    sm90::wgmma_commit();
  };
  // Masks S (partial tiles only), moves the row maxima and sums, turns S into P in place and
  // gives the factors that bring O to the new maxima (log2 domain; rows g: e = 0, 1; g + 8:
  // e = 2, 3). Touches neither O nor pa. A row's reference maximum moves only when the tile's
  // exceeds it by more than kSlack (2^8): P then stays below 2^8, which fp32 sums and the 16-bit
  // P V operand hold as well as values below 1 (same relative precision), the result is exact
  // (O and the sum share the reference), and O is rescaled only on the rare tiles that move it.
  // The bitmask words of this thread's two rows in a partial tile, read before the tile's S is
  // waited for, so that the global load does not stall the softmax.
  // A step's schedule tiles, by their bitmask index: -1 fully visible (kSkip: to this consumer's
  // rows), kAbsentTile none.
  struct StepMasks {
    int32_t m[L::kSubs];
  };
  struct RowBits {
    bool partial;
    uint64_t w[L::kSubs][2];
  };
  auto row_bits = [&](const StepMasks& m) {
    RowBits b;
    b.partial = false;
#pragma unroll
    for (int sub = 0; sub < L::kSubs; ++sub) b.partial |= m.m[sub] != -1;
    if (b.partial) {
#pragma unroll
      for (int sub = 0; sub < L::kSubs; ++sub) {
        if (m.m[sub] >= 0) {
          const uint64_t* bits = p.sched.bits + int64_t{m.m[sub]} * kTileRows + tile_row0 + g;
          b.w[sub][0] = bits[0];
          b.w[sub][1] = bits[8];
        } else {
          b.w[sub][0] = b.w[sub][1] = m.m[sub] == -1 ? ~uint64_t{0} : uint64_t{0};
        }
      }
    }
    return b;
  };
  auto softmax = [&](const RowBits& bits, float (&alpha)[2]) {
    if (bits.partial) {
#pragma unroll
      for (int sub = 0; sub < L::kSubs; ++sub) {
        const ThreadBits w[2] = {ThreadBits(bits.w[sub][0], t4), ThreadBits(bits.w[sub][1], t4)};
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (!w[e >> 1][n * 8 + (e & 1)]) sc[4 * (8 * sub + n) + e] = -INFINITY;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * r], sc[4 * n + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float tile_max = mx * p.scale_log2;
      alpha[r] = 1.f;
      if (tile_max > row_max[r] + kSlack) {  // also the first tile that sees anything (-inf before)
        alpha[r] = exp2f(row_max[r] - tile_max);
        row_max[r] = tile_max;
        if constexpr (!kSumMma) row_sum[r] *= alpha[r];
      }
      const float m_use = row_max[r] == -INFINITY ? 0.f : row_max[r];
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        sc[4 * n + 2 * r] = exp2f(fmaf(sc[4 * n + 2 * r], p.scale_log2, -m_use));
        sc[4 * n + 2 * r + 1] = exp2f(fmaf(sc[4 * n + 2 * r + 1], p.scale_log2, -m_use));
        if constexpr (!kSumMma) row_sum[r] += sc[4 * n + 2 * r] + sc[4 * n + 2 * r + 1];
      }
    }
  };
  auto rescale_o = [&](const float (&alpha)[2]) {
    if (alpha[0] == 1.f && alpha[1] == 1.f) return;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[4 * n + 0] *= alpha[0];
      o[4 * n + 1] *= alpha[0];
      o[4 * n + 2] *= alpha[1];
      o[4 * n + 3] *= alpha[1];
    }
    if constexpr (kSumMma) {
      osum[0] *= alpha[0];
      osum[1] *= alpha[0];
      osum[2] *= alpha[1];
      osum[3] *= alpha[1];
    }
  };
  // P as the A operand: the accumulators of key blocks 2 kk, 2 kk + 1 are k-step kk's fragment.
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      pa[kk][0] = M::pack(sc[8 * kk + 0], sc[8 * kk + 1]);
      pa[kk][1] = M::pack(sc[8 * kk + 2], sc[8 * kk + 3]);
      pa[kk][2] = M::pack(sc[8 * kk + 4], sc[8 * kk + 5]);
      pa[kk][3] = M::pack(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
  };
  // Finish: row sums across the 4 threads of a row, normalise, write O and LSE, for row tile
  // tile_row of head head, from O and the row statistics given. O goes through this consumer's
  // 64 rows of the Q tile at q_buf, which no one reads once its last S is done (each consumer
  // reads only its own rows of Q), and leaves by one TMA store a 64-column half: a thread's
  // 4-byte pieces, stored directly, cost ~2 us a tile in partial-sector writes (commit df8026e). The
  // store is committed, not waited for: the consumer's first thread waits (bulk_wait_read) before
  // the buffer is written again or the block ends.
  auto finish = [&](int32_t tile_row, int head, const float (&rmax)[2], const float (&rsum)[2], uint32_t q_buf) {
    // The warp's lanes read its Q rows (ldmatrix, 64-key kernels) before other lanes write O there:
    // racecheck flags that pair in the 64-key kernels unless the warp syncs between them.
    __syncwarp();
    T* o_base = static_cast<T*>(p.o) + head * p.o_head;
    const int64_t q0 = int64_t{tile_row} * kTileRows;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = rsum[r];
      if constexpr (!kSumMma) {  // kSumMma's are the whole rows' already
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int row_in_tile = row0 + g + 8 * r;  // in the Q buffer
      const int64_t row = q0 + tile_row0 + g + 8 * r;
      if (maps.o_tma) {
        // The 128-byte swizzle of the TMA box: 16-byte unit n & 7 of a row lands at (n & 7) ^ (row & 7).
        const uint32_t dst = q_buf + row_in_tile * 128 + 4 * t4;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          sm90::st_shared_u32(dst + (n >> 3) * (L::kRows * 128) + (((n & 7) ^ (row_in_tile & 7)) << 4),
                              M::pack(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv));
      }
      if (row >= p.seqlen_q) continue;
      if (!maps.o_tma) {
        T* dst = o_base + row * p.o_tok + 2 * t4;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<uint32_t*>(dst + n * 8) = M::pack(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
      }
      if (t4 == 0)
        p.lse[head * p.lse_head + row * p.lse_tok] =
            sum > 0.f ? (rmax[r] + log2f(sum)) * 0.69314718055994531f : -INFINITY;
    }
    // This consumer's four warps (1 and 2 are pingpong's turns): their O in shared memory, and
    // (persistent kernel) their reads of the Q buffer and its slot done before the leader frees it.
    if (maps.o_tma) sm90::fence_proxy_async();  // the shared writes, seen by the TMA unit
    sm90::named_sync(3 + c, 128);
    if (maps.o_tma) {
      if ((threadIdx.x & 127) == 0) {
#pragma unroll
        for (int half = 0; half < L::kHalves; ++half)
          sm90::tma_store_3d(&maps.o, q_buf + half * (L::kRows * 128) + c * (64 * 128), 64 * half, head,
                             static_cast<int32_t>(q0) + (kPair ? 0 : 64 * c));
        sm90::bulk_commit();
      }
    }
  };
  // Split-KV's finish: this part's O (normalized by its own sums) and LSE, fp32, straight from the
  // registers to its slots in part_o / part_lse (8-byte stores; no shared memory, no TMA). Rows
  // that see nothing in the part get O = 0 and LSE = -inf, which the combine weighs 0.
  auto finish_part = [&](int32_t tile_row, int32_t part_place, int head, const float (&rmax)[2],
                         const float (&rsum)[2]) {
    const int64_t q0 = int64_t{tile_row} * kTileRows;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = rsum[r];
      if constexpr (!kSumMma) {
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int64_t row = q0 + tile_row0 + g + 8 * r;
      if (row >= p.seqlen_q) continue;
      const int64_t slot = (int64_t{part_place} * p.heads_q + head) * kTileRows + (row - q0);
      float* dst = p.part_o + slot * D + 2 * t4;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
      if (t4 == 0) p.part_lse[slot] = sum > 0.f ? (rmax[r] + log2f(sum)) * 0.69314718055994531f : -INFINITY;
    }
  };
  // A tile's place in the K-and-V ring of the non-persistent kernels, stepped along with the tiles
  // (no division by the stage count in the loop).
  using Slot = RingSlot<L::kStages>;

  CachedTileCursor cur(p.sched.runs, p.sched.run_offsets, q_tile);
  // The masks of a step's tiles, moving the cursor past them (called where the cursor is valid:
  // the first tile of a step always exists).
  auto take_step = [&] {
    StepMasks m;
#pragma unroll
    for (int sub = 0; sub < L::kSubs; ++sub) {
      if (sub == 0 || cur.valid()) {
        // The skipping kernel also leaves unmasked the tiles its rows see whole (block-sparse
        // masks: every tile it computes). The 128-key kernel keeps the tile's mask, as in v14:
        // with the half's, its window masks measured 2-5% slower in one A/B (commit 89a1084), not
        // traced to a cause.
        m.m[sub] = kSkip ? cur.mask(c) : cur.mask();
        cur.next();
      } else {
        m.m[sub] = kAbsentTile;
      }
    }
    return m;
  };
  float alpha[2];
  // Pingpong: consumer c issues its GEMMs only on its turn (named barrier 1 + c, which the other
  // consumer arrives at after issuing its own), consumer 0 first. Both walk the same tiles, so
  // their turns alternate strictly; consumer 1 skips the arrive after its last issue, which no
  // turn of consumer 0 waits for.
  auto take_turn = [&] {
    if constexpr (kPingpong) sm90::named_sync(1 + c, 256);
  };
  auto pass_turn = [&](bool last) {
    if constexpr (kPingpong) {
      if (!(last && c == 1)) sm90::named_arrive(2 - c, 256);
    }
  };
  if constexpr (kPersistent) {
    // The persistent consumer: the block's row tiles (all with runs) as one stream of steps. The
    // first step of a row tile issues its S beside the last P V of the tile before; that tile's O
    // leaves (finish) once the P V is done, after the new tile's softmax. The stream starts with a
    // first S alone and ends with a last P V alone.
    // The loop state (ring slots, cursor, Q buffer) stays warp-uniform, so ptxas keeps it in
    // uniform registers as in sm90_k128's loop: the slot's fields are read through redux.sync, and
    // there is no path back to the loop's start but the next step. With a second back edge (a
    // path for rows that see nothing) the step took 41 more instructions (ncu, full at 16K), the
    // descriptors of every wgmma computed in vector registers (commit 118db5f).
    const bool leader = (threadIdx.x & 127) == 0;
    RingSlot<L::kKStages> kx;
    RingSlot<L::kVStages> vx, vprev;
    int taken = 0;     // row tiles taken from the Q buffers
    int q_buf = 0;     // the Q buffer of the tile being computed
    int pending = -1;  // a Q buffer that this consumer's last O store may still read
    // The leader waits until the TMA unit has read that O, then gives the buffer back to the
    // producer (both consumers' leaders arrive).
    auto release_pending = [&] {
      if (pending >= 0) {
        if (leader) {
          sm90::bulk_wait_read<0>();
          sm90::mbar_arrive(q_empty(pending));
        }
        pending = -1;
      }
    };
    // The next row tile: true when there is one (q_tile, h, q_buf and cur are its), false when
    // the block has no more. The buffer waited on is the one the tile before last was stored
    // from: it is given back first.
    auto take_tile = [&]() -> bool {
      release_pending();
      const int b = taken & 1;
      sm90::mbar_wait(q_full(b), (taken >> 1) & 1);
      ++taken;
      const volatile PersistentSlot& slot = slots[b];
      auto uniform = [](int32_t v) { return __reduce_min_sync(0xffffffffu, v); };  // one value a warp
      const int32_t tile = uniform(slot.q_tile);
      if (tile < 0) return false;
      q_tile = tile;
      place = uniform(slot.place);
      h = uniform(slot.head);
      q_buf = b;
      const TileRun first{uniform(slot.first.begin), uniform(slot.first.end), uniform(slot.first.mask),
                          uniform(slot.first.halves)};
      cur = CachedTileCursor(p.sched.runs, uniform(slot.run), uniform(slot.run_end), first);
      return true;
    };
    auto zero_o = [&] {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) osum[i] = 0.f;
    };
    float kept_max[2], kept_sum[2];  // the row statistics of the tile whose last P V is in flight
    if (take_tile()) {
      // The stream's first step: S alone.
      sm90::mbar_wait(pk_full(kx.stage), kx.phase);
      issue_s(kx.stage, q_buf);
      const RowBits bits0 = row_bits(take_step());
      sm90::wgmma_wait<0>();
      sm90::fence_regs(sc);
      sm90::mbar_arrive(pk_empty(kx.stage));
      kx.next();
      softmax(bits0, alpha);
      rescale_o(alpha);
      pack_p();
      vprev = vx;
      vx.next();
      int32_t pv_tile = q_tile, pv_place = place;  // the row tile (place), head and Q buffer of the
      int pv_head = h, pv_buf = q_buf;               // P V still to issue
      // One step: its S beside the P V of the step before. kBoundary: the first step of a row
      // tile, whose softmax starts from nothing, and whose P V is the last of the tile before:
      // that tile's O leaves once it is done.
      auto step = [&]<bool kBoundary>() {
        sm90::mbar_wait(pk_full(kx.stage), kx.phase);
        issue_s(kx.stage, q_buf);
        sm90::mbar_wait(pv_full(vprev.stage), vprev.phase);
        issue_pv(vprev.stage);
        if constexpr (!kBoundary) release_pending();  // the last O store has had a step to leave
        const RowBits bits = row_bits(take_step());
        if constexpr (kBoundary) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            kept_max[r] = row_max[r];
            kept_sum[r] = row_sum[r];
            row_max[r] = -INFINITY;
            row_sum[r] = 0.f;
          }
        }
        sm90::wgmma_wait<1>();  // S of this step
        sm90::fence_regs(sc);
        sm90::mbar_arrive(pk_empty(kx.stage));
        kx.next();
        softmax(bits, alpha);
        if constexpr (kSoftmaxBesidePv) sm90::wait_below(kSumMma ? sc[kKeys / 2 - 1] : row_sum[0] + row_sum[1]);
        sm90::wgmma_wait<0>();  // P V of the step before
        fence_o();
        sm90::mbar_arrive(pv_empty(vprev.stage));
        if constexpr (kBoundary) {
          if constexpr (kSumMma) {
            kept_sum[0] = osum[0];
            kept_sum[1] = osum[2];
          }
          if (pv_place >= 0) finish_part(pv_tile, pv_place, pv_head, kept_max, kept_sum);
          else finish(pv_tile, pv_head, kept_max, kept_sum, sq + pv_buf * L::kQBytes);
          pending = pv_buf;
          zero_o();
        } else {
          rescale_o(alpha);
        }
        pack_p();
        vprev = vx;
        vx.next();
      };
      for (;;) {
        while (cur.valid()) step.template operator()<false>();
        pv_tile = q_tile;
        pv_place = place;
        pv_head = h;
        pv_buf = q_buf;
        if (!take_tile()) break;
        step.template operator()<true>();
      }
      // The stream ends: its last P V alone, and that tile's O.
      sm90::mbar_wait(pv_full(vprev.stage), vprev.phase);
      issue_pv(vprev.stage);
      sm90::wgmma_wait<0>();
      fence_o();
      sm90::mbar_arrive(pv_empty(vprev.stage));
      take_sums();
      if (pv_place >= 0) finish_part(pv_tile, pv_place, pv_head, row_max, row_sum);
      else finish(pv_tile, pv_head, row_max, row_sum, sq + pv_buf * L::kQBytes);
      pending = pv_buf;
    }
    release_pending();  // the block's shared memory stays until the TMA unit has read the last O
  } else if constexpr (!kOverlap) {
    // One tile at a time: S, softmax, P V, each waited for.
    for (Slot x; cur.valid(); x.next()) {
      const int s = x.stage;
      sm90::mbar_wait(full_k(s), x.phase);
      issue_s(s);
      const RowBits bits = row_bits(take_step());
      sm90::wgmma_wait<0>();
      sm90::fence_regs(sc);
      softmax(bits, alpha);
      rescale_o(alpha);
      pack_p();
      sm90::mbar_wait(full_v(s), x.phase);
      issue_pv(s);
      sm90::wgmma_wait<0>();
      fence_o();
      sm90::mbar_arrive(empty(s));
    }
  } else {
    // Software pipelined: S of tile j is issued together with P V of tile j - 1, and the softmax
    // of tile j runs while that P V is on the tensor cores. With kSkip this holds within each
    // stretch of tiles the consumer computes; the tiles idle for its rows are not computed. An
    // idle tile's stage is released once its loads landed, which keeps this consumer within one
    // ring cycle of the other and no copy in flight when the producer reuses the stage. A stretch
    // goes on across up to kStages - 2 idle tiles, released while the stage of the P V still to
    // issue is held: the next computed tile is then in another stage. Where more idle tiles come,
    // the stretch's last P V is finished first (holding its stage while releasing more would let
    // the ring wrap onto it: deadlock). Without kSkip the row tile is one stretch. (No wgmma sits
    // under a condition inside a loop: ptxas would serialize them all, C7518.)
    auto idle_here = [&] {
      if constexpr (kSkip) return cur.idle(c);
      else return false;
    };
    if constexpr (kPingpong) {
      if (c == 1) sm90::named_arrive(1, 256);  // consumer 0 goes first
    }
    Slot x;
    auto skip_idle = [&] {
      cur.next();
      sm90::mbar_wait(full_k(x.stage), x.phase);
      sm90::mbar_wait(full_v(x.stage), x.phase);
      sm90::mbar_arrive(empty(x.stage));
      x.next();
    };
    while (cur.valid()) {
      if (idle_here()) {
        skip_idle();
        continue;
      }
      // A stretch's first tile: O holds only finished tiles, rescaled with the softmax.
      sm90::mbar_wait(full_k(x.stage), x.phase);
      take_turn();
      issue_s(x.stage);
      pass_turn(false);
      const RowBits bits0 = row_bits(take_step());
      sm90::wgmma_wait<0>();
      sm90::fence_regs(sc);
      softmax(bits0, alpha);
      rescale_o(alpha);
      pack_p();
      Slot prev = x;
      x.next();
      // Whether the stretch goes on, past the idle tiles it may hold across (kSkip).
      auto stretch_goes_on = [&] {
        if constexpr (kSkip) {
          for (int held = 0; held < L::kStages - 2 && cur.valid() && idle_here(); ++held) skip_idle();
        }
        return cur.valid() && !idle_here();
      };
      while (stretch_goes_on()) {
        sm90::mbar_wait(full_k(x.stage), x.phase);
        if constexpr (kPingpong) {
          // Both tiles landed before the turn is taken: a turn is never held waiting for TMA.
          sm90::mbar_wait(full_v(prev.stage), prev.phase);
          take_turn();
          issue_s(x.stage);
          issue_pv(prev.stage);
          pass_turn(false);
        } else {
          issue_s(x.stage);
          sm90::mbar_wait(full_v(prev.stage), prev.phase);
          issue_pv(prev.stage);
        }
        const RowBits bits = row_bits(take_step());
        sm90::wgmma_wait<1>();  // S of this tile
        sm90::fence_regs(sc);
        softmax(bits, alpha);
        if constexpr (kSoftmaxBesidePv) sm90::wait_below(kSumMma ? sc[kKeys / 2 - 1] : row_sum[0] + row_sum[1]);
        sm90::wgmma_wait<0>();  // P V of prev
        fence_o();
        sm90::mbar_arrive(empty(prev.stage));
        rescale_o(alpha);
        pack_p();
        prev = x;
        x.next();
      }
      sm90::mbar_wait(full_v(prev.stage), prev.phase);
      take_turn();
      issue_pv(prev.stage);
      pass_turn(true);  // pingpong has no kSkip: this is its only stretch, its last issue
      sm90::wgmma_wait<0>();
      fence_o();
      sm90::mbar_arrive(empty(prev.stage));
    }
  }
  if constexpr (!kPersistent) {
    take_sums();
    if (place >= 0) finish_part(row_tile, place, h, row_max, row_sum);
    else finish(row_tile, h, row_max, row_sum, sq);
    if (maps.o_tma && (threadIdx.x & 127) == 0) sm90::bulk_wait_read<0>();  // before the block's shared memory goes
  }
#else
  __trap();  // launched only where the device code was built for sm_90a (see sm90_device)
#endif
}

// Which forward runs on an sm_90 GPU, from the "forward" option (ForwardChoice, options.hpp): absent,
// sm90_overlap, sm90_persistent
// or sm90_k128 by the schedule (default_sm90_forward, kernels.hpp); "sm90_k128" (the wgmma kernel
// with S of step j issued beside P V of step j - 1, 128 keys a step; v11), "sm90_k128_pingpong"
// (that, with the two consumers taking turns to issue), "sm90_overlap" (the same with 64 keys a
// step, Q in registers, and the tiles idle for a consumer's rows skipped; v6, v12),
// "sm90_persistent" (sm90_k128 with a block an SM, the row tiles one after another, each one's
// first S beside the last P V of the tile before; v17), "sm90_pair" (sm90_k128 on 64-row tiles,
// its two consumers on two query heads of one kv head, a step any two of the row tile's 64-key
// tiles; v41: plan() builds the 64-row schedule for it, where the group is even), "sm90_pair64"
// (the same with 64-key steps, sm90_overlap's loop without its skip; v19), "sm90_k128_wg3"
// (sm90_k128 with three consumers on 192-row tiles, at head dim 64 only: plan() builds the 192-row
// schedule for it; elsewhere sm90_k128; v40),
// "sm90_overlap_wg3" (sm90_overlap with three consumers on 192-row tiles, Q in shared memory; at head
// dim 128 only: plan() builds the 192-row schedule for it; elsewhere the default; v42),
// "sm90_pingpong" (64 keys, taking turns; v8), "sm90" (the wgmma kernel, one 64-key tile at a
// time) or "mma" (the portable mma.sync kernel). Measurements in docs/kernels/flex_flash.md.

// A kernel's dynamic shared memory: its layout's, and with kSum's row sums by the tensor cores
// their block of ones (1024 bytes at the next 1024-byte boundary: 2048 more at most).
template <class L, int kSum>
constexpr int forward_smem_bytes() {
  return L::kBytes + (kSum > 0 ? 2048 : 0);
}

// Split-KV's combine (FwdParams::part_of): O and LSE of a split row tile's rows from its parts'
// fp32 O and LSE, each part weighed by exp(its LSE - the largest); rows no part sees get O = 0,
// LSE = -inf. A thread 8 columns of a row, head dim / 8 threads a row; a block 128 threads over
// rows of one split row tile (blockIdx.x: the split row tile by the tile's blocks), blockIdx.y
// the head.
template <class T, int D>
__global__ void __launch_bounds__(128) combine_parts_kernel(const FwdParams p) {
  constexpr int kThreadsPerRow = D / 8, kRowsPerBlock = 128 / kThreadsPerRow;
  const int tile_blocks = (p.sched.tile_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int split = static_cast<int>(blockIdx.x) / tile_blocks;
  const int head = static_cast<int>(blockIdx.y);
  const int r = (static_cast<int>(blockIdx.x) % tile_blocks) * kRowsPerBlock + static_cast<int>(threadIdx.x) / kThreadsPerRow;
  const int64_t row = int64_t{p.split_rows[split]} * p.sched.tile_rows + r;
  const int col = static_cast<int>(threadIdx.x % kThreadsPerRow) * 8;
  if (r >= p.sched.tile_rows || row >= p.seqlen_q) return;
  const int first = p.split_first[split], end = p.split_first[split + 1];
  auto slot = [&](int place) { return (int64_t{place} * p.heads_q + head) * p.sched.tile_rows + r; };
  float m = -INFINITY;
  for (int j = first; j < end; ++j) m = fmaxf(m, p.part_lse[slot(j)]);
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  float weights = 0.f;
  if (m != -INFINITY) {
    for (int j = first; j < end; ++j) {
      const float w = expf(p.part_lse[slot(j)] - m);
      weights += w;
      const float4* src = reinterpret_cast<const float4*>(p.part_o + slot(j) * D + col);
      const float4 a = src[0], b = src[1];
      acc[0] += w * a.x, acc[1] += w * a.y, acc[2] += w * a.z, acc[3] += w * a.w;
      acc[4] += w * b.x, acc[5] += w * b.y, acc[6] += w * b.z, acc[7] += w * b.w;
    }
  }
  const float inv = weights > 0.f ? 1.f / weights : 0.f;
  using M = Mma<T>;
  const uint4 out{M::pack(acc[0] * inv, acc[1] * inv), M::pack(acc[2] * inv, acc[3] * inv),
                  M::pack(acc[4] * inv, acc[5] * inv), M::pack(acc[6] * inv, acc[7] * inv)};
  *reinterpret_cast<uint4*>(static_cast<T*>(p.o) + head * p.o_head + row * p.o_tok + col) = out;
  if (col == 0) p.lse[head * p.lse_head + row * p.lse_tok] = weights > 0.f ? m + logf(weights) : -INFINITY;
}

template <class T, int D>
void launch_combine_parts(const FwdParams& p, cudaStream_t stream) {
  if (p.split_count == 0) return;
  constexpr int kRowsPerBlock = 128 / (D / 8);
  const int tile_blocks = (p.sched.tile_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const dim3 grid(static_cast<unsigned>(p.split_count * tile_blocks), static_cast<unsigned>(p.heads_q));
  combine_parts_kernel<T, D><<<grid, 128, 0, stream>>>(p);
  LCA_FLEX_CHECK_LAUNCH("flex_flash combine_parts_kernel");
}

// The rows of the row tiles that see nothing (order's last row_tiles - busy_tiles; never a split
// row tile's part: split_row_tiles gives every part tiles): O = 0 and LSE = -inf. A block a
// (row tile, head); a row's O in 16-byte stores by head dim / 8 threads side by side (a row a
// thread, 2 bytes a store, had every warp store touch 32 rows: on the fetched stages of
// balanced's staged forward, most of a call's rows, it ran at a fraction of the memory's speed),
// its LSE by the next threads.
template <class T, int D>
__global__ void __launch_bounds__(128) empty_rows_kernel(const FwdParams p) {
  static_assert(D * sizeof(T) % 16 == 0, "a row's O is written in 16-byte pieces");
  constexpr int kThreadsPerRow = D * static_cast<int>(sizeof(T)) / 16, kRowsAtOnce = 128 / kThreadsPerRow;
  const int32_t at = p.sched.order[p.sched.busy_tiles + static_cast<int32_t>(blockIdx.x)];
  const int32_t tile = p.part_of ? p.part_of[2 * at] : at;
  const int head = static_cast<int>(blockIdx.y);
  const int64_t first = int64_t{tile} * p.sched.tile_rows;
  const int64_t rows = p.seqlen_q - first < p.sched.tile_rows ? p.seqlen_q - first : int64_t{p.sched.tile_rows};
  const int piece = static_cast<int>(threadIdx.x) % kThreadsPerRow;
  for (int64_t r = threadIdx.x / kThreadsPerRow; r < rows; r += kRowsAtOnce)
    reinterpret_cast<uint4*>(static_cast<T*>(p.o) + head * p.o_head + (first + r) * p.o_tok)[piece] =
        make_uint4(0u, 0u, 0u, 0u);
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) p.lse[head * p.lse_head + (first + r) * p.lse_tok] = -INFINITY;
}

// The row tiles that see nothing, where the schedule has any (launched before the kernel that
// computes the others, on the same stream).
template <class T, int D>
void launch_empty_rows(const FwdParams& p, cudaStream_t stream) {
  if (p.sched.busy_tiles >= p.sched.row_tiles) return;
  const dim3 grid(static_cast<unsigned>(p.sched.row_tiles - p.sched.busy_tiles), static_cast<unsigned>(p.heads_q));
  empty_rows_kernel<T, D><<<grid, 128, 0, stream>>>(p);
  LCA_FLEX_CHECK_LAUNCH("flex_flash empty_rows_kernel");
}

template <class T, int D, bool kOverlap, bool kPingpong, int kKeys = kTile, int kConsumers = 2, int kSum = 0>
void launch_forward_sm90_variant(const FwdParams& p, const Sm90Maps& maps, cudaStream_t stream) {
  using L = Sm90VariantLayout<T, D, kOverlap, kPingpong, kKeys, kConsumers>;
  constexpr int kBytes = forward_smem_bytes<L, kSum>();
  static_assert(kBytes <= kSm90SmemBytes, "the forward's shared memory exceeds the H100's 227 KiB a block");
  constexpr auto kernel = forward_sm90_kernel<T, D, kOverlap, kPingpong, kKeys, false, false, kConsumers, kSum>;
  LCA_FLEX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  // A block a busy row tile and head (order's first busy_tiles; forward_block decodes them by the
  // grid's width), the rows that see nothing apart, and split-KV's parts combined after.
  launch_empty_rows<T, D>(p, stream);
  if (p.sched.busy_tiles == 0) return;
  const dim3 grid(static_cast<unsigned>(p.sched.busy_tiles), static_cast<unsigned>(p.heads_q));
  kernel<<<grid, L::kThreads, kBytes, stream>>>(p, maps);
  LCA_FLEX_CHECK_LAUNCH("flex_flash forward_sm90_kernel");
  launch_combine_parts<T, D>(p, stream);
}

// The persistent kernel: a block an SM (at most one a busy row tile and head), its row tiles
// from a counter zeroed here. The row tiles that see nothing are not its: empty_rows_kernel
// writes them, so that its consumers' loop has no path for them (see the consumer).
template <class T, int D, int kSum = 0>
void launch_forward_sm90_persistent(const FwdParams& p, const Sm90Maps& maps, cudaStream_t stream) {
  using L = Sm90PersistentLayout<T, D>;
  constexpr int kBytes = forward_smem_bytes<L, kSum>();
  static_assert(kBytes <= kSm90SmemBytes, "the forward's shared memory exceeds the H100's 227 KiB a block");
  launch_empty_rows<T, D>(p, stream);
  const int64_t items = int64_t{p.sched.busy_tiles} * p.heads_q;
  if (items == 0) return;
  constexpr auto kernel = forward_sm90_kernel<T, D, true, false, 2 * kTile, true, false, 2, kSum>;
  LCA_FLEX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  int device = 0, sms = 0;
  LCA_FLEX_CUDA_CHECK(cudaGetDevice(&device));
  LCA_FLEX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const unsigned grid = static_cast<unsigned>(items < sms ? items : sms);
  LCA_FLEX_CUDA_CHECK(cudaMemsetAsync(p.sched.counter, 0, sizeof(int32_t), stream));
  kernel<<<grid, L::kThreads, kBytes, stream>>>(p, maps);
  LCA_FLEX_CHECK_LAUNCH("flex_flash forward_sm90_kernel (persistent)");
  launch_combine_parts<T, D>(p, stream);
}

// The pair kernel: a block a (64-row tile, two query heads of one kv head), kKeys keys a step;
// plan() gave it the 64-row schedule (pair_forward), where heads_q / heads_kv is even.
template <class T, int D, int kKeys>
void launch_forward_sm90_pair(const FwdParams& p, const Sm90Maps& maps, cudaStream_t stream) {
  using L = Sm90VariantLayout<T, D, true, false, kKeys>;
  static_assert(L::kBytes <= kSm90SmemBytes, "the forward's shared memory exceeds the H100's 227 KiB a block");
  constexpr auto kernel = forward_sm90_kernel<T, D, true, false, kKeys, false, true>;
  LCA_FLEX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes));
  launch_empty_rows<T, D>(p, stream);
  if (p.sched.busy_tiles == 0) return;
  const dim3 grid(static_cast<unsigned>(p.sched.busy_tiles), static_cast<unsigned>(p.heads_q / 2));
  kernel<<<grid, L::kThreads, L::kBytes, stream>>>(p, maps);
  LCA_FLEX_CHECK_LAUNCH("flex_flash forward_sm90_kernel (pair)");
}

// The Hopper forward kernels, named as the "forward" option names them (sm90_forward_name).
enum class Sm90FwdKernel { pair, pair64, k128_wg3, overlap_wg3, pingpong, plain, overlap, k128_pingpong, k128, persistent };

constexpr const char* sm90_forward_name(Sm90FwdKernel k) {
  switch (k) {
    case Sm90FwdKernel::pair: return "sm90_pair";
    case Sm90FwdKernel::pair64: return "sm90_pair64";
    case Sm90FwdKernel::k128_wg3: return "sm90_k128_wg3";
    case Sm90FwdKernel::overlap_wg3: return "sm90_overlap_wg3";
    case Sm90FwdKernel::pingpong: return "sm90_pingpong";
    case Sm90FwdKernel::plain: return "sm90";
    case Sm90FwdKernel::overlap: return "sm90_overlap";
    case Sm90FwdKernel::k128_pingpong: return "sm90_k128_pingpong";
    case Sm90FwdKernel::k128: return "sm90_k128";
    case Sm90FwdKernel::persistent: return "sm90_persistent";
  }
  return "?";
}

// The kernel launch_forward_sm90 runs a schedule with: a 64-row schedule with an even group takes
// the pair kernel (128 keys a step, unless sm90_pair64 asks for v19's 64), a 192-row one three
// consumers (sm90_k128_wg3 at head dim 64, sm90_overlap_wg3 at 128), a 128-row one the kernel
// the "forward" option (`choice`) asks for or, absent (or asking for a kernel of other tile rows), the default's:
// where plan() did not take the pair kernel (Sm90Forward::pair), the 64-key kernel that skips idle
// tile halves stands in for it. plan_info names the same (forward_kernel_name).
inline Sm90FwdKernel sm90_forward_kernel(ForwardChoice choice, int32_t tile_rows, double idle_share, double mean_tiles, int32_t max_tiles,
                                         int32_t group, int head_dim) {
  if (tile_rows == kTile)
    return choice == ForwardChoice::sm90_pair64 ? Sm90FwdKernel::pair64 : Sm90FwdKernel::pair;
  if (tile_rows == 3 * kTile) return head_dim == 64 ? Sm90FwdKernel::k128_wg3 : Sm90FwdKernel::overlap_wg3;
  switch (choice) {
    case ForwardChoice::sm90_pingpong: return Sm90FwdKernel::pingpong;
    case ForwardChoice::sm90: return Sm90FwdKernel::plain;
    case ForwardChoice::sm90_overlap: return Sm90FwdKernel::overlap;
    case ForwardChoice::sm90_k128_pingpong: return Sm90FwdKernel::k128_pingpong;
    case ForwardChoice::sm90_k128:
    case ForwardChoice::sm90_k128_wg3:  // at head dim 128 (plan() builds 192-row tiles only at 64)
      return Sm90FwdKernel::k128;
    case ForwardChoice::sm90_persistent: return Sm90FwdKernel::persistent;
    default:
      switch (default_sm90_forward(idle_share, mean_tiles, max_tiles, group)) {
        case Sm90Forward::pair:
        case Sm90Forward::skip64: return Sm90FwdKernel::overlap;
        case Sm90Forward::persistent: return Sm90FwdKernel::persistent;
        case Sm90Forward::k128: return Sm90FwdKernel::k128;
      }
  }
  return Sm90FwdKernel::k128;
}

// The row sums (kSum) kernel k runs with for the "fwd_sum" option's value `asked` (-1 absent):
// only the 128-key kernels at head dim 64 have a choice. Absent: by the tensor cores (1) in sm90_k128
// and sm90_k128_wg3, by FADD (0) in sm90_persistent. On an H200, one run each (docs/kernels/flex_flash.md):
// the tensor cores' took sm90_k128_wg3 to 0.99-1.05x on full, causal, documents and prefix_lm_causal
// at 7680-98304 tokens (geomean 1.02), sm90_persistent on sliding_window_causal to 0.98-1.01x.
// mma_beside runs as mma in sm90_k128_wg3, whose 160 registers a thread leave ptxas placing the P V's
// wait above all but 4 of the softmax's exponentials anyway.
inline int sm90_forward_sum(int asked, Sm90FwdKernel k, int head_dim) {
  const bool wg3 = k == Sm90FwdKernel::k128_wg3;
  if (head_dim != 64 || (k != Sm90FwdKernel::k128 && !wg3 && k != Sm90FwdKernel::persistent)) return 0;
  if (asked < 0) return k == Sm90FwdKernel::persistent ? 0 : 1;
  return wg3 && asked == 2 ? 1 : asked;
}

// The Hopper forward of a 128-row schedule, of a 64-row one with an even group (the pair kernel), or
// of a 192-row one (three consumers), by sm90_forward_kernel.
template <class T, int D>
void launch_forward_sm90(const FwdParams& p, cudaStream_t stream) {
  Sm90Maps maps;
  const int64_t heads_kv = p.heads_q / p.group;
  // Q lands in one box of the tile's rows (the pair kernel: a 64-row box a head).
  maps.q = make_thd_map<T>(p.q, D, p.heads_q, p.seqlen_q, p.q_head, p.q_tok, static_cast<uint32_t>(p.sched.tile_rows),
                           "q");
  maps.k = make_thd_map<T>(p.k, D, heads_kv, p.seqlen_k, p.k_head, p.k_tok, kTile, "k");
  maps.v = make_thd_map<T>(p.v, D, heads_kv, p.seqlen_k, p.v_head, p.v_tok, kTile, "v");
  maps.o_tma = reinterpret_cast<uintptr_t>(p.o) % 16 == 0 && (p.o_head * sizeof(T)) % 16 == 0 &&
               (p.o_tok * sizeof(T)) % 16 == 0;
  if (maps.o_tma) maps.o = make_thd_map<T>(p.o, D, p.heads_q, p.seqlen_q, p.o_head, p.o_tok, 64, "o");
  const Sm90FwdKernel kernel = sm90_forward_kernel(p.forward, p.sched.tile_rows, p.sched.idle_share,
                                                   p.sched.mean_tiles, p.sched.max_tiles, p.group, D);
  const int sum = sm90_forward_sum(p.sum, kernel, D);
  switch (kernel) {
    case Sm90FwdKernel::pair: return launch_forward_sm90_pair<T, D, 2 * kTile>(p, maps, stream);
    case Sm90FwdKernel::pair64: return launch_forward_sm90_pair<T, D, kTile>(p, maps, stream);
    case Sm90FwdKernel::k128_wg3:
    case Sm90FwdKernel::overlap_wg3:
      if constexpr (D == 64) {
        if (sum == 1) return launch_forward_sm90_variant<T, D, true, false, 2 * kTile, 3, 1>(p, maps, stream);
        return launch_forward_sm90_variant<T, D, true, false, 2 * kTile, 3>(p, maps, stream);
      } else {
        return launch_forward_sm90_variant<T, D, true, false, kTile, 3>(p, maps, stream);
      }
    case Sm90FwdKernel::pingpong: return launch_forward_sm90_variant<T, D, true, true>(p, maps, stream);
    case Sm90FwdKernel::plain: return launch_forward_sm90_variant<T, D, false, false>(p, maps, stream);
    case Sm90FwdKernel::overlap: return launch_forward_sm90_variant<T, D, true, false>(p, maps, stream);
    case Sm90FwdKernel::k128_pingpong: return launch_forward_sm90_variant<T, D, true, true, 2 * kTile>(p, maps, stream);
    case Sm90FwdKernel::k128:
      if constexpr (D == 64) {
        if (sum == 1) return launch_forward_sm90_variant<T, D, true, false, 2 * kTile, 2, 1>(p, maps, stream);
        if (sum == 2) return launch_forward_sm90_variant<T, D, true, false, 2 * kTile, 2, 2>(p, maps, stream);
      }
      return launch_forward_sm90_variant<T, D, true, false, 2 * kTile>(p, maps, stream);
    case Sm90FwdKernel::persistent:
      if constexpr (D == 64) {
        if (sum == 1) return launch_forward_sm90_persistent<T, D, 1>(p, maps, stream);
        if (sum == 2) return launch_forward_sm90_persistent<T, D, 2>(p, maps, stream);
      }
      return launch_forward_sm90_persistent<T, D>(p, maps, stream);
  }
}

// The wgmma kernel runs where it was asked for (the "forward" option is not mma) and can run (sm90_device).
inline bool sm90_available(ForwardChoice choice) { return choice != ForwardChoice::mma && sm90_device(); }

// The three-consumer kernel of a head dim: the "forward" option's value that asks for it, and the
// default kernel it may stand in for on a 128-row schedule. Head dim 64: sm90_k128_wg3 for sm90_k128
// (long row tiles); 128: sm90_overlap_wg3 for sm90_persistent (short row tiles: the windows).
struct Wg3Kernel {
  ForwardChoice asked;
  Sm90Forward replaces;
};
constexpr Wg3Kernel wg3_kernel(int head_dim) {
  return head_dim == 64 ? Wg3Kernel{ForwardChoice::sm90_k128_wg3, Sm90Forward::k128}
                        : Wg3Kernel{ForwardChoice::sm90_overlap_wg3, Sm90Forward::persistent};
}

// Whether plan() builds the forward's 192-row schedule for the three-consumer kernel of this head
// dim: where the wgmma kernels run and the "forward" option (`choice`) asks for that kernel or, absent, the 128-row
// schedule calls for the kernel it stands in for (default_sm90_forward).
inline bool wg3_forward_wanted(ForwardChoice choice, int head_dim, double idle_share, double mean_tiles,
                               int32_t max_tiles, int32_t group) {
  if ((head_dim != 64 && head_dim != 128) || !sm90_available(choice)) return false;
  const Wg3Kernel k = wg3_kernel(head_dim);
  return choice == k.asked || (choice == ForwardChoice::sm90_auto &&
                               default_sm90_forward(idle_share, mean_tiles, max_tiles, group) == k.replaces);
}

// Whether plan() builds the forward's 64-row schedule for the pair kernel: where the wgmma kernels
// run, the group is even, and the "forward" option (`choice`) asks for sm90_pair or, absent, the 128-row
// schedule's idle share calls for it (default_sm90_forward).
inline bool pair_forward_wanted(ForwardChoice choice, double idle_share, double mean_tiles, int32_t max_tiles,
                                int32_t group) {
  if (group % 2 != 0 || !sm90_available(choice)) return false;
  return choice == ForwardChoice::sm90_pair || choice == ForwardChoice::sm90_pair64 ||
         (choice == ForwardChoice::sm90_auto &&
          default_sm90_forward(idle_share, mean_tiles, max_tiles, group) == Sm90Forward::pair);
}

}  // namespace lca_flex_flash::dev
