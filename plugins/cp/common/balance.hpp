// Load balance for the `balanced` strategy: the sequence is cut into chunks along q, the mask's
// cells are counted per (q chunk, k chunk) pair, and the chunks go to context groups so that
// every group holds the same number of chunks (the same tokens, within one chunk's rounding)
// and the largest group's cell count is as small as the solver finds. Used by layout.hpp (the
// dispatch), context_stage.hpp (which KV chunks a group fetches) and the scaling model.
// Rule: pure functions of (slices, seqlen, groups, chunks): every rank computes the same answer.
#pragma once

#include "slice_clip.hpp"

#include <lca/abi.h>
#include <lca/error.hpp>
#include <lca/types.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace lca::cp {

struct Balance {
  std::vector<int64_t> bounds;           // chunk c is tokens [bounds[c], bounds[c + 1])
  std::vector<int64_t> area;             // cells of chunk i's rows x chunk j's columns, at i * n + j
  std::vector<int> owner;                // context group of each chunk
  std::vector<std::vector<int>> chunks;  // per group, its chunks in ascending (buffer) order

  int count() const { return static_cast<int>(bounds.size()) - 1; }
  int64_t rows_area(int i) const {
    const int n = count();
    return std::accumulate(area.begin() + int64_t(i) * n, area.begin() + int64_t(i + 1) * n, int64_t(0));
  }
  int64_t group_area(int g) const {
    int64_t a = 0;
    for (int c : chunks[g]) a += rows_area(c);
    return a;
  }
  // The chunk holding token t.
  int chunk_of(int64_t t) const {
    return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), t) - bounds.begin()) - 1;
  }
  // Whether group g's rows see any cell of chunk j's columns.
  bool touches(int g, int j) const {
    const int n = count();
    for (int i : chunks[g])
      if (area[int64_t(i) * n + j] > 0) return true;
    return false;
  }
};

// n chunks spread evenly over [0, S): lengths differ by at most one token.
inline std::vector<int64_t> even_bounds(int64_t S, int n) {
  std::vector<int64_t> b(n + 1);
  for (int i = 0; i <= n; ++i) b[i] = S / n * i + std::min<int64_t>(i, S % n);
  return b;
}

// Cells of every (q chunk, k chunk) pair, each slice clipped to the pairs it spans.
inline std::vector<int64_t> chunk_areas(const std::vector<lca_slice>& slices, const std::vector<int64_t>& bounds) {
  const int n = static_cast<int>(bounds.size()) - 1;
  std::vector<int64_t> area(int64_t(n) * n, 0);
  auto first_chunk = [&](int64_t t) {
    return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), t) - bounds.begin()) - 1;
  };
  std::vector<lca_slice> pieces;
  for (const lca_slice& s : slices) {
    if (s.q_end <= s.q_begin || s.k_end <= s.k_begin) continue;
    int64_t lo, hi;
    slice_band(s, &lo, &hi);
    for (int i = first_chunk(s.q_begin); i < n && bounds[i] < s.q_end; ++i) {
      // Only the columns this row chunk's band can reach.
      const int64_t qa = std::max(s.q_begin, bounds[i]), qb = std::min(s.q_end, bounds[i + 1]);
      const int64_t ka = std::max(s.k_begin, lo == -kUnbounded ? s.k_begin : qa + lo);
      const int64_t kb = std::min(s.k_end, hi == kUnbounded ? s.k_end : qb - 1 + hi + 1);
      if (ka >= kb) continue;
      for (int j = first_chunk(ka); j < n && bounds[j] < kb; ++j) {
        pieces.clear();
        clip_slice(s, bounds[i], bounds[i + 1], bounds[j], bounds[j + 1], pieces);
        for (const lca_slice& p : pieces) area[int64_t(i) * n + j] += slice_area(p);
      }
    }
  }
  return area;
}

