// Tile classification: for each row tile, every slice that reaches it contributes the column
// tiles it touches and, when it covers all 64 rows of the tile, those it covers completely. A
// tile covered completely by one slice and touched by no other is full; any other touched tile
// is partial and gets a bitmask rasterized row by row from the slices; a partial tile whose
// bitmask turns out all ones is full, and tiles with equal bitmasks share one. Memory is O(runs +
// distinct bitmasks), never O(tiles^2).
#include "schedule.hpp"

#include <lca/error.hpp>
#include <lca/types.hpp>

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>
#include <queue>
#include <unordered_map>

namespace lca_flex_flash {

namespace {

struct Span {
  int64_t begin, end;
};

// The slice's extent along the row axis and the visible column range of one row.
Span row_span(const lca_slice& s, bool by_query) {
  return by_query ? Span{s.q_begin, s.q_end} : Span{s.k_begin, s.k_end};
}
Span col_range(const lca_slice& s, int64_t row, bool by_query) {
  Span r{};
  if (by_query) lca::slice_row_range(s, row, &r.begin, &r.end);
  else lca::slice_col_range(s, row, &r.begin, &r.end);
  return r;
}

// What one slice does to one row tile, in column tiles.
struct Reach {
  int32_t touch_begin, touch_end;  // tiles with at least one visible cell (a superset)
  int32_t full_begin, full_end;    // tiles every row of the row tile sees completely
};

bool reach_of(const lca_slice& s, bool by_query, int64_t r0, int64_t r1, bool whole_tile, Reach* out) {
  const Span span = row_span(s, by_query);
  const int64_t a = std::max(r0, span.begin), b = std::min(r1, span.end);
  if (a >= b) return false;
  int64_t lo_min = std::numeric_limits<int64_t>::max(), hi_max = std::numeric_limits<int64_t>::min();
  int64_t lo_max = lo_min, hi_min = hi_max;
  bool first = true, any_empty = false;
  // FULL slices see the same columns on every row; the other types are linear in the row, so
  // their extremes sit at the ends, but empty rows break that: walk the rows (at most 64).
  const int64_t last = s.type == LCA_SLICE_FULL ? a + 1 : b;
  for (int64_t row = a; row < last; ++row) {
    const Span c = col_range(s, row, by_query);
    if (c.end <= c.begin) {
      any_empty = true;
      continue;
    }
    lo_min = std::min(lo_min, c.begin);
    hi_max = std::max(hi_max, c.end);
    if (first) {
      lo_max = c.begin;
      hi_min = c.end;
      first = false;
    } else {
      lo_max = std::max(lo_max, c.begin);
      hi_min = std::min(hi_min, c.end);
    }
  }
  if (first) return false;  // no row sees anything
  out->touch_begin = static_cast<int32_t>(lo_min / kTileCols);
  out->touch_end = static_cast<int32_t>((hi_max + kTileCols - 1) / kTileCols);
  out->full_begin = out->full_end = 0;
  if (whole_tile && a == r0 && b == r1 && !any_empty) {
    const int64_t fb = (lo_max + kTileCols - 1) / kTileCols, fe = hi_min / kTileCols;
    if (fe > fb) {
      out->full_begin = static_cast<int32_t>(fb);
      out->full_end = static_cast<int32_t>(fe);
    }
  }
  return true;
}

// Each distinct partial-tile bitmask once: tiles with the same pattern (the diagonal tiles of a
// causal mask, the half-tile blocks of a block-sparse one) share it, so that the bitmasks take
// memory by distinct pattern, not by tile (a 512K block-sparse mask has ~25M partial 128x64
// tiles: 25 GiB of bitmasks unshared, a few KiB shared).
class PatternStore {
 public:
  // The index (in patterns of `words` words) of `pattern` in `bits`, appended if new.
  int32_t intern(const uint64_t* pattern, int64_t words, std::vector<uint64_t>& bits) {
    // Most tiles repeat one of the last few patterns (a mask's structure repeats along a row):
    // compare with those before hashing 64-128 words.
    for (const int32_t recent : recent_)
      if (recent >= 0 && std::equal(pattern, pattern + words, bits.data() + static_cast<size_t>(recent) * words))
        return recent;
    const int32_t found = lookup(pattern, words, bits);
    recent_[next_recent_] = found;
    next_recent_ = (next_recent_ + 1) % kRecent;
    return found;
  }

 private:
  static constexpr int kRecent = 4;

  int32_t lookup(const uint64_t* pattern, int64_t words, std::vector<uint64_t>& bits) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t i = 0; i < words; ++i) h = (h ^ pattern[i]) * 1099511628211ull;
    auto [lo, hi] = index_.equal_range(h);
    for (auto it = lo; it != hi; ++it)
      if (std::equal(pattern, pattern + words, bits.data() + static_cast<size_t>(it->second) * words)) return it->second;
    const int64_t index = static_cast<int64_t>(bits.size()) / words;
    lca::require(index < std::numeric_limits<int32_t>::max(), LCA_ERR_UNSUPPORTED,
                 "flex_flash: too many distinct partial-tile patterns for 32-bit mask indices");
    bits.insert(bits.end(), pattern, pattern + words);
    index_.emplace(h, static_cast<int32_t>(index));
    return static_cast<int32_t>(index);
  }

  std::unordered_multimap<uint64_t, int32_t> index_;
  int32_t recent_[kRecent] = {-1, -1, -1, -1};
  int next_recent_ = 0;
};

// A point of the sweep over one row tile's column tiles; at equal columns, ends come first.
enum EventKind : int32_t { kTouchEnd = 0, kFullEnd = 1, kFullBegin = 2, kTouchBegin = 3 };
struct Event {
  int32_t col;
  int32_t kind;
  int32_t slice;  // index into the row tile's touching slices
};

void set_bits(uint64_t* word, int64_t lo, int64_t hi) {
  if (hi <= lo) return;
  const uint64_t upper = hi >= 64 ? ~uint64_t{0} : ((uint64_t{1} << hi) - 1);
  const uint64_t lower = (uint64_t{1} << lo) - 1;
  *word |= upper & ~lower;
}

// Column tile `col` of row tile t (the row tile being built: its runs are s.runs' last ones), fully
// visible: onto the last run if that one is full and ends there.
void add_full_tile(TileSchedule& s, int32_t t, int32_t col) {
  TileRun* last = s.runs.size() > static_cast<size_t>(s.run_offsets[t]) ? &s.runs.back() : nullptr;
  if (last != nullptr && last->mask < 0 && last->end == col) ++last->end;
  else s.runs.push_back(TileRun{col, col + 1, -1, 0});
  ++s.full_tiles;
}

// Column tile `col` of row tile t, partial: its bitmask (s.tile_rows words) stored once in the
// schedule's store, its half bits (128-row tiles), and onto the last run if that one is partial, ends
// there, has the same half bits and its masks continue into this one's.
void add_partial_tile(TileSchedule& s, PatternStore& patterns, int32_t t, int32_t col, const uint64_t* pattern) {
  const int64_t rows = s.tile_rows;
  const int32_t index = patterns.intern(pattern, rows, s.bits);
  int32_t halves = 0;
  if (rows > kTile) {  // 128 or 192 rows: their 64-row parts
    for (int h = 0; h < rows / kTile; ++h) {
      const uint64_t* first = pattern + h * kTile;
      if (std::all_of(first, first + kTile, [](uint64_t w) { return w == 0; })) halves |= kIdleHalf << h;
      // Every column of every row (a half past the last row or column has zero words).
      if (std::all_of(first, first + kTile, [](uint64_t w) { return w == ~uint64_t{0}; })) halves |= kFullHalf << h;
    }
  }
  TileRun* last = s.runs.size() > static_cast<size_t>(s.run_offsets[t]) ? &s.runs.back() : nullptr;
  if (last != nullptr && last->mask >= 0 && last->end == col && last->mask + (last->end - last->begin) == index &&
      last->halves == halves)
    ++last->end;
  else s.runs.push_back(TileRun{col, col + 1, index, halves});
  ++s.partial_tiles;
  for (int h = 0; h < rows / kTile; ++h) s.idle_halves += (halves >> h) & kIdleHalf;
}

