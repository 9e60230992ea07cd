// The local kernel's work in tiles: what a tiled flash kernel (flex_flash's schedule, 128-row
// tiles of 64 columns) computes for a mask, and its simulated time on the GPU's SMs in tile units.
// Used by the CP scaling model (cp_model.cpp) for every local kernel call, and by its tests.
// Rule: a unit is only comparable within one pass: calibrate forward and backward each against a
// measured call of the same pass (KernelRate::unit_ms).
#pragma once

#include <lca/abi.h>

#include <cstdint>

namespace lca::core::model {

// The tile rows of the kernels the model stands for: the Hopper forward's query tiles and the
// backward's key tiles (flex_flash kernels.hpp, 128 unless a schedule of 64 computes clearly less).
inline constexpr int32_t kModelTileRows = 128;

struct TileCount {
  int64_t tiles = 0;      // (row tile, 64-column tile) pairs the schedule computes, a head
  int64_t partial = 0;    // of those, the ones the mask fills only in part
  int64_t row_tiles = 0;  // row tiles with at least one tile: each pays the block's fixed cost
};

// Forward: rows are queries; backward: rows are keys. The mask must be valid (slices in bounds).
TileCount count_tiles(const lca_mask& mask, bool backward);

// The kernel's simulated makespan on `slots` SMs (flex_flash's dispatch simulations: a block a
// row tile and head, each costing its tiles plus the block's fixed cost), in that pass's units.
// heads_together: the forward's heads go out in the groups plan() picks (forward_heads_together);
// false: heads outer, as flex_flash ran before it grouped them. fwd_split: the forward's row tiles
// split as plan() splits them at this head dim (split-KV: forward_split_parts), each part a block.
// The backward's blocks are the ones plan() makes by default; l2_bytes (the GPU's L2; 0: an H100's
// 50 MiB) sets where its walks split by query ranges. 0 for a mask with no cells.
double tile_units(const lca_mask& mask, bool backward, int heads_q, int heads_kv, int slots,
                  bool heads_together = true, bool fwd_split = false, int head_dim = 128, int64_t l2_bytes = 0);

// The mask's cells over the cells of the 128-row tiles the schedule computes (count_tiles: a
// tile of 128 x 64 cells, partial ones whole); 0 for a mask with no cells.
double tile_fill(const lca_mask& mask, bool backward);

// flex_flash's predicted share of its own full at the same length, heads, head dim and pass: the
// mask's cells over full's (the FLOPs a TFLOP/s counts) times full's simulated time over the
// mask's (tile_units with the plan's head order and forward split). It is the schedule's own
// account of a cell: the tiles it computes, partial ones as whole, each row tile's fixed cost and
// the dispatch of its blocks on the SMs; not the slower rate of partial tiles, L2 or the kernels'
// differences. 0 where the mask has no cells. `full` must have the mask's lengths.
double own_full_share(const lca_mask& mask, const lca_mask& full, bool backward, int heads_q, int heads_kv, int slots,
                      int head_dim = 128, int64_t l2_bytes = 0);

}  // namespace lca::core::model