// What a tiled kernel computes of each chunk's rows: its (tile_rows x tile_cols) tiles that hold a
// cell, tiles aligned to each chunk's start (a rank's buffers put its chunks one after another),
// plus `row_tile_cost` tiles' worth for every row tile that has any (its fixed cost: loading its
// queries, the first and last steps). Short documents fill tiles in part and cost whole tiles, which
// the cell count does not see. A row tile's columns are taken as the hull of each slice's band over
// its rows (exact for the band slices masks are made of).
inline std::vector<int64_t> chunk_tile_weights(const std::vector<lca_slice>& slices,
                                               const std::vector<int64_t>& bounds, int64_t tile_rows = 128,
                                               int64_t tile_cols = 64, int64_t row_tile_cost = 2) {
  const int n = static_cast<int>(bounds.size()) - 1;
  std::vector<int64_t> weight(n, 0);
  std::vector<const lca_slice*> sorted;
  for (const lca_slice& s : slices)
    if (slice_area(s) > 0) sorted.push_back(&s);
  std::sort(sorted.begin(), sorted.end(), [](const lca_slice* a, const lca_slice* b) { return a->q_begin < b->q_begin; });
  auto chunk_of = [&](int64_t t) {
    return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), t) - bounds.begin()) - 1;
  };
  std::vector<const lca_slice*> active;
  struct Cols {
    int j;
    int64_t first, last;  // column tiles [first, last) of chunk j
  };
  std::vector<Cols> cols;
  size_t next = 0;
  for (int i = 0; i < n; ++i)
    for (int64_t a = bounds[i]; a < bounds[i + 1]; a += tile_rows) {
      const int64_t b = std::min(a + tile_rows, bounds[i + 1]);
      while (next < sorted.size() && sorted[next]->q_begin < b) active.push_back(sorted[next++]);
      active.erase(std::remove_if(active.begin(), active.end(), [&](const lca_slice* s) { return s->q_end <= a; }),
                   active.end());
      cols.clear();
      for (const lca_slice* s : active) {
        if (s->q_begin >= b) continue;
        int64_t lo, hi;
        slice_band(*s, &lo, &hi);
        const int64_t qa = std::max(a, s->q_begin), qb = std::min(b, s->q_end);
        const int64_t ka = std::max(s->k_begin, lo == -kUnbounded ? s->k_begin : qa + lo);
        const int64_t kb = std::min(s->k_end, hi == kUnbounded ? s->k_end : qb - 1 + hi + 1);
        if (ka >= kb) continue;
        for (int j = chunk_of(ka); j < n && bounds[j] < kb; ++j) {
          const int64_t x = std::max(ka, bounds[j]) - bounds[j], y = std::min(kb, bounds[j + 1]) - bounds[j];
          cols.push_back({j, x / tile_cols, (y + tile_cols - 1) / tile_cols});
        }
      }
      if (cols.empty()) continue;
      std::sort(cols.begin(), cols.end(),
                [](const Cols& x, const Cols& y) { return x.j != y.j ? x.j < y.j : x.first < y.first; });
      int64_t tiles = 0;
      for (size_t c = 0; c < cols.size();) {  // the union of each chunk's column tile runs
        const int j = cols[c].j;
        int64_t first = cols[c].first, last = cols[c].last;
        for (++c; c < cols.size() && cols[c].j == j; ++c) {
          if (cols[c].first > last) tiles += last - first, first = cols[c].first;
          last = std::max(last, cols[c].last);
        }
        tiles += last - first;
      }
      if (tiles > 0) weight[i] += tiles + row_tile_cost;
    }
  return weight;
}

// Chunks to `groups` groups of equal counts (n % groups of them hold one more), minimising the
// largest group's area: greedy largest-first into the lightest group with room, then pairwise
// swaps that lower the heaviest group while they help.
inline std::vector<int> assign_chunks(const std::vector<int64_t>& weight, int groups) {
  const int n = static_cast<int>(weight.size());
  std::vector<int> quota(groups, n / groups), owner(n, -1), order(n);
  for (int g = 0; g < n % groups; ++g) ++quota[g];
  std::vector<int64_t> load(groups, 0);
  std::vector<int> held(groups, 0);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return weight[a] > weight[b]; });
  for (int c : order) {
    int best = -1;
    for (int g = 0; g < groups; ++g)
      if (held[g] < quota[g] && (best < 0 || load[g] < load[best])) best = g;
    owner[c] = best;
    load[best] += weight[c];
    ++held[best];
  }
  // Swap a chunk of the heaviest group with a lighter chunk elsewhere when that lowers the
  // heaviest load without raising the other group to it; stop when no swap helps.
  for (int round = 0; round < 4 * n; ++round) {
    const int h = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
    int64_t best_gain = 0;
    int bi = -1, bj = -1;
    std::vector<int> mine;
    for (int i = 0; i < n; ++i)
      if (owner[i] == h) mine.push_back(i);
    for (int i : mine) {
      for (int j = 0; j < n; ++j) {
        const int g = owner[j];
        if (g == h || weight[j] >= weight[i]) continue;
        const int64_t d = weight[i] - weight[j];
        if (load[g] + d >= load[h]) continue;
        const int64_t gain = std::min(d, load[h] - (load[g] + d));
        if (gain > best_gain) best_gain = gain, bi = i, bj = j;
      }
    }
    if (bi < 0) break;
    const int g = owner[bj];
    load[h] += weight[bj] - weight[bi];
    load[g] += weight[bi] - weight[bj];
    std::swap(owner[bi], owner[bj]);
  }
  return owner;
}

// The largest group's summed weight under an assignment of chunks to groups.
inline int64_t largest_load(const std::vector<int64_t>& weight, const std::vector<int>& owner, int groups) {
  std::vector<int64_t> load(groups, 0);
  for (size_t c = 0; c < owner.size(); ++c) load[owner[c]] += weight[c];
  return *std::max_element(load.begin(), load.end());
}