// Row tile t's runs are all added: its end in run_offsets.
void end_row_tile(TileSchedule& s, int32_t t) {
  lca::require(s.runs.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), LCA_ERR_UNSUPPORTED,
               "flex_flash: the mask needs more tile runs than 32-bit run offsets hold");
  s.run_offsets[static_cast<size_t>(t) + 1] = static_cast<int32_t>(s.runs.size());
}

// The launch order (most tiles first: cost[t] is row tile t's tiles), busy_tiles and max_tiles.
void finish_order(TileSchedule& s, const std::vector<int64_t>& cost) {
  s.order.resize(static_cast<size_t>(s.row_tiles));
  std::iota(s.order.begin(), s.order.end(), 0);
  std::stable_sort(s.order.begin(), s.order.end(), [&](int32_t a, int32_t b) { return cost[a] > cost[b]; });
  // A row tile has runs exactly where it has cost, so the sort put those without last.
  for (int32_t t = 0; t < s.row_tiles; ++t) s.busy_tiles += s.run_offsets[t] < s.run_offsets[t + 1];
  if (s.row_tiles > 0) s.max_tiles = static_cast<int32_t>(cost[static_cast<size_t>(s.order[0])]);
}

}  // namespace

TileSchedule build_schedule(const lca_mask& mask, bool by_query, int32_t tile_rows) {
  lca::require(tile_rows == 64 || tile_rows == 128 || tile_rows == 192, LCA_ERR_INTERNAL,
               "flex_flash: tile rows must be 64, 128 or 192");
  TileSchedule s;
  s.tile_rows = tile_rows;
  const int64_t R = tile_rows;
  s.rows = by_query ? mask.seqlen_q : mask.seqlen_k;
  s.cols = by_query ? mask.seqlen_k : mask.seqlen_q;
  lca::require(s.rows / R < std::numeric_limits<int32_t>::max() / 2 && mask.num_slices < (int64_t{1} << 31),
               LCA_ERR_UNSUPPORTED, "flex_flash: the mask is too large for 32-bit tile indices");
  s.row_tiles = static_cast<int32_t>((s.rows + R - 1) / R);
  s.col_tiles = static_cast<int32_t>((s.cols + kTileCols - 1) / kTileCols);

  // Slices bucketed by the row tiles they span (CSR).
  std::vector<int64_t> bucket_offsets(static_cast<size_t>(s.row_tiles) + 1, 0);
  auto tiles_of = [&](const lca_slice& sl) {
    const Span span = row_span(sl, by_query);
    const bool empty = span.end <= span.begin || sl.q_end <= sl.q_begin || sl.k_end <= sl.k_begin;
    return empty ? Span{0, 0} : Span{span.begin / R, (span.end + R - 1) / R};
  };
  for (int64_t i = 0; i < mask.num_slices; ++i) {
    const Span t = tiles_of(mask.slices[i]);
    for (int64_t r = t.begin; r < t.end; ++r) ++bucket_offsets[r + 1];
  }
  std::partial_sum(bucket_offsets.begin(), bucket_offsets.end(), bucket_offsets.begin());
  std::vector<int32_t> bucket(static_cast<size_t>(bucket_offsets.back()));
  {
    std::vector<int64_t> cursor(bucket_offsets.begin(), bucket_offsets.end() - 1);
    for (int64_t i = 0; i < mask.num_slices; ++i) {
      const Span t = tiles_of(mask.slices[i]);
      for (int64_t r = t.begin; r < t.end; ++r) bucket[cursor[r]++] = static_cast<int32_t>(i);
    }
  }

  s.run_offsets.assign(static_cast<size_t>(s.row_tiles) + 1, 0);
  std::vector<int64_t> cost(static_cast<size_t>(s.row_tiles), 0);
  std::vector<Event> events;
  std::vector<int32_t> touching, active, active_pos;
  std::vector<Reach> reaches;
  std::vector<uint64_t> scratch;  // the bitmasks of the tiles being classified
  PatternStore patterns;
  for (int32_t t = 0; t < s.row_tiles; ++t) {
    const int64_t r0 = int64_t{t} * R, r1 = std::min(r0 + R, s.rows);
    const bool whole = r1 - r0 == R;
    touching.clear();
    reaches.clear();
    for (int64_t b = bucket_offsets[t]; b < bucket_offsets[t + 1]; ++b) {
      Reach reach{};
      if (!reach_of(mask.slices[bucket[b]], by_query, r0, r1, whole, &reach)) continue;
      touching.push_back(bucket[b]);
      reaches.push_back(reach);
    }
    // Sweep over column tiles: touch count and full count per elementary segment, and the
    // slices active there (only those are rasterized: a block-sparse row tile has thousands of
    // slices, each over one or two segments).
    events.clear();
    for (size_t i = 0; i < reaches.size(); ++i) {
      const Reach& r = reaches[i];
      const auto idx = static_cast<int32_t>(i);
      events.push_back(Event{r.touch_begin, kTouchBegin, idx});
      events.push_back(Event{r.touch_end, kTouchEnd, idx});
      if (r.full_end > r.full_begin) {
        events.push_back(Event{r.full_begin, kFullBegin, idx});
        events.push_back(Event{r.full_end, kFullEnd, idx});
      }
    }
    std::sort(events.begin(), events.end(),
              [](const Event& a, const Event& b) { return a.col < b.col || (a.col == b.col && a.kind < b.kind); });
    active.clear();
    active_pos.assign(reaches.size(), -1);
    int32_t full = 0;
    for (size_t e = 0; e < events.size();) {
      const int32_t x = events[e].col;
      for (; e < events.size() && events[e].col == x; ++e) {
        const Event& ev = events[e];
        switch (ev.kind) {
          case kFullBegin: ++full; break;
          case kFullEnd: --full; break;
          case kTouchBegin:
            active_pos[ev.slice] = static_cast<int32_t>(active.size());
            active.push_back(ev.slice);
            break;
          case kTouchEnd: {
            const int32_t at = active_pos[ev.slice], moved = active.back();
            active[at] = moved;
            active_pos[moved] = at;
            active.pop_back();
            break;
          }
        }
      }
      if (e == events.size()) break;
      const int32_t y = events[e].col;
      if (active.empty() || y <= x) continue;
      const bool is_full = active.size() == 1 && full == 1;
      TileRun* prev = s.runs.size() > static_cast<size_t>(s.run_offsets[t]) ? &s.runs.back() : nullptr;
      if (is_full) {
        if (prev != nullptr && prev->mask < 0 && prev->end == x) prev->end = y;
        else s.runs.push_back(TileRun{x, y, -1, 0});
        s.full_tiles += y - x;
      } else {
        // Rasterize the touched tiles [x, y) from every slice active there, then give each its
        // pattern: a tile that every row and column of sees completely is full after all (two
        // half-tile blocks of a block-sparse mask, say), any other pattern is stored once and
        // shared by every tile that has it.
        const int32_t n = y - x;
        scratch.assign(static_cast<size_t>(n) * R, 0);
        for (const int32_t i : active) {
          const lca_slice& sl = mask.slices[touching[i]];
          const Span span = row_span(sl, by_query);
          const int64_t a = std::max(r0, span.begin), b = std::min(r1, span.end);
          if (sl.type == LCA_SLICE_FULL) {
            // The same columns on every row: each tile's word once, OR-ed down the rows.
            const Span c = col_range(sl, a, by_query);
            const int64_t c0 = std::max<int64_t>(c.begin, int64_t{x} * kTileCols);
            const int64_t c1 = std::min<int64_t>(c.end, int64_t{y} * kTileCols);
            for (int64_t col_tile = c0 / kTileCols; col_tile * kTileCols < c1; ++col_tile) {
              const int64_t base = col_tile * kTileCols;
              uint64_t word = 0;
              set_bits(&word, std::max(c0, base) - base, std::min(c1, base + kTileCols) - base);
              uint64_t* column = &scratch[static_cast<size_t>(col_tile - x) * R];
              for (int64_t row = a; row < b; ++row) column[row - r0] |= word;
            }
            continue;
          }
          for (int64_t row = a; row < b; ++row) {
            const Span c = col_range(sl, row, by_query);
            const int64_t c0 = std::max<int64_t>(c.begin, int64_t{x} * kTileCols);
            const int64_t c1 = std::min<int64_t>(c.end, int64_t{y} * kTileCols);
            for (int64_t col_tile = c0 / kTileCols; col_tile * kTileCols < c1; ++col_tile) {
              const int64_t base = col_tile * kTileCols;
              uint64_t* word = &scratch[static_cast<size_t>(col_tile - x) * R + (row - r0)];
              set_bits(word, std::max(c0, base) - base, std::min(c1, base + kTileCols) - base);
            }
          }
        }
        for (int32_t i = 0; i < n; ++i) {
          const uint64_t* pattern = &scratch[static_cast<size_t>(i) * R];
          const int32_t col = x + i;
          const bool inside = whole && (int64_t{col} + 1) * kTileCols <= s.cols;
          if (inside && std::all_of(pattern, pattern + R, [](uint64_t w) { return w == ~uint64_t{0}; }))
            add_full_tile(s, t, col);
          else add_partial_tile(s, patterns, t, col, pattern);
        }
      }
      cost[t] += y - x;
    }
    end_row_tile(s, t);
  }
  finish_order(s, cost);
  return s;
}

