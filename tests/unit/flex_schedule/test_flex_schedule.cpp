// flex_flash's tile schedule against the slice definition (lca::slice_contains): for the 14
// builtin patterns at odd lengths and for random masks of disjoint slices of every type (rows
// shared by several slices, empty slices, q != k lengths), in the forward (rows = queries) and
// backward (rows = keys) orientations, with 64- and 128-row tiles. Also: full tiles really are full, every tile is listed
// at most once, the launch order is a permutation sorted by work, and the Hopper backward's blocks
// (backward_items) hold every key tile exactly once.
#include "random_slices.hpp"
#include "builtin_fixture.hpp"

#include "plugins/kernels/flex_flash/kernels.hpp"
#include "plugins/kernels/flex_flash/schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <cstdio>
#include <tuple>

namespace lca::test {
namespace {

using lca_flex_flash::backward_items;
using lca_flex_flash::build_schedule;
using lca_flex_flash::BwdItem;
using lca_flex_flash::BwdPairing;
using lca_flex_flash::kWalkDown0;
using lca_flex_flash::kWalkDown1;
using lca_flex_flash::kWalkHeadsInner;
using lca_flex_flash::kTile;
using lca_flex_flash::kFullHalf;
using lca_flex_flash::kIdleHalf;
using lca_flex_flash::schedule_visible;
using lca_flex_flash::TileSchedule;

// The default Hopper forward that a 128-row schedule calls for with this group (plan()'s first
// choice, default_sm90_forward).
lca_flex_flash::Sm90Forward default_forward(const TileSchedule& s128, int32_t group) {
  return lca_flex_flash::default_sm90_forward(lca_flex_flash::idle_share(s128), lca_flex_flash::mean_tiles(s128),
                                              s128.max_tiles, group);
}

bool covered(const lca_mask& m, int64_t q, int64_t k) {
  for (int64_t i = 0; i < m.num_slices; ++i)
    if (lca::slice_contains(m.slices[i], q, k)) return true;
  return false;
}

// Every row tile of s in exactly one item, in one slot of it; the second slot empty or a tile.
void expect_items_partition(const TileSchedule& s, const std::vector<BwdItem>& items) {
  std::vector<int> seen(static_cast<size_t>(s.row_tiles), 0);
  for (const BwdItem& it : items) {
    ASSERT_GE(it.tiles[0], 0);
    ASSERT_LT(it.tiles[0], s.row_tiles);
    ASSERT_GE(it.tiles[1], -1);
    ASSERT_LT(it.tiles[1], s.row_tiles);
    ASSERT_EQ(it.flags & ~(kWalkDown0 | kWalkDown1 | kWalkHeadsInner | lca_flex_flash::kWalkLocal), 0);
    for (int i = 0; i < 2; ++i) {
      const int32_t t = it.tiles[i];
      if (t < 0) {
        ASSERT_EQ(it.query_tiles[i], 0);
        continue;
      }
      ++seen[static_cast<size_t>(t)];
      int32_t query_tiles = 0;
      for (int32_t r = s.run_offsets[t]; r < s.run_offsets[t + 1]; ++r) query_tiles += s.runs[r].end - s.runs[r].begin;
      ASSERT_EQ(it.query_tiles[i], query_tiles) << "row tile " << t;
    }
  }
  for (int32_t t = 0; t < s.row_tiles; ++t) ASSERT_EQ(seen[static_cast<size_t>(t)], 1) << "row tile " << t;
}

// Every query tile of a key tile, in walk order: (tile, bitmask index or -1, half bits).
std::vector<std::tuple<int32_t, int32_t, int32_t>> walk_of(const TileSchedule& s, int32_t t) {
  std::vector<std::tuple<int32_t, int32_t, int32_t>> v;
  for (int32_t r = s.run_offsets[t]; r < s.run_offsets[t + 1]; ++r) {
    const auto& run = s.runs[r];
    for (int32_t c = run.begin; c < run.end; ++c) v.emplace_back(c, run.mask < 0 ? -1 : run.mask + (c - run.begin), run.halves);
  }
  return v;
}

// Every plain walk split (split_items, at most 4 parts) and placed (place_split_walks): the key
// tiles' own runs are untouched; each part walks a row tile of its own past row_tiles, as many query
// tiles as it says; a split tile's parts, in order, walk exactly its tiles with the same bitmasks
// and half bits; every key tile is in one item or in the parts of one slot.
// With range_tiles > 0 (split_by_ranges' parts) each part walks query tiles of one range of that many,
// and the items go out in range order (each item's first query tile's range), tiles that see nothing last.
void expect_parts(const TileSchedule& s, std::vector<BwdItem> split, int32_t range_tiles = 0) {
  TileSchedule placed = s;
  const std::vector<int32_t> tiles = lca_flex_flash::place_split_walks(placed, split);
  int32_t parts = 0;
  std::vector<std::vector<const BwdItem*>> by_slot(tiles.size());
  std::vector<int> seen(static_cast<size_t>(s.row_tiles), 0);
  for (const BwdItem& it : split) {
    if (it.slot < 0) {
      for (int32_t t : it.tiles)
        if (t >= 0) ++seen[static_cast<size_t>(t)];
      continue;
    }
    ++parts;
    ASSERT_LT(static_cast<size_t>(it.slot), tiles.size());
    ASSERT_GE(it.tiles[0], s.row_tiles);
    ASSERT_EQ(it.tiles[1], -1);
    ASSERT_EQ(walk_of(placed, it.tiles[0]).size(), static_cast<size_t>(it.query_tiles[0]));
    by_slot[static_cast<size_t>(it.slot)].push_back(&it);
  }
  ASSERT_EQ(placed.run_offsets.size(), s.run_offsets.size() + static_cast<size_t>(parts));
  for (int32_t t = 0; t <= s.row_tiles; ++t) ASSERT_EQ(placed.run_offsets[t], s.run_offsets[t]);
  for (int32_t r = 0; r < s.run_offsets[s.row_tiles]; ++r) ASSERT_EQ(placed.runs[r].begin, s.runs[r].begin);
  for (size_t slot = 0; slot < tiles.size(); ++slot) {
    auto& ps = by_slot[slot];
    ASSERT_GE(ps.size(), 2u) << "slot " << slot;
    std::sort(ps.begin(), ps.end(), [](const BwdItem* a, const BwdItem* b) { return a->from_tile < b->from_tile; });
    std::vector<std::tuple<int32_t, int32_t, int32_t>> walked;
    for (const BwdItem* part : ps) {
      ASSERT_EQ(part->from_tile, static_cast<int32_t>(walked.size()));
      const auto w = walk_of(placed, part->tiles[0]);
      walked.insert(walked.end(), w.begin(), w.end());
    }
    ASSERT_EQ(walked, walk_of(s, tiles[slot])) << "slot " << slot;
    ++seen[static_cast<size_t>(tiles[slot])];
  }
  for (int32_t t = 0; t < s.row_tiles; ++t) ASSERT_EQ(seen[static_cast<size_t>(t)], 1) << "row tile " << t;
  if (parts > 0) {  // placed parts name row tiles of their own: placing them again is refused
    TileSchedule again = placed;
    std::vector<BwdItem> twice = split;
    EXPECT_THROW(lca_flex_flash::place_split_walks(again, twice), lca::Error);
  }
  if (range_tiles <= 0) return;
  int32_t last_range = -1;
  for (const BwdItem& it : split) {
    const auto w = walk_of(placed, it.tiles[0]);
    if (w.empty()) {
      last_range = std::numeric_limits<int32_t>::max();
      continue;
    }
    const int32_t range = std::get<0>(w.front()) / range_tiles;
    ASSERT_GE(range, last_range) << "items in range order";
    last_range = range;
    if (it.slot >= 0)
      for (const auto& tile : w) ASSERT_EQ(std::get<0>(tile) / range_tiles, range) << "a part walks one range";
  }
}

void expect_split_walks(const TileSchedule& s, const std::vector<BwdItem>& items, int32_t group) {
  expect_parts(s, lca_flex_flash::split_items(items, group, 0, 4));
}

// s (rows: queries if by_query, else keys) against the mask's truth: every cell, the runs, full
// tiles, half bits, shared bitmasks, the order; backward: the Hopper backward's blocks. A matched
// schedule's rows are its blocks' keys (schedule_row_key).
void expect_schedule_exact(const TileSchedule& s, const lca_mask& m, const std::vector<char>& truth, bool by_query) {
  const int32_t tile_rows = s.tile_rows;
  ASSERT_EQ(s.rows, by_query ? m.seqlen_q : m.seqlen_k);
  auto visible = [&](int64_t r, int64_t x) {
    const int64_t key = lca_flex_flash::schedule_row_key(s, r);
    return key < s.rows && x < s.cols && (by_query ? truth[key * m.seqlen_k + x] : truth[x * m.seqlen_k + key]);
  };
  int64_t wrong = 0;
  for (int64_t r = 0; r < int64_t{s.row_tiles} * tile_rows; ++r)
    for (int64_t c = 0; c < s.cols; ++c) {
      const bool want = visible(r, c);
      if (schedule_visible(s, r, c) != want && wrong++ < 5)
        ADD_FAILURE() << "row " << r << " col " << c << ": schedule " << !want << ", mask " << want;
    }
  EXPECT_EQ(wrong, 0);
  // Runs of a row tile are ordered and disjoint; full tiles are completely visible.
  int64_t full = 0, partial = 0, idle_halves = 0;
  for (int32_t t = 0; t < s.row_tiles; ++t) {
    int32_t last_end = -1;
    for (int32_t i = s.run_offsets[t]; i < s.run_offsets[t + 1]; ++i) {
      const auto& run = s.runs[i];
      ASSERT_LT(run.begin, run.end);
      ASSERT_GE(run.begin, last_end) << "runs overlap or are out of order";
      last_end = run.end;
      (run.mask < 0 ? full : partial) += run.end - run.begin;
      // Half bits: exactly the 64-row parts of 128- and 192-row tiles that see nothing (idle) or
      // every column (full), the same for every tile of the run (a warpgroup that owns an idle part
      // skips the tile, one that owns a full part skips the masking).
      const int parts = tile_rows / 64;
      const bool has_parts = tile_rows == 128 || tile_rows == 192;
      ASSERT_TRUE(run.halves == 0 || (has_parts && run.mask >= 0)) << "half bits on a full or 64-row tile";
      if (has_parts && run.mask >= 0) {
        const int32_t all_parts = (1 << parts) - 1;
        EXPECT_NE(run.halves & (all_parts * kIdleHalf), all_parts * kIdleHalf)
            << "a tile that sees nothing is scheduled";
        EXPECT_NE(run.halves & (all_parts * kFullHalf), all_parts * kFullHalf)
            << "a tile that sees everything is partial";
        for (int32_t c = run.begin; c < run.end; ++c)
          for (int h = 0; h < parts; ++h) {
            bool seen = false, all = true;
            for (int64_t r = int64_t{t} * tile_rows + 64 * h; r < int64_t{t} * tile_rows + 64 * (h + 1); ++r)
              for (int64_t x = int64_t{c} * kTile; x < (c + 1) * int64_t{kTile}; ++x) {
                const bool v = visible(r, x);
                seen = seen || v;
                all = all && v;
              }
            const std::string where =
                "row tile " + std::to_string(t) + " col tile " + std::to_string(c) + " part " + std::to_string(h);
            ASSERT_EQ((run.halves >> h) & kIdleHalf, seen ? 0 : 1) << where;
            ASSERT_EQ(((run.halves >> h) & kFullHalf) != 0, all) << where;
            idle_halves += seen ? 0 : 1;
          }
      }
      if (run.mask >= 0) continue;
      for (int32_t c = run.begin; c < run.end; ++c)
        for (int64_t r = int64_t{t} * tile_rows; r < (t + 1) * int64_t{tile_rows}; ++r)
          for (int64_t x = int64_t{c} * kTile; x < (c + 1) * int64_t{kTile}; ++x) {
            ASSERT_TRUE(lca_flex_flash::schedule_row_key(s, r) < s.rows && x < s.cols) << "a full tile reaches past the sequence";
            ASSERT_TRUE(visible(r, x));
          }
    }
  }
  EXPECT_EQ(full, s.full_tiles);
  EXPECT_EQ(partial, s.partial_tiles);
  EXPECT_EQ(idle_halves, s.idle_halves);
  // Bitmasks are shared between tiles with the same pattern: at most one per partial tile,
  // and every run's masks lie inside the store.
  EXPECT_LE(s.bits.size(), static_cast<size_t>(partial) * tile_rows);
  EXPECT_EQ(s.bits.size() % tile_rows, 0u);
  for (const auto& run : s.runs)
    if (run.mask >= 0) ASSERT_LE(static_cast<size_t>(run.mask + run.end - run.begin) * tile_rows, s.bits.size());
  std::vector<int32_t> sorted = s.order;
  std::sort(sorted.begin(), sorted.end());
  for (int32_t t = 0; t < s.row_tiles; ++t) ASSERT_EQ(sorted[t], t) << "the order is not a permutation";
  // The row tiles with runs come first (the persistent forward takes order's first busy_tiles).
  for (int32_t i = 0; i < s.row_tiles; ++i)
    ASSERT_EQ(i < s.busy_tiles, s.run_offsets[s.order[i]] < s.run_offsets[s.order[i] + 1]) << "order position " << i;
  // max_tiles is the longest row tile's tiles, counted over its runs.
  int32_t most = 0;
  for (int32_t t = 0; t < s.row_tiles; ++t) {
    int32_t tiles = 0;
    for (int32_t r = s.run_offsets[t]; r < s.run_offsets[t + 1]; ++r) tiles += s.runs[r].end - s.runs[r].begin;
    most = std::max(most, tiles);
  }
  EXPECT_EQ(s.max_tiles, most);
  if (!by_query)
    for (auto [heads_kv, slots, pairing] : {std::tuple{8, 132, BwdPairing::kAuto}, std::tuple{1, 3, BwdPairing::kAuto},
                                            std::tuple{2, 132, BwdPairing::kNone}, std::tuple{2, 132, BwdPairing::kAll}}) {
      SCOPED_TRACE("items: heads_kv " + std::to_string(heads_kv) + " slots " + std::to_string(slots));
      const auto items = backward_items(s, heads_kv, 8 / heads_kv, slots, pairing);
      expect_items_partition(s, items);
      expect_split_walks(s, items, 8 / heads_kv);
      for (int32_t range_tiles : {1, 3})
        expect_parts(s, lca_flex_flash::split_by_ranges(s, items, 8 / heads_kv, range_tiles), range_tiles);
    }
}

// Every 64-key block of the mask in exactly one half of a matched schedule's key tiles; an odd
// count's last half is the block past the end.
void expect_blocks_partition(const TileSchedule& s, int32_t blocks) {
  ASSERT_EQ(s.key_blocks.size(), 2 * static_cast<size_t>(s.row_tiles));
  std::vector<int> seen(static_cast<size_t>(blocks) + 1, 0);
  for (const int32_t b : s.key_blocks) {
    ASSERT_GE(b, 0);
    ASSERT_LE(b, blocks);
    ++seen[static_cast<size_t>(b)];
  }
  for (int32_t b = 0; b < blocks; ++b) ASSERT_EQ(seen[static_cast<size_t>(b)], 1) << "block " << b;
  ASSERT_EQ(seen[static_cast<size_t>(blocks)], blocks % 2);
}

void expect_exact(const lca_mask& m, const std::string& label) {
  const std::vector<char> truth = lca::test::dense_truth(m);  // row-major over (q, k)
  // 192-row tiles: the forward of the three-consumer Hopper kernel (head dim 64).
  for (auto [by_query, tile_rows] : {std::pair{true, 64}, std::pair{true, 128}, std::pair{true, 192}, std::pair{false, 64},
                                     std::pair{false, 128}}) {
    SCOPED_TRACE(label + (by_query ? " forward" : " backward") + " tile rows " + std::to_string(tile_rows));
    expect_schedule_exact(build_schedule(m, by_query, tile_rows), m, truth, by_query);
  }
  // The backward's key blocks matched into key tiles (match_key_blocks), wherever they are.
  SCOPED_TRACE(label + " backward, matched key blocks");
  const TileSchedule narrow = build_schedule(m, /*by_query=*/false, kTile);
  const TileSchedule matched = lca_flex_flash::build_matched_schedule(narrow, lca_flex_flash::match_key_blocks(narrow));
  expect_blocks_partition(matched, narrow.row_tiles);
  expect_schedule_exact(matched, m, truth, /*by_query=*/false);
}

TEST(FlexSchedule, BuiltinPatternsAreExact) {
  auto& p = BuiltinProvider::instance();
  for (int64_t seqlen : {1000, 1537}) {
    for (const auto& [name, params] : lca::test::patterns_near_1k()) {
      auto g = p.generate(name, params, seqlen, 7);
      ASSERT_EQ(g.status, LCA_OK) << name << ": " << g.error;
      expect_exact(*g.mask, name + " " + std::to_string(seqlen));
    }
  }
}

TEST(FlexSchedule, RandomSliceMasksAreExact) {
  std::mt19937_64 rng(2026);
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{300, 300}, {64, 64}, {65, 200}, {513, 130}, {1, 77}, {200, 1}}) {
    for (int rep = 0; rep < 6; ++rep) {
      const auto slices = lca::test::random_slices(rng, sq, sk);
      const lca_mask m{sizeof(lca_mask), sq, sk, static_cast<int64_t>(slices.size()), slices.data(), nullptr, 0, nullptr};
      expect_exact(m, "random " + std::to_string(sq) + "x" + std::to_string(sk) + " #" + std::to_string(rep));
    }
  }
}

