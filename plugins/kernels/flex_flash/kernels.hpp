// Launch parameters and launchers of the flex_flash CUDA kernels (forward, backward and the
// small pre/post passes of the backward). Used by flex_flash.cpp; implemented per dtype and head
// dim in the launch_*.cu files.
// Rule: pointers are device pointers; strides are in elements; tiles and bitmasks come from a
// TileSchedule uploaded by plan().
#pragma once

#include "options.hpp"
#include "schedule.hpp"

#include <lca/abi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace lca_flex_flash {

// Query rows of a forward tile (the forward schedule's tile_rows: 128, or 64 where that computes
// clearly fewer cells or the Hopper pair kernel runs, see plan()), keys of a backward tile (the
// backward schedule's tile_rows; likewise 64 where that computes clearly fewer cells); 16 rows a
// warp in both.
constexpr int kFwdRows = 128;
constexpr int kBwdKeys = 128;

struct DeviceSchedule {
  const TileRun* runs = nullptr;
  const int32_t* run_offsets = nullptr;
  const uint64_t* bits = nullptr;
  const int32_t* order = nullptr;
  int32_t row_tiles = 0;
  int32_t tile_rows = 0;
  float idle_share = 0.f;  // of the 64-row halves of scheduled tiles, the share that sees nothing
  float mean_tiles = 0.f;  // scheduled tiles per row tile (backward: query tiles a key tile walks)
  const BwdItem* items = nullptr;  // backward only: the Hopper backward's blocks (backward_items)
  int32_t item_count = 0;
  // Forward: the persistent kernel's next row tile. Backward: a place per kv head, where its
  // blocks' walks are (the skip kernel's rotated walks), then the blocks' ticket (dQ's first writers,
  // BwdParams::dq_first). Zeroed a launch.
  int32_t* counter = nullptr;
  int32_t busy_tiles = 0;      // row tiles with runs: order's first busy_tiles (the rest see nothing)
  bool plain_walks = false;    // backward only: every item one key tile walked up, heads outer (plain_walks)
  bool alike_walks = false;    // backward only: plain walks of about the same length (alike_walks)
  int32_t max_tiles = 0;       // the most scheduled tiles of one row tile (TileSchedule::max_tiles)
  // Backward only: the blocks go out in groups of this many kv heads (a divisor of heads_kv), each
  // group's kv heads inner: 1, one kv head after another; heads_kv, all inner (kv_heads_together).
  int32_t kv_heads_together = 1;
  // Backward only, matched schedules (TileSchedule::key_blocks, 2 a key tile), else null: the
  // 64-key block of each half of each key tile; the skip kernel runs them.
  const int32_t* key_blocks = nullptr;
  float mean_span = 0.f;  // column tiles from a row tile's first scheduled one to its last (mean_span)
  // Backward only: the items are walks split by query ranges (split_by_ranges, range_walks_rule).
  bool range_walks = false;
  // Forward only: the blocks go out in groups of this many heads, each group's heads inner
  // (TileSchedule::heads_together, forward_block).
  int32_t heads_together = 1;
};

// Floats in one of the split walks' fp32 accumulators (dK's; dV's follows it): BwdParams::dkv_accum.
constexpr int64_t dkv_accum_floats(int64_t split_count, int64_t heads_kv, int64_t head_dim) {
  return split_count * heads_kv * kBwdKeys * head_dim;
}

struct FwdParams {
  const void *q, *k, *v;
  void* o;
  float* lse;
  int64_t q_tok, q_head, k_tok, k_head, v_tok, v_head, o_tok, o_head;  // strides
  int64_t lse_head, lse_tok;
  int64_t seqlen_q, seqlen_k;
  int32_t heads_q, group;  // group = heads_q / heads_kv
  float scale_log2;        // softmax_scale * log2(e)
  DeviceSchedule sched;    // rows are query tiles
  ForwardChoice forward = ForwardChoice::sm90_auto;  // the instance's "forward" option (options.hpp)
  int32_t sum = -1;  // the "fwd_sum" option: the Hopper forward's row sums at head dim 64 (-1: sm90_forward_sum's rule)
  // Split-KV (split_row_tiles, forward_split_parts), else null: sched's row tile v is a part of row
  // tile part_of[2 v] whose O, normalized, and LSE go in fp32 to place part_of[2 v + 1] of part_o /
  // part_lse (place p, head h, row r of the tile at (p * heads_q + h) * tile_rows + r; part_o
  // head_dim floats a row), or, place -1, that whole row tile, written as usual. The split row tiles
  // are split_rows[i], their parts at places split_first[i] .. split_first[i + 1] - 1 (split_count
  // of them): combine_parts_kernel makes their O and LSE.
  const int32_t* part_of = nullptr;
  const int32_t* split_rows = nullptr;
  const int32_t* split_first = nullptr;
  int32_t split_count = 0;
  float* part_o = nullptr;
  float* part_lse = nullptr;
};

struct BwdParams {
  const void *q, *k, *v, *o, *d_o;
  const float* lse;
  void *dq, *dk, *dv;
  float* dq_accum;  // [seqlen_q, heads_q, head_dim] fp32
  float* delta;     // [heads_q, seqlen_q] fp32: rowsum(dO * O)
  // Split walks (split_long_walks): dK (scaled) then dV, fp32, each [slot][heads_kv][kBwdKeys]
  // [head_dim] (dkv_accum_floats); split_tiles[slot] is the slot's key tile.
  float* dkv_accum;
  const int32_t* split_tiles;
  int32_t split_count;
  int64_t q_tok, q_head, k_tok, k_head, v_tok, v_head, o_tok, o_head, do_tok, do_head;
  int64_t dq_tok, dq_head, dk_tok, dk_head, dv_tok, dv_head;
  int64_t lse_head, lse_tok;
  int64_t seqlen_q, seqlen_k;
  int32_t heads_q, heads_kv, group;
  float scale, scale_log2;
  DeviceSchedule sched;  // rows are key tiles
  // First writers (dq_first_writers), or null: query tile t's accumulator rows are stored, not added,
  // by the block of key tile dq_first[t] (-1: zeroed by prepare_kernel, added into by all), which
  // then sets dq_ready[head][t] to dq_call; the other blocks add there once it reads dq_call. The
  // call's number (never 0) grows by one a backward call, so the flags need no zeroing.
  const int32_t* dq_first;
  uint32_t* dq_ready;
  uint32_t dq_call;
  BackwardChoice backward = BackwardChoice::sm90_auto;  // the instance's "backward" option (options.hpp)
  // dV += P^T dO issued before the dS^T stores and barrier, dK after dQ ("bwd_dv_first"): the
  // tensor cores busy through that barrier. Only the Hopper kernel without the skip or rotation.
  bool dv_first = false;
};