// What the dispatch weighs a chunk by: the cells of its rows, or the tiles a tiled kernel computes
// for them (chunk_tile_weights).
enum class BalanceBy { cells, tiles };

// The balanced split with exactly chunks_per_group chunks a group (arguments checked by make_balance).
inline Balance split_in_chunks(const std::vector<lca_slice>& slices, int64_t S, int groups, int chunks_per_group,
                               BalanceBy by) {
  const int n = static_cast<int>(std::min<int64_t>(int64_t(groups) * chunks_per_group, S));
  Balance b;
  b.bounds = even_bounds(S, n);
  b.area = chunk_areas(slices, b.bounds);
  std::vector<int64_t> cells(n);
  for (int i = 0; i < n; ++i) cells[i] = b.rows_area(i);
  b.owner = assign_chunks(cells, groups);
  if (by == BalanceBy::tiles) {
    // The split by tiles, unless the split by cells already holds fewer tiles in its largest group.
    const std::vector<int64_t> tiles = chunk_tile_weights(slices, b.bounds);
    const std::vector<int> by_tiles = assign_chunks(tiles, groups);
    if (largest_load(tiles, by_tiles, groups) < largest_load(tiles, b.owner, groups)) b.owner = by_tiles;
  }
  b.chunks.assign(groups, {});
  for (int c = 0; c < n; ++c) b.chunks[b.owner[c]].push_back(c);
  return b;
}

// The chunks a group where the option leaves the count out (chunks_per_group 0): kBaseChunks,
// doubled while the doubled split's largest group holds under 1 / (1 + kChunkDoublingCost) of the
// cells of the split before it, chunks stay at least kMinChunkTokens long and at most
// kMostChunks a group. Doubling the chunks costs what it does not rebalance: more segments to fetch
// and merge, more tiles cut at chunk starts. Measured on 4 H200s (cp-balance, 32K tokens a GPU, the
// 60 document cells whose split by 8 is balanced already): 16 chunks ran 0.85-1.23x 8 (geomean
// 0.99), 32 chunks 0.74-1.16x (0.93), about 3.5% a doubling; the rule takes 5%, which also covers
// the runs' spread. Where the last long document of causal_blockwise left the heaviest of 4 groups
// of 8 chunks 1.52x the mean, 16 chunks ran 1.33-1.52x. Confirmed on other lengths and draws in
// docs/cp.md (a training step 0.90-2.31x, geomean 1.16, where the rule changes the split). Since
// fetches travel in message runs (cast_plan.hpp) a doubling measured about free on average (16
// chunks 1.01x, 32 chunks 0.99x, cells moving up to 12% either way); the 5% stays, since a lower
// charge sends many masks to 64 chunks a group, never measured.
inline constexpr int kBaseChunks = 8;
inline constexpr double kChunkDoublingCost = 0.05;
inline constexpr int64_t kMinChunkTokens = 256;
inline constexpr int kMostChunks = 64;

// The cells of the largest group of the balanced split by cells with chunks_per_group chunks a group.
inline int64_t largest_group_cells(const std::vector<lca_slice>& slices, int64_t S, int groups, int chunks_per_group) {
  const Balance b = split_in_chunks(slices, S, groups, chunks_per_group, BalanceBy::cells);
  int64_t most = 0;
  for (int g = 0; g < groups; ++g) most = std::max(most, b.group_area(g));
  return most;
}

inline int auto_chunks(const std::vector<lca_slice>& slices, int64_t S, int groups) {
  int chunks = kBaseChunks;
  int64_t cells = largest_group_cells(slices, S, groups, chunks);
  while (2 * chunks <= kMostChunks && S / (int64_t(groups) * 2 * chunks) >= kMinChunkTokens) {
    const int64_t doubled = largest_group_cells(slices, S, groups, 2 * chunks);
    if (double(doubled) * (1.0 + kChunkDoublingCost) >= double(cells)) break;
    chunks *= 2;
    cells = doubled;
  }
  return chunks;
}

// The balanced split of a mask over `groups` context groups, chunks_per_group chunks each (0: as
// many as auto_chunks picks).
inline Balance make_balance(const std::vector<lca_slice>& slices, int64_t S, int groups, int chunks_per_group,
                            BalanceBy by = BalanceBy::cells) {
  require(groups >= 1 && chunks_per_group >= 0, LCA_ERR_INVALID_ARGUMENT,
          "balanced: chunks_per_rank must be >= 1, got " + std::to_string(chunks_per_group));
  require(S >= groups, LCA_ERR_UNSUPPORTED,
          "balanced: " + std::to_string(S) + " tokens cannot give each of " + std::to_string(groups) +
              " context groups a chunk");
  const int chunks = chunks_per_group > 0 ? chunks_per_group : auto_chunks(slices, S, groups);
  return split_in_chunks(slices, S, groups, chunks, by);
}

}  // namespace lca::cp