TEST(FlexSchedule, MemoryStaysLinearAtLongLengths) {
  // 512K causal: one full run and one partial tile per row tile (two with 128 rows); 512K full:
  // one run per row tile.
  const int64_t s = 512 * 1024;
  for (int type : {LCA_SLICE_FULL, LCA_SLICE_CAUSAL}) {
    const lca_slice one{0, s, 0, s, type, 0};
    const lca_mask m{sizeof(lca_mask), s, s, 1, &one, nullptr, 0, nullptr};
    const TileSchedule f = build_schedule(m, true);
    EXPECT_EQ(f.row_tiles, s / kTile);
    EXPECT_LE(f.runs.size(), 2u * f.row_tiles);
    EXPECT_EQ(f.partial_tiles, type == LCA_SLICE_FULL ? 0 : s / kTile);
    EXPECT_EQ(f.full_tiles + f.partial_tiles,
              type == LCA_SLICE_FULL ? (s / kTile) * (s / kTile) : (s / kTile) * (s / kTile + 1) / 2);
    if (type == LCA_SLICE_CAUSAL) EXPECT_EQ(f.order.front(), f.row_tiles - 1) << "longest rows first";
    const TileSchedule f128 = build_schedule(m, true, 128);
    EXPECT_EQ(f128.row_tiles, s / 128);
    // Causal: a full run and the diagonal's two partial tiles, in two runs (the second one's
    // upper 64 rows see nothing: other idle bits).
    EXPECT_LE(f128.runs.size(), 3u * f128.row_tiles);
    EXPECT_EQ(f128.idle_halves, type == LCA_SLICE_FULL ? 0 : s / 128);
    EXPECT_EQ(f128.partial_tiles, type == LCA_SLICE_FULL ? 0 : 2 * (s / 128));
  }
}

// Forward and backward keep 128-row tiles for masks that are smooth at that scale and take
// 64-row tiles for 64-token block-sparse masks; the GPU tests run both kernels of each pass
// through these same masks.
TEST(FlexSchedule, TileRowsFollowTheMask) {
  auto& p = BuiltinProvider::instance();
  for (int64_t seqlen : {1999, 1201}) {
    auto causal = p.generate("causal", "{}", seqlen, 11);
    auto sparse = p.generate("block_sparse", R"({"sparsity":0.3})", seqlen, 11);
    ASSERT_EQ(sparse.status, LCA_OK) << sparse.error;
    for (bool by_query : {true, false}) {
      EXPECT_EQ(lca_flex_flash::build_adaptive_schedule(*causal.mask, by_query, 128).tile_rows, 128);
      EXPECT_EQ(lca_flex_flash::build_adaptive_schedule(*sparse.mask, by_query, 128).tile_rows, 64);
    }
    expect_exact(*sparse.mask, "block_sparse forward choice");
  }
  const int64_t s = 16384;
  auto big = p.generate("block_sparse", R"({"sparsity":0.3})", s, 42);
  EXPECT_EQ(lca_flex_flash::build_adaptive_schedule(*big.mask, true, 128).tile_rows, 64);
  EXPECT_EQ(lca_flex_flash::build_adaptive_schedule(*big.mask, false, 128).tile_rows, 64);
}

// A 128K block-sparse mask (64-token blocks, half of them kept) on 128-row tiles: ~1.5M partial
// tiles, whose bitmasks are one of two patterns (the upper or the lower 64 rows); tiles where
// both halves are kept are full. Unshared, the bitmasks would take 1.5 GiB here and ~25 GiB at 512K.
TEST(FlexSchedule, BlockSparseBitmasksAreSharedAndDoubleBlocksAreFull) {
  auto& p = BuiltinProvider::instance();
  auto g = p.generate("block_sparse", "{}", 128 * 1024, 3);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  for (bool by_query : {true, false}) {
    const TileSchedule s = build_schedule(*g.mask, by_query, 128);
    EXPECT_GT(s.partial_tiles, 1000000);
    EXPECT_GT(s.full_tiles, 500000);  // both 64-row halves kept: a quarter of the tiles
    EXPECT_EQ(s.bits.size(), 2u * 128) << "distinct bitmasks: the upper and the lower half";
    EXPECT_EQ(s.idle_halves, s.partial_tiles) << "every partial tile has one idle half";
    EXPECT_LE(static_cast<int64_t>(s.runs.size()), s.full_tiles + s.partial_tiles);
  }
}

// The choice weighs cells by the speed of the kernel that would compute them: where the wide
// kernels run a cell more than twice as fast (the Hopper kernels against mma.sync's 64-row ones),
// 128-row tiles always win, since one holds at most twice the cells of the 64-row tiles it covers.
// Just under or over 2x, a mask of 64-token blocks along the diagonal (every 128-row tile half
// empty) flips the choice.
TEST(FlexSchedule, TileRowsFollowThePredictedTime) {
  auto& p = BuiltinProvider::instance();
  using lca_flex_flash::build_adaptive_schedule;
  for (const auto& [name, params] : lca::test::patterns_near_1k()) {
    auto g = p.generate(name, params, 2048, 5);
    ASSERT_EQ(g.status, LCA_OK) << name << ": " << g.error;
    for (bool by_query : {true, false}) {
      const TileSchedule wide = build_schedule(*g.mask, by_query, 128);
      const TileSchedule narrow = build_schedule(*g.mask, by_query, 64);
      const int64_t cells_wide = (wide.full_tiles + wide.partial_tiles) * 128;
      const int64_t cells_narrow = (narrow.full_tiles + narrow.partial_tiles) * 64;
      EXPECT_LE(cells_wide, 2 * cells_narrow) << name;
      EXPECT_EQ(build_adaptive_schedule(*g.mask, by_query, 128, 2.69).tile_rows, 128) << name;
      EXPECT_EQ(build_adaptive_schedule(*g.mask, by_query, 128, 1.25).tile_rows,
                cells_narrow * 1.25 < double(cells_wide) ? 64 : 128)
          << name;
    }
  }
  const int64_t s = 4096;
  std::vector<lca_slice> blocks;
  for (int64_t b = 0; b < s; b += 64) blocks.push_back(lca_slice{b, b + 64, b, b + 64, LCA_SLICE_FULL, 0});
  const lca_mask diagonal{sizeof(lca_mask), s, s, static_cast<int64_t>(blocks.size()), blocks.data(), nullptr, 0, nullptr};
  for (bool by_query : {true, false}) {
    EXPECT_EQ(build_adaptive_schedule(diagonal, by_query, 128, 1.9).tile_rows, 64);
    EXPECT_EQ(build_adaptive_schedule(diagonal, by_query, 128, 2.1).tile_rows, 128);
  }
}

// Blocks of the Hopper backward on a causal mask at 16K, heads 64:8, 132 SMs: key tile k (query
// tiles 2k .. 255) shares a block with key tile 127 - k, heads inner, the long one walked from the
// last query tile down and the short one up, so every pair's walk is as long (258 query tiles)
// and the blocks of a wave walk two fronts of query tiles in step (commit 88575d6). The pairs that
// would leave the last wave part empty are split into single tiles, launched last. Masks whose key
// tiles see alike query ranges (full, sliding windows, documents) stay unpaired: one tile a block,
// longest first, first query tile to last, heads outer.
TEST(FlexSchedule, BackwardPairsTheKeyTilesOfCausalMasks) {
  auto& p = BuiltinProvider::instance();
  auto g = p.generate("causal", "{}", 16384, 42);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  const TileSchedule s = build_schedule(*g.mask, /*by_query=*/false, 128);
  ASSERT_EQ(s.row_tiles, 128);
  const std::vector<BwdItem> items = backward_items(s, 8, 8, 132, BwdPairing::kAuto);
  expect_items_partition(s, items);
  size_t pairs = 0;
  bool singles_started = false;
  for (const BwdItem& it : items) {
    if (it.tiles[1] < 0) {
      singles_started = true;
      EXPECT_EQ(it.flags, kWalkHeadsInner | kWalkDown0);
      continue;
    }
    EXPECT_FALSE(singles_started) << "a pair launched after a single tile";
    ++pairs;
    EXPECT_EQ(it.tiles[0] + it.tiles[1], 127);
    EXPECT_LT(it.tiles[0], it.tiles[1]) << "the long tile first";
    EXPECT_EQ(it.query_tiles[0] + it.query_tiles[1], 258);
    EXPECT_EQ(it.flags, kWalkHeadsInner | kWalkDown0) << "long tile down, short tile up, heads inner";
  }
  // 64 pairs a kv head on 132 SMs: at most a wave's worth (17) split.
  EXPECT_GE(pairs, 64u - 17u);
  // kAll splits none; kNone pairs none: 128 single tiles, longest first, walked up, heads outer.
  const std::vector<BwdItem> all = backward_items(s, 8, 8, 132, BwdPairing::kAll);
  EXPECT_EQ(all.size(), 64u);
  const std::vector<BwdItem> singles = backward_items(s, 8, 8, 132, BwdPairing::kNone);
  ASSERT_EQ(singles.size(), 128u);
  for (size_t i = 0; i < singles.size(); ++i) {
    EXPECT_EQ(singles[i].tiles[0], static_cast<int32_t>(i));
    EXPECT_EQ(singles[i].tiles[1], -1);
    EXPECT_EQ(singles[i].flags, 0);
  }
  // Alike ranges: no pairs by default (documents of 1K-3K tokens; the default distribution at 16K
  // packs a few long documents, which are causal-like and paired). Many short causal documents take
  // the document-local order: tile order, each walked down with heads inner; the others stay plain.
  for (const auto& [name, params] : {std::pair{"full", "{}"}, std::pair{"sliding_window_causal", "{}"},
                                     std::pair{"causal_document", R"({"dist":"uniform:1000-3000"})"},
                                     std::pair{"block_sparse", "{}"}, std::pair{"global_sliding", "{}"}}) {
    auto m = p.generate(name, params, 16384, 42);
    ASSERT_EQ(m.status, LCA_OK) << m.error;
    const TileSchedule sm = build_schedule(*m.mask, /*by_query=*/false, 128);
    const bool local = std::string(name) == "causal_document";
    const std::vector<BwdItem> items = backward_items(sm, 8, 8, 132, BwdPairing::kAuto);
    EXPECT_EQ(lca_flex_flash::local_walks(items), local) << name;
    for (size_t i = 0; i < items.size(); ++i) {
      EXPECT_EQ(items[i].tiles[1], -1) << name;
      EXPECT_EQ(items[i].flags, local ? kWalkDown0 | kWalkHeadsInner | lca_flex_flash::kWalkLocal : 0) << name;
      if (local) EXPECT_EQ(items[i].tiles[0], static_cast<int32_t>(i)) << "tile order";
    }
    // Off, or under another pairing: plain.
    EXPECT_FALSE(lca_flex_flash::local_walks(backward_items(sm, 8, 8, 132, BwdPairing::kAuto, lca_flex_flash::BwdLocal::kOff)));
    EXPECT_FALSE(lca_flex_flash::local_walks(backward_items(sm, 8, 8, 132, BwdPairing::kNone)));
    EXPECT_TRUE(lca_flex_flash::local_walks(backward_items(sm, 8, 8, 132, BwdPairing::kNone, lca_flex_flash::BwdLocal::kOn)));
  }
  // Prefix-LM: the prefix's keys see every query, the rest causally: paired.
  {
    auto m = p.generate("prefix_lm_causal", "{}", 16384, 42);
    ASSERT_EQ(m.status, LCA_OK) << m.error;
    const TileSchedule sm = build_schedule(*m.mask, /*by_query=*/false, 128);
    const std::vector<BwdItem> prefix_items = backward_items(sm, 8, 8, 132, BwdPairing::kAuto);
    expect_items_partition(sm, prefix_items);
    EXPECT_EQ(prefix_items.front().flags, kWalkHeadsInner | kWalkDown0);
    EXPECT_GE(prefix_items.front().tiles[1], 0);
  }
  // Where the long tiles' query ranges meet at the start (keys see the queries before them), the
  // long tile walks up and the short one down.
  const int64_t n = 4096;
  const lca_slice inverse{0, n, 0, n, LCA_SLICE_INV_CAUSAL, 0};
  const lca_mask inv{sizeof(lca_mask), n, n, 1, &inverse, nullptr, 0, nullptr};
  const TileSchedule si = build_schedule(inv, /*by_query=*/false, 128);
  const std::vector<BwdItem> inv_items = backward_items(si, 1, 1, 1, BwdPairing::kAuto);
  expect_items_partition(si, inv_items);
  ASSERT_EQ(inv_items.size(), 16u);
  for (const BwdItem& it : inv_items) {
    EXPECT_EQ(it.tiles[0] + it.tiles[1], 31);
    EXPECT_GT(it.tiles[0], it.tiles[1]) << "the long tile first";
    EXPECT_EQ(it.flags, kWalkHeadsInner | kWalkDown1) << "long tile up, short tile down";
  }
}

// Calls fn(name, seqlen, schedule of 128-row tiles) for every builtin pattern at its default
// parameters and each of `seqlens`.
template <class Fn>
void for_each_builtin(bool by_query, std::initializer_list<int64_t> seqlens, Fn fn) {
  auto& p = BuiltinProvider::instance();
  for (const char* name : {"full", "causal", "full_document", "causal_document", "sliding_window",
                           "sliding_window_causal", "sliding_window_document", "shared_question", "causal_blockwise",
                           "prefix_lm_causal", "prefix_lm_document", "global_sliding", "block_causal_document",
                           "block_sparse"}) {
    for (const int64_t seqlen : seqlens) {
      auto g = p.generate(name, "{}", seqlen, 42);
      ASSERT_EQ(g.status, LCA_OK) << name << ": " << g.error;
      fn(std::string(name), seqlen, build_schedule(*g.mask, by_query, 128));
    }
  }
}

// Over the builtin patterns at their default parameters and 1K-16K: the idle share of the 128-row
// schedule (forward or backward) passes the launcher's threshold (kIdleShareFor64Keys,
// kIdleShareForSkip) exactly where `skipping` says; block_sparse's is a third at every length.
void expect_skipping(bool by_query, double threshold, const std::set<std::pair<std::string, int64_t>>& skipping) {
  for_each_builtin(by_query, {1024, 2048, 4096, 16384}, [&](const std::string& name, int64_t seqlen,
                                                              const TileSchedule& s) {
    const double share = lca_flex_flash::idle_share(s);
    if (name == "block_sparse") {
      EXPECT_NEAR(share, 1.0 / 3.0, 0.05) << seqlen;
    } else {
      EXPECT_EQ(share > threshold, skipping.count({name, seqlen}) == 1) << name << " " << seqlen << ": " << share;
    }
  });
}

// The default Hopper forward takes the 64-key kernel that skips idle tile halves where more than
// a tenth of them are idle (forward_sm90.cuh, kIdleShareFor64Keys). Of the builtin patterns at
// their default parameters that is block_sparse (a third) at every length, and the sliding windows
// at 1K-2K, whose row tiles see few key tiles with a diagonal among them; the rest keep 128-key
// steps.
TEST(FlexSchedule, IdleHalvesPickTheSkippingForwardForBlockSparseAndShortWindows) {
  const std::set<std::pair<std::string, int64_t>> skipping = {
      {"sliding_window", 1024}, {"sliding_window_causal", 1024}, {"sliding_window_causal", 2048},
      {"sliding_window_document", 1024}};
  expect_skipping(/*by_query=*/true, lca_flex_flash::kIdleShareFor64Keys, skipping);
}

// Where the 64-key kernel would be picked, an even group (query heads a kv head) takes the pair
// kernel instead, whose two consumers compute two heads of one 64-row tile; an odd group keeps the
// skipping kernel; elsewhere the group changes nothing.
TEST(FlexSchedule, AnEvenGroupTakesThePairForwardWhereTilesHaveIdleHalves) {
  using lca_flex_flash::Sm90Forward;
  for_each_builtin(/*by_query=*/true, {1024, 16384}, [&](const std::string& name, int64_t seqlen,
                                                          const TileSchedule& s) {
    const double share = lca_flex_flash::idle_share(s), tiles = lca_flex_flash::mean_tiles(s);
    const int32_t most = s.max_tiles;
    const Sm90Forward odd = lca_flex_flash::default_sm90_forward(share, tiles, most, 1);
    for (const int32_t group : {2, 8}) {
      const Sm90Forward even = lca_flex_flash::default_sm90_forward(share, tiles, most, group);
      if (odd == Sm90Forward::skip64) EXPECT_EQ(even, Sm90Forward::pair) << name << " " << seqlen;
      else EXPECT_EQ(even, odd) << name << " " << seqlen;
    }
    EXPECT_NE(lca_flex_flash::default_sm90_forward(share, tiles, most, 3), Sm90Forward::pair) << name << " " << seqlen;
    if (name == "block_sparse") EXPECT_EQ(odd, Sm90Forward::skip64) << seqlen;
  });
}