// One instantiation per (lca_dtype, head dim), each in its own launch_*.cu.
template <int DType, int HeadDim>
void forward_impl(const FwdParams& p, void* stream);
template <int DType, int HeadDim>
void backward_impl(const BwdParams& p, void* stream);

#define LCA_FLEX_DECLARE(DTYPE, DIM)                                         \
  template <>                                                                 \
  void forward_impl<DTYPE, DIM>(const FwdParams& p, void* stream);            \
  template <>                                                                 \
  void backward_impl<DTYPE, DIM>(const BwdParams& p, void* stream);
LCA_FLEX_DECLARE(LCA_DTYPE_BF16, 64)
LCA_FLEX_DECLARE(LCA_DTYPE_BF16, 128)
LCA_FLEX_DECLARE(LCA_DTYPE_F16, 64)
LCA_FLEX_DECLARE(LCA_DTYPE_F16, 128)
#undef LCA_FLEX_DECLARE

// How much faster a cell of the mask runs in the kernel that takes 128-row tiles than in the one
// that takes 64-row tiles, on the current GPU and the instance's kernel options (forward/backward):
// plan() weighs the two schedules by it (build_adaptive_schedule).
// Constants, not measured at run time: kernels-16k on an H100 (commit b5d732a), TFLOP/s a cell of
// the mask at 16K, head_dim 128: the Hopper kernels on 128-row tiles (full mask) against the
// mma.sync kernels on 64-row tiles (block_sparse, whose 64-token blocks those tiles fit exactly).
// Re-measure them when either kernel changes much.
// Stale since commit 754bb8c: the Hopper kernels now run full at 609 / 509, so the ratios are
// 2.96 / 2.60 rather than 2.69 / 1.99. The forward's choice does not move (both are over 2, the
// most cells a 128-row tile can cost over its 64-row halves); the backward's would, toward
// 128-row tiles for masks whose 128-row schedule costs 2.0-2.6x the cells. Left as measured
// until the 64-row kernels and such a mask (block_sparse at 512K) are timed again on a device.
constexpr double kSm90Forward = 555.0, kMma64Forward = 206.0;
constexpr double kSm90Backward = 391.0, kMma64Backward = 196.0;
// Between the two mma.sync kernels (v3): 128-row tiles share each loaded K/V tile between twice
// the MMAs, worth about a quarter.
constexpr double kMmaWideOverNarrow = 1.25;
// The default's wide_tile_speedup where the Hopper kernels run (the plan's, and the CP model's).
constexpr double kSm90WideTileSpeedup(bool forward) {
  return forward ? kSm90Forward / kMma64Forward : kSm90Backward / kMma64Backward;
}
double wide_tile_speedup(bool forward, const Options& o);

// Whether the forward takes the Hopper pair kernel (forward_sm90.cuh, pair_forward_wanted), given
// the 128-row schedule's idle share, mean and most tiles a row tile: plan() then builds the 64-row
// schedule.
bool pair_forward(const Options& o, double idle_share, double mean_tiles, int32_t max_tiles, int32_t group);
// Whether the forward takes the Hopper kernel with three consumers (forward_sm90.cuh,
// wg3_forward_wanted) at this head dim, given the 128-row schedule's idle share, mean and most tiles
// a row tile: plan() then builds the 192-row schedule.
bool wg3_forward(const Options& o, int32_t head_dim, double idle_share, double mean_tiles, int32_t max_tiles,
                 int32_t group);
// Whether the "forward" option asks for that kernel (sm90_k128_wg3 at head dim 64, sm90_overlap_wg3
// at 128): then on every mask, whatever the dispatch.
bool wg3_forward_forced(const Options& o, int32_t head_dim);
// The kernel (sm90_k128, sm90_k128_wg3 on a 192-row schedule at head dim 64, or sm90_persistent)
// the forward runs on schedule s, which split-KV applies to (split_row_tiles); sm90_auto where
// another kernel runs, the wgmma kernels do not, or the "fwd_split" option is "off". plan() passes
// it on as the "forward" choice with the split schedule, whose statistics would pick otherwise.
ForwardChoice split_grid_kernel(const Options& o, int32_t head_dim, const TileSchedule& s, int32_t group);
// The split the "fwd_split" option forces on schedule s (parts_N: every row tile; long_N:
// long_walk_parts), or empty where it leaves the split to the rule ("auto") or asks for none.
std::vector<int32_t> forced_split_parts(const Options& o, const TileSchedule& s);

// How the Hopper backward puts key tiles into blocks (backward_items), from the "backward" option:
// one a block (sm90_unpaired, sm90_atomic); pairs on causal-like masks (the default); pairs on
// every mask, none split (sm90_paired: the two-tile path even on problems too small to fill the
// GPU, as in the tests).
BwdPairing backward_pairing(const Options& o);
// The Hopper backward's kv heads together (DeviceSchedule::kv_heads_together), from the
// "bwd_order" option: kv_heads_outer (1), kv_heads_inner (heads_kv), kv_heads_2 or kv_heads_4 (2 or
// 4, or what of it divides heads_kv); 0 where it is absent: default_kv_heads_together's choice.
int32_t backward_kv_heads_together(const Options& o, int32_t heads_kv);
// Whether plan() splits the Hopper backward's long walks (split_long_walks), from the "bwd_split"
// option: absent, by its rule (where the default takes the skip kernel, by skip_split_walks's);
// "off", never; "all", every
// plain walk of two or more query tiles into up to kForcedSplitParts parts (the tests' small
// problems then take the split path).
enum class BwdSplit { kAuto, kOff, kAll };
constexpr int32_t kForcedSplitParts = 4;
BwdSplit backward_split(const Options& o);
// Whether plan() matches the backward's 64-key blocks into key tiles (match_key_blocks), from
// the "bwd_match" option: absent, where the default takes the skip kernel and the matched schedule's
// modelled time (skip_backward_cost) is kMatchGain lower; "off", never; "on", on every mask (for the
// tests: blocks of any mask, wherever they are). Only where the Hopper backward runs with the
// "backward" option absent, sm90 or sm90_skip (else off): a matched schedule runs the skip kernel.
enum class BwdMatch { kAuto, kOff, kOn };
BwdMatch backward_match(const Options& o);
// Whether backward_items may take the document-local order, from the "bwd_local" option: absent, by
// its rule (not where the default may take the skip kernel); "off", never; "on", on every unpaired mask.
BwdLocal backward_local(const Options& o);

// Whether plan() gives the Hopper backward first writers of dQ (dq_first_writers), from
// the "dq_first" option: absent, by that function's rule (kTimed); "off", never; "on", on every query
// tile a plain walk visits (kAll: blocks wait for first writers that run beside them; for the tests).
// Only where the kernel without the skip or rotation runs with dQ through TMA (the default's choice
// on plain walks, or "backward": "sm90_noskip"), on 128-key schedules; else kOff.
enum class DqFirst { kOff, kTimed, kAll };
DqFirst backward_dq_first(const Options& o, const TileSchedule& s, const std::vector<BwdItem>& items, int32_t group);