TileSchedule build_adaptive_schedule(const lca_mask& mask, bool by_query, int32_t wide_rows, double wide_speedup) {
  TileSchedule wide = build_schedule(mask, by_query, wide_rows);
  // A wide tile is touched only where one of the narrow tiles it covers is, so it holds at most
  // twice their cells: from a 2x speedup on, the narrow tiles cannot win and are not built (a
  // 512K block-sparse schedule takes seconds).
  if (wide_rows == kTile || wide_speedup * kTile >= wide_rows) return wide;
  TileSchedule narrow = build_schedule(mask, by_query, kTile);
  const double cells_wide = double(wide.full_tiles + wide.partial_tiles) * wide.tile_rows;
  const double cells_narrow = double(narrow.full_tiles + narrow.partial_tiles) * narrow.tile_rows;
  return cells_narrow * wide_speedup < cells_wide ? narrow : wide;
}

double idle_share(const TileSchedule& s) {
  const int64_t tiles = s.full_tiles + s.partial_tiles;
  return tiles > 0 ? double(s.idle_halves) / (double(s.tile_rows / kTile) * double(tiles)) : 0.0;  // 64-row parts
}

double mean_tiles(const TileSchedule& s) {
  return s.row_tiles > 0 ? double(s.full_tiles + s.partial_tiles) / double(s.row_tiles) : 0.0;
}

double mean_span(const TileSchedule& s) {
  if (s.row_tiles <= 0) return 0.0;
  int64_t sum = 0;
  for (int32_t t = 0; t < s.row_tiles; ++t) {
    const int32_t first = s.run_offsets[static_cast<size_t>(t)], last = s.run_offsets[static_cast<size_t>(t) + 1];
    if (first < last) sum += s.runs[static_cast<size_t>(last) - 1].end - s.runs[static_cast<size_t>(first)].begin;
  }
  return double(sum) / double(s.row_tiles);
}

double far_reuse_share(const TileSchedule& s, int32_t group, int64_t capacity_places) {
  std::vector<int64_t> last(static_cast<size_t>(s.col_tiles), -1);  // the visit count at a column tile's last visit
  int64_t walked = 0, reuses = 0, far = 0;
  for (int32_t t = 0; t < s.row_tiles; ++t)
    for (int32_t r = s.run_offsets[static_cast<size_t>(t)]; r < s.run_offsets[static_cast<size_t>(t) + 1]; ++r) {
      const TileRun& run = s.runs[static_cast<size_t>(r)];
      for (int32_t c = run.begin; c < run.end; ++c, ++walked) {
        int64_t& at = last[static_cast<size_t>(c)];
        if (at >= 0) {
          ++reuses;
          if ((walked - at) * group > capacity_places) ++far;
        }
        at = walked;
      }
    }
  return reuses > 0 ? double(far) / double(reuses) : 0.0;
}

double visit_concentration(const TileSchedule& s) {
  // Visits a column tile gets (a difference array over the runs), then their prefix sums, so that
  // each run's visits to shared tiles add up in one subtraction.
  std::vector<int64_t> cover(static_cast<size_t>(s.col_tiles) + 1, 0);
  int64_t busy = 0, visits = 0, spans = 0;
  for (int32_t t = 0; t < s.row_tiles; ++t) {
    const int32_t first = s.run_offsets[static_cast<size_t>(t)], last = s.run_offsets[static_cast<size_t>(t) + 1];
    if (first >= last) continue;
    ++busy;
    spans += s.runs[static_cast<size_t>(last) - 1].end - s.runs[static_cast<size_t>(first)].begin;
    for (int32_t r = first; r < last; ++r) {
      const TileRun& run = s.runs[static_cast<size_t>(r)];
      ++cover[static_cast<size_t>(run.begin)];
      --cover[static_cast<size_t>(run.end)];
      visits += run.end - run.begin;
    }
  }
  if (visits == 0 || spans == 0) return 0.0;
  std::vector<int64_t> before(static_cast<size_t>(s.col_tiles) + 1, 0);  // visits of the column tiles before c
  int64_t running = 0;
  for (int32_t c = 0; c < s.col_tiles; ++c) {
    running += cover[static_cast<size_t>(c)];
    before[static_cast<size_t>(c) + 1] = before[static_cast<size_t>(c)] + running;
  }
  double shared = 0;  // the visits of every run's column tiles, summed over its visits
  for (int32_t t = 0; t < s.row_tiles; ++t)
    for (int32_t r = s.run_offsets[static_cast<size_t>(t)]; r < s.run_offsets[static_cast<size_t>(t) + 1]; ++r) {
      const TileRun& run = s.runs[static_cast<size_t>(r)];
      shared += double(before[static_cast<size_t>(run.end)] - before[static_cast<size_t>(run.begin)]);
    }
  const double shared_share = shared / double(visits) / double(busy);
  const double visited_share = double(visits) / double(spans);
  return shared_share / visited_share;
}

namespace {

// When the last of `costs` ends if they start in order on `slots` SMs, each taking the next one
// as soon as it is free (how the GPU hands out a grid's blocks, one block an SM).
int64_t simulated_makespan(const std::vector<int64_t>& costs, int32_t slots) {
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> free_at;
  for (int32_t i = 0; i < slots; ++i) free_at.push(0);
  int64_t end = 0;
  for (const int64_t c : costs) {
    const int64_t t = free_at.top() + c;
    free_at.pop();
    free_at.push(t);
    end = std::max(end, t);
  }
  return end;
}

// The scheduled tiles of row tile t.
int64_t row_tile_tiles(const TileSchedule& s, int32_t t) {
  int64_t tiles = 0;
  for (int32_t r = s.run_offsets[t]; r < s.run_offsets[t + 1]; ++r) tiles += s.runs[r].end - s.runs[r].begin;
  return tiles;
}

// Each row tile's forward block cost, its tiles and block_tiles' worth of fixed costs, in cells (0
// for a row tile without runs).
std::vector<int64_t> forward_row_costs(const TileSchedule& s, int64_t block_tiles = kForwardBlockTiles) {
  std::vector<int64_t> row_cost(static_cast<size_t>(s.row_tiles), 0);
  for (int32_t t = 0; t < s.row_tiles; ++t) {
    const int64_t tiles = row_tile_tiles(s, t);
    row_cost[static_cast<size_t>(t)] = tiles > 0 ? (tiles + block_tiles) * s.tile_rows : 0;
  }
  return row_cost;
}

// Every head's blocks of these row costs spread evenly over `slots` SMs (0 without SMs).
double spread_over(const std::vector<int64_t>& row_cost, int32_t heads, int32_t slots) {
  if (slots <= 0) return 0.0;
  double work = 0.0;
  for (const int64_t c : row_cost) work += double(c);
  return work * heads / slots;
}

int64_t forward_makespan(const TileSchedule& s, const std::vector<int64_t>& row_cost, int32_t together,
                         int32_t heads, int32_t slots) {
  // In the kernels' launch order (forward_block over the busy row tiles: those without runs are
  // order's last and cost nothing).
  const int64_t blocks = int64_t{s.busy_tiles} * heads;
  std::vector<int64_t> costs(static_cast<size_t>(blocks));
  for (int64_t n = 0; n < blocks; ++n)
    costs[static_cast<size_t>(n)] =
        row_cost[static_cast<size_t>(s.order[forward_block(n, s.busy_tiles, heads, together).at])];
  return simulated_makespan(costs, slots);
}

}  // namespace