// The default Hopper forward takes the persistent kernel where it does not take the 64-key one
// and row tiles see at most kPersistentMeanTiles 64-key tiles on average, or none more than
// kPersistentMaxTiles (default_sm90_forward). Of the builtin patterns at their default parameters
// and 4K-64K that is every one at 4K (at most 64 tiles a row tile) but block_sparse (the pair
// kernel), and the sliding windows at every length (1025 keys a row: 18 tiles causal, 34
// two-sided); the rest keep the 128-key kernel (full at 16K: 256 tiles).
TEST(FlexSchedule, ShortRowTilesPickThePersistentForward) {
  for_each_builtin(/*by_query=*/true, {4096, 16384, 65536}, [&](const std::string& name, int64_t seqlen,
                                                                 const TileSchedule& s) {
    const double tiles = lca_flex_flash::mean_tiles(s);
    const bool picked = lca_flex_flash::default_sm90_forward(lca_flex_flash::idle_share(s), tiles, s.max_tiles, 8) ==
                        lca_flex_flash::Sm90Forward::persistent;
    const bool window = name.rfind("sliding_window", 0) == 0;
    EXPECT_EQ(picked, window || (seqlen == 4096 && name != "block_sparse"))
        << name << " " << seqlen << ": " << tiles << " / " << s.max_tiles;
  });
}

// Head dim 64's three consumers (192-row tiles) wherever the 128-key kernel runs, whatever the
// grid: full at 16K and 32K with heads 64 and 8, and at 4224 tokens with heads 8, where the 192-row
// grid's simulated dispatch costs 1.5x the 128-row grid's cells (2 waves against 2); at head dim
// 128 the window rule decides (wg3_window_grid_keeps_gain). The simulated makespan counts cells:
// full at 16K, heads 8, 128-row tiles: 8 waves of (256 + 2) x 128.
TEST(FlexSchedule, ThreeConsumerTilesAtHeadDim64OnEveryGrid) {
  using lca_flex_flash::simulated_forward_makespan;
  using lca_flex_flash::wg3_grid_keeps_gain;
  for (int64_t seqlen : {4224, 16384, 32768}) {
    for (const char* name : {"full", "causal"}) {
      auto g = BuiltinProvider::instance().generate(name, "{}", seqlen, 42);
      ASSERT_EQ(g.status, LCA_OK) << g.error;
      const TileSchedule s128 = build_schedule(*g.mask, /*by_query=*/true, 128);
      const TileSchedule s192 = build_schedule(*g.mask, /*by_query=*/true, 192);
      SCOPED_TRACE(std::string(name) + " " + std::to_string(seqlen));
      for (const int32_t heads : {8, 64}) EXPECT_TRUE(wg3_grid_keeps_gain(64, s192, s128, heads, 132));
      if (std::string(name) == "full" && seqlen == 16384)
        EXPECT_EQ(simulated_forward_makespan(s128, 8, 132), 8 * (256 + 2) * 128);
      if (std::string(name) == "full" && seqlen == 4224) {
        EXPECT_EQ(2 * simulated_forward_makespan(s192, 8, 132), 3 * simulated_forward_makespan(s128, 8, 132));
        // Head dim 128's rule weighs the same grid: 176 blocks on 132 SMs end far from an even spread.
        EXPECT_FALSE(wg3_grid_keeps_gain(128, s192, s128, 8, 132));
      }
    }
  }
}

// But at head dim 64 the 192-row tiles are not taken where they compute over kWg3CellsLimit times
// the 128-row tiles' cells: block_sparse with 128-token blocks (seed 1212's sweep cells, 0.45 and
// 0.54 of own full on them: 1.81x and 1.61x the cells), and with 70% of them kept at another
// length and seed; its 64-token blocks run the pair kernel anyway. Full, causal and documents of
// thousands of tokens add at most a few percent and keep them.
TEST(FlexSchedule, ThreeConsumerTilesAtHeadDim64OnlyWhereTheyAddFewCells) {
  using lca_flex_flash::schedule_cells;
  using lca_flex_flash::wg3_grid_keeps_gain;
  auto& p = BuiltinProvider::instance();
  struct C { const char* name; const char* params; int64_t seqlen; uint64_t seed; bool keeps; };
  for (const C c : {C{"block_sparse", "{\"block\":128,\"sparsity\":0.19}", 42985, 1212001, false},
                    C{"block_sparse", "{\"block\":128,\"sparsity\":0.38}", 18599, 1212005, false},
                    C{"block_sparse", "{\"block\":128,\"sparsity\":0.7}", 30011, 7, false},
                    C{"full", "{}", 42985, 1212001, true}, C{"causal", "{}", 18599, 1212005, true},
                    C{"causal_document", "{\"dist\":\"uniform:2048-20480\"}", 30011, 7, true},
                    C{"prefix_lm_causal", "{\"prefix\":5767}", 18599, 1212005, true}}) {
    SCOPED_TRACE(std::string(c.name) + " " + c.params + " " + std::to_string(c.seqlen));
    auto g = p.generate(c.name, c.params, c.seqlen, c.seed);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    const TileSchedule s128 = build_schedule(*g.mask, /*by_query=*/true, 128);
    const TileSchedule s192 = build_schedule(*g.mask, /*by_query=*/true, 192);
    ASSERT_EQ(default_forward(s128, 8), lca_flex_flash::Sm90Forward::k128);  // the kernel the 192-row tiles replace
    EXPECT_EQ(wg3_grid_keeps_gain(64, s192, s128, 8, 132), c.keeps)
        << schedule_cells(s192) / schedule_cells(s128) << "x the cells";
    if (c.keeps) EXPECT_LT(schedule_cells(s192), 1.05 * schedule_cells(s128));
  }
}

// Split-KV on head dim 64's 192-row grid at 7680 tokens, 8 heads (forward_split_parts, with the
// heads together plan() gives them): full's 40 row tiles a head (320 blocks, 2.4 waves) end on a
// last wave of 56 blocks: its 7 row tiles are cut in 2, the rest whole, predicted at most 0.9 of
// unsplit and below every row tile cut alike. Whatever it takes on either grid of full and causal,
// no other split of the kinds it weighs is predicted sooner, and what it takes is kSplitKvGain sooner
// than unsplit.
TEST(FlexSchedule, ThreeConsumerGridSplitsBySimulatedTime) {
  using lca_flex_flash::most_parts;
  using lca_flex_flash::split_forward_cost;
  for (const char* name : {"full", "causal"}) {
    auto g = BuiltinProvider::instance().generate(name, "{}", 7680, 42);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    for (const int32_t rows : {128, 192}) {
      SCOPED_TRACE(std::string(name) + " rows " + std::to_string(rows));
      TileSchedule s = build_schedule(*g.mask, /*by_query=*/true, rows);
      s.heads_together = lca_flex_flash::forward_heads_together(s, 8, 132);
      const auto parts = lca_flex_flash::forward_split_parts(s, 8, 132, 64);
      const double whole = split_forward_cost(s, std::vector<int32_t>{}, 8, 132, 64);
      const double chosen = most_parts(parts) > 1 ? split_forward_cost(s, parts, 8, 132, 64) : whole;
      if (most_parts(parts) > 1) EXPECT_LE(chosen, lca_flex_flash::kSplitKvGain * whole);
      for (int32_t k = 2; k <= lca_flex_flash::kMaxSplitKvParts; ++k) {
        EXPECT_LE(chosen, split_forward_cost(s, k, 8, 132, 64) + 1e-6) << "alike " << k;
        EXPECT_LE(chosen, split_forward_cost(s, lca_flex_flash::long_walk_parts(s, k), 8, 132, 64) + 1e-6) << "long " << k;
      }
      if (std::string(name) == "full" && rows == 192) {
        EXPECT_EQ(parts, lca_flex_flash::tail_parts(s, 7, 2));
        EXPECT_LT(chosen, 0.9 * whole);
      }
    }
  }
}

// The masks of test_flex_flash's ThreeConsumersAtHeadDim64MatchTheGpuReference (8K + 37 tokens,
// heads 48:12): on an H100's 132 SMs the default takes the 128-key kernel on their 128-row schedules
// and then the 192-row tiles, so that GPU test runs the three consumers, as it says.
TEST(FlexSchedule, TheThreeConsumerGpuTestsMasksTakeThreeConsumers) {
  const int64_t s = 8192 + 37;
  std::vector<lca_slice> causal{lca_slice{0, s, 0, s, LCA_SLICE_CAUSAL, 0}}, documents;
  int64_t at = 0;
  for (int64_t len : {int64_t{5000}, int64_t{37}, int64_t{2000}, s - 7037}) {
    documents.push_back(lca_slice{at, at + len, at, at + len, LCA_SLICE_CAUSAL, 0});
    at += len;
  }
  for (const auto* slices : {&causal, &documents}) {
    const lca_mask m{sizeof(lca_mask), s, s, static_cast<int64_t>(slices->size()), slices->data(), nullptr, 0, nullptr};
    const TileSchedule s128 = build_schedule(m, /*by_query=*/true, 128);
    EXPECT_EQ(default_forward(s128, 4),
              lca_flex_flash::Sm90Forward::k128)
        << slices->size() << " slices";
    const TileSchedule s192 = build_schedule(m, /*by_query=*/true, 192);
    EXPECT_TRUE(lca_flex_flash::wg3_grid_keeps_gain(64, s192, s128, 48, 132)) << slices->size() << " slices";
  }
}

// Split-KV's schedule (split_row_tiles): a row tile's parts are consecutive virtual row tiles
// (part_row names it, part_place their places: consecutive, -1 for a row tile left whole); the
// parts' tiles, in order, are the row tile's walk (tile by tile, with each tile's bitmask index),
// cut at even steps so that no part but the last ends on an odd tile, at most one part a step (a
// row tile without runs stays whole); split_rows / split_first list the split row tiles and their
// places; the order holds every virtual row tile, busy ones first. On causal (one run a row tile,
// partial at the diagonal) and on documents at an odd length (several runs a row tile), 128 and
// 192 rows; every row tile alike (2-4 parts) and a mixed split (row tile t in 1 + t % 4 parts).
TEST(FlexSchedule, SplitRowTilesCutsEachWalkIntoItsParts) {
  using lca_flex_flash::split_row_tiles;
  const int64_t n = 9001;
  std::vector<lca_slice> docs;
  int64_t at = 0;
  for (int64_t len : {int64_t{3000}, int64_t{77}, int64_t{1900}, n - 4977}) {
    docs.push_back(lca_slice{at, at + len, at, at + len, LCA_SLICE_CAUSAL, 0});
    at += len;
  }
  std::vector<lca_slice> causal{lca_slice{0, n, 0, n, LCA_SLICE_CAUSAL, 0}};
  auto walk = [](const TileSchedule& s, int32_t t) {
    std::vector<std::pair<int32_t, int32_t>> w;  // (column tile, bitmask index or -1)
    for (int32_t r = s.run_offsets[t]; r < s.run_offsets[t + 1]; ++r)
      for (int32_t c = s.runs[r].begin; c < s.runs[r].end; ++c)
        w.emplace_back(c, s.runs[r].mask < 0 ? -1 : s.runs[r].mask + (c - s.runs[r].begin));
    return w;
  };
  for (const auto* slices : {&causal, &docs}) {
    const lca_mask m{sizeof(lca_mask), n, n, static_cast<int64_t>(slices->size()), slices->data(), nullptr, 0, nullptr};
    for (int32_t rows : {128, 192}) {
      const TileSchedule s = build_schedule(m, /*by_query=*/true, rows);
      const TileSchedule one = split_row_tiles(s, 1);
      EXPECT_EQ(one.runs.size(), s.runs.size());
      EXPECT_EQ(one.order, s.order);
      EXPECT_TRUE(one.part_row.empty());
      std::vector<std::vector<int32_t>> splits;
      for (int32_t parts : {2, 3, 4}) splits.emplace_back(static_cast<size_t>(s.row_tiles), parts);
      std::vector<int32_t> mixed(static_cast<size_t>(s.row_tiles));
      for (int32_t t = 0; t < s.row_tiles; ++t) mixed[static_cast<size_t>(t)] = 1 + t % 4;
      splits.push_back(mixed);
      for (const auto& parts : splits) {
        SCOPED_TRACE(std::to_string(slices->size()) + " slices, " + std::to_string(rows) + " rows, row tile 1 in " +
                     std::to_string(parts[1]) + " parts");
        const TileSchedule v = split_row_tiles(s, parts);
        ASSERT_EQ(v.part_row.size(), static_cast<size_t>(v.row_tiles));
        ASSERT_EQ(v.part_place.size(), static_cast<size_t>(v.row_tiles));
        EXPECT_EQ(v.tile_rows, s.tile_rows);
        EXPECT_EQ(v.bits, s.bits);
        ASSERT_EQ(v.split_first.size(), v.split_rows.size() + 1);
        int32_t i = 0, next_place = 0, split_index = 0;
        for (int32_t t = 0; t < s.row_tiles; ++t) {
          const auto whole = walk(s, t);
          const size_t steps = (whole.size() + 1) / 2;
          const auto want = static_cast<size_t>(std::clamp<int64_t>(parts[static_cast<size_t>(t)], 1,
                                                                    std::max<int64_t>(static_cast<int64_t>(steps), 1)));
          std::vector<std::pair<int32_t, int32_t>> joined;
          size_t got = 0;
          for (; i < v.row_tiles && v.part_row[static_cast<size_t>(i)] == t; ++i, ++got) {
            const auto piece = walk(v, i);
            EXPECT_FALSE(piece.empty() && want > 1) << "row tile " << t << ": a split part without tiles";
            if (got + 1 < want) EXPECT_EQ(piece.size() % 2, 0u) << "row tile " << t << " part " << got;
            EXPECT_LE(piece.size(), 2 * ((steps + want - 1) / want)) << "row tile " << t << " part " << got;
            EXPECT_EQ(v.part_place[static_cast<size_t>(i)], want > 1 ? next_place++ : -1) << "row tile " << t;
            joined.insert(joined.end(), piece.begin(), piece.end());
          }
          EXPECT_EQ(got, want) << "row tile " << t;
          EXPECT_EQ(joined, whole) << "row tile " << t;
          if (want > 1) {
            ASSERT_LT(split_index, static_cast<int32_t>(v.split_rows.size()));
            EXPECT_EQ(v.split_rows[static_cast<size_t>(split_index)], t);
            EXPECT_EQ(v.split_first[static_cast<size_t>(split_index) + 1] - v.split_first[static_cast<size_t>(split_index)],
                      static_cast<int32_t>(want));
            ++split_index;
          }
        }
        EXPECT_EQ(i, v.row_tiles);
        EXPECT_EQ(split_index, static_cast<int32_t>(v.split_rows.size()));
        EXPECT_EQ(v.split_first.back(), next_place);
        std::vector<int32_t> sorted = v.order;
        std::sort(sorted.begin(), sorted.end());
        for (int32_t k = 0; k < v.row_tiles; ++k) ASSERT_EQ(sorted[static_cast<size_t>(k)], k);
        int32_t busy = 0;
        for (int32_t k = 0; k < v.row_tiles; ++k) busy += v.run_offsets[k + 1] > v.run_offsets[k] ? 1 : 0;
        EXPECT_EQ(v.busy_tiles, busy);
        for (int32_t k = 0; k < v.row_tiles; ++k) {
          const int32_t r = v.order[static_cast<size_t>(k)];
          EXPECT_EQ(v.run_offsets[r + 1] > v.run_offsets[r], k < busy) << "order place " << k;
          if (k >= busy) EXPECT_EQ(v.part_place[static_cast<size_t>(r)], -1) << "a row tile that sees nothing is whole";
        }
      }
    }
  }
}