// The launchers' thresholds, here rather than in the .cuh files so that the host tests check the
// builtin masks against the same numbers (test_flex_schedule).
// The default Hopper forward's choice (forward_sm90.cuh): 128-key steps run a computed cell ~6%
// faster than 64-key steps (v11's A/B), but only the 64-key kernel skips the tiles that one
// consumer's 64 rows do not see. Where more than this share of the schedule's tile halves are idle
// (block-sparse masks of 64-token blocks: a third), the 64-key kernel is predicted faster.
// Measured at a third (v12, block_sparse 1.16-1.19x with 64 keys); the threshold itself is the
// prediction from v11's 6%, not timed.
constexpr float kIdleShareFor64Keys = 0.1f;
// ... and among the rest (forward_sm90.cuh), the persistent kernel where row tiles see at most
// kPersistentMeanTiles 64-key tiles on average, or none sees more than kPersistentMaxTiles. It
// saves each row tile its Q load, a lone S and softmax, a lone P V and a block launch (~2.5 us of
// a sliding_window_causal tile's 18), but its steps run ~2% slower than sm90_k128's on the full
// mask (ncu: 4% more instructions, commit 118db5f). Measured at sustained clocks (H100, A/B in turns
// after 300 ms of warm-up, commit 4cc4df6), persistent over sm90_k128 at 2K / 4K / 8K (row tiles of at
// most 32 / 64 / 128 tiles): full +5.6 / +2.4 / -0.5%, causal +6.7 / +3.0 / +0.6%,
// shared_question +8.2 / +3.1 / -1.3%; sliding_window and sliding_window_document (34 tiles at
// 8K-64K) +0.6 to +7%; full at 16K-64K -1.6 to -2%, global_sliding (row tiles of 256-1024) -1.8 to
// +0.4%. (v18 timed causal and shared_question at 4K 1-6% slower persistent, by warm-up count
// alone, at clocks that fell in some cells and not in others.) The mean's threshold covers masks
// of many short row tiles and a few long ones (none among the builtin patterns at 4K-64K).
constexpr float kPersistentMeanTiles = 24.f;
constexpr int32_t kPersistentMaxTiles = 64;
// At head dim 64, where the 128-key kernel is picked, three consumers on 192-row tiles
// (sm90_k128_wg3) run a cell faster than two consumers on 128-row tiles, and plan() takes them on
// every grid. A grid of 192-row tiles is a third shorter, and a rule once kept 128-row tiles where
// the 192-row grid's simulated dispatch (waves of blocks, split-KV's parts included) cost over a
// constant times the cells of the 128-row grid's. Both kernels forced on 124 cells (full and
// causal, 4105-117099 tokens, heads 8:1, 16:16, 32:32 and 64:8; an H200, 62 cells,
// docs/results/2026-11-28-h200-fwd-d64-wg3.md; an H100, 60 cells,
// docs/results/2026-12-07-h100-fwd-d64-wg3.md): the 192-row tiles ran 1.01-1.32x faster on 122,
// and 0.98x and 0.99x on the other two. That held where the simulated dispatch gave the 192-row
// grid 1.12-1.5x the cells (full at 4105-4209 tokens, 8:1: 2 waves of 192-row blocks, or their
// split, against 2 of 128-row ones; 1.01-1.06x faster), where each constant tried (1.08, 1.12,
// 1.15) kept 128-row tiles on cells that ran 1.01-1.25x faster on 192. The waves the simulation
// counts do not show in these short blocks' times.
// At head dim 128, where the persistent kernel is picked (short row tiles: the sliding windows),
// three consumers of 64 rows on 192-row tiles in 64-key steps, each skipping the tiles its rows do
// not see (sm90_overlap_wg3), run the windows faster: measured (H100 and H200, heads 64:8, commit
// 85b8116) 1.013-1.033x the persistent kernel at 16K and 64K, with their grid's last wave in it. That
// grid has no persistent blocks, so plan() takes the 192-row tiles only where their simulated
// dispatch ends within this factor of an even spread of the same cells over the SMs (the persistent
// kernel's): the lowest gain measured (1.013, sliding_window_causal at 16K) times the simulated
// tail it was measured with (that grid ends 1.012x its even spread), rounded down. Heads 64:8:
// 1.001-1.012 at 16K-64K; 8:1 at 16K: 1.09-1.11 (688 blocks, 5.2 waves).
constexpr double kWg3WindowSpeedup = 1.02;
inline bool wg3_window_grid_keeps_gain(const TileSchedule& rows192, int32_t heads_q, int32_t slots) {
  if (slots <= 0) return true;
  const double even = double(simulated_forward_makespan(rows192, heads_q, 1)) / slots;
  return double(simulated_forward_makespan(rows192, heads_q, slots)) <= kWg3WindowSpeedup * even;
}
// But a 192-row tile computes every 64-key tile that any of its rows sees: where the mask's blocks
// follow 128-row lines, a 192-row tile straddles two blocks and computes both blocks' key tiles.
// block_sparse with 128-token blocks at head dim 64 (seed 1212's sweep, H100: 42985 tokens at
// 32:32 with 19% of the blocks kept, 18599 at 8:1 with 38%) ran at 0.45 and 0.54 of its own full
// on 192-row tiles, which compute 1.81x and 1.61x the cells of 128-row tiles (idle share 0.45 and
// 0.38 against 0), while its tiles of 128 rows are all full. So at head dim 64 the 192-row tiles are
// taken only where they compute at most kWg3CellsLimit times the 128-row tiles' cells: the median
// gain a cell of the 192-row tiles in the A/B above (1.111 on the H100's first file, full and
// causal at 4919-22301 tokens, which compute the same cells on both within 1-2%; the range was
// 0.99-1.32). Where they add more cells than that, 128-row tiles are predicted sooner. Over 614
// drawn cells at head dim 64 where the 128-key kernel runs (the sweeps of seeds 7, 91, 1207, 1212,
// 1313, 8080, 8101-8108 and 9191, and 600 more of seed 5151), block_sparse with 128-token blocks
// computes 1.20-1.87x the cells on 192-row tiles (more the fewer blocks are kept), causal_blockwise
// at most 1.135x, every other mask at most 1.08x. Not yet timed on a GPU against the 192-row tiles.
constexpr double kWg3CellsLimit = 1.11;
inline double schedule_cells(const TileSchedule& s) {
  return double(s.full_tiles + s.partial_tiles) * s.tile_rows * kTile;
}
// The rule of the head dim's three-consumer kernel (wg3_forward): head dim 64 where the 192-row
// tiles add at most kWg3CellsLimit of the 128-row tiles' cells (rows128: the 128-row schedule the
// choice was made on), 128 against the persistent kernel's even spread.
inline bool wg3_grid_keeps_gain(int32_t head_dim, const TileSchedule& rows192, const TileSchedule& rows128,
                                int32_t heads_q, int32_t slots) {
  if (head_dim == 64) return schedule_cells(rows192) <= kWg3CellsLimit * schedule_cells(rows128);
  return wg3_window_grid_keeps_gain(rows192, heads_q, slots);
}
// Where the 64-key kernel is picked and the group (heads_q / heads_kv) is even, the pair kernel
// is picked instead: plan() builds 64-row tiles and a block's two consumers take the same 64 rows
// of two query heads that share K and V, so neither has idle tiles to skip (v19).
// Short row tiles with few idle halves take the persistent kernel (at head dim 128 the 192-row
// tiles above, where their grid keeps the gain) even over a tenth idle: a row tile skips
// idle_share x mean_tiles 64-key tile steps in the 64-key kernels, and the persistent kernel saves
// it ~2.5 us of fixed costs, about 2.7 such steps at head dim 128 and 5 at 64 (a step of 128 rows x
// 64 keys at ~4.5 TFLOP/s an SM). Where the skip saves at most kPersistentIdleTiles steps (below
// both) the persistent kernel is predicted faster. Measured (H100, tools/dev/matrices/
// ab-short-fwd.json, seed 101, 30011 and 100003 tokens, heads 32:32 / 64:8 / 8:1, d64 and d128:
// causal_document with 320-480- and 600-1000-token documents, full_document with 350-500, a
// 300-token sliding_window_causal; idle share 0.105-0.182, idle x mean 0.97-1.03 steps): against
// the pair / 64-key kernels, persistent 1.02-1.24x at head dim 64 and the 192-row tiles 1.02-1.18x
// at 128 (the persistent kernel there 0.99-1.16x). block_sparse (a third idle, 10 or more such
// steps) keeps the pair kernel.
constexpr double kPersistentIdleTiles = 2.0;
// The default Hopper forward (the "forward" option absent), from the 128-row schedule.
enum class Sm90Forward { k128, skip64, persistent, pair };
constexpr Sm90Forward default_sm90_forward(double idle_share, double mean_tiles, int32_t max_tiles, int32_t group) {
  const bool short_rows = mean_tiles <= kPersistentMeanTiles || max_tiles <= kPersistentMaxTiles;
  if (idle_share > kIdleShareFor64Keys && !(short_rows && idle_share * mean_tiles <= kPersistentIdleTiles))
    return group % 2 == 0 ? Sm90Forward::pair : Sm90Forward::skip64;
  if (short_rows) return Sm90Forward::persistent;
  return Sm90Forward::k128;
}
// The default Hopper backward's choice (backward_sm90.cuh): the kernel that skips a consumer's
// idle iterations runs its busy ones ~7% slower than the kernel without the branch (2026-11-23,
// full and causal at 16K-32K); it runs where more than this
// share of the schedule's tile halves are idle (block-sparse masks of 64-token blocks: a third; of
// the other builtin masks only some at 1K-2K, test_flex_schedule pins which). The threshold is
// chosen, not timed.
constexpr float kIdleShareForSkip = 0.1f;
// ... and where a block walks at most this many iterations (query tiles x heads of the group, on
// average), or kPlainSkipWalkLimit where every block's walk is plain (one key tile, walked up,
// heads outer). The skip makes an iteration's time depend on the block's mask, so blocks end at
// different times and those that start after the first wave would read query tiles far from where
// the running blocks are, out of L2. Plain walks start where the running blocks of their kv head
// are and go round (backward_sm90.cuh, v20): block_sparse at 64K (6144 iterations) went from 0.79x to 1.27x the
// kernel without the skip (L2 hit rate 63% -> 95%). Other walks keep the limit, from v15's
// block_sparse without that start: 1.11x at 32K (3072 iterations), 0.79x at 64K (6144); not
// timed closer.
constexpr float kSkipWalkLimit = 4096.f;
// Plain walks too have a limit, of this many iterations: past block_sparse at 64K the skip kernel
// falls apart. Measured (H100, commit 29fb46f), block_sparse backward, skip / no skip, TFLOP/s: 64K
// (6146 iterations) 421 / 338, 80K (7682) 231 / 342, 96K 217 / 343, 112K 209 / 342, 128K 216 /
// 338; at 256K the skip kernel's L2 hit rate is 34% (92.6% at 64K) and it reads ~59 KB from
// DRAM an iteration, all of its Q, dO and dQ tiles. Why the rotated start stops keeping the
// blocks together there is not known; the kernel without the skip holds its rate at every length.
constexpr float kPlainSkipWalkLimit = 7000.f;
// ... and where a block's walk passes over at most this many (query head of the group, 64-row query
// tile) places without visiting them: group x (the walk's span - its tiles), mean_span and
// mean_tiles (span_places - mean_walk).
// A rotated walk starts at the place its kv head's running blocks published and skips to the
// next tile it visits, so blocks whose walks visit few of the places drift apart; once the places
// they drift over hold more Q and dO than L2 keeps, each block reads its tiles from DRAM. Measured
// (H100, d128, blocks of 64, ab-bwd-gqa-sparse-groups: groups 1, 2, 4 and 8 over 8 kv heads, kept
// 0.1-0.75, 40000 and 98304 tokens, the skip kernel on matched blocks against the kernel without
// the skip, walks rotated): every cell passing over at most 2014 places held the skip kernel's rate
// (389-517 TFLOP/s, 1.15-1.43x the others); from 2470 up it lost, 1.03x at 2470 (16:8, 98304, kept 0.1)
// and 1.2-1.6x at 2796-9878 (160-252 against 247-306 rotated; 64:8 at kept 0.1 and 0.25, 32:8 at
// 98304); test_flex_schedule prints each cell's count. Between, the skip kernel is unsteady: 64:8 at
// 32768 tokens, kept 0.25 (2280 places with seed 42, 2400 with seed 23) ran it at 415, 309 and 320
// in three runs. MHA keeps the skip to 128K at these fractions (1664 places at 128K, kept 0.1). The
// limit sits at the top of what held in every run: where the walks pass over more, they are split
// by query ranges (range_walks_rule), which ran 0.92-0.99x the skip kernel where it held and
// 1.1-2.5x it where it fell, so a cell moved in error costs far less than one kept in error. A
// short document's walk passes over next to nothing (its span is its document), so the limit leaves
// document masks as they were. Not measured at head dim 64 (half the bytes a place) or on an H200.
constexpr double kSkipPassedPlacesLimit = 2100.;
// The (query head of the group, 64-row query tile) places of a backward walk's range, from its
// first query tile to its last (mean_span) in each head of the group: what
// default_sm90_skip_backward weighs a walk (its mean length) against.
constexpr double span_places(double mean_span, int32_t group) { return mean_span * group; }
constexpr bool default_sm90_skip_backward(double idle_share, double mean_walk, bool plain_walks, double span_places) {
  return idle_share > kIdleShareForSkip && mean_walk <= (plain_walks ? kPlainSkipWalkLimit : kSkipWalkLimit) &&
         span_places - mean_walk <= kSkipPassedPlacesLimit;
}
// Plain walks longer than kPlainSkipWalkLimit on average rotate (kRotate) in the kernel without the
// skip: each block starts where the running blocks of its kv head are, as the skip kernel's do.
// With walks this long, blocks that start their walk from the beginning after the first wave read
// query tiles that the running ones left long ago; at 64K full's backward read 188 GB from DRAM
// (L2 hit rate 91%), rotated 21.6 GB (98.8%). Measured (H100, commit f57293c, rotated against not, in
// turns): full -0.1 / +0.8 / +6.4% at 32K / 64K / 128K (walks of 4096 / 8192 / 16384 iterations),
// block_sparse +2.5 / +4.3% at 80K / 128K; shorter walks lose (sliding_window -1 to -6%, its walks
// of ~150 iterations), the kernel's walkers counting their iterations (32 bytes of spills). The
// limit is the skip kernel's for plain walks: block_sparse's walks rotate at every length, in the
// skip kernel up to 64K and in this one beyond.
// Only alike walks rotate (schedule.hpp, alike_walks). causal_blockwise at 256K / 512K has plain walks
// this long but of 2 to 1349 / 4452 query tiles, and rotated its backward ran at 0.95x / 0.71x the
// kernel without it; full_document at 512K (4 to 2298) at 1.025x, which this rule gives up (H100,
// commit cd142dc). Why unlike walks lose is not known.
// Plain walks that the skip kernel would take but for the places they pass over
// (kSkipPassedPlacesLimit) are split by query ranges by default (range_walks_rule); with that off
// ("bwd_ranges": 0) they rotate, alike or not, as the skip kernel would have rotated them: on
// those cells (block-sparse walks of many lengths) the rotated kernel without the skip ran 0.96-1.30x
// the plain one, 1.03-1.58x the skip kernel (H100, same run).
constexpr bool default_sm90_rotate_backward(double idle_share, double mean_walk, bool plain_walks, bool alike_walks,
                                            double span_places) {
  if (!plain_walks) return false;
  if (mean_walk > kPlainSkipWalkLimit) return alike_walks;
  return idle_share > kIdleShareForSkip && span_places - mean_walk > kSkipPassedPlacesLimit;
}
// The default Hopper backward kernel (the "backward" option absent), from the backward schedule: the
// skip kernel (its plain walks rotated), the kernel without the skip with rotated plain walks, or
// the kernel without either. The two conditions never hold together (plain walks: at most / over
// kPlainSkipWalkLimit; other walks never rotate).
enum class Sm90Backward { noskip, rotate, skip };
constexpr Sm90Backward default_sm90_backward(double idle_share, double mean_walk, bool plain_walks, bool alike_walks,
                                             double span_places) {
  if (default_sm90_skip_backward(idle_share, mean_walk, plain_walks, span_places)) return Sm90Backward::skip;
  if (default_sm90_rotate_backward(idle_share, mean_walk, plain_walks, alike_walks, span_places))
    return Sm90Backward::rotate;
  return Sm90Backward::noskip;
}