int64_t simulated_forward_makespan(const TileSchedule& s, int32_t heads, int32_t slots) {
  return forward_makespan(s, forward_row_costs(s), s.heads_together, heads, slots);
}

TileSchedule split_row_tiles(const TileSchedule& s, const std::vector<int32_t>& parts) {
  if (most_parts(parts) <= 1) return s;
  lca::require(static_cast<int64_t>(parts.size()) == s.row_tiles, LCA_ERR_INTERNAL,
               "flex_flash: split_row_tiles needs a part count per row tile");
  TileSchedule v;
  v.rows = s.rows, v.cols = s.cols, v.tile_rows = s.tile_rows, v.col_tiles = s.col_tiles;
  v.bits = s.bits;
  v.heads_together = s.heads_together;
  v.full_tiles = s.full_tiles, v.partial_tiles = s.partial_tiles, v.idle_halves = s.idle_halves;
  v.run_offsets.push_back(0);
  std::vector<int32_t> first_of(static_cast<size_t>(s.row_tiles));  // row tile t's first virtual row tile
  std::vector<int64_t> tiles_of;                                     // each virtual row tile's tiles
  int32_t place = 0;
  for (int32_t t = 0; t < s.row_tiles; ++t) {
    const int64_t n = row_tile_tiles(s, t), steps = (n + 1) / 2;
    const auto cut = static_cast<int32_t>(std::clamp<int64_t>(parts[static_cast<size_t>(t)], 1, std::max<int64_t>(steps, 1)));
    first_of[static_cast<size_t>(t)] = static_cast<int32_t>(tiles_of.size());
    if (cut > 1) {
      v.split_rows.push_back(t);
      v.split_first.push_back(place);
    }
    for (int32_t j = 0; j < cut; ++j) {
      const int64_t lo = 2 * (j * steps / cut), hi = std::min<int64_t>(2 * ((j + 1) * steps / cut), n);
      int64_t w0 = 0;  // the walk position of run r's first tile
      for (int32_t r = s.run_offsets[t]; r < s.run_offsets[t + 1]; ++r) {
        const TileRun& run = s.runs[r];
        const int64_t len = run.end - run.begin, a = std::max(lo, w0), b = std::min(hi, w0 + len);
        if (a < b) {
          const auto skip = static_cast<int32_t>(a - w0);
          v.runs.push_back(TileRun{run.begin + skip, run.begin + static_cast<int32_t>(b - w0),
                                   run.mask >= 0 ? run.mask + skip : run.mask, run.halves});
        }
        w0 += len;
      }
      v.run_offsets.push_back(static_cast<int32_t>(v.runs.size()));
      v.part_row.push_back(t);
      v.part_place.push_back(cut > 1 ? place++ : -1);
      tiles_of.push_back(std::max<int64_t>(hi - lo, 0));
    }
  }
  v.split_first.push_back(place);
  v.row_tiles = static_cast<int32_t>(tiles_of.size());
  v.order.reserve(tiles_of.size());
  for (const int32_t t : s.order)
    for (int32_t i = first_of[static_cast<size_t>(t)]; i < v.row_tiles && v.part_row[static_cast<size_t>(i)] == t; ++i)
      v.order.push_back(i);
  std::stable_sort(v.order.begin(), v.order.end(), [&](int32_t x, int32_t y) {
    return tiles_of[static_cast<size_t>(x)] > tiles_of[static_cast<size_t>(y)];
  });
  for (const int64_t n : tiles_of) v.busy_tiles += n > 0 ? 1 : 0;
  v.max_tiles = v.order.empty() ? 0 : static_cast<int32_t>(tiles_of[static_cast<size_t>(v.order.front())]);
  return v;
}

TileSchedule split_row_tiles(const TileSchedule& s, int32_t parts) {
  return split_row_tiles(s, std::vector<int32_t>(static_cast<size_t>(s.row_tiles), parts));
}

std::vector<int32_t> tail_parts(const TileSchedule& s, int32_t tiles, int32_t parts) {
  std::vector<int32_t> cut(static_cast<size_t>(s.row_tiles), 1);
  for (int32_t i = std::max(0, s.busy_tiles - tiles); i < s.busy_tiles; ++i)
    cut[static_cast<size_t>(s.order[static_cast<size_t>(i)])] = parts;
  return cut;
}

int32_t most_parts(const std::vector<int32_t>& parts) {
  return parts.empty() ? 1 : std::max(1, *std::max_element(parts.begin(), parts.end()));
}

std::vector<int32_t> long_walk_parts(const TileSchedule& s, int32_t share) {
  std::vector<int32_t> parts(static_cast<size_t>(s.row_tiles), 1);
  const int64_t cap = (int64_t{s.max_tiles} + share - 1) / std::max(share, 1);
  if (cap <= 0) return parts;
  for (int32_t t = 0; t < s.row_tiles; ++t)
    parts[static_cast<size_t>(t)] = static_cast<int32_t>(
        std::min<int64_t>(kMaxSplitKvParts, (row_tile_tiles(s, t) + cap - 1) / cap));
  return parts;
}

TileSchedule split_schedule(const TileSchedule& s, const std::vector<int32_t>& parts, int32_t heads, int32_t slots) {
  TileSchedule v = split_row_tiles(s, parts);
  if (!v.split_rows.empty()) v.heads_together = forward_heads_together(v, heads, slots);
  return v;
}

double split_forward_cost(const TileSchedule& s, const std::vector<int32_t>& parts, int32_t heads, int32_t slots,
                          int32_t head_dim, double cutoff) {
  const TileSchedule v = split_schedule(s, parts, heads, slots);
  double combine = 0.0;
  if (!v.split_rows.empty()) {
    // The combine pass reads every part's fp32 O and LSE of a split row and writes its O (16-bit).
    const double places = double(v.split_first.back()) * s.tile_rows * heads;
    const double rows = double(v.split_rows.size()) * s.tile_rows * heads;
    const double bytes = places * (head_dim + 1) * 4.0 + rows * head_dim * 2.0;
    combine = bytes / kSplitKvCombineBytes * (kSplitKvCellRate / (256.0 * head_dim));
  }
  const std::vector<int64_t> row_cost = forward_row_costs(v, kSplitKvBlockTiles);
  if (cutoff < std::numeric_limits<double>::infinity()) {
    // The blocks' work spread evenly over the SMs bounds the dispatch from below: where that already
    // reaches the cutoff, the dispatch is not simulated.
    if (const double bound = spread_over(row_cost, heads, slots) + combine; bound >= cutoff) return bound;
  }
  return double(forward_makespan(v, row_cost, v.heads_together, heads, slots)) + combine;
}

double split_forward_cost(const TileSchedule& s, int32_t parts, int32_t heads, int32_t slots, int32_t head_dim) {
  return split_forward_cost(s, std::vector<int32_t>(static_cast<size_t>(s.row_tiles), parts), heads, slots, head_dim);
}