// The long-walk split (long_walk_parts, and forward_split_parts' choice of it): global_sliding at
// 39936 tokens with 18 global tokens and a 294-token window, heads 8:1 (the seed-2718 sweep's
// deepest cliff): the global rows' row tile walks all 624 key tiles, every other about 14, so
// unsplit the 8 heads' global blocks end the forward alone (632 tiles against 433 an SM with the
// blocks' fixed costs); the rule cuts that row tile only (in 2: each part then ends before the
// rest), predicted at least 1.3x sooner. Full at 39936 and 8 heads has no long walk: no split.
TEST(FlexSchedule, LongWalkSplitCutsOnlyTheWalksThatEndTheForward) {
  using lca_flex_flash::forward_split_parts;
  using lca_flex_flash::long_walk_parts;
  using lca_flex_flash::most_parts;
  using lca_flex_flash::split_forward_cost;
  auto& p = BuiltinProvider::instance();
  auto g = p.generate("global_sliding", R"({"global_tokens": 18, "window": 294})", 39936, 42);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  TileSchedule s = build_schedule(*g.mask, /*by_query=*/true, 128);
  s.heads_together = lca_flex_flash::forward_heads_together(s, 8, 132);
  ASSERT_EQ(s.max_tiles, 624);
  const std::vector<int32_t> halves = long_walk_parts(s, 2);
  EXPECT_EQ(halves[0], 2) << "the global rows' row tile";
  EXPECT_EQ(std::count(halves.begin(), halves.end(), 1), s.row_tiles - 1);
  const std::vector<int32_t> parts = forward_split_parts(s, 8, 132, 64);
  ASSERT_EQ(parts.size(), static_cast<size_t>(s.row_tiles));
  EXPECT_GT(parts[0], 1);
  EXPECT_EQ(std::count(parts.begin(), parts.end(), 1), s.row_tiles - 1) << "only the long walk";
  const double whole = split_forward_cost(s, std::vector<int32_t>{}, 8, 132, 64);
  EXPECT_LT(split_forward_cost(s, parts, 8, 132, 64) * 1.3, whole);
  EXPECT_LT(split_forward_cost(s, parts, 8, 132, 64), split_forward_cost(s, 4, 8, 132, 64)) << "not every row tile";
  // With 64 heads the short walks fill the SMs past the long one's end: no split.
  TileSchedule wide = s;
  wide.heads_together = lca_flex_flash::forward_heads_together(wide, 64, 132);
  EXPECT_EQ(most_parts(forward_split_parts(wide, 64, 132, 64)), 1);
  auto f = p.generate("full", "{}", 39936, 42);
  ASSERT_EQ(f.status, LCA_OK) << f.error;
  EXPECT_EQ(most_parts(forward_split_parts(build_schedule(*f.mask, /*by_query=*/true, 128), 8, 132, 64)), 1);
}

// The tail split (tail_parts, and forward_split_parts' choice of it): full at 4105 tokens, heads 8:1,
// head dim 64's 192-row tiles: 22 row tiles a head, 176 equal blocks on 132 SMs, the last wave a
// third full. The rule cuts the last 6 row tiles of the launch order (44 blocks: the last wave) in 2
// and leaves the other 16 whole; split_schedule sends heads out together (4 of them: a group's
// parts come after its whole blocks, heads outer would put every head's parts amid the next
// head's whole blocks). Predicted 0.80 of unsplit, and below every row tile cut alike.
// A grid of many even waves (full at 39936, 8 heads) and one whose last wave is nearly full (full at
// 8192, heads 16:8, 128-row tiles: 1024 blocks, 7.76 waves) are left whole.
TEST(FlexSchedule, TailSplitCutsTheLastWavesRowTiles) {
  using lca_flex_flash::forward_split_parts;
  using lca_flex_flash::most_parts;
  using lca_flex_flash::split_forward_cost;
  auto& p = BuiltinProvider::instance();
  auto f = p.generate("full", "{}", 4105, 42);
  ASSERT_EQ(f.status, LCA_OK) << f.error;
  TileSchedule s = build_schedule(*f.mask, /*by_query=*/true, 192);
  s.heads_together = lca_flex_flash::forward_heads_together(s, 8, 132);
  ASSERT_EQ(s.row_tiles, 22);
  const std::vector<int32_t> parts = forward_split_parts(s, 8, 132, 64);
  ASSERT_EQ(parts.size(), static_cast<size_t>(s.row_tiles));
  EXPECT_EQ(parts, lca_flex_flash::tail_parts(s, 6, 2));
  EXPECT_EQ(std::count(parts.begin(), parts.end(), 2), 6);
  for (int32_t i = 0; i < 16; ++i) EXPECT_EQ(parts[static_cast<size_t>(s.order[static_cast<size_t>(i)])], 1) << i;
  const TileSchedule v = lca_flex_flash::split_schedule(s, parts, 8, 132);
  EXPECT_GT(v.heads_together, 1);
  const double whole = split_forward_cost(s, std::vector<int32_t>{}, 8, 132, 64);
  const double tail = split_forward_cost(s, parts, 8, 132, 64);
  EXPECT_LT(tail, 0.85 * whole);
  for (int32_t k = 2; k <= lca_flex_flash::kMaxSplitKvParts; ++k)
    EXPECT_LT(tail, split_forward_cost(s, k, 8, 132, 64)) << "every row tile in " << k;
  auto wide = p.generate("full", "{}", 39936, 42);
  ASSERT_EQ(wide.status, LCA_OK) << wide.error;
  EXPECT_EQ(most_parts(forward_split_parts(build_schedule(*wide.mask, /*by_query=*/true, 192), 8, 132, 64)), 1);
  auto eight = p.generate("full", "{}", 8192, 42);
  ASSERT_EQ(eight.status, LCA_OK) << eight.error;
  EXPECT_EQ(most_parts(forward_split_parts(build_schedule(*eight.mask, /*by_query=*/true, 128), 16, 132, 128)), 1);
}

// split_forward_bound is a bound: no split of any kind costs less (so forward_split_parts may skip
// building them where the unsplit dispatch is within kSplitKvGain of it), over masks with even and
// uneven walks, lengths that are not tile multiples, few and many heads. Many waves of even walks
// (causal at 44748 tokens, 64 heads) are within it: no split; global_sliding's long walk at 8
// heads is not.
TEST(FlexSchedule, SplitKvBoundHoldsForEverySplit) {
  using lca_flex_flash::forward_split_parts;
  using lca_flex_flash::long_walk_parts;
  using lca_flex_flash::split_forward_bound;
  using lca_flex_flash::split_forward_cost;
  auto& p = BuiltinProvider::instance();
  const std::pair<const char*, const char*> masks[] = {
      {"full", "{}"}, {"causal", "{}"}, {"causal_document", R"({"dist": "chatqa"})"},
      {"causal_blockwise", R"({"dist": "prolong64k"})"}, {"global_sliding", R"({"global_tokens": 40, "window": 500})"},
      {"sliding_window", R"({"window": 700})"}};
  int pruned = 0, simulated = 0;  // candidates the cutoff spared simulating, and those it did not
  for (const auto& [name, params] : masks)
    for (const int64_t n : {5001, 23457})
      for (const int32_t heads : {8, 64}) {
        SCOPED_TRACE(std::string(name) + " " + std::to_string(n) + " heads " + std::to_string(heads));
        auto g = p.generate(name, params, n, 42);
        ASSERT_EQ(g.status, LCA_OK) << g.error;
        TileSchedule s = build_schedule(*g.mask, /*by_query=*/true, 128);
        s.heads_together = lca_flex_flash::forward_heads_together(s, heads, 132);
        const double bound = split_forward_bound(s, heads, 132);
        EXPECT_LE(bound, split_forward_cost(s, std::vector<int32_t>{}, heads, 132, 128) + 1e-6);
        const double whole = split_forward_cost(s, std::vector<int32_t>{}, heads, 132, 128);
        for (int32_t k = 2; k <= lca_flex_flash::kMaxSplitKvParts; ++k) {
          EXPECT_LE(bound, split_forward_cost(s, k, heads, 132, 128) + 1e-6) << "parts " << k;
          EXPECT_LE(bound, split_forward_cost(s, long_walk_parts(s, k), heads, 132, 128) + 1e-6) << "long " << k;
          for (const int32_t tiles : {1, s.busy_tiles / 3, s.busy_tiles - 1})
            EXPECT_LE(bound, split_forward_cost(s, lca_flex_flash::tail_parts(s, tiles, k), heads, 132, 128) + 1e-6)
                << "tail " << tiles << " in " << k;
          // With a cutoff the cost is the same, or a bound at least the cutoff and at most the cost:
          // a split that cannot beat the cutoff is not simulated, and none that can is lost.
          for (const std::vector<int32_t>& parts :
               {std::vector<int32_t>(static_cast<size_t>(s.row_tiles), k), long_walk_parts(s, k)}) {
            const double full = split_forward_cost(s, parts, heads, 132, 128);
            const double cut = split_forward_cost(s, parts, heads, 132, 128, 0.97 * whole);
            if (cut != full) {
              ++pruned;
              EXPECT_GE(cut, 0.97 * whole) << "parts " << k;
              EXPECT_LE(cut, full + 1e-6) << "parts " << k;
            } else {
              ++simulated;
            }
          }
        }
      }
  EXPECT_GT(pruned, 0) << "the cutoff never spared a simulation";
  EXPECT_GT(simulated, 0) << "the cutoff spared every simulation";
  auto c = p.generate("causal", "{}", 44748, 42);
  ASSERT_EQ(c.status, LCA_OK) << c.error;
  TileSchedule cs = build_schedule(*c.mask, /*by_query=*/true, 128);
  cs.heads_together = lca_flex_flash::forward_heads_together(cs, 64, 132);
  EXPECT_LT(lca_flex_flash::kSplitKvGain * split_forward_cost(cs, std::vector<int32_t>{}, 64, 132, 128),
            split_forward_bound(cs, 64, 132));
  EXPECT_TRUE(forward_split_parts(cs, 64, 132, 128).empty());
  auto gl = p.generate("global_sliding", R"({"global_tokens": 18, "window": 294})", 39936, 42);
  ASSERT_EQ(gl.status, LCA_OK) << gl.error;
  TileSchedule gs = build_schedule(*gl.mask, /*by_query=*/true, 128);
  gs.heads_together = lca_flex_flash::forward_heads_together(gs, 8, 132);
  EXPECT_GT(split_forward_cost(gs, std::vector<int32_t>{}, 8, 132, 64), 1.3 * split_forward_bound(gs, 8, 132));
}

// Split-KV's rule (forward_split_parts): on grids of a few waves the parts end on fuller waves. Full
// at 7680 tokens with 8 heads on 192-row tiles: 320 blocks of 120 tiles, 2.4 waves of 132 SMs,
// ends in 3 rounds; in 2 parts, 640 blocks of 60 tiles in 5 rounds (4.8 waves) of shorter blocks, plus
// the combine: 0.93x, split. With 64 heads (19.4 waves) the parts' fixed costs and the combine lose;
// no SM count, no split.
TEST(FlexSchedule, SplitKvWhereTheGridEndsOnAPartlyEmptyWave) {
  using lca_flex_flash::forward_split_parts;
  using lca_flex_flash::split_forward_cost;
  auto full = [](int64_t n) {
    auto g = BuiltinProvider::instance().generate("full", "{}", n, 42);
    EXPECT_EQ(g.status, LCA_OK) << g.error;
    return build_schedule(*g.mask, /*by_query=*/true, 192);
  };
  const TileSchedule small = full(7680);
  EXPECT_GT(lca_flex_flash::most_parts(forward_split_parts(small, 8, 132, 64)), 1);
  EXPECT_LT(split_forward_cost(small, 2, 8, 132, 64), 0.97 * split_forward_cost(small, 1, 8, 132, 64));
  EXPECT_TRUE(forward_split_parts(small, 64, 132, 64).empty());
  EXPECT_TRUE(forward_split_parts(small, 8, 0, 64).empty());
  // The unsplit cost: 3 rounds of (120 tiles + the block's kSplitKvBlockTiles) x 192 rows.
  EXPECT_DOUBLE_EQ(split_forward_cost(small, 1, 8, 132, 64), 3.0 * (120 + lca_flex_flash::kSplitKvBlockTiles) * 192);
}

// TileSchedule::max_tiles: the longest row tile's scheduled tiles. At 4K, full: 64 on every row
// tile; causal: the last row tile's 64; sliding_window (512 each side there): 1152 keys, 18 tiles
// of 64. At 16K sliding_window (1024 each side): 2176 keys, 34 tiles.
TEST(FlexSchedule, MaxTilesIsTheLongestRowTile) {
  auto& p = BuiltinProvider::instance();
  for (const auto& [name, want] : std::vector<std::pair<const char*, int32_t>>{
           {"full", 64}, {"causal", 64}, {"sliding_window", 18}}) {
    auto g = p.generate(name, "{}", 4096, 42);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    EXPECT_EQ(build_schedule(*g.mask, /*by_query=*/true, 128).max_tiles, want) << name;
  }
  auto w = p.generate("sliding_window", "{}", 16384, 42);
  ASSERT_EQ(w.status, LCA_OK) << w.error;
  EXPECT_EQ(build_schedule(*w.mask, /*by_query=*/true, 128).max_tiles, 34);
}

// The default Hopper backward takes the kernel whose consumers skip their idle iterations where
// more than a tenth of the backward schedule's tile halves (64 keys x 64 queries) are idle
// (backward_sm90.cuh, kIdleShareForSkip): that kernel runs its busy iterations slower, so it must
// not be picked for the dense masks at the lengths this benchmark is about. Of the builtin patterns
// at their default parameters it is block_sparse (a third) at every length, and at 1K-2K, where a
// key tile sees few query tiles and a diagonal among them, the windows, short documents and the
// shared question (15-25% idle; the trade there is not timed).
TEST(FlexSchedule, IdleHalvesPickTheSkippingBackwardForBlockSparseAndShortMasks) {
  const std::set<std::pair<std::string, int64_t>> skipping = {
      {"causal_document", 1024}, {"sliding_window", 1024}, {"sliding_window_causal", 1024},
      {"sliding_window_causal", 2048}, {"sliding_window_document", 1024}, {"shared_question", 1024},
      {"shared_question", 2048}, {"prefix_lm_document", 1024}};
  expect_skipping(/*by_query=*/false, lca_flex_flash::kIdleShareForSkip, skipping);
}

// block_sparse's backward blocks are plain walks (one key tile, up, heads outer) at every length,
// so the default takes the skip kernel there up to kPlainSkipWalkLimit (64K: 6146 iterations, over
// kSkipWalkLimit), and not at 80K (7682) and beyond, where it loses to the kernel without the
// skip; walks that are not plain keep kSkipWalkLimit. Causal's blocks are pairs: not plain.
// Key blocks matched into key tiles (match_key_blocks): on block_sparse, where the skip kernel runs,
// the matched tiles hold the same busy 64-key halves in fewer tiles with fewer idle halves; the
// default takes them there from 4K on (heads 64:8 on 132 SMs) and nowhere else among these masks;
// on masks whose blocks are alike the pairs are the adjacent blocks.
TEST(FlexSchedule, MatchedKeyBlocksRunFewerHalfIdleIterationsOnBlockSparse) {
  using lca_flex_flash::BwdMatch;
  using lca_flex_flash::default_backward_schedule;
  using lca_flex_flash::skip_backward_cost;
  auto& p = BuiltinProvider::instance();
  auto busy_halves = [](const TileSchedule& s) { return 2 * (s.full_tiles + s.partial_tiles) - s.idle_halves; };
  for (const int64_t seqlen : {4096, 16384, 65536, 81920}) {
    auto g = p.generate("block_sparse", "{}", seqlen, 42);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    const TileSchedule plain = default_backward_schedule(*g.mask, 2.0, 8, 8, 132, BwdMatch::kOff);
    const TileSchedule chosen = default_backward_schedule(*g.mask, 2.0, 8, 8, 132, BwdMatch::kAuto);
    if (seqlen > 65536) {  // past the skip kernel's walk limit: no match
      EXPECT_TRUE(chosen.key_blocks.empty()) << seqlen;
      continue;
    }
    ASSERT_FALSE(chosen.key_blocks.empty()) << seqlen;
    expect_blocks_partition(chosen, static_cast<int32_t>(seqlen / kTile));
    EXPECT_EQ(busy_halves(chosen), busy_halves(plain)) << seqlen;
    EXPECT_LT(chosen.full_tiles + chosen.partial_tiles, plain.full_tiles + plain.partial_tiles) << seqlen;
    EXPECT_LT(chosen.idle_halves, plain.idle_halves) << seqlen;
    EXPECT_LE(skip_backward_cost(chosen, 8, 132), (1.0 - lca_flex_flash::kMatchGain) * skip_backward_cost(plain, 8, 132))
        << seqlen;
    EXPECT_TRUE(lca_flex_flash::plain_walks(
        lca_flex_flash::default_backward_blocks(chosen, 8, 8, 132, BwdPairing::kAuto).items));
  }
  // test_flex_flash's 8K case (heads 16:8) runs matched key tiles.
  auto small = p.generate("block_sparse", "{}", 8192, 5);
  ASSERT_EQ(small.status, LCA_OK) << small.error;
  EXPECT_FALSE(default_backward_schedule(*small.mask, 2.0, 2, 8, 132, BwdMatch::kAuto).key_blocks.empty());
  for (const char* name : {"full", "causal", "sliding_window", "sliding_window_causal", "global_sliding"}) {
    auto g = p.generate(name, "{}", 16384, 42);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    EXPECT_TRUE(default_backward_schedule(*g.mask, 2.0, 8, 8, 132, BwdMatch::kAuto).key_blocks.empty()) << name;
  }
  auto full = p.generate("full", "{}", 4096, 42);
  ASSERT_EQ(full.status, LCA_OK) << full.error;
  const TileSchedule forced = default_backward_schedule(*full.mask, 2.0, 8, 8, 132, BwdMatch::kOn);
  ASSERT_EQ(forced.key_blocks.size(), 64u);
  for (int32_t b = 0; b < 64; ++b) EXPECT_EQ(forced.key_blocks[static_cast<size_t>(b)], b);
  // Too many blocks to pair: none matched.
  const lca_slice one{0, 256 * 1024, 0, 256 * 1024, LCA_SLICE_FULL, 0};
  const lca_mask wide{sizeof(lca_mask), 256 * 1024, 256 * 1024, 1, &one, nullptr, 0, nullptr};
  EXPECT_TRUE(lca_flex_flash::match_key_blocks(build_schedule(wide, /*by_query=*/false, kTile)).empty());
}