// The Hopper backward kernel a schedule runs with under the "backward" option v (sm90_auto where
// absent; sm90_atomic is the kernel without the skip, its dQ through atomics): the variant's, else the
// default's rule; a matched schedule always runs the skip kernel. The launcher
// (backward_sm90.cuh, sm90_backward_kernel) and plan() (backward_dq_first) both ask this.
inline Sm90Backward sm90_backward_for(BackwardChoice v, double idle_share, double mean_walk, bool plain_walks,
                                      bool alike_walks, bool matched, double span_places, bool range_walks = false) {
  if (v == BackwardChoice::sm90_atomic) return Sm90Backward::noskip;
  if (v == BackwardChoice::sm90_skip || matched) return Sm90Backward::skip;
  if (v == BackwardChoice::sm90_noskip) return Sm90Backward::noskip;
  if (v == BackwardChoice::sm90_rotate) return plain_walks ? Sm90Backward::rotate : Sm90Backward::noskip;
  if (range_walks) return Sm90Backward::skip;  // range_walks_rule: the skip kernel on the ranges' parts
  return default_sm90_backward(idle_share, mean_walk, plain_walks, alike_walks, span_places);
}
// Whether dQ's first writers (BwdParams::dq_first) run in that kernel: the one without the skip or
// rotation, with dQ through TMA (not sm90_atomic).
inline bool dq_first_runs_in(BackwardChoice v, Sm90Backward kernel) {
  return v != BackwardChoice::sm90_atomic && kernel == Sm90Backward::noskip;
}

