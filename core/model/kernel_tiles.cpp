// Tiles and simulated time of a local kernel call, from flex_flash's own host-side schedule
// (plugins/kernels/flex_flash/schedule.cpp, compiled into the core library: plain C++, no CUDA),
// so that the model counts the tiles the kernel walks, partial ones at chunk boundaries included.
#include "core/model/kernel_tiles.hpp"

#include "core/mask/mask_source.hpp"

#include "plugins/kernels/flex_flash/kernels.hpp"
#include "plugins/kernels/flex_flash/schedule.hpp"

#include <algorithm>

namespace lca::core::model {

namespace ff = lca_flex_flash;

TileCount count_tiles(const lca_mask& mask, bool backward) {
  TileCount c;
  if (mask.num_slices == 0 || mask.seqlen_q == 0 || mask.seqlen_k == 0) return c;
  const ff::TileSchedule s = ff::build_schedule(mask, /*by_query=*/!backward, kModelTileRows);
  c.tiles = s.full_tiles + s.partial_tiles;
  c.partial = s.partial_tiles;
  c.row_tiles = s.busy_tiles;
  return c;
}

double tile_units(const lca_mask& mask, bool backward, int heads_q, int heads_kv, int slots, bool heads_together,
                  bool fwd_split, int head_dim, int64_t l2_bytes) {
  if (mask.num_slices == 0 || mask.seqlen_q == 0 || mask.seqlen_k == 0) return 0.0;
  if (backward) {
    // The backward's blocks as plan() makes them by default (kernels.hpp: default_backward_schedule
    // and default_backward_blocks): key tiles paired on causal-like masks, long walks split, walks
    // split by query ranges where most reuses are far (the range's places from this GPU's L2),
    // matched key blocks, the kv heads that go out together; one grid over the kv heads.
    const int32_t group = heads_q / heads_kv;
    const ff::TileSchedule s = ff::default_backward_schedule(mask, ff::kSm90WideTileSpeedup(false), group, heads_kv,
                                                             slots, ff::BwdMatch::kAuto);
    if (s.full_tiles + s.partial_tiles == 0) return 0.0;
    const int32_t rule_places = l2_bytes > 0 ? ff::range_places_for(l2_bytes, head_dim) : ff::kRangePlaces;
    const ff::BackwardBlocks b = ff::default_backward_blocks(s, heads_kv, group, slots, ff::BwdPairing::kAuto,
                                                             ff::BwdLocal::kAuto, ff::BwdSplit::kAuto, 0, -1, rule_places);
    return double(ff::simulated_order_makespan(b.items, heads_kv, group, slots, b.kv_heads_together));
  }
  ff::TileSchedule s = ff::build_schedule(mask, /*by_query=*/true, kModelTileRows);
  if (s.full_tiles + s.partial_tiles == 0) return 0.0;
  // The forward's blocks in the order plan() gives them: the heads in the groups its own simulated
  // dispatch picks (forward_heads_together), so that a call whose long row tiles would end the grid
  // alone heads outer starts them early, as the kernel does.
  s.heads_together = heads_together ? ff::forward_heads_together(s, heads_q, slots) : 1;
  // Split-KV as plan() takes it: a split row tile's parts are blocks of their own, their heads in
  // the groups plan() picks again on the split schedule (the pass that combines them is left out:
  // a few rows' O and LSE).
  if (fwd_split)
    if (const std::vector<int32_t> parts = ff::forward_split_parts(s, heads_q, slots, head_dim); ff::most_parts(parts) > 1)
      return double(ff::simulated_forward_makespan(
          heads_together ? ff::split_schedule(s, parts, heads_q, slots) : ff::split_row_tiles(s, parts), heads_q, slots));
  return double(ff::simulated_forward_makespan(s, heads_q, slots));
}

double tile_fill(const lca_mask& mask, bool backward) {
  const TileCount c = count_tiles(mask, backward);
  return c.tiles > 0 ? double(mask_area(mask)) / (double(c.tiles) * kModelTileRows * ff::kTile) : 0.0;
}

double own_full_share(const lca_mask& mask, const lca_mask& full, bool backward, int heads_q, int heads_kv, int slots,
                      int head_dim, int64_t l2_bytes) {
  const double cells = double(mask_area(mask)), full_cells = double(mask_area(full));
  if (cells <= 0 || full_cells <= 0) return 0.0;
  const double units = tile_units(mask, backward, heads_q, heads_kv, slots, true, true, head_dim, l2_bytes);
  const double full_units = tile_units(full, backward, heads_q, heads_kv, slots, true, true, head_dim, l2_bytes);
  if (units <= 0 || full_units <= 0) return 0.0;
  return cells / full_cells * (full_units / units);
}

}  // namespace lca::core::model