// At 1K-2K the skip kernel runs some masks that are not block-sparse (the test above), and a
// block's walk is the time: 8-16 key tiles x 8 kv heads fill at most one wave of 132 SMs. Matching
// there lowered the summed cost by 2-4% but lengthened the dearest key tile, and lost (H100, commit
// 10d4683: shared_question at 2K 0.83x, causal_document and prefix_lm_document at 1K 0.90-0.91x,
// block_sparse at 1K 0.97x); skip_backward_cost takes the dearest tile, so the default matches none
// of these, and block_sparse again from 4K (above). The same rule looks at the kv heads: block_sparse
// at 8K is matched with 8 (512 blocks) and not with one (64 blocks, whose dearest tile the match
// lengthens, 86.9 -> 88.2 iterations).
TEST(FlexSchedule, ShortMasksKeepTheirAdjacentKeyBlocksWhereTheLongestWalkIsTheTime) {
  using lca_flex_flash::BwdMatch;
  using lca_flex_flash::default_backward_schedule;
  auto& p = BuiltinProvider::instance();
  for (const char* name : {"causal_document", "prefix_lm_document", "shared_question", "sliding_window",
                           "sliding_window_causal", "sliding_window_document", "block_sparse"}) {
    for (const int64_t seqlen : {1024, 2048}) {
      auto g = p.generate(name, "{}", seqlen, 42);
      ASSERT_EQ(g.status, LCA_OK) << g.error;
      EXPECT_TRUE(default_backward_schedule(*g.mask, 2.0, 8, 8, 132, BwdMatch::kAuto).key_blocks.empty())
          << name << " " << seqlen;
    }
  }
  auto g = p.generate("block_sparse", "{}", 8192, 42);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  EXPECT_FALSE(default_backward_schedule(*g.mask, 2.0, 8, 8, 132, BwdMatch::kAuto).key_blocks.empty());
  EXPECT_TRUE(default_backward_schedule(*g.mask, 2.0, 8, 1, 132, BwdMatch::kAuto).key_blocks.empty());
}

// Causal-like masks at 1K-2K: backward_items' blocks (pairs, or single tiles walking down with heads
// inner) fill under a wave of 132 SMs with 8 kv heads, and the longest walk is the time; the default
// takes plain single tiles there, their long walks split (unpaired_under_a_wave). From 4K (128 blocks
// of pairs, simulated within 2% of unpaired) the pairs stay, as do the blocks of masks that are
// not causal-like; the skip kernel's masks have no pairs.
TEST(FlexSchedule, CausalLikeMasksUnderAWaveSplitSingleTiles) {
  using lca_flex_flash::BwdLocal;
  using lca_flex_flash::BwdMatch;
  auto& p = BuiltinProvider::instance();
  auto pairs = [](const std::vector<BwdItem>& v) {
    return std::count_if(v.begin(), v.end(), [](const BwdItem& it) { return it.tiles[1] >= 0; });
  };
  for (const char* name : {"causal", "causal_blockwise", "prefix_lm_causal"}) {
    for (const int64_t seqlen : {1024, 2048, 4096, 16384}) {
      auto g = p.generate(name, "{}", seqlen, 42);
      ASSERT_EQ(g.status, LCA_OK) << g.error;
      const TileSchedule s = lca_flex_flash::default_backward_schedule(*g.mask, 2.0, 8, 8, 132, BwdMatch::kAuto);
      const std::vector<BwdItem> before = backward_items(s, 8, 8, 132, BwdPairing::kAuto, BwdLocal::kAuto);
      const auto blocks = lca_flex_flash::default_backward_blocks(s, 8, 8, 132, BwdPairing::kAuto);
      if (seqlen <= 2048) {
        EXPECT_FALSE(lca_flex_flash::plain_walks(before)) << name << " " << seqlen;
        EXPECT_EQ(pairs(blocks.items), 0) << name << " " << seqlen;
        EXPECT_TRUE(std::any_of(blocks.items.begin(), blocks.items.end(), [](const BwdItem& it) { return it.slot >= 0; }))
            << name << " " << seqlen << ": split";
        EXPECT_GT(blocks.items.size(), before.size()) << name << " " << seqlen;
      } else {
        EXPECT_EQ(pairs(blocks.items), pairs(before)) << name << " " << seqlen;
        EXPECT_GT(pairs(blocks.items), 0) << name << " " << seqlen;
      }
      // Every key tile exactly once (split parts: one tile, counted once).
      std::vector<int> seen(static_cast<size_t>(s.row_tiles), 0);
      for (const BwdItem& it : blocks.items) {
        if (it.slot < 0 || it.from_tile == 0) ++seen[static_cast<size_t>(it.tiles[0])];
        if (it.tiles[1] >= 0) ++seen[static_cast<size_t>(it.tiles[1])];
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), s.row_tiles) << name << " " << seqlen;
    }
  }
  // The skip kernel's blocks (causal_document at 1K) stay plain single tiles, never paired (under a
  // wave its walks may be split: skip_split_walks), and forced pairing keeps its pairs.
  auto d = p.generate("causal_document", "{}", 1024, 42);
  ASSERT_EQ(d.status, LCA_OK) << d.error;
  const TileSchedule ds = lca_flex_flash::default_backward_schedule(*d.mask, 2.0, 8, 8, 132, BwdMatch::kAuto);
  const auto skip_blocks = lca_flex_flash::default_backward_blocks(ds, 8, 8, 132, BwdPairing::kAuto).items;
  EXPECT_TRUE(std::all_of(skip_blocks.begin(), skip_blocks.end(),
                          [](const BwdItem& it) { return it.tiles[1] < 0 && it.flags == 0; }));
  auto c = p.generate("causal", "{}", 1024, 42);
  ASSERT_EQ(c.status, LCA_OK) << c.error;
  const TileSchedule cs = lca_flex_flash::default_backward_schedule(*c.mask, 2.0, 8, 8, 132, BwdMatch::kAuto);
  EXPECT_GT(pairs(lca_flex_flash::default_backward_blocks(cs, 8, 8, 132, BwdPairing::kAll).items), 0);
}

TEST(FlexSchedule, PlainWalksTakeTheSkippingBackwardUpToTheirLimit) {
  auto& p = BuiltinProvider::instance();
  for (const int64_t seqlen : {16384, 65536, 81920}) {
    auto g = p.generate("block_sparse", "{}", seqlen, 42);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    const TileSchedule s = build_schedule(*g.mask, /*by_query=*/false, 128);
    const auto items = backward_items(s, 8, 8, 132, BwdPairing::kAuto);
    EXPECT_TRUE(lca_flex_flash::plain_walks(items)) << seqlen;
    const double walk = lca_flex_flash::mean_tiles(s) * 8;
    const double places = lca_flex_flash::span_places(lca_flex_flash::mean_span(s), 8);
    EXPECT_EQ(lca_flex_flash::default_sm90_skip_backward(lca_flex_flash::idle_share(s), walk, true, places),
              seqlen <= 65536)
        << seqlen << ": " << walk;
    if (seqlen == 65536) {
      EXPECT_GT(walk, lca_flex_flash::kSkipWalkLimit);
      EXPECT_FALSE(lca_flex_flash::default_sm90_skip_backward(lca_flex_flash::idle_share(s), walk, false, places));
    }
  }
  auto c = p.generate("causal", "{}", 16384, 42);
  ASSERT_EQ(c.status, LCA_OK) << c.error;
  const TileSchedule s = build_schedule(*c.mask, /*by_query=*/false, 128);
  EXPECT_FALSE(lca_flex_flash::plain_walks(backward_items(s, 8, 8, 132, BwdPairing::kAuto)));
  EXPECT_TRUE(lca_flex_flash::plain_walks(backward_items(s, 8, 8, 132, BwdPairing::kNone)));
}

// The skip kernel's second limit, the places a walk passes over (kSkipPassedPlacesLimit), on the
// cells it was measured on (ab-bwd-gqa-sparse-groups and paper-sparse, H100; blocks of 64, 8 kv heads): the skip kernel
// on matched blocks where it held its rate; else (range_walks_rule) the same blocks unmatched, every
// plain walk split by query ranges of kRangePlaces places (split_by_ranges), in range order, one kv
// head after another, and the skip kernel on them: the configuration {"bwd_ranges": kRangePlaces} ran
// there (ab-bwd-gqa-sparse-ranges).
TEST(FlexSchedule, SparseWalksThatPassOverManyPlacesSplitByRanges) {
  struct Cell {
    int64_t seqlen;
    double kept;
    int32_t group;
    bool skip;
    uint64_t seed = 23;
  };
  const Cell cells[] = {
      {40000, 0.1, 1, true},   {40000, 0.1, 2, true},   {40000, 0.1, 4, true},   {40000, 0.1, 8, false},
      {40000, 0.25, 4, true},  {40000, 0.25, 8, false}, {40000, 0.5, 8, true},   {98304, 0.1, 1, true},
      {98304, 0.1, 2, false},  {98304, 0.25, 2, true},  {98304, 0.1, 4, false},  {98304, 0.25, 4, false},
      {98304, 0.5, 4, true},   {98304, 0.1, 8, false},  {98304, 0.25, 8, false}, {131072, 0.1, 1, true},
      {32768, 0.25, 8, false, 42},  // paper-sparse's: 2280 places, the skip kernel at 320 (and 309, 415 at seed 23)
  };
  for (const Cell& c : cells) {
    const std::string params = "{\"block\": 64, \"sparsity\": " + std::to_string(c.kept) + "}";
    auto g = BuiltinProvider::instance().generate("block_sparse", params, c.seqlen, c.seed);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    const std::string at = std::to_string(c.seqlen) + " kept " + std::to_string(c.kept) + " group " +
                           std::to_string(c.group);
    const TileSchedule s = lca_flex_flash::default_backward_schedule(*g.mask, 391.0 / 196.0 /* choice.cu: plan()'s on Hopper */, c.group, 8, 132, lca_flex_flash::BwdMatch::kAuto);
    EXPECT_EQ(!s.key_blocks.empty(), c.skip) << at;
    const auto b = lca_flex_flash::default_backward_blocks(s, 8, c.group, 132, BwdPairing::kAuto);
    const bool plain = lca_flex_flash::plain_walks(b.items), alike = lca_flex_flash::alike_walks(b.items);
    const double passed =
        lca_flex_flash::span_places(lca_flex_flash::mean_span(s), c.group) - lca_flex_flash::mean_tiles(s) * c.group;
    const auto kernel = lca_flex_flash::sm90_backward_for(
        lca_flex_flash::BackwardChoice::sm90_auto, lca_flex_flash::idle_share(s), lca_flex_flash::mean_tiles(s) * c.group,
        plain, alike, !s.key_blocks.empty(), lca_flex_flash::span_places(lca_flex_flash::mean_span(s), c.group),
        b.range_places > 0);
    EXPECT_EQ(kernel, lca_flex_flash::Sm90Backward::skip) << at;
    EXPECT_EQ(b.kv_heads_together, 1) << at;
    std::printf("[places] block_sparse 64 kept %.2f %lld tokens group %d: %.0f passed over (walk %.0f of %.0f), %zu blocks\n",
                c.kept, static_cast<long long>(c.seqlen), c.group, passed, lca_flex_flash::mean_tiles(s) * c.group,
                lca_flex_flash::span_places(lca_flex_flash::mean_span(s), c.group), b.items.size());
    if (c.skip) {
      EXPECT_EQ(b.range_places, 0) << at;
      EXPECT_LE(passed, lca_flex_flash::kSkipPassedPlacesLimit) << at;
      continue;
    }
    EXPECT_GT(passed, lca_flex_flash::kSkipPassedPlacesLimit) << at;
    EXPECT_EQ(b.range_places, lca_flex_flash::kRangePlaces) << at;
    EXPECT_FALSE(plain) << at << ": the walks are split";
    expect_parts(s, b.items, lca_flex_flash::range_tiles(lca_flex_flash::kRangePlaces, c.group));
  }
}

// Blocks that fill whole tiles (block_sparse with blocks of 128) leave no tile part idle, and their
// walks visit their spans evenly (visit_concentration about 1), so range_walks_rule splits them by
// query ranges wherever they pass over more than kSkipPassedPlacesLimit places (group 8 but half
// kept at 32K; with one query head a kv head they pass over fewer and stay whole), and the skip kernel
// runs the parts. paper-sparse found the backward without the split at 303-390 TFLOP/s at 64K-128K
// with 64:8 against 467-541 at 32K; with it 489-547 (tools/dev/matrices/paper-sparse-block128-bwd.json).
TEST(FlexSchedule, BlocksThatFillTilesSplitByRangesWhereTheyPassOverManyPlaces) {
  for (const double kept : {0.1, 0.5}) {
    for (const int64_t seqlen : {32768, 65536, 98321}) {
      const std::string params = "{\"block\": 128, \"sparsity\": " + std::to_string(kept) + "}";
      auto g = BuiltinProvider::instance().generate("block_sparse", params, seqlen, 4242);
      ASSERT_EQ(g.status, LCA_OK) << g.error;
      for (const int32_t group : {1, 8}) {
        const std::string at = "kept " + std::to_string(kept) + " " + std::to_string(seqlen) + " tokens group " +
                               std::to_string(group);
        const TileSchedule s = lca_flex_flash::default_backward_schedule(
            *g.mask, 391.0 / 196.0 /* choice.cu: plan()'s on Hopper */, group, 8, 132, lca_flex_flash::BwdMatch::kAuto);
        const double idle = lca_flex_flash::idle_share(s), walk = lca_flex_flash::mean_tiles(s) * group;
        const double places = lca_flex_flash::span_places(lca_flex_flash::mean_span(s), group);
        EXPECT_LT(idle, 0.01) << at << ": only the short last block of a length off the tiles leaves parts idle";
        EXPECT_TRUE(s.key_blocks.empty()) << at;
        EXPECT_NEAR(lca_flex_flash::visit_concentration(s), 1.0, 0.1) << at;

        const auto b = lca_flex_flash::default_backward_blocks(s, 8, group, 132, BwdPairing::kAuto);
        const bool passes_over_many = places - walk > lca_flex_flash::kSkipPassedPlacesLimit;
        // One query head a kv head passes over fewer; half kept at 32K with 8 (1950) is under the limit too.
        if (group == 1 || (kept > 0.2 && seqlen < 65536)) EXPECT_FALSE(passes_over_many) << at << ": " << places - walk;
        else EXPECT_TRUE(passes_over_many) << at << ": " << places - walk << " places passed over";
        EXPECT_EQ(b.range_places, passes_over_many ? lca_flex_flash::kRangePlaces : 0) << at;
        const auto kernel = lca_flex_flash::sm90_backward_for(lca_flex_flash::BackwardChoice::sm90_auto, idle, walk,
                                                              lca_flex_flash::plain_walks(b.items),
                                                              lca_flex_flash::alike_walks(b.items), false, places,
                                                              b.range_places > 0);
        EXPECT_EQ(kernel == lca_flex_flash::Sm90Backward::skip, passes_over_many) << at;
        if (passes_over_many) expect_parts(s, b.items, lca_flex_flash::range_tiles(lca_flex_flash::kRangePlaces, group));
      }
    }
  }
}

// Where most of the walks' visits go to a band every walk shares (global tokens beside a narrow
// window) and the tile parts are not idle, the walks stay whole however many places they pass
// over: split by ranges, global_sliding with 882 global tokens and a window of 296 ran 0.72-0.94x
// at 8:1 (tools/dev/matrices/ab-bwd-ranges-full-tiles.json). visit_concentration tells the two
// apart: exactly 1 on full (every walk visits every column tile), about 1 on block_sparse, over
// kEvenVisits there.
TEST(FlexSchedule, VisitConcentrationTellsSharedBandsFromEvenSpreads) {
  auto& p = BuiltinProvider::instance();
  auto backward = [&](const char* name, const char* params, int64_t seqlen, uint64_t seed) {
    auto g = p.generate(name, params, seqlen, seed);
    EXPECT_EQ(g.status, LCA_OK) << g.error;
    return lca_flex_flash::default_backward_schedule(*g.mask, 391.0 / 196.0, 8, 1, 132, lca_flex_flash::BwdMatch::kAuto);
  };
  EXPECT_DOUBLE_EQ(lca_flex_flash::visit_concentration(backward("full", "{}", 20000, 1)), 1.0);
  EXPECT_NEAR(lca_flex_flash::visit_concentration(backward("block_sparse", "{\"block\": 128, \"sparsity\": 0.2}", 50001, 9393)),
              1.0, 0.05);
  for (const int64_t seqlen : {45237, 81791, 116352}) {
    const TileSchedule s = backward("global_sliding", "{\"global_tokens\": 882, \"window\": 296}", seqlen, 5150);
    const double idle = lca_flex_flash::idle_share(s), walk = lca_flex_flash::mean_tiles(s) * 8;
    const double places = lca_flex_flash::span_places(lca_flex_flash::mean_span(s), 8);
    EXPECT_LE(idle, lca_flex_flash::kIdleShareForSkip) << seqlen;
    EXPECT_GT(places - walk, lca_flex_flash::kSkipPassedPlacesLimit) << seqlen;
    EXPECT_GT(lca_flex_flash::visit_concentration(s), lca_flex_flash::kEvenVisits) << seqlen;
    EXPECT_EQ(lca_flex_flash::default_backward_blocks(s, 1, 8, 132, BwdPairing::kAuto).range_places, 0) << seqlen;
  }
  // A schedule without visits.
  EXPECT_EQ(lca_flex_flash::visit_concentration(TileSchedule{}), 0.0);
}