// The default order of the Hopper backward's blocks (the "bwd_order" option absent): kv_heads_together's
// rule, but g = 1 where the walks rotate (the skip kernel's, and long plain walks), starting where
// their kv head's running blocks are: block_sparse lost 3 / 9% with all kv heads inner at 4K / 8K,
// where the simulation promised +7 / +2% (H100, commit f57293c).
inline int32_t default_kv_heads_together(const TileSchedule& s, const std::vector<BwdItem>& items, int32_t heads_kv,
                                         int32_t group, int32_t slots) {
  if (default_sm90_backward(idle_share(s), mean_tiles(s) * group, plain_walks(items), alike_walks(items),
                            span_places(mean_span(s), group)) != Sm90Backward::noskip)
    return 1;
  return kv_heads_together(items, heads_kv, group, slots);
}

// The backward schedule as plan() makes it: build_adaptive_schedule's, or (`match`, backward_match)
// its key blocks matched into key tiles (build_matched_schedule) where the default takes the skip
// kernel on it and the match lowers the modelled time (skip_backward_cost, its blocks on `slots` SMs)
// by kMatchGain, or everywhere (kOn). test_flex_schedule checks the builtin masks' choices through
// this function.
inline TileSchedule default_backward_schedule(const lca_mask& mask, double wide_speedup, int32_t group, int32_t heads_kv,
                                              int32_t slots, BwdMatch match) {
  TileSchedule s = build_adaptive_schedule(mask, /*by_query=*/false, kBwdKeys, wide_speedup);
  if (match == BwdMatch::kOff || s.tile_rows != kBwdKeys) return s;
  if (match == BwdMatch::kAuto && !default_sm90_skip_backward(idle_share(s), mean_tiles(s) * group, /*plain_walks=*/true,
                                                               span_places(mean_span(s), group)))
    return s;
  const TileSchedule narrow = build_schedule(mask, /*by_query=*/false, kTile);
  std::vector<int32_t> blocks = match_key_blocks(narrow);
  if (blocks.empty()) return s;
  TileSchedule matched = build_matched_schedule(narrow, std::move(blocks));
  if (match == BwdMatch::kOn ||
      skip_backward_cost(matched, heads_kv, slots) <= (1.0 - kMatchGain) * skip_backward_cost(s, heads_kv, slots))
    return matched;
  return s;
}