double split_forward_bound(const TileSchedule& s, int32_t heads, int32_t slots) {
  return spread_over(forward_row_costs(s, kSplitKvBlockTiles), heads, slots);
}

std::vector<int32_t> forward_split_parts(const TileSchedule& s, int32_t heads, int32_t slots, int32_t head_dim) {
  if (slots <= 0 || s.busy_tiles == 0) return {};
  const double whole = split_forward_cost(s, std::vector<int32_t>{}, heads, slots, head_dim);
  // Where the unsplit dispatch is within kSplitKvGain of the bound, no split can be taken: none is
  // built (many waves of even walks, most plans).
  if (kSplitKvGain * whole < split_forward_bound(s, heads, slots)) return {};
  std::vector<int32_t> best;
  double best_cost = whole;
  auto consider = [&](std::vector<int32_t> parts) {
    if (most_parts(parts) <= 1) return;
    const double c = split_forward_cost(s, parts, heads, slots, head_dim, best_cost);
    if (c < best_cost) best = std::move(parts), best_cost = c;
  };
  for (int32_t parts = 2; parts <= kMaxSplitKvParts; ++parts)
    consider(std::vector<int32_t>(static_cast<size_t>(s.row_tiles), parts));
  for (int32_t share = 2; share <= kMaxSplitKvParts; ++share) consider(long_walk_parts(s, share));
  // The last-dispatched row tiles cut: as many row tiles as the last, partly filled wave holds, give
  // or take a wave's worth.
  const int64_t blocks = int64_t{s.busy_tiles} * heads, last_wave = blocks % slots;
  if (last_wave > 0) {
    const int64_t in_last = (last_wave + heads - 1) / heads, a_wave = (slots + heads - 1) / heads;
    for (int32_t parts = 2; parts <= kMaxSplitKvParts; ++parts)
      for (int64_t k = std::max<int64_t>(1, in_last - a_wave); k <= std::min<int64_t>(s.busy_tiles - 1, in_last + a_wave); ++k)
        consider(tail_parts(s, static_cast<int32_t>(k), parts));
  }
  return best_cost <= kSplitKvGain * whole ? best : std::vector<int32_t>{};
}

int32_t forward_heads_together(const TileSchedule& s, int32_t heads, int32_t slots) {
  if (slots <= 0 || heads <= 1 || s.busy_tiles == 0) return 1;
  const std::vector<int64_t> row_cost = forward_row_costs(s);
  std::vector<std::pair<int32_t, int64_t>> ends;  // (heads together, simulated end), fewest first
  for (int32_t g = 1; g < heads; g *= 2)
    if (heads % g == 0) ends.emplace_back(g, forward_makespan(s, row_cost, g, heads, slots));
  ends.emplace_back(heads, forward_makespan(s, row_cost, heads, heads, slots));
  int64_t soonest = ends.front().second;
  for (const auto& e : ends) soonest = std::min(soonest, e.second);
  if (double(soonest) > kTogetherGain * double(ends.front().second)) return 1;
  for (const auto& [g, end] : ends)
    if (double(end) <= kTogetherSlack * double(soonest)) return g;
  return 1;
}

int64_t item_iterations(const BwdItem& it, int32_t group) {
  return (int64_t{it.query_tiles[0]} + it.query_tiles[1]) * group;
}

int64_t item_cost(const BwdItem& it, int32_t group) {
  // A block's fixed cost (K and V in, dK and dV out) in iterations' worth, and a split part's more
  // (128 x D x 2 fp32 atomics a block, the conversion pass): estimates, not timed.
  constexpr int64_t kBlockOverhead = 4, kSplitOverhead = 4;
  return kBlockOverhead + (it.slot >= 0 ? kSplitOverhead : 0) + item_iterations(it, group);
}

int64_t simulated_order_makespan(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group, int32_t slots,
                                 int32_t g) {
  std::vector<int64_t> costs;
  costs.reserve(items.size() * static_cast<size_t>(heads_kv));
  for (int32_t first = 0; first < heads_kv; first += g)
    for (const BwdItem& it : items) costs.insert(costs.end(), static_cast<size_t>(g), item_cost(it, group));
  return simulated_makespan(costs, slots);
}

int64_t simulated_default_makespan(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group, int32_t slots) {
  return simulated_order_makespan(items, heads_kv, group, slots, kv_heads_together(items, heads_kv, group, slots));
}

double dispatch_over_spread(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group, int32_t slots,
                            int32_t g) {
  if (slots <= 0 || items.empty() || heads_kv <= 0) return 0.0;
  if (g <= 0 || heads_kv % g != 0) g = 1;
  double work = 0.0;
  for (const BwdItem& it : items) work += double(item_cost(it, group));
  const double spread = work * heads_kv / slots;
  return double(simulated_order_makespan(items, heads_kv, group, slots, g)) / spread;
}

int32_t kv_heads_together(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group, int32_t slots) {
  if (slots <= 0 || items.empty() || local_walks(items)) return 1;
  int64_t longest = 0;
  for (const BwdItem& it : items) longest = std::max(longest, item_iterations(it, group));
  int32_t g = 1;
  while (heads_kv % (2 * g) == 0 && 2 * g * longest <= kKvHeadsWalkLimit) g *= 2;
  if (g == 1) return 1;
  const int64_t apart = simulated_order_makespan(items, heads_kv, group, slots, 1);
  const int64_t together = simulated_order_makespan(items, heads_kv, group, slots, g);
  return double(together) * (1.0 + kKvHeadsGain) <= double(apart) ? g : 1;
}