// Ranges pay where most reuses of a query tile would miss L2 (far_reuse_share): block_sparse's random
// visits and causal_blockwise's last document at 512K reuse far (share 0.97-1.0); global_sliding with
// a few global tokens beside a narrow window reuses the global rows' tile at every key tile and a
// window's tiles at the next few (0.15-0.20), and its walks stay whole at any length although their
// idle tile parts pass range_walks_rule (split by ranges they ran 4.4x slower: 48 against 209 TFLOP/s
// at 39936 tokens, 8:1, d64, H200).
TEST(FlexSchedule, RangesOnlyWhereReusesAreFar) {
  auto& p = BuiltinProvider::instance();
  auto schedule = [&](const char* name, const char* params, int64_t seqlen) {
    auto g = p.generate(name, params, seqlen, 7);
    EXPECT_EQ(g.status, LCA_OK) << g.error;
    return lca_flex_flash::default_backward_schedule(*g.mask, 391.0 / 196.0, 8, 1, 132, lca_flex_flash::BwdMatch::kAuto);
  };
  for (const int64_t seqlen : {39936, 70001, 131072}) {
    for (const char* params : {R"({"global_tokens": 18, "window": 294})", R"({"global_tokens": 58, "window": 241})"}) {
      const TileSchedule s = schedule("global_sliding", params, seqlen);
      const double idle = lca_flex_flash::idle_share(s), walk = lca_flex_flash::mean_tiles(s) * 8;
      const double places = lca_flex_flash::span_places(lca_flex_flash::mean_span(s), 8);
      EXPECT_GT(idle, lca_flex_flash::kIdleShareForSkip) << params << " " << seqlen;
      EXPECT_TRUE(lca_flex_flash::range_walks_rule(idle, walk, true, places, 0.0)) << params << " " << seqlen;
      EXPECT_LT(lca_flex_flash::far_reuse_share(s, 8, lca_flex_flash::kRangePlaces), 0.25) << params << " " << seqlen;
      EXPECT_EQ(lca_flex_flash::default_backward_blocks(s, 1, 8, 132, BwdPairing::kAuto).range_places, 0) << params << " " << seqlen;
    }
    const TileSchedule sparse = schedule("block_sparse", R"({"block": 64, "sparsity": 0.25})", seqlen);
    EXPECT_GT(lca_flex_flash::far_reuse_share(sparse, 8, lca_flex_flash::kRangePlaces), 0.95) << seqlen;
    EXPECT_EQ(lca_flex_flash::default_backward_blocks(sparse, 1, 8, 132, BwdPairing::kAuto).range_places,
              lca_flex_flash::kRangePlaces) << seqlen;
  }
  // With 8 kv heads the walks go out 4 together (heads inner), so a query tile's next visit in its
  // head comes 4 walks later: global_sliding with 73 global tokens and a window of 2232 at 73541
  // tokens, 64:8, d64 (an H200's 1920 places a range) reuses far and is split by ranges (1.70x the
  // walks whole, 390 against 230 TFLOP/s), at 8:1 near and kept whole (1.28x the ranges).
  const TileSchedule wide = schedule("global_sliding", R"({"global_tokens": 73, "window": 2232})", 73541);
  const TileSchedule wide8 = lca_flex_flash::default_backward_schedule(
      *p.generate("global_sliding", R"({"global_tokens": 73, "window": 2232})", 73541, 7).mask, 391.0 / 196.0, 8, 8, 132,
      lca_flex_flash::BwdMatch::kAuto);
  EXPECT_EQ(lca_flex_flash::default_backward_blocks(wide8, 8, 8, 132, BwdPairing::kAuto, lca_flex_flash::BwdLocal::kAuto,
                                                    lca_flex_flash::BwdSplit::kAuto, 0, -1, 1920).range_places, 1920);
  EXPECT_EQ(lca_flex_flash::default_backward_blocks(wide, 1, 8, 132, BwdPairing::kAuto, lca_flex_flash::BwdLocal::kAuto,
                                                    lca_flex_flash::BwdSplit::kAuto, 0, -1, 1920).range_places, 0);
  // Every reuse at the next visit (one column tile, every row tile) is near; a cache of no places
  // misses every one.
  const TileSchedule full = schedule("full", "{}", 5000);
  EXPECT_EQ(lca_flex_flash::far_reuse_share(full, 1, int64_t{1} << 40), 0.0);
  EXPECT_EQ(lca_flex_flash::far_reuse_share(full, 1, 0), 1.0);
  EXPECT_EQ(lca_flex_flash::far_reuse_share(TileSchedule{}, 8, 800), 0.0);
}

// The places a walk passes over are those between its first and last query tile: a key tile of a
// short document walks its own document's query tiles and passes over next to nothing, so the
// limit leaves the skip kernel to the document masks whose idle share takes it (the sweep's short
// documents and windows), at any length and group.
TEST(FlexSchedule, DocumentWalksPassOverFewPlaces) {
  auto& p = BuiltinProvider::instance();
  const std::pair<const char*, const char*> masks[] = {
      {"causal_document", "{\"dist\": \"uniform:435-479\"}"},
      {"prefix_lm_document", "{\"dist\": \"uniform:265-559\", \"prefix\": 78}"},
      {"sliding_window_document", "{\"dist\": \"uniform:500-1114\", \"window\": 257}"},
      {"full_document", "{\"dist\": \"chatqa\"}"}};
  for (const auto& [name, params] : masks) {
    for (const int64_t seqlen : {17664, 89981}) {
      auto g = p.generate(name, params, seqlen, 11);
      ASSERT_EQ(g.status, LCA_OK) << g.error;
      const TileSchedule s = build_schedule(*g.mask, /*by_query=*/false, 128);
      for (const int32_t group : {1, 8}) {
        const double passed = lca_flex_flash::span_places(lca_flex_flash::mean_span(s), group) -
                              lca_flex_flash::mean_tiles(s) * group;
        EXPECT_LT(passed, 0.25 * lca_flex_flash::kSkipPassedPlacesLimit) << name << " " << seqlen << " group " << group;
      }
    }
  }
}

// Past the skip kernel's limit for plain walks (kPlainSkipWalkLimit iterations), the default
// rotates plain walks of about one length (alike_walks) in the kernel without the skip
// (default_sm90_rotate_backward): full from 64K (8192 iterations; 4096 at 32K stay as they are),
// to 512K; block_sparse past 64K and causal_blockwise at 64K, 256K and 512K pass over too many places
// for either, with visits spread evenly, and their walks are split by query ranges instead
// (range_walks_rule; causal_blockwise at 512K ran 526 TFLOP/s split, 318 whole). Every other builtin
// mask at 16K-512K has short walks, pairs (causal-like masks), split walks, the document-local order
// or walks of many lengths, and none of those rotate: full_document at 512K (4 to 2298 query tiles)
// has plain walks past the limit that pass over few places. The default keeps one kv head after
// another where walks rotate.
TEST(FlexSchedule, LongPlainWalksRotateWhereTheyAreAlike) {
  const std::set<std::pair<std::string, int64_t>> rotating = {
      {"full", 65536}, {"full", 131072}, {"full", 262144}, {"full", 524288}};
  const std::set<std::pair<std::string, int64_t>> ranges = {
      {"block_sparse", 131072},     {"block_sparse", 262144},     {"block_sparse", 524288},
      {"causal_blockwise", 65536},  {"causal_blockwise", 262144}, {"causal_blockwise", 524288}};
  const std::set<std::pair<std::string, int64_t>> long_unlike = {{"full_document", 524288}};
  for_each_builtin(/*by_query=*/false, {16384, 32768, 65536, 131072, 262144, 524288},
                   [&](const std::string& name, int64_t seqlen, const lca_flex_flash::TileSchedule& s) {
    const auto b = lca_flex_flash::default_backward_blocks(s, 8, 8, 132, BwdPairing::kAuto);
    const double walk = lca_flex_flash::mean_tiles(s) * 8;
    const bool plain = lca_flex_flash::plain_walks(b.items), alike = lca_flex_flash::alike_walks(b.items);
    // The launcher's choice (backward_sm90.cuh) and its rotation rule agree.
    const double places = lca_flex_flash::span_places(lca_flex_flash::mean_span(s), 8);
    const bool rotates = lca_flex_flash::default_sm90_backward(lca_flex_flash::idle_share(s), walk, plain, alike, places) ==
                         lca_flex_flash::Sm90Backward::rotate;
    EXPECT_EQ(rotates, lca_flex_flash::default_sm90_rotate_backward(lca_flex_flash::idle_share(s), walk, plain, alike, places))
        << name << " " << seqlen;
    EXPECT_EQ(rotates, rotating.count({name, seqlen}) == 1) << name << " " << seqlen << ": walk " << walk;
    EXPECT_EQ(b.range_places > 0, ranges.count({name, seqlen}) == 1) << name << " " << seqlen;
    // Long plain walks of many lengths: what the rule leaves out.
    EXPECT_EQ(plain && !alike && walk > lca_flex_flash::kPlainSkipWalkLimit && b.range_places == 0,
              long_unlike.count({name, seqlen}) == 1)
        << name << " " << seqlen;
    if (rotates) {
      EXPECT_FALSE(lca_flex_flash::default_sm90_skip_backward(lca_flex_flash::idle_share(s), walk, plain, places)) << name;
      EXPECT_EQ(b.kv_heads_together, 1) << name << " " << seqlen;
    }
  });
}

// The backward's blocks go out with kv heads together where one kv head after another would leave
// long items to start late, as many together as their walks allow: global_sliding (its key tiles
// of global keys walk 2052 iterations against 532 at 16K; simulated 0.83 -> 0.97 of the work's
// bound) all 8 up to 32K, 4 at 64K (walks of 8192), 2 at 128K, where the default splits those walks
// instead (split_long_walks) and keeps one kv head after another; block_causal_document at 4K-16K.
// (The pair: the rule on backward_items' blocks, and the default's choice, default_backward_blocks.)
// Where the items are alike (full, causal's pairs, the windows) or the gain is small
// (sliding_window_document and shared_question at 16K / 64K: 2-3%) the order stays, and the default
// keeps the skip kernel (block_sparse) so even where the rule alone would not (4K).
TEST(FlexSchedule, LongItemsOfFewKeyTilesGoOutWithKvHeadsTogether) {
  using lca_flex_flash::kv_heads_together;
  using lca_flex_flash::simulated_order_makespan;
  auto& p = BuiltinProvider::instance();
  auto together = [&](const std::string& name, int64_t seqlen) {
    auto g = p.generate(name, "{}", seqlen, 42);
    EXPECT_EQ(g.status, LCA_OK) << g.error;
    const TileSchedule s = build_schedule(*g.mask, /*by_query=*/false, 128);
    const auto items = backward_items(s, 8, 8, 132, BwdPairing::kAuto);
    EXPECT_EQ(kv_heads_together(items, 8, 8, 0), 1);
    EXPECT_EQ(kv_heads_together(items, 1, 8, 132), 1);
    EXPECT_EQ(kv_heads_together(items, 3, 8, 132), 1);  // no even group of kv heads
    return std::make_pair(kv_heads_together(items, 8, 8, 132),
                          lca_flex_flash::default_backward_blocks(s, 8, 8, 132, BwdPairing::kAuto).kv_heads_together);
  };
  using P = std::pair<int32_t, int32_t>;
  for (const int64_t seqlen : {4096, 16384, 32768}) EXPECT_EQ(together("global_sliding", seqlen), P(8, 8)) << seqlen;
  EXPECT_EQ(together("global_sliding", 65536), P(4, 4));
  EXPECT_EQ(together("global_sliding", 131072), P(2, 1));
  for (const int64_t seqlen : {4096, 8192, 16384})
    EXPECT_EQ(together("block_causal_document", seqlen), P(8, 8)) << seqlen;
  EXPECT_EQ(together("block_causal_document", 32768), P(1, 1));
  for (const char* name : {"full", "causal", "sliding_window", "sliding_window_causal", "sliding_window_document",
                           "block_sparse", "shared_question"})
    EXPECT_EQ(together(name, 16384), P(1, 1)) << name;
  EXPECT_EQ(together("shared_question", 65536), P(1, 1));
  EXPECT_EQ(together("block_sparse", 4096), P(8, 1));

  // The simulated order: 2 kv heads of one long and two short items each, on 3 SMs. Apart, kv head
  // 1's long item starts once an SM has run a short one of kv head 0; together, both long items
  // start at once and the third SM runs the four short ones beside them.
  const std::vector<BwdItem> few = {BwdItem{{0, -1}, {16, 0}, 0}, BwdItem{{1, -1}, {0, 0}, 0},
                                    BwdItem{{2, -1}, {0, 0}, 0}};
  const int64_t long_cost = lca_flex_flash::item_cost(few[0], 1), short_cost = lca_flex_flash::item_cost(few[1], 1);
  ASSERT_GT(long_cost, 4 * short_cost);
  EXPECT_EQ(simulated_order_makespan(few, 2, 1, 3, 1), long_cost + short_cost);
  EXPECT_EQ(simulated_order_makespan(few, 2, 1, 3, 2), long_cost);
  // Alike items: the same makespan either way, so one kv head after another.
  const std::vector<BwdItem> alike(100, BwdItem{{0, -1}, {256, 0}, 0});
  EXPECT_EQ(kv_heads_together(alike, 8, 8, 132), 1);
  // One long item a kv head ahead of many short ones: all 8 together while 8 walks fit the limit,
  // fewer as the long walk grows.
  std::vector<BwdItem> skewed(1, BwdItem{{0, -1}, {500, 0}, 0});
  skewed.insert(skewed.end(), 400, BwdItem{{1, -1}, {5, 0}, 0});
  EXPECT_EQ(kv_heads_together(skewed, 8, 8, 16), 8);
  skewed[0].query_tiles[0] = static_cast<int32_t>(lca_flex_flash::kKvHeadsWalkLimit / 64 + 1);
  EXPECT_EQ(kv_heads_together(skewed, 8, 8, 16), 4);
  skewed[0].query_tiles[0] = static_cast<int32_t>(lca_flex_flash::kKvHeadsWalkLimit / 32 + 1);
  EXPECT_EQ(kv_heads_together(skewed, 8, 8, 16), 2);
}

// The backward splits a walk across blocks where it alone would end the backward late: shared_question
// at 128K (a key tile of the question that every query tile sees: 16K iterations, over the whole
// work's bound per SM; simulated 0.52 of the bound -> over 0.9) and global_sliding at 256K (its global
// key tiles, where kv heads together no longer fit: 0.85 -> over 0.95). Nowhere at 16K-64K on the
// builtin masks (global_sliding's kv heads together already reach 0.97-0.99 there).
TEST(FlexSchedule, LongWalksAreSplitWhereTheyEndTheBackwardLate) {
  using lca_flex_flash::item_cost;
  using lca_flex_flash::kv_heads_together;
  using lca_flex_flash::split_long_walks;
  auto& p = BuiltinProvider::instance();
  // The simulated dispatch, in the order kv_heads_together picks, as a share of the work's bound.
  auto share = [](const std::vector<BwdItem>& items) {
    int64_t work = 0;
    for (const BwdItem& it : items) work += item_cost(it, 8) * 8;
    return double(work) / 132 / double(lca_flex_flash::simulated_default_makespan(items, 8, 8, 132));
  };
  auto split_of = [&](const std::string& name, int64_t seqlen, double* before, double* after) {
    auto g = p.generate(name, "{}", seqlen, 42);
    EXPECT_EQ(g.status, LCA_OK) << g.error;
    const TileSchedule s = build_schedule(*g.mask, /*by_query=*/false, 128);
    const auto items = backward_items(s, 8, 8, 132, BwdPairing::kAuto);
    const auto split = split_long_walks(items, 8, 8, 132);
    EXPECT_EQ(split_long_walks(items, 8, 8, 0).size(), items.size());  // no SMs given: as they are
    if (before) *before = share(items);
    if (after) *after = share(split);
    return split.size() - items.size();
  };
  double before = 0, after = 0;
  EXPECT_GT(split_of("shared_question", 131072, &before, &after), 0u);
  EXPECT_LT(before, 0.6);
  EXPECT_GT(after, 0.9);
  EXPECT_GT(split_of("global_sliding", 262144, &before, &after), 0u);
  EXPECT_LT(before, 0.9);
  EXPECT_GT(after, 0.95);
  for (const int64_t seqlen : {16384, 65536})
    for (const char* name : {"full", "causal", "causal_document", "sliding_window", "sliding_window_causal",
                             "sliding_window_document", "shared_question", "global_sliding", "block_causal_document",
                             "prefix_lm_causal"})
      EXPECT_EQ(split_of(name, seqlen, nullptr, nullptr), 0u) << name << " " << seqlen;

  // The GPU test's mask (test_flex_flash, ALongWalkSplitAcrossBlocksMatchesTheGpuReference), heads
  // 16:8: the default splits it on an H100's 132 SMs (not the skip kernel's mask: few idle halves),
  // and its documents take the document-local order.
  {
    const auto slices = lca::test::question_then_documents(8192, 128, 1024);
    const lca_mask m{sizeof(lca_mask), 8192, 8192, static_cast<int64_t>(slices.size()), slices.data(), nullptr, 0, nullptr};
    const TileSchedule s = build_schedule(m, /*by_query=*/false, 128);
    const auto items = lca_flex_flash::default_backward_blocks(s, 8, 2, 132, BwdPairing::kAuto).items;
    EXPECT_GT(items.size(), static_cast<size_t>(s.row_tiles));  // the question's walk in parts,
    EXPECT_GE(items.front().slot, 0);                            // launched first,
    EXPECT_EQ(items.front().flags, 0);
    EXPECT_TRUE(lca_flex_flash::local_walks(items));             // the documents' key tiles local
  }

  // One long walk among many short ones on 16 SMs: split into about equal parts of at most its
  // half, quarter ... whichever ends soonest; the short ones stay whole.
  std::vector<BwdItem> skewed(1, BwdItem{{0, -1}, {1000, 0}, 0});
  skewed.insert(skewed.end(), 400, BwdItem{{1, -1}, {5, 0}, 0});
  const auto split = split_long_walks(skewed, 1, 8, 16);
  ASSERT_GT(split.size(), skewed.size());
  int32_t tiles = 0;
  for (const BwdItem& it : split) {
    if (it.slot < 0) {
      EXPECT_EQ(it.query_tiles[0], 5);
      continue;
    }
    EXPECT_EQ(it.slot, 0);
    EXPECT_EQ(it.tiles[0], 0);
    EXPECT_GE(it.query_tiles[0], 1000 / 16);
    tiles += it.query_tiles[0];
  }
  EXPECT_EQ(tiles, 1000);
  // Not split: a walk of one query tile, pairs and walks with heads inner.
  const std::vector<BwdItem> unsplittable = {BwdItem{{0, -1}, {1, 0}, 0}, BwdItem{{1, 2}, {500, 3}, kWalkHeadsInner},
                                             BwdItem{{3, -1}, {500, 0}, kWalkHeadsInner}};
  for (const BwdItem& it : lca_flex_flash::split_items(unsplittable, 8, 0)) EXPECT_EQ(it.slot, -1);
}