// On causal-like masks backward_items pairs key tiles, or (pairs that would leave a wave part
// empty) gives them single but walking down with heads inner, which split_long_walks does not split:
// their reads stay in L2. Where all the blocks fit in one wave (blocks x kv heads <= slots), the time
// is the longest walk, and plain single tiles, their long walks split, would spread it over the idle
// SMs. There this gives those (backward_items unpaired, then split_long_walks) where their simulated
// dispatch is kUnpairGain sooner than the blocks given (`blocks`); else nothing (empty). Measured
// (H100, heads 64:8, commit 10d4683), causal backward, unpaired and split against the default before: 1.73x
// at 1K (simulated 2.06x), 1.27x at 2K (1.48x); at 4K, where the simulation gives 1.02x, unpaired
// lost (0.69x, 0.97x with every walk split in 4): there unpaired blocks lose the order of their reads.
// The gain is chosen, not tuned.
constexpr double kUnpairGain = 0.2;
inline std::vector<BwdItem> unpaired_under_a_wave(const TileSchedule& s, const std::vector<BwdItem>& blocks,
                                                  int32_t heads_kv, int32_t group, int32_t slots, BwdLocal local) {
  // Already plain single tiles (split or not): nothing to unpair.
  const bool single_already =
      std::all_of(blocks.begin(), blocks.end(), [](const BwdItem& it) { return it.tiles[1] < 0 && it.flags == 0; });
  if (slots <= 0 || blocks.empty() || single_already || static_cast<int64_t>(blocks.size()) * heads_kv > slots) return {};
  std::vector<BwdItem> single = split_long_walks(backward_items(s, heads_kv, group, slots, BwdPairing::kNone, local),
                                                 heads_kv, group, slots);
  return double(simulated_default_makespan(single, heads_kv, group, slots)) * (1.0 + kUnpairGain) <=
                 double(simulated_default_makespan(blocks, heads_kv, group, slots))
             ? single
             : std::vector<BwdItem>{};
}

// The document-local order (backward_items) does not split its walks, and the longest documents'
// walks set the time while SMs idle beside them: under two waves at any length, and over more
// where a few documents are far longer than the rest (prolong64k documents at 55011 tokens, heads
// 8:1: 430 blocks, simulated 0.64 of the bound; it ran 0.74x cudnn_sdpa in a sweep). There plain
// walks, longest first and split (split_long_walks), take its place where split_long_walks does
// split some and their simulated dispatch is kUnpairGain sooner (local_walks_give_way): under two
// waves always, over two waves where every block of the local order is a document-local walk. Only
// the split is the gain: plain walks lose the L2 reuse of a document's query tiles, which the
// simulation does not see, so without a split the local order stays; and where the local order
// holds plain walks of its own (a question that every answer sees, split there too) it stays over
// two waves. Measured (H100):
// - tools/dev/matrices/ab-short-bwd.json (seed 101, causal_document with 1100-2400-token documents,
//   d128, heads 8:1): at 20011 tokens (157 blocks, 1.2 waves; simulated 1.50x) plain split walks ran
//   1.27x the local order, which trailed cudnn_sdpa (0.83x); at 60013 (469 blocks, 3.6 waves;
//   simulated 1.28x, no walk split) plain walks ran 0.72x it, and with 64:8 (1256-3752 blocks)
//   0.64-0.72x;
// - tools/dev/matrices/ab-short-bwd-confirm.json (seed 202, causal_document with documents of
//   800-1600, 1100-2400 and 2000-4000 tokens, prefix_lm_document with 1000-3000, d64 and d128):
//   at 18001 and 24007 tokens (202-783 blocks, walks split) 1.15-1.8x the local order; at 33001
//   (258 blocks, 1.95 waves) plain walks that no split reached ran 1.14-1.30x it at d64 but
//   0.83-0.93x at d128, so without a split the local order stays;
// - over two waves, tools/dev/matrices/ab-bwd-local-split*.json (seed 611: causal_document with
//   prolong64k and pile documents, prefix_lm_document with prolong512k, shared_question with
//   prolong512k and 300-900-token documents; 7001-70001 tokens, heads 8:1, 16:2 and 64:8, d64 and
//   d128; and the builtin masks at 131072 tokens, 8:1, seed 42), the local order forced against
//   forced off in one run: the 20 cells this rule moves ran 1.54-2.10x at d64 and 1.12-1.58x at
//   d128 (2.4-4.1 waves at 8:1 and 16:2; shared_question at 7001 tokens with 64:8, 3.3 waves). The
//   shared_question cells whose question walks are plain in the local order stay in it: over two
//   waves split plain walks lost on 25 of their 34 cells (0.69-0.79x with 64:8 at d128, 0.80-0.90x
//   at d64) and gained on 9 (1.07-1.50x, 8:1 and 16:2, mostly d64): given up, not lost.
inline bool local_walks_give_way(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t slots) {
  if (slots <= 0 || !local_walks(items)) return false;
  const bool only_local =
      std::all_of(items.begin(), items.end(), [](const BwdItem& it) { return (it.flags & kWalkLocal) != 0; });
  return only_local || static_cast<int64_t>(items.size()) * heads_kv <= 2 * int64_t{slots};
}

// The skip kernel's plain walks were never split (split_long_walks): its blocks start where the
// running blocks of their kv head are, which keeps their reads in L2 over many waves. But where a few
// walks are far longer than the rest, they set the time while the other SMs idle: under a wave (one
// or two kv heads at short lengths, short documents) the longest documents' walks, and at any length
// a short question that every answer sees (shared_question), whose few key tiles walk every query
// tile while the others walk a dozen. There split_long_walks's parts (the skip kernel runs them, as
// it runs bwd_split's) take their place where they simulate kUnpairGain sooner, as
// unpaired_under_a_wave gives them to the kernel without the skip; only where the split walks still
// take the skip kernel (its limit for walks that are not plain). Documents of alike walks over a
// wave or more simulate no gain and stay whole. Measured (H100, b=1, bf16):
// - chosen on tools/dev/matrices/ab-bwd-skip-split-wave.json (seed 303, d64 and d128), every plain
//   walk split in up to 4 (bwd_split all) against none: causal_document with 300-700-token documents
//   and prefix_lm_document with 500-1000 at 6007 / 9088 / 14011 tokens, 8:1 (47-110 blocks)
//   1.02-2.49x and 16:2 at 6007 (94 blocks) 1.33-1.66x, which trailed cudnn_sdpa by up to 1.6x;
//   16:2 at 9088 (142 blocks) 1.06-1.13x and at 14011 (220; this rule's split simulates no gain there)
//   0.84-0.87x;
// - confirmed under a wave on ab-bwd-skip-split-wave-confirm.json (seed 404, 5003 / 7777 / 12011
//   tokens, causal_document with 250-650 and 400-900-token documents, prefix_lm_document with
//   300-800, 8:1 and 16:2, d64 and d128): the 26 cells split ran 1.13-2.35x the walks whole
//   (geomean 1.63x) and ahead of cudnn_sdpa (0.71-0.86x its time), the 18 other skip cells unchanged;
// - over many waves on ab-bwd-skip-split-long.json (seed 505, d128): shared_question with a
//   300-450-token question at 9088-75845 tokens ran 1.4-1.6x at 64:8 (4-36 waves), 4.6-5.9x at 16:2
//   and 8.4-10.4x at 8:1 (it was 0.04 of full at 75845 tokens, 8:1, in a sweep); causal_document with
//   300-700-token documents split at 8:1 only (9088: 1.44x; 20011, 1.2 waves: 1.07x), unchanged elsewhere.
inline std::vector<BwdItem> skip_split_walks(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group,
                                             int32_t slots, double idle, double walk, double places) {
  if (slots <= 0 || items.empty() || !plain_walks(items) ||
      !default_sm90_skip_backward(idle, walk, /*plain_walks=*/false, places))
    return {};
  std::vector<BwdItem> split = split_long_walks(items, heads_kv, group, slots);
  if (split.size() == items.size()) return {};
  return double(simulated_default_makespan(split, heads_kv, group, slots)) * (1.0 + kUnpairGain) <=
                 double(simulated_default_makespan(items, heads_kv, group, slots))
             ? split
             : std::vector<BwdItem>{};
}