std::vector<BwdItem> backward_items(const TileSchedule& s, int32_t heads_kv, int32_t group, int32_t slots,
                                    BwdPairing pairing, BwdLocal local) {
  const int32_t n = s.row_tiles;
  std::vector<int64_t> tiles(static_cast<size_t>(n), 0);
  std::vector<int32_t> lo(static_cast<size_t>(n), std::numeric_limits<int32_t>::max()), hi(static_cast<size_t>(n), -1);
  int32_t min_lo = std::numeric_limits<int32_t>::max(), max_hi = -1;
  int64_t most = 0, fewest = std::numeric_limits<int64_t>::max(), seen = 0;
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t r = s.run_offsets[t]; r < s.run_offsets[t + 1]; ++r) {
      const TileRun& run = s.runs[r];
      tiles[t] += run.end - run.begin;
      lo[t] = std::min(lo[t], run.begin);
      hi[t] = std::max(hi[t], run.end);
    }
    if (tiles[t] > 0) {
      min_lo = std::min(min_lo, lo[t]);
      max_hi = std::max(max_hi, hi[t]);
      most = std::max(most, tiles[t]);
      fewest = std::min(fewest, tiles[t]);
      ++seen;
    }
  }
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return tiles[a] > tiles[b]; });

  int64_t at_end = 0, at_start = 0, contiguous = 0;
  for (int32_t t = 0; t < n; ++t) {
    at_end += tiles[t] > 0 && hi[t] == max_hi;
    at_start += tiles[t] > 0 && lo[t] == min_lo;
    contiguous += tiles[t] > 0 && tiles[t] == hi[t] - lo[t];
  }
  // Causal-like: the ranges end (or start) together and have no gaps (global_sliding's ranges all
  // start at the global rows but are windows past them), and their lengths differ. The 90% and
  // 2x bounds are chosen, not tuned: the builtin masks fall far from them either way (commit 88575d6).
  const bool causal_like = seen > 0 && 10 * std::max(at_end, at_start) >= 9 * seen && 10 * contiguous >= 9 * seen &&
                           most > 2 * fewest;
  const bool pair = n >= 2 && (pairing == BwdPairing::kAll || (pairing == BwdPairing::kAuto && causal_like));
  // Paired walks start where the ranges meet: at their common end where at least as many tiles
  // end there as start together (causal), else at the start; the second tile of a pair walks back.
  const bool down = at_end >= at_start;
  const int32_t single_flags = pair ? kWalkHeadsInner | (down ? kWalkDown0 : 0) : 0;
  auto cost = [group](const BwdItem& it) { return item_cost(it, group); };

  // Document-local: of the tiles whose range ends where another's does, those that start apart
  // from the rest of their end's (distinct starts per end, counted where an end has two or more).
  if (!pair && seen > 0 && (local == BwdLocal::kOn || (local == BwdLocal::kAuto && pairing == BwdPairing::kAuto))) {
    int64_t total = 0;
    for (int32_t t = 0; t < n; ++t) total += tiles[t];
    bool take = local == BwdLocal::kOn;
    if (!take && 10 * contiguous >= 9 * seen && double(total) <= kLocalMeanTiles * double(seen)) {
      std::unordered_map<int32_t, std::vector<int32_t>> starts_by_end;
      for (int32_t t = 0; t < n; ++t)
        if (tiles[t] > 0) starts_by_end[hi[t]].push_back(lo[t]);
      int64_t staggered = 0;
      for (auto& [end, starts] : starts_by_end) {
        std::sort(starts.begin(), starts.end());
        const int64_t distinct = std::unique(starts.begin(), starts.end()) - starts.begin();
        if (distinct >= 2) staggered += distinct;
      }
      take = 2 * staggered >= seen;
    }
    if (take) {
      const double long_walk = kLocalLongWalk * double(total) / double(seen);
      std::vector<BwdItem> items, locals;
      for (int32_t t = 0; t < n; ++t) {
        const BwdItem it{{t, -1}, {static_cast<int32_t>(tiles[t]), 0}, 0};
        if (double(tiles[t]) > long_walk) {
          items.push_back(it);
        } else {
          locals.push_back(it);
          locals.back().flags = kWalkDown0 | kWalkHeadsInner | kWalkLocal;
        }
      }
      std::stable_sort(items.begin(), items.end(), [&](const BwdItem& a, const BwdItem& b) { return cost(a) > cost(b); });
      items.insert(items.end(), locals.begin(), locals.end());
      return items;
    }
  }
  const int32_t pairs = pair ? n / 2 : 0;
  // The items with the last `split` pairs (those of middling tiles) launched as single tiles.
  auto build = [&](int32_t split) {
    std::vector<BwdItem> items;
    items.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < pairs - split; ++i) {
      const int32_t a = order[i], b = order[n - 1 - i];
      items.push_back(BwdItem{{a, b},
                              {static_cast<int32_t>(tiles[a]), static_cast<int32_t>(tiles[b])},
                              kWalkHeadsInner | (down ? kWalkDown0 : kWalkDown1)});
    }
    for (int32_t i = pairs - split; i < n - (pairs - split); ++i) {
      const int32_t t = order[i];
      items.push_back(BwdItem{{t, -1}, {static_cast<int32_t>(tiles[t]), 0}, single_flags});
    }
    std::stable_sort(items.begin(), items.end(), [&](const BwdItem& a, const BwdItem& b) { return cost(a) > cost(b); });
    return items;
  };
  if (pairs == 0 || slots <= 0 || pairing == BwdPairing::kAll) return build(0);
  auto makespan = [&](const std::vector<BwdItem>& items) {
    std::vector<int64_t> costs;
    costs.reserve(items.size() * static_cast<size_t>(heads_kv));
    for (int32_t h = 0; h < heads_kv; ++h)
      for (const BwdItem& it : items) costs.push_back(cost(it));
    return simulated_makespan(costs, slots);
  };
  // Split single tiles walk out of step with the pairs (on a causal mask their reads miss L2), so
  // at most a wave's worth of blocks is split: slots / heads_kv pairs, as many dispatches
  // simulated (a 512K schedule on an H100: 17 of 16K blocks each, milliseconds).
  const int32_t most_split = std::min(pairs, (slots + heads_kv - 1) / heads_kv);
  std::vector<std::pair<int32_t, int64_t>> tried;
  for (int32_t split = 0; split <= most_split; ++split) tried.emplace_back(split, makespan(build(split)));
  int64_t best = tried.front().second;
  for (const auto& [split, time] : tried) best = std::min(best, time);
  // 1.5%: about the run-to-run spread of the measured rates, chosen rather than tuned.
  for (const auto& [split, time] : tried)
    if (double(time) <= 1.015 * double(best)) return build(split);
  return build(0);  // not reached: the best one is within 1.5% of itself
}

bool schedule_visible(const TileSchedule& s, int64_t row, int64_t col) {
  const int64_t t = row / s.tile_rows, c = col / kTileCols;
  if (t >= s.row_tiles) return false;
  for (int32_t r = s.run_offsets[t]; r < s.run_offsets[t + 1]; ++r) {
    const TileRun& run = s.runs[r];
    if (c < run.begin || c >= run.end) continue;
    if (run.mask < 0) return true;
    const uint64_t word =
        s.bits[(static_cast<size_t>(run.mask) + (c - run.begin)) * s.tile_rows + (row - t * s.tile_rows)];
    return (word >> (col - c * kTileCols)) & 1u;
  }
  return false;
}

int64_t schedule_row_key(const TileSchedule& s, int64_t row) {
  if (s.key_blocks.empty()) return row;
  const int64_t half = row / kTile;
  return int64_t{s.key_blocks[static_cast<size_t>(half)]} * kTile + row % kTile;
}

std::vector<int32_t> match_key_blocks(const TileSchedule& narrow) {
  lca::require(narrow.tile_rows == kTile, LCA_ERR_INTERNAL, "flex_flash: key blocks are matched on 64-row tiles");
  const int32_t n = narrow.row_tiles;
  if (n > kMatchMostBlocks) return {};
  // Each block's query tiles as a bit set.
  const int64_t words = (int64_t{narrow.col_tiles} + 63) / 64;
  std::vector<uint64_t> seen(static_cast<size_t>(n * words), 0);
  for (int32_t t = 0; t < n; ++t)
    for (int32_t r = narrow.run_offsets[t]; r < narrow.run_offsets[t + 1]; ++r)
      for (int32_t c = narrow.runs[r].begin; c < narrow.runs[r].end; ++c)
        seen[static_cast<size_t>(t * words + c / 64)] |= uint64_t{1} << (c % 64);
  struct Candidate {
    int32_t common, a, b;
  };
  std::vector<Candidate> candidates;
  candidates.reserve(static_cast<size_t>(n) * static_cast<size_t>(n > 0 ? n - 1 : 0) / 2);
  for (int32_t a = 0; a < n; ++a)
    for (int32_t b = a + 1; b < n; ++b) {
      int32_t common = 0;
      for (int64_t w = 0; w < words; ++w)
        common += std::popcount(seen[static_cast<size_t>(a * words + w)] & seen[static_cast<size_t>(b * words + w)]);
      candidates.push_back(Candidate{common, a, b});
    }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& x, const Candidate& y) { return x.common > y.common; });
  std::vector<int32_t> partner(static_cast<size_t>(n), -1);
  for (const Candidate& c : candidates)
    if (partner[static_cast<size_t>(c.a)] < 0 && partner[static_cast<size_t>(c.b)] < 0) {
      partner[static_cast<size_t>(c.a)] = c.b;
      partner[static_cast<size_t>(c.b)] = c.a;
    }
  std::vector<int32_t> blocks;
  blocks.reserve(static_cast<size_t>(n + 1));
  for (int32_t a = 0; a < n; ++a) {
    const int32_t b = partner[static_cast<size_t>(a)];
    if (b >= 0 && b < a) continue;  // listed with its lower block
    blocks.push_back(a);
    blocks.push_back(b >= 0 ? b : n);  // the odd block out: with the block past the end
  }
  return blocks;
}