// The document-local order of the backward (backward_items) on the builtin masks, as plan() asks
// for it (not where the skip kernel may run): the masks of many short causal documents at 128K (at
// seed 42 their documents average a few hundred tokens there: mean walks of 25-27 query tiles), not
// at 16K-64K or 256K (longer documents, mean walks of ~200; at 16K-32K they are paired); never the
// windows, global_sliding, full or block_sparse. Its blocks go out one kv head after another.
TEST(FlexSchedule, ManyShortDocumentsTakeTheDocumentLocalOrder) {
  auto local_of = [](const std::string&, int64_t, const TileSchedule& s) {
    const auto blocks = lca_flex_flash::default_backward_blocks(s, 8, 8, 132, BwdPairing::kAuto);
    return lca_flex_flash::local_walks(blocks.items) && blocks.kv_heads_together == 1;
  };
  const std::set<std::string> documents = {"causal_document", "prefix_lm_document", "shared_question"};
  for_each_builtin(/*by_query=*/false, {16384, 65536, 131072, 262144}, [&](const std::string& name, int64_t seqlen, const TileSchedule& s) {
    EXPECT_EQ(local_of(name, seqlen, s), seqlen == 131072 && documents.count(name) > 0) << name << " " << seqlen;
  });
}

// dQ's first writers (dq_first_writers) on the builtin masks at 16K and 64K, heads 64:8 on 132 SMs,
// the default's blocks: the three windows have them (sliding_window for at least 80% of the query
// tiles, sliding_window_causal 95%, sliding_window_document 60%: 619 of 1024 at 64K, where blocks at
// its documents' ends would write first more than kFirstWriterBlockTiles), no block writes first
// more than kFirstWriterBlockTiles of them, and the reordered blocks put the first visitor of each
// such tile ahead of the others, which reach it at least kFirstWriterLead iterations later in every
// head where they may run beside it; the dispatch is simulated within 1% of the default order's.
// Masks whose key tiles reach a query tile together (full, the
// documents) or whose walks are not plain (causal's pairs, the document-local order) have none, nor
// do the causal-like masks whose plain walks at 64K would keep first writers for half their tiles
// (shared_question) or cost the dispatch 1.8-1.9% (causal_document, causal_blockwise,
// prefix_lm_document). Not timed (the tests' mode): every tile a plain walk visits has its first visitor as first
// writer, even on full.
TEST(FlexSchedule, WindowsHaveFirstWritersOfDq) {
  using lca_flex_flash::dq_first_writers;
  using lca_flex_flash::kFirstWriterLead;
  const std::set<std::string> writing = {"sliding_window", "sliding_window_causal", "sliding_window_document"};
  for_each_builtin(/*by_query=*/false, {16384, 65536}, [&](const std::string& name, int64_t seqlen,
                                                            const TileSchedule& s) {
    const auto b = lca_flex_flash::default_backward_blocks(s, 8, 8, 132, BwdPairing::kAuto);
    const auto w = dq_first_writers(s, b.items, 8, 8, b.kv_heads_together, 132);
    EXPECT_EQ(!w.key_tile.empty(), writing.count(name) == 1) << name << " " << seqlen << ": " << w.tiles;
    if (w.key_tile.empty()) return;
    ASSERT_EQ(w.key_tile.size(), static_cast<size_t>(s.col_tiles)) << name << " " << seqlen;
    expect_items_partition(s, w.items);
    EXPECT_TRUE(lca_flex_flash::plain_walks(w.items));
    // Each query tile's visitors in the new order: (item index, iteration in head 0, in head 7).
    std::vector<std::vector<std::tuple<int32_t, int32_t, int32_t>>> visitors(static_cast<size_t>(s.col_tiles));
    for (size_t i = 0; i < w.items.size(); ++i) {
      int32_t at = 0;
      for (const auto& [c, mask, halves] : walk_of(s, w.items[i].tiles[0])) {
        visitors[static_cast<size_t>(c)].emplace_back(static_cast<int32_t>(i), at, at + 7 * w.items[i].query_tiles[0]);
        ++at;
      }
    }
    int64_t tiles = 0, seen = 0;
    for (int32_t c = 0; c < s.col_tiles; ++c) {
      const auto& v = visitors[static_cast<size_t>(c)];
      seen += !v.empty();
      const int32_t writer = w.key_tile[static_cast<size_t>(c)];
      if (writer < 0) continue;
      ++tiles;
      ASSERT_FALSE(v.empty()) << c;
      const auto [first, at0, at7] = v.front();
      EXPECT_EQ(w.items[static_cast<size_t>(first)].tiles[0], writer) << name << " tile " << c;
      for (size_t j = 1; j < v.size(); ++j)
        if (std::get<0>(v[j]) - first < 132 / b.kv_heads_together) {
          EXPECT_GE(std::get<1>(v[j]), at0 + kFirstWriterLead) << name << " tile " << c;
          EXPECT_GE(std::get<2>(v[j]), at7 + kFirstWriterLead) << name << " tile " << c;
        }
    }
    EXPECT_EQ(tiles, w.tiles);
    const double floor = name == "sliding_window" ? 0.8 : name == "sliding_window_causal" ? 0.95 : 0.6;
    EXPECT_GE(double(tiles), floor * double(seen)) << name << " " << seqlen;
    std::map<int32_t, int32_t> writes;  // key tile -> query tiles it writes first
    for (const int32_t k : w.key_tile)
      if (k >= 0) EXPECT_LE(++writes[k], lca_flex_flash::kFirstWriterBlockTiles) << name << " key tile " << k;
    // The new order costs the simulated dispatch at most 1%.
    const double makespan = double(lca_flex_flash::simulated_order_makespan(w.items, 8, 8, 132, b.kv_heads_together)) /
                            double(lca_flex_flash::simulated_order_makespan(b.items, 8, 8, 132, b.kv_heads_together));
    EXPECT_LE(makespan, 1.01) << name << " " << seqlen;
    std::printf("[first writers] %s %lld: %lld of %lld query tiles, simulated dispatch x%.4f\n", name.c_str(),
                static_cast<long long>(seqlen), static_cast<long long>(tiles), static_cast<long long>(seen), makespan);
  });
  // test_flex_flash's 8K cases (heads 16:8, seed 5) run the kernel without the skip, with first writers.
  for (const char* name : {"sliding_window_causal", "sliding_window"}) {
    auto g = BuiltinProvider::instance().generate(name, "{}", 8192, 5);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    const TileSchedule s = build_schedule(*g.mask, /*by_query=*/false, 128);
    const auto b = lca_flex_flash::default_backward_blocks(s, 8, 2, 132, BwdPairing::kAuto);
    // The kernel by the "backward" option: first writers run in the default's and sm90_noskip's, not in
    // the atomic, skip or rotating variants'.
    auto runs_under = [&](const std::string& name) {
      const lca_flex_flash::BackwardChoice v = lca_flex_flash::backward_choice(name);
      return lca_flex_flash::dq_first_runs_in(
          v, lca_flex_flash::sm90_backward_for(v, lca_flex_flash::idle_share(s), lca_flex_flash::mean_tiles(s) * 2,
                                               lca_flex_flash::plain_walks(b.items),
                                               lca_flex_flash::alike_walks(b.items), /*matched=*/false,
                                               lca_flex_flash::span_places(lca_flex_flash::mean_span(s), 2)));
    };
    EXPECT_TRUE(runs_under("")) << name;
    EXPECT_TRUE(runs_under("sm90_noskip")) << name;
    for (const char* v : {"sm90_atomic", "sm90_skip", "sm90_rotate"}) EXPECT_FALSE(runs_under(v)) << name << " " << v;
    EXPECT_FALSE(dq_first_writers(s, b.items, 8, 2, b.kv_heads_together, 132).key_tile.empty()) << name;
  }
  auto g = BuiltinProvider::instance().generate("full", "{}", 4096, 42);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  const TileSchedule s = build_schedule(*g.mask, /*by_query=*/false, 128);
  const auto items = backward_items(s, 8, 8, 132, BwdPairing::kAuto);
  const auto all = dq_first_writers(s, items, 8, 8, 1, 132, /*timed=*/false);
  ASSERT_EQ(all.key_tile.size(), static_cast<size_t>(s.col_tiles));
  for (const int32_t k : all.key_tile) EXPECT_EQ(k, all.items.front().tiles[0]);
}

// Head dim 128: where the default takes the persistent kernel (the sliding windows' short row
// tiles), plan() takes three consumers on 192-row tiles (sm90_overlap_wg3) where that grid's
// simulated dispatch ends within kWg3WindowSpeedup of an even spread: with heads 64:8 at 16K and
// 64K (1.001-1.012x), not with 8:1 at 16K (688 blocks of 192 rows: 5.2 waves, 1.09-1.11x).
TEST(FlexSchedule, ThreeConsumerWindowTilesWhereTheGridKeepsTheirGain) {
  using lca_flex_flash::wg3_window_grid_keeps_gain;
  for (int64_t seqlen : {16384, 65536}) {
    for (const char* name : {"sliding_window", "sliding_window_causal", "sliding_window_document"}) {
      auto g = BuiltinProvider::instance().generate(name, "{}", seqlen, 42);
      ASSERT_EQ(g.status, LCA_OK) << g.error;
      const TileSchedule s128 = build_schedule(*g.mask, /*by_query=*/true, 128);
      const TileSchedule s192 = build_schedule(*g.mask, /*by_query=*/true, 192);
      SCOPED_TRACE(std::string(name) + " " + std::to_string(seqlen));
      EXPECT_EQ(default_forward(s128, 8),
                lca_flex_flash::Sm90Forward::persistent);
      EXPECT_TRUE(wg3_window_grid_keeps_gain(s192, 64, 132));
      EXPECT_TRUE(wg3_window_grid_keeps_gain(s192, 8, 0));  // no SM count: no dispatch to weigh
      if (seqlen == 16384) EXPECT_FALSE(wg3_window_grid_keeps_gain(s192, 8, 132));
    }
  }
  // full's row tiles are long: the default takes the 128-key kernel, and the rule is not asked.
  auto full = BuiltinProvider::instance().generate("full", "{}", 16384, 42);
  const TileSchedule f128 = build_schedule(*full.mask, /*by_query=*/true, 128);
  EXPECT_EQ(default_forward(f128, 8),
            lca_flex_flash::Sm90Forward::k128);
}

// The masks of test_flex_flash's ThreeConsumersInWindowsMatchTheGpuReference (16K + 37 tokens,
// heads 64:8, head dim 128): the default takes the persistent kernel's class on their 128-row
// schedules and then the 192-row tiles on 132 SMs, so that GPU test runs sm90_overlap_wg3 by default.
TEST(FlexSchedule, TheWindowGpuTestsMasksTakeThreeConsumers) {
  const int64_t s = 16384 + 37;
  for (const char* name : {"sliding_window_causal", "sliding_window_document"}) {
    auto g = BuiltinProvider::instance().generate(name, "{}", s, 7);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    const TileSchedule s128 = build_schedule(*g.mask, /*by_query=*/true, 128);
    EXPECT_EQ(default_forward(s128, 8),
              lca_flex_flash::Sm90Forward::persistent)
        << name;
    const TileSchedule s192 = build_schedule(*g.mask, /*by_query=*/true, 192);
    EXPECT_TRUE(lca_flex_flash::wg3_grid_keeps_gain(128, s192, s128, 64, 132)) << name;
  }
}

// Short row tiles with few idle halves (idle share x mean tiles at most kPersistentIdleTiles) take
// the persistent forward even where over a tenth of the halves are idle: the cells of
// ab-short-fwd.json (seed 101) and ab-short-fwd-confirm.json (seed 202) that measured it faster,
// documents and windows of a few hundred tokens; block_sparse's short row tiles (a tenth of
// 64-blocks kept at 9001 tokens: nearly half the halves idle) keep the kernels that skip them.
TEST(FlexSchedule, ShortRowTilesWithFewIdleHalvesTakeThePersistentForward) {
  using lca_flex_flash::Sm90Forward;
  auto& p = BuiltinProvider::instance();
  struct C { const char* name; const char* params; int64_t seqlen; uint64_t seed; };
  for (const C c : {C{"causal_document", "{\"dist\":\"uniform:320-480\"}", 30011, 101},
                    C{"full_document", "{\"dist\":\"uniform:350-500\"}", 100003, 101},
                    C{"sliding_window_causal", "{\"window\":300}", 30011, 101},
                    C{"causal_document", "{\"dist\":\"uniform:250-700\"}", 77777, 202},
                    C{"prefix_lm_document", "{\"dist\":\"uniform:300-600\"}", 45007, 202},
                    C{"sliding_window_causal", "{\"window\":400}", 9001, 202}}) {
    auto g = p.generate(c.name, c.params, c.seqlen, c.seed);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    const TileSchedule s = build_schedule(*g.mask, /*by_query=*/true, 128);
    SCOPED_TRACE(std::string(c.name) + " " + c.params + " " + std::to_string(c.seqlen));
    EXPECT_GT(lca_flex_flash::idle_share(s), lca_flex_flash::kIdleShareFor64Keys);
    EXPECT_LE(lca_flex_flash::idle_share(s) * lca_flex_flash::mean_tiles(s), lca_flex_flash::kPersistentIdleTiles);
    for (const int32_t group : {1, 8}) EXPECT_EQ(default_forward(s, group), Sm90Forward::persistent);
  }
  auto b = p.generate("block_sparse", "{\"block\":64,\"sparsity\":0.1}", 9001, 202);
  ASSERT_EQ(b.status, LCA_OK) << b.error;
  const TileSchedule bs = build_schedule(*b.mask, /*by_query=*/true, 128);
  EXPECT_EQ(default_forward(bs, 1), Sm90Forward::skip64);
  EXPECT_EQ(default_forward(bs, 8), Sm90Forward::pair);
}

// A builtin mask's default backward schedule on 132 SMs with groups of 8 query heads a kv head.
TileSchedule default_backward_of(const char* name, const char* params, int64_t seqlen, uint64_t seed,
                                 int32_t heads_kv) {
  auto g = BuiltinProvider::instance().generate(name, params, seqlen, seed);
  EXPECT_EQ(g.status, LCA_OK) << g.error;
  if (g.status != LCA_OK) return TileSchedule{};
  return lca_flex_flash::default_backward_schedule(*g.mask, 2.0, 8, heads_kv, 132, lca_flex_flash::BwdMatch::kAuto);
}

bool any_split(const std::vector<BwdItem>& items) {
  return std::any_of(items.begin(), items.end(), [](const BwdItem& it) { return it.slot >= 0; });
}