// Walks split by query ranges (split_by_ranges) where plain walks pass over more than
// kSkipPassedPlacesLimit places, however long the walks (a part's walk is a range's), and either over
// a tenth of the tile parts are idle (where the skip kernel would run but for those places) or the
// walks visit their spans evenly (visit_concentration at most kEvenVisits). The blocks of a range
// run together (one kv head after another), each part a walk from its range's start, and the skip
// kernel runs them. A range holds as many (query head, query tile) places as L2 holds their Q, dO
// and dQ (range_places_for: 64 rows x head_dim x (2 + 2 + 4) bytes a place; 800 places on an H100
// at head dim 128), so that the blocks of a range read one another's tiles from L2 however far
// apart their walks drift. Measured (H100, tools/dev/matrices/ab-bwd-gqa-sparse-ranges.json, seed
// 29, d128, blocks of 64, 40000 and 98304 tokens, groups 1-8 over 8 kv heads, kept 0.1-0.5; ranges of
// 256 / 512 / 1024 / 2048 places): on the 8 cells the rule moves, ranges of 512 and 1024 places ran
// 352-449 TFLOP/s (1.12-2.40x the rotated kernel without the skip that ran there before), 256 lost
// up to 10% to them, and 2048 (128 MB of a range) fell to 263-299 at 98304 with groups 4 and 8.
// Where the skip kernel held (at most 2014 places passed over) ranges ran 0.92-1.0x of it, so the
// rule leaves those. The kernel without the skip on ranges ran 0.67-0.80x the skip kernel on them.
// Without idle parts the same drift happens: block_sparse on blocks of 128 (tiles filled, walks of
// the kernel without the skip, not rotated) ran its GQA backward at 303-390 TFLOP/s at 64K-128K
// against 467-541 at 32K in paper-sparse. Split by ranges wherever the walks pass over more than the
// limit, measured against the walks kept whole ({"bwd_ranges": 0}), H100, d128 unless named, in one
// run each (tools/dev/matrices/ab-bwd-ranges-full-tiles*.json, docs/results/2026-11-28-h100-bwd-ranges-full-tiles.md):
// - seed 5150 at 45237 / 81791 / 116352 tokens, 64:8 and 8:1 (and d64 at 60013 / 128000): block_sparse
//   blocks of 128, kept 0.15-0.7, 1.02-1.66x; causal_blockwise 0.98-1.34x; global_sliding with wide
//   windows 1.01-1.07x, but with 882 global tokens and a window of 296 at 8:1 0.72x / 0.89x / 0.94x
//   (64:8 0.98-1.43x). Those walks send most of their visits to the global tokens' query tiles, which
//   every walk shares and L2 keeps anyway; split, all of a range's parts add into the same few dQ
//   tiles at once. visit_concentration tells them apart: 3.6-8.4 there, 0.97-1.0 on block_sparse,
//   0.8-1.3 with wide windows, 1.2-1.7 on causal_blockwise with chatqa documents, 2.4-8.4 with
//   pile or short uniform ones (which gained 1.03-1.34x and now stay whole: given up, not lost).
//   kEvenVisits = 2 is twice an even spread, set between those groups, not fitted to a cell.
// - confirmed on seed 9393 at 50001 / 73728 / 104729 tokens, 64:8 and 8:1, on the cells the rule
//   moves: block_sparse kept 0.2 and 0.55 1.01-1.70x; causal_blockwise with chatqa documents
//   1.05-1.12x; global_sliding with a window of 5000 1.02-1.04x, with 6000 or 9000 global tokens and
//   a window of 400 (concentration 1.2-1.8) 1.00-1.08x, with 60 global tokens and a window of 1000
//   0.94-1.02x (0.94 on 2 of 6 cells; the cells the rule leaves ran 0.98-1.02x, one 1.07x, in the
//   same run): the one loss this rule is known to take.
// - causal_blockwise (the long-512k preset's documents, seed 42), 64:8: 64K 536 against 470, 256K
//   526 against 373, 512K 526 against 318 TFLOP/s.
// And only where most reuses of a query tile would miss L2 (far_reuse_share over kFarReuses: the
// places walked since its last visit, key tiles in order, exceed the range's places; a walk's places
// counted for every query head of its kv head and every kv head that goes out with it, heads inner,
// as the walks whole would): the point of ranges. global_sliding with a few global tokens beside a
// narrow window passed the rule above by its idle tile parts (18 global tokens, window 294: idle 0.13), but its walks reuse the global rows'
// tile at every key tile and their window's tiles at the next few (far share 0.15-0.20 at any
// length): split by ranges, every key tile's walk became a part on the global rows' tile and one on
// its window, a range's parts adding into those rows' dQ together, and the backward ran 4.4x slower
// at 39936 tokens, 8:1, d64 on an H200 (48 against 209 TFLOP/s whole; tools/dev/matrices/
// ab-bwd-global-sliding.json). Where ranges were measured to pay the share is 0.97-1.0 (block_sparse,
// causal_blockwise at 512K, global_sliding with a window of 5000). Against the rule before on two
// seeded draws (6161, 7272; global_sliding, block_sparse, causal_blockwise; 8:1 to 64:8, d64 and
// d128, 30717-87897 tokens) it changed 19 of 96 cells, all global_sliding: 0.983-2.23x, geomean 1.20
// (docs/results/2026-11-28-h200-bwd-far-reuse.md); at 64:8 with long windows (73 global tokens,
// window 2232, 4 kv heads together) counting the kv heads keeps ranges there, where they ran 1.70x
// the walks whole.
constexpr double kEvenVisits = 2.0;
constexpr double kFarReuses = 0.5;
constexpr int64_t kRangeBytesPerRow = 2 + 2 + 4;  // Q, dO (16-bit) and dQ (fp32) a row and head dim
constexpr int32_t range_places_for(int64_t l2_bytes, int32_t head_dim) {
  const int64_t places = l2_bytes / (int64_t{kTile} * head_dim * kRangeBytesPerRow);
  return places < 64 ? 64 : static_cast<int32_t>(places);
}
constexpr int32_t kRangePlaces = range_places_for(int64_t{50} << 20, 128);  // an H100's 50 MiB at head dim 128: 800
constexpr bool range_walks_rule(double idle_share, double mean_walk, bool plain_walks, double span_places,
                                double visit_concentration) {
  return plain_walks && span_places - mean_walk > kSkipPassedPlacesLimit &&
         (idle_share > kIdleShareForSkip || visit_concentration <= kEvenVisits);
}
constexpr int32_t range_tiles(int32_t places, int32_t group) { return places / group > 1 ? places / group : 1; }