TileSchedule build_matched_schedule(const TileSchedule& narrow, std::vector<int32_t> key_blocks) {
  lca::require(narrow.tile_rows == kTile && key_blocks.size() % 2 == 0, LCA_ERR_INTERNAL,
               "flex_flash: a matched schedule is made of 64-row tiles, two a tile");
  TileSchedule s;
  s.tile_rows = 2 * kTile;
  s.rows = narrow.rows;
  s.cols = narrow.cols;
  s.col_tiles = narrow.col_tiles;
  s.row_tiles = static_cast<int32_t>(key_blocks.size() / 2);
  s.run_offsets.assign(static_cast<size_t>(s.row_tiles) + 1, 0);
  std::vector<int64_t> cost(static_cast<size_t>(s.row_tiles), 0);
  PatternStore patterns;
  uint64_t pattern[2 * kTile];
  // Each half's runs, walked column by column: the run being walked (a copy) and where it is.
  struct Cursor {
    int32_t run, end;
  };
  auto cursor_of = [&](int32_t k) {
    return k < narrow.row_tiles ? Cursor{narrow.run_offsets[k], narrow.run_offsets[k + 1]} : Cursor{0, 0};
  };
  for (int32_t t = 0; t < s.row_tiles; ++t) {
    const int32_t blocks[2] = {key_blocks[static_cast<size_t>(2 * t)], key_blocks[static_cast<size_t>(2 * t + 1)]};
    lca::require(blocks[0] >= 0 && blocks[0] <= narrow.row_tiles && blocks[1] >= 0 && blocks[1] <= narrow.row_tiles,
                 LCA_ERR_INTERNAL, "flex_flash: a matched key block is out of range");
    Cursor at[2] = {cursor_of(blocks[0]), cursor_of(blocks[1])};
    TileRun cur[2] = {};
    auto load = [&](int h) {
      if (at[h].run < at[h].end) cur[h] = narrow.runs[at[h].run];
    };
    load(0);
    load(1);
    auto col_of = [&](int h) { return at[h].run < at[h].end ? cur[h].begin : INT32_MAX; };
    for (;;) {
      const int32_t c = std::min(col_of(0), col_of(1));
      if (c == INT32_MAX) break;
      bool full = true;
      for (int h = 0; h < 2; ++h) {
        uint64_t* half = pattern + h * kTile;
        if (col_of(h) != c) {
          std::fill(half, half + kTile, uint64_t{0});
          full = false;
          continue;
        }
        if (cur[h].mask < 0) {
          std::fill(half, half + kTile, ~uint64_t{0});
        } else {
          const uint64_t* words = &narrow.bits[static_cast<size_t>(cur[h].mask) * kTile];
          std::copy(words, words + kTile, half);
          full = false;
          ++cur[h].mask;
        }
        if (++cur[h].begin == cur[h].end && ++at[h].run < at[h].end) load(h);
      }
      ++cost[static_cast<size_t>(t)];
      if (full) add_full_tile(s, t, c);  // both halves full tiles of narrow: whole blocks, inside the columns
      else add_partial_tile(s, patterns, t, c, pattern);
    }
    end_row_tile(s, t);
  }
  finish_order(s, cost);
  s.key_blocks = std::move(key_blocks);
  return s;
}

double skip_backward_cost(const TileSchedule& s, int32_t heads_kv, int32_t slots) {
  double total = 0.0, dearest = 0.0;
  for (int32_t t = 0; t < s.row_tiles; ++t) {
    double tile = 0.0;
    for (int32_t r = s.run_offsets[static_cast<size_t>(t)]; r < s.run_offsets[static_cast<size_t>(t) + 1]; ++r) {
      const TileRun& run = s.runs[static_cast<size_t>(r)];
      const bool half_idle = (run.halves & (kIdleHalf | (kIdleHalf << 1))) != 0;
      tile += (half_idle ? kHalfIdleCost : 1.0) * (run.end - run.begin);
    }
    total += tile;
    dearest = std::max(dearest, tile);
  }
  return std::max(total * std::max(heads_kv, 1) / std::max(slots, 1), dearest);
}

bool local_walks(const std::vector<BwdItem>& items) {
  return std::any_of(items.begin(), items.end(), [](const BwdItem& it) { return (it.flags & kWalkLocal) != 0; });
}

bool plain_walks(const std::vector<BwdItem>& items) {
  return std::all_of(items.begin(), items.end(),
                     [](const BwdItem& it) { return it.tiles[1] < 0 && it.flags == 0 && it.slot < 0; });
}

bool alike_walks(const std::vector<BwdItem>& items) {
  if (items.empty() || !plain_walks(items)) return false;
  const auto [shortest, longest] = std::minmax_element(
      items.begin(), items.end(), [](const BwdItem& a, const BwdItem& b) { return a.query_tiles[0] < b.query_tiles[0]; });
  return double(longest->query_tiles[0]) <= kAlikeWalkRatio * double(shortest->query_tiles[0]);
}

FirstWriters dq_first_writers(const TileSchedule& s, const std::vector<BwdItem>& items, int32_t heads_kv,
                              int32_t group, int32_t kv_heads_together, int32_t slots, bool timed) {
  FirstWriters w;
  if (items.empty() || !plain_walks(items) || !s.key_blocks.empty()) return w;
  auto walk_start = [&](int32_t t) {
    return s.run_offsets[t] < s.run_offsets[t + 1] ? s.runs[s.run_offsets[t]].begin : 0;
  };
  w.items = items;
  int32_t longest = 0;
  for (const BwdItem& it : items) longest = std::max(longest, it.query_tiles[0]);
  auto is_long = [&](const BwdItem& it) { return it.query_tiles[0] >= kFirstWriterLongWalk * longest; };
  std::stable_sort(w.items.begin(), w.items.end(), [&](const BwdItem& a, const BwdItem& b) {
    if (is_long(a) != is_long(b)) return is_long(a);
    return is_long(a) && walk_start(a.tiles[0]) > walk_start(b.tiles[0]);
  });
  // Blocks this many items apart may run together (one kv head's items are g blocks apart).
  const int64_t together = std::max<int64_t>(1, int64_t{slots} / std::max(1, kv_heads_together));
  const size_t n = static_cast<size_t>(s.col_tiles);
  std::vector<int32_t> first(n, -1), first_at(n, 0), first_item(n, 0), first_len(n, 0);
  std::vector<char> lost(n, 0);
  int64_t visited = 0;
  for (size_t i = 0; i < w.items.size(); ++i) {
    const int32_t t = w.items[i].tiles[0], len = w.items[i].query_tiles[0];
    int32_t at = 0;  // where the walk reaches the tile: iteration at + h x len for head h
    int32_t writes = 0;  // tiles this block is the first visitor of
    for (int32_t r = s.run_offsets[t]; r < s.run_offsets[t + 1]; ++r)
      for (int32_t c = s.runs[r].begin; c < s.runs[r].end; ++c, ++at) {
        const size_t q = static_cast<size_t>(c);
        if (first[q] < 0) {
          first[q] = t;
          first_at[q] = at;
          first_item[q] = static_cast<int32_t>(i);
          first_len[q] = len;
          ++visited;
          // Past kFirstWriterBlockTiles the tile is zeroed and added into as before.
          if (timed && ++writes > kFirstWriterBlockTiles) lost[q] = 1;
          continue;
        }
        // Behind the first writer by kFirstWriterLead iterations for every head (the gap is linear
        // in the head: its ends suffice), where the two may run together.
        const int64_t last = group - 1;
        if (timed && static_cast<int64_t>(i) - first_item[q] < together &&
            (at < first_at[q] + kFirstWriterLead || at + last * len < first_at[q] + last * first_len[q] + kFirstWriterLead))
          lost[q] = 1;
      }
  }
  w.key_tile.assign(n, -1);
  for (size_t q = 0; q < n; ++q)
    if (first[q] >= 0 && !lost[q]) {
      w.key_tile[q] = first[q];
      ++w.tiles;
    }
  if (visited == 0) return FirstWriters{};
  if (timed && (double(w.tiles) < kFirstWriterShare * double(visited) ||
                double(simulated_order_makespan(w.items, heads_kv, group, slots, kv_heads_together)) >
                    (1.0 + kFirstWriterDispatch) *
                        double(simulated_order_makespan(items, heads_kv, group, slots, kv_heads_together))))
    return FirstWriters{};
  return w;
}