// Every key tile of s once among single-tile items: whole, or its parts (the first from its first
// query tile).
void expect_key_tiles_once(const TileSchedule& s, const std::vector<BwdItem>& items) {
  std::vector<int> seen(static_cast<size_t>(s.row_tiles), 0);
  for (const BwdItem& it : items)
    if (it.slot < 0 || it.from_tile == 0) ++seen[static_cast<size_t>(it.tiles[0])];
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), s.row_tiles);
}

// The backward's document-local order gives way to plain walks, split, where split_long_walks splits
// some plain walks and their simulated dispatch is 20% sooner (local_walks_give_way): under two waves
// (causal documents of 1100-2400 tokens at 20011 tokens, seed 101, and 18001, seed 202, one kv head
// on 132 SMs), and over two waves where the local order holds no plain walks of its own (prolong64k
// and pile documents at 41011 and 70001 tokens with one kv head and at 23003 with two, seed 611; a
// 300-900-token question at 7001 tokens with 8 kv heads). It stays at 60013 tokens (3.6 waves, no
// walk split), with 8 kv heads at 20011, at 33001 tokens with one (258 blocks: no walk split), on
// the builtin masks at 128K, and where the question's own walks are plain in the local order over
// two waves (shared_question at 41011 tokens, seed 611: prolong512k documents with one and two kv
// heads, where the split walks ran 0.82x with two at head dim 128, and 300-900-token documents with
// 8 kv heads, 0.79x at head dim 128).
TEST(FlexSchedule, TheDocumentLocalOrderGivesWayToSplitWalksWhereTheLongestDocumentsSetTheTime) {
  struct C { const char* name; const char* params; int64_t seqlen; uint64_t seed; int32_t heads_kv; bool local; };
  for (const C c : {C{"causal_document", "{\"dist\":\"uniform:1100-2400\"}", 20011, 101, 1, false},
                    C{"causal_document", "{\"dist\":\"uniform:1100-2400\"}", 18001, 202, 1, false},
                    C{"prefix_lm_document", "{\"dist\":\"uniform:1000-3000\"}", 24007, 202, 1, false},
                    C{"causal_document", "{\"dist\":\"prolong64k\"}", 41011, 611, 1, false},
                    C{"causal_document", "{\"dist\":\"pile\"}", 70001, 611, 1, false},
                    C{"causal_document", "{\"dist\":\"prolong64k\"}", 23003, 611, 2, false},
                    C{"prefix_lm_document", "{\"dist\":\"prolong512k\",\"prefix\":40}", 70001, 611, 1, false},
                    C{"shared_question", "{\"dist\":\"uniform:300-900\"}", 7001, 611, 8, false},
                    C{"causal_document", "{\"dist\":\"uniform:1100-2400\"}", 60013, 101, 1, true},
                    C{"causal_document", "{\"dist\":\"uniform:1100-2400\"}", 20011, 101, 8, true},
                    C{"causal_document", "{\"dist\":\"uniform:1100-2400\"}", 33001, 202, 1, true},
                    C{"shared_question", "{\"dist\":\"prolong512k\"}", 41011, 611, 1, true},
                    C{"shared_question", "{\"dist\":\"prolong512k\"}", 41011, 611, 2, true},
                    C{"shared_question", "{\"dist\":\"uniform:300-900\"}", 41011, 611, 8, true},
                    C{"causal_document", "{}", 131072, 42, 1, true}, C{"shared_question", "{}", 131072, 42, 1, true}}) {
    SCOPED_TRACE(std::string(c.name) + " " + c.params + " " + std::to_string(c.seqlen) + " kv heads " +
                 std::to_string(c.heads_kv));
    const TileSchedule s = default_backward_of(c.name, c.params, c.seqlen, c.seed, c.heads_kv);
    const auto blocks = lca_flex_flash::default_backward_blocks(s, c.heads_kv, 8, 132, BwdPairing::kAuto);
    EXPECT_EQ(lca_flex_flash::local_walks(blocks.items), c.local);
    if (!c.local) {
      EXPECT_TRUE(any_split(blocks.items));
      expect_key_tiles_once(s, blocks.items);
    }
  }
}

// The skip kernel's plain walks are split (skip_split_walks) where the split simulates kUnpairGain
// sooner than the walks whole, and the kernel stays the skip kernel: short documents with one or two
// kv heads, whose blocks fit in a wave or about, and a short question that every answer sees, whose
// key tiles walk every query tile at any number of waves; walks of documents alike stay whole. The
// cells of tools/dev/matrices/ab-bwd-skip-split-wave.json (seed 303), ab-bwd-skip-split-long.json
// (seed 505) and the GPU tests (seed 404).
TEST(FlexSchedule, TheSkipKernelsWalksAreSplitWhereTheLongestSetTheTime) {
  struct C { const char* name; const char* params; int64_t seqlen; uint64_t seed; int32_t heads_kv; bool split; };
  for (const C c : {C{"causal_document", "{\"dist\":\"uniform:300-700\"}", 6007, 303, 1, true},
                    C{"causal_document", "{\"dist\":\"uniform:300-700\"}", 6007, 303, 2, true},
                    C{"causal_document", "{\"dist\":\"uniform:300-700\"}", 9088, 303, 1, true},
                    C{"causal_document", "{\"dist\":\"uniform:300-700\"}", 14011, 303, 1, true},
                    C{"prefix_lm_document", "{\"dist\":\"uniform:500-1000\"}", 6007, 303, 2, true},
                    C{"causal_document", "{\"dist\":\"uniform:250-650\"}", 6007, 404, 1, true},
                    C{"prefix_lm_document", "{\"dist\":\"uniform:300-800\"}", 6007, 404, 1, true},
                    C{"causal_document", "{\"dist\":\"uniform:300-700\"}", 9088, 303, 2, true},
                    C{"shared_question", "{\"dist\":\"uniform:300-450\"}", 9088, 505, 1, true},
                    C{"shared_question", "{\"dist\":\"uniform:300-450\"}", 20011, 505, 8, true},
                    C{"shared_question", "{\"dist\":\"uniform:300-450\"}", 75845, 505, 2, true},
                    C{"causal_document", "{\"dist\":\"uniform:300-700\"}", 20011, 505, 1, true},
                    // Documents' walks alike over a wave or more: the split would not end sooner.
                    C{"causal_document", "{\"dist\":\"uniform:300-700\"}", 14011, 303, 2, false},
                    C{"causal_document", "{\"dist\":\"uniform:300-700\"}", 9088, 505, 2, false}}) {
    SCOPED_TRACE(std::string(c.name) + " " + c.params + " " + std::to_string(c.seqlen) + " kv heads " +
                 std::to_string(c.heads_kv));
    const TileSchedule s = default_backward_of(c.name, c.params, c.seqlen, c.seed, c.heads_kv);
    const double idle = lca_flex_flash::idle_share(s), walk = lca_flex_flash::mean_tiles(s) * 8,
                 places = lca_flex_flash::span_places(lca_flex_flash::mean_span(s), 8);
    ASSERT_TRUE(lca_flex_flash::default_sm90_skip_backward(idle, walk, /*plain_walks=*/true, places));
    const auto blocks = lca_flex_flash::default_backward_blocks(s, c.heads_kv, 8, 132, BwdPairing::kAuto);
    const bool split = any_split(blocks.items);
    EXPECT_EQ(split, c.split);
    EXPECT_EQ(lca_flex_flash::sm90_backward_for(lca_flex_flash::BackwardChoice::sm90_auto, idle, walk,
                                                lca_flex_flash::plain_walks(blocks.items),
                                                lca_flex_flash::alike_walks(blocks.items), false, places),
              lca_flex_flash::Sm90Backward::skip);
    expect_key_tiles_once(s, blocks.items);
    if (split) {
      const auto whole = lca_flex_flash::default_backward_blocks(s, c.heads_kv, 8, 132, BwdPairing::kAuto,
                                                                 lca_flex_flash::BwdLocal::kAuto,
                                                                 lca_flex_flash::BwdSplit::kOff);
      EXPECT_LE(double(lca_flex_flash::simulated_default_makespan(blocks.items, c.heads_kv, 8, 132)) *
                    (1.0 + lca_flex_flash::kUnpairGain),
                double(lca_flex_flash::simulated_default_makespan(whole.items, c.heads_kv, 8, 132)));
    }
  }
}

// Forward blocks decode as the simulation orders them: every (row tile, head) once, the heads in
// groups of `together`, each group's heads inner; a count that does not divide the heads is 1.
TEST(FlexSchedule, ForwardBlocksCoverEveryRowTileAndHeadOnce) {
  using lca_flex_flash::forward_block;
  const int32_t tiles = 7, heads = 6;
  for (const int32_t together : {1, 2, 3, 6, 4, 0}) {
    const int32_t g = heads % std::max(together, 1) == 0 ? std::max(together, 1) : 1;
    std::vector<int> seen(tiles * heads, 0);
    for (int64_t n = 0; n < int64_t{tiles} * heads; ++n) {
      const auto b = forward_block(n, tiles, heads, together);
      ASSERT_GE(b.at, 0);
      ASSERT_LT(b.at, tiles);
      ASSERT_GE(b.head, 0);
      ASSERT_LT(b.head, heads);
      ++seen[b.at * heads + b.head];
      EXPECT_EQ(b.head / g, n / (int64_t{tiles} * g)) << "together " << together << ", block " << n;
      EXPECT_EQ(b.at, (n % (int64_t{tiles} * g)) / g) << "together " << together << ", block " << n;
    }
    for (int x : seen) EXPECT_EQ(x, 1) << "together " << together;
  }
}

// Heads go out together where heads outer starts the last heads' long walks late (simulated on an
// H100's 132 SMs), in the fewest that end within 2% of the soonest: global_sliding's global rows and
// causal_blockwise's last document, causal on 192-row tiles at 7K-16K (the 7383-token causal at
// 32:32 d64 where cudnn_sdpa ran 1.10x flex_flash heads outer). Not where heads outer ends within 5%
// of the soonest (causal and full on 128-row tiles at 16K, documents, long causal), nor for one head
// or no SM count.
TEST(FlexSchedule, HeadsGoOutTogetherWhereHeadsOuterStartsLongWalksLate) {
  using lca_flex_flash::forward_heads_together;
  using lca_flex_flash::simulated_forward_makespan;
  struct Cell {
    const char* name;
    const char* params;
    int64_t seqlen;
    int32_t heads, rows;
    bool together;
  };
  const std::vector<Cell> cells = {
      {"global_sliding", R"({"global_tokens":59,"window":971})", 48065, 8, 128, true},
      {"global_sliding", R"({"global_tokens":59,"window":971})", 48065, 64, 128, true},
      {"causal_blockwise", R"({"dist":"uniform:300-818"})", 102912, 32, 128, true},
      {"causal", "{}", 16384, 8, 192, true},
      {"causal", "{}", 7383, 32, 192, true},
      {"causal", "{}", 16384, 8, 128, false},
      {"causal", "{}", 129664, 8, 128, false},
      {"causal", "{}", 48065, 8, 192, false},
      {"full", "{}", 16384, 8, 128, false},
      {"causal_document", "{}", 32768, 8, 128, false},
      {"shared_question", "{}", 32768, 64, 128, false},
      {"prefix_lm_causal", R"({"prefix":98169})", 102601, 32, 192, false},
  };
  for (const auto& c : cells) {
    auto g = BuiltinProvider::instance().generate(c.name, c.params, c.seqlen, 42);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    TileSchedule s = build_schedule(*g.mask, /*by_query=*/true, c.rows);
    SCOPED_TRACE(std::string(c.name) + " " + c.params + " " + std::to_string(c.seqlen) + " heads " +
                 std::to_string(c.heads) + " rows " + std::to_string(c.rows));
    const int64_t outer = simulated_forward_makespan(s, c.heads, 132);
    const int32_t together = forward_heads_together(s, c.heads, 132);
    EXPECT_EQ(together > 1, c.together) << together;
    EXPECT_EQ(c.heads % together, 0) << together;
    s.heads_together = together;
    const int64_t end = simulated_forward_makespan(s, c.heads, 132);
    if (c.together) EXPECT_LE(double(end), lca_flex_flash::kTogetherGain * double(outer));
    else EXPECT_EQ(end, outer);
    for (int32_t more = together * 2; more < c.heads; more *= 2) {  // fewer heads would not do
      s.heads_together = more;
      EXPECT_GE(double(simulated_forward_makespan(s, c.heads, 132)) * lca_flex_flash::kTogetherSlack, double(end));
    }
    s.heads_together = 1;
    EXPECT_EQ(forward_heads_together(s, 1, 132), 1);
    EXPECT_EQ(forward_heads_together(s, c.heads, 0), 1);
  }
}

// The backwards measured slower with first writers of dQ (an H100, d128, 125611 tokens,
// docs/results/2026-12-07-h100-bwd-first-writers.md): causal_document with 2K-20K-token documents
// (heads 64:8 and 8:1) and shared_question with prolong64k documents (64:8) ran 1.10-1.30x faster
// without. There the first long walk of each document was the first visitor of its whole walk;
// capped at kFirstWriterBlockTiles a block, too few tiles keep one and none do. The windows
// measured faster with them keep them (sliding_window with a 1517-token window: 8:1 at 66836 and
// 125611 tokens, 64:8 at 46374, 1.08x).
TEST(FlexSchedule, LongDocumentsHaveNoFirstWritersOfDq) {
  auto& p = BuiltinProvider::instance();
  auto first_writers = [&](const char* name, const char* params, int64_t seqlen, int32_t heads_kv) {
    auto g = p.generate(name, params, seqlen, 42);
    EXPECT_EQ(g.status, LCA_OK) << g.error;
    const TileSchedule s = build_schedule(*g.mask, /*by_query=*/false, 128);
    const auto b = lca_flex_flash::default_backward_blocks(s, heads_kv, 8, 132, BwdPairing::kAuto);
    EXPECT_TRUE(lca_flex_flash::plain_walks(b.items)) << name << " " << seqlen;
    // Before the cap: a block was the first visitor of over a hundred query tiles.
    const auto all = lca_flex_flash::dq_first_writers(s, b.items, heads_kv, 8, b.kv_heads_together, 132, /*timed=*/false);
    std::map<int32_t, int32_t> writes;
    int32_t most = 0;
    for (const int32_t k : all.key_tile)
      if (k >= 0) most = std::max(most, ++writes[k]);
    return std::pair{lca_flex_flash::dq_first_writers(s, b.items, heads_kv, 8, b.kv_heads_together, 132).tiles, most};
  };
  for (const int32_t heads_kv : {8, 1}) {
    const auto [tiles, most] = first_writers("causal_document", R"({"dist":"uniform:2048-20480"})", 125611, heads_kv);
    EXPECT_EQ(tiles, 0) << heads_kv;
    EXPECT_GT(most, 100) << heads_kv;
  }
  EXPECT_EQ(first_writers("shared_question", R"({"dist":"prolong64k"})", 125611, 8).first, 0);
  for (const int64_t seqlen : {46374, 66836, 125611})
    EXPECT_GT(first_writers("sliding_window", R"({"window":1517})", seqlen, 1).first, 0) << seqlen;
}


// plan_info's backward dispatch_over_spread: the default blocks' simulated dispatch, in the order
// they go out, over their work spread evenly over the SMs. Full's equal walks over many waves end
// with the spread; prefix_lm_causal with a 5767-token prefix at 18599 tokens, one kv head (seed
// 1212005, a sweep's cliff at 0.61 of its own full on an H100) has 144 blocks on 132 SMs, and two
// pairs of the prefix's key tiles run on after the rest: its dispatch ends about 1.5x the spread.
TEST(FlexSchedule, DispatchOverSpreadTellsATailFromWholeWaves) {
  using lca_flex_flash::BwdMatch;
  using lca_flex_flash::dispatch_over_spread;
  auto& p = BuiltinProvider::instance();
  auto of = [&](const char* name, const char* params, int64_t seqlen, uint64_t seed, int32_t heads_kv, int32_t group) {
    auto g = p.generate(name, params, seqlen, seed);
    EXPECT_EQ(g.status, LCA_OK) << g.error;
    const TileSchedule s = lca_flex_flash::default_backward_schedule(*g.mask, 391.0 / 196.0, group, heads_kv, 132,
                                                                     BwdMatch::kAuto);
    const auto b = lca_flex_flash::default_backward_blocks(s, heads_kv, group, 132, BwdPairing::kAuto);
    EXPECT_EQ(dispatch_over_spread(b.items, heads_kv, group, 0, b.kv_heads_together), 0.0);
    return dispatch_over_spread(b.items, heads_kv, group, 132, b.kv_heads_together);
  };
  const double full = of("full", "{}", 65536, 42, 8, 8);
  EXPECT_GE(full, 1.0);
  EXPECT_LT(full, 1.05);  // 4096 blocks: 31.03 waves, the last one 4 blocks deep
  const double prefix = of("prefix_lm_causal", "{\"prefix\":5767}", 18599, 1212005, 1, 8);
  EXPECT_GT(prefix, 1.4);
  EXPECT_LT(prefix, 1.7);
  // Its makespan against the blocks' cost is what unpairing is weighed on (unpaired_under_a_wave).
  EXPECT_GT(prefix, full + 0.3);
  std::printf("[dispatch] full %.3f prefix_lm_causal %.3f\n", full, prefix);
}

}  // namespace

}  // namespace lca::test