// The Hopper backward's blocks and their order as plan() makes them, before place_split_walks:
// backward_items, in the document-local order (`local`, option bwd_local) but not where the skip
// kernel may run (its plain walks rotate instead); on 128-key schedules, long walks split (`split`,
// option bwd_split), where the default takes the skip kernel only as skip_split_walks gives them;
// where every choice is the default's, causal-like blocks that fit in one wave as
// unpaired_under_a_wave gives them; kv heads
// together by default_kv_heads_together, or `together` where over 0 (option bwd_order). test_flex_schedule
// checks the builtin masks' choices through this same function.
// `ranges` (option bwd_ranges): places a range, where over 0; 0 never; below 0 by range_walks_rule
// with rule_places a range (range_places_for this GPU's L2 and the head dim).
struct BackwardBlocks {
  std::vector<BwdItem> items;
  int32_t kv_heads_together = 1;
  int32_t range_places = 0;  // the places of a range where the walks are split by ranges, else 0
};
inline BackwardBlocks default_backward_blocks(const TileSchedule& s, int32_t heads_kv, int32_t group, int32_t slots,
                                              BwdPairing pairing, BwdLocal local = BwdLocal::kAuto,
                                              BwdSplit split = BwdSplit::kAuto, int32_t together = 0,
                                              int32_t ranges = -1, int32_t rule_places = kRangePlaces) {
  const double idle = idle_share(s), walk = mean_tiles(s) * group, places = span_places(mean_span(s), group);
  // A matched schedule runs the skip kernel whatever its idle share: no split, g = 1.
  const bool matched = !s.key_blocks.empty();
  const bool skip_possible = matched || default_sm90_skip_backward(idle, walk, /*plain_walks=*/true, places);
  BackwardBlocks b;
  b.items = backward_items(s, heads_kv, group, slots, pairing,
                           local == BwdLocal::kAuto && skip_possible ? BwdLocal::kOff : local);
  if (local == BwdLocal::kAuto && split == BwdSplit::kAuto && s.tile_rows == kBwdKeys &&
      local_walks_give_way(b.items, heads_kv, slots)) {
    std::vector<BwdItem> plain = backward_items(s, heads_kv, group, slots, pairing, BwdLocal::kOff);
    const std::vector<BwdItem> split_plain = split_long_walks(plain, heads_kv, group, slots);
    if (split_plain.size() > plain.size() &&
        double(simulated_default_makespan(split_plain, heads_kv, group, slots)) * (1.0 + kUnpairGain) <=
            double(simulated_default_makespan(b.items, heads_kv, group, slots)))
      b.items = std::move(plain);  // split below, as any plain walks
  }
  if (matched) {
    b.kv_heads_together = together > 0 ? together : 1;
    return b;
  }
  if (s.tile_rows == kBwdKeys && split != BwdSplit::kAll) {
    // visit_concentration walks the runs again: only where it decides.
    bool by_rule = ranges < 0 && plain_walks(b.items) && places - walk > kSkipPassedPlacesLimit &&
                   range_walks_rule(idle, walk, true, places, idle > kIdleShareForSkip ? 0.0 : visit_concentration(s));
    if (by_rule) {
      // Whole, the walks go out g kv heads together, heads inner: a query tile's next visit in its
      // head comes g walks later.
      const int32_t g = together > 0 ? together : default_kv_heads_together(s, b.items, heads_kv, group, slots);
      by_rule = far_reuse_share(s, group * g, rule_places) > kFarReuses;
    }
    const int32_t per_range = ranges > 0 ? ranges : (by_rule ? rule_places : 0);
    if (per_range > 0) {
      b.items = split_by_ranges(s, b.items, group, range_tiles(per_range, group));
      b.range_places = per_range;
      b.kv_heads_together = together > 0 ? together : 1;
      return b;
    }
  }
  if (s.tile_rows == kBwdKeys) {
    if (split == BwdSplit::kAll)
      b.items = split_items(b.items, group, 0, kForcedSplitParts);
    else if (split == BwdSplit::kAuto && !default_sm90_skip_backward(idle, walk, plain_walks(b.items), places))
      b.items = split_long_walks(b.items, heads_kv, group, slots);
    else if (split == BwdSplit::kAuto) {
      if (std::vector<BwdItem> parts = skip_split_walks(b.items, heads_kv, group, slots, idle, walk, places);
          !parts.empty())
        b.items = std::move(parts);
    }
  }
  if (pairing == BwdPairing::kAuto && split == BwdSplit::kAuto && together <= 0 && !skip_possible)
    if (std::vector<BwdItem> single = unpaired_under_a_wave(s, b.items, heads_kv, group, slots, local); !single.empty())
      b.items = std::move(single);
  b.kv_heads_together = together > 0 ? together : default_kv_heads_together(s, b.items, heads_kv, group, slots);
  return b;
}

// dtype: lca_dtype (bf16 or f16); head_dim 64 or 128. Launch errors throw lca::Error.
void launch_forward(int32_t dtype, int32_t head_dim, const FwdParams& p, void* stream);
void launch_backward(int32_t dtype, int32_t head_dim, const BwdParams& p, void* stream);

// What launch_forward / launch_backward run with these parameters (choice.cu), for flex_flash's
// plan_info: the kernel, by the value of the "forward" / "backward" option that forces it, and
// whether dQ's first writers run.
const char* launched_forward_kernel(const FwdParams& p, int32_t head_dim);
const char* launched_forward_row_sums(const FwdParams& p, int32_t head_dim);
const char* launched_backward_kernel(const BwdParams& p);
bool launched_dq_first_writers(const BwdParams& p);
bool launched_dv_first(const BwdParams& p);

}  // namespace lca_flex_flash