namespace {
// A walk split_items may split: one key tile of two or more query tiles, up, heads outer, whole.
bool splittable(const BwdItem& it) {
  return it.tiles[1] < 0 && it.flags == 0 && it.slot < 0 && it.query_tiles[0] > 1;
}
}  // namespace

std::vector<BwdItem> split_items(const std::vector<BwdItem>& items, int32_t group, int64_t limit, int32_t most_parts) {
  std::vector<BwdItem> out;
  out.reserve(items.size());
  int32_t slot = 0;
  for (const BwdItem& it : items) {
    const int32_t tiles = it.query_tiles[0];
    const int64_t iterations = item_iterations(it, group);
    int64_t parts = 1;
    if (splittable(it) && iterations > limit) {
      parts = limit > 0 ? std::min<int64_t>((iterations + limit - 1) / limit, tiles) : tiles;
      if (most_parts > 0) parts = std::min<int64_t>(parts, most_parts);
    }
    if (parts == 1) {
      out.push_back(it);
      continue;
    }
    for (int64_t k = 0; k < parts; ++k) {
      BwdItem part = it;
      part.from_tile = static_cast<int32_t>(k * tiles / parts);
      part.query_tiles[0] = static_cast<int32_t>((k + 1) * tiles / parts) - part.from_tile;
      part.slot = slot;
      out.push_back(part);
    }
    ++slot;
  }
  // Longest first, but the blocks of the document-local order after the rest, in their order.
  std::stable_sort(out.begin(), out.end(), [group](const BwdItem& a, const BwdItem& b) {
    const bool la = (a.flags & kWalkLocal) != 0, lb = (b.flags & kWalkLocal) != 0;
    if (la || lb) return !la && lb;
    return item_cost(a, group) > item_cost(b, group);
  });
  return out;
}

std::vector<BwdItem> split_long_walks(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group,
                                      int32_t slots) {
  if (slots <= 0 || items.empty()) return items;
  int64_t longest = 0;
  for (const BwdItem& it : items)
    if (splittable(it)) longest = std::max(longest, item_iterations(it, group));
  if (longest == 0) return items;
  // Each in the order kv_heads_together gives it.
  auto makespan = [&](const std::vector<BwdItem>& v) { return simulated_default_makespan(v, heads_kv, group, slots); };
  const int64_t whole = makespan(items);
  std::vector<BwdItem> best = items;
  int64_t best_time = whole;
  for (int32_t parts = 2; parts <= 16; parts *= 2) {
    std::vector<BwdItem> split = split_items(items, group, longest / parts);
    if (split.size() == items.size()) continue;  // nothing split
    const int64_t time = makespan(split);
    if (double(time) * 1.01 < double(best_time)) {
      best = std::move(split);
      best_time = time;
    }
  }
  return double(best_time) * (1.0 + kSplitGain) <= double(whole) ? best : items;
}

std::vector<BwdItem> split_by_ranges(const TileSchedule& s, const std::vector<BwdItem>& items, int32_t group,
                                     int32_t range_tiles) {
  range_tiles = std::max(range_tiles, 1);
  struct Placed {
    BwdItem item;
    int32_t range;  // the range of its first query tile; INT32_MAX for a tile that sees nothing
  };
  std::vector<Placed> placed;
  placed.reserve(items.size());
  int32_t slot = 0;
  for (const BwdItem& it : items) {
    const int32_t t = it.tiles[0];
    const int32_t first = s.run_offsets[static_cast<size_t>(t)], last = s.run_offsets[static_cast<size_t>(t) + 1];
    if (first == last || it.tiles[1] >= 0) {  // nothing to walk, or not a single tile: as it is
      placed.push_back({it, first == last ? std::numeric_limits<int32_t>::max() : s.runs[first].begin / range_tiles});
      continue;
    }
    // The visited query tiles of each range, counted along the walk.
    std::vector<std::pair<int32_t, int32_t>> ranges;  // (range, visited tiles)
    for (int32_t r = first; r < last; ++r)
      for (int32_t c = s.runs[static_cast<size_t>(r)].begin; c < s.runs[static_cast<size_t>(r)].end;) {
        const int32_t range = c / range_tiles, end = std::min(s.runs[static_cast<size_t>(r)].end, (range + 1) * range_tiles);
        if (ranges.empty() || ranges.back().first != range) ranges.emplace_back(range, 0);
        ranges.back().second += end - c;
        c = end;
      }
    if (!splittable(it) || ranges.size() < 2) {
      placed.push_back({it, ranges.front().first});
      continue;
    }
    int32_t from = 0;
    for (const auto& [range, tiles] : ranges) {
      BwdItem part = it;
      part.from_tile = from;
      part.query_tiles[0] = tiles;
      part.slot = slot;
      placed.push_back({part, range});
      from += tiles;
    }
    ++slot;
  }
  std::stable_sort(placed.begin(), placed.end(), [group](const Placed& a, const Placed& b) {
    if (a.range != b.range) return a.range < b.range;
    return item_cost(a.item, group) > item_cost(b.item, group);
  });
  std::vector<BwdItem> out;
  out.reserve(placed.size());
  for (const Placed& p : placed) out.push_back(p.item);
  return out;
}

std::vector<int32_t> place_split_walks(TileSchedule& s, std::vector<BwdItem>& items) {
  std::vector<int32_t> tiles;
  // Query tiles walked before each run of the schedule's own row tiles, counted along its tile's
  // walk: a part finds its first run by a binary search (a 512K block-sparse walk has thousands of
  // runs and is split into dozens of ranges).
  const int32_t own_runs = s.run_offsets[static_cast<size_t>(s.row_tiles)];
  std::vector<int32_t> walked_before(static_cast<size_t>(own_runs));
  for (int32_t t = 0; t < s.row_tiles; ++t)
    for (int32_t r = s.run_offsets[t], walked = 0; r < s.run_offsets[t + 1]; ++r) {
      walked_before[static_cast<size_t>(r)] = walked;
      walked += s.runs[r].end - s.runs[r].begin;
    }
  for (BwdItem& it : items) {
    if (it.slot < 0) continue;
    const int32_t t = it.tiles[0];
    if (t < 0 || t >= s.row_tiles)
      throw lca::Error(LCA_ERR_INTERNAL, "flex_flash: place_split_walks: a part names row tile " + std::to_string(t) +
                                             " outside the schedule's " + std::to_string(s.row_tiles) +
                                             " (already placed?)");
    if (tiles.size() <= static_cast<size_t>(it.slot)) tiles.resize(static_cast<size_t>(it.slot) + 1, -1);
    tiles[static_cast<size_t>(it.slot)] = t;
    // The part's query tiles [from, to), counted along the key tile's walk, cut from its runs.
    const int32_t from = it.from_tile, to = it.from_tile + it.query_tiles[0];
    const auto first = walked_before.begin() + s.run_offsets[t], last = walked_before.begin() + s.run_offsets[t + 1];
    int32_t r = static_cast<int32_t>(std::upper_bound(first, last, from) - walked_before.begin()) - 1;
    r = std::max(r, s.run_offsets[t]);
    for (; r < s.run_offsets[t + 1] && walked_before[static_cast<size_t>(r)] < to; ++r) {
      const TileRun run = s.runs[r];  // a copy: push_back may move the runs
      const int32_t walked = walked_before[static_cast<size_t>(r)];
      const int32_t lo = std::max(from, walked), hi = std::min(to, walked + (run.end - run.begin));
      if (lo < hi) {
        const int32_t begin = run.begin + (lo - walked);
        s.runs.push_back(TileRun{begin, run.begin + (hi - walked), run.mask < 0 ? run.mask : run.mask + (begin - run.begin),
                                 run.halves});
      }
    }
    it.tiles[0] = static_cast<int32_t>(s.run_offsets.size()) - 1;
    s.run_offsets.push_back(static_cast<int32_t>(s.runs.size()));
  }
  return tiles;
}

}  // namespace lca_flex_flash
