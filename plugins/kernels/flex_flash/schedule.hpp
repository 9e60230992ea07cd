// The tile schedule of flex_flash: a slice mask turned, on the host in plan(), into per-row-tile
// runs of 64x64 tiles that are either fully visible or partial (with an exact bitmask).
// Used by the flex_flash plan (forward: rows are queries; backward: rows are keys) and its tests.
// Rule: the schedule is exact: a cell is computed iff some slice covers it, once.
#pragma once

#include <lca/abi.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace lca_flex_flash {

constexpr int kTile = 64;       // column tile edge: one bit of a 64-bit word per column
constexpr int kTileCols = kTile;

// Column tiles [begin, end) of one row tile. mask < 0: every tile is fully visible. Otherwise
// tile begin + i has its bitmask at bits[(mask + i) * tile_rows .. + tile_rows): word r holds
// the visibility of row r of the tile, bit c that of column c. Tiles with equal bitmasks share
// one (runs of any row tile may point at the same bits). halves (partial 128- and 192-row tiles
// only, else 0; a run's tiles all have the same): bit h (kIdleHalf << h) set when rows 64 h ..
// 64 h + 63 of the tile see nothing, so a kernel whose warpgroup owns those 64 rows may skip the
// tile; bit 3 + h (kFullHalf << h) when they see every column, so that warpgroup needs no masking
// there. (The name is older than 192-row tiles: a tile has two or three such 64-row parts.)
struct TileRun {
  int32_t begin, end;
  int32_t mask;
  int32_t halves;
};
constexpr int32_t kIdleHalf = 1, kFullHalf = 8;

struct TileSchedule {
  int64_t rows = 0, cols = 0;  // tokens along each axis
  int32_t tile_rows = kTile;   // rows of a tile (columns are always kTileCols)
  int32_t row_tiles = 0, col_tiles = 0;
  std::vector<int32_t> run_offsets;  // row tile t owns runs[run_offsets[t] .. run_offsets[t+1])
  std::vector<TileRun> runs;
  std::vector<uint64_t> bits;   // tile_rows words per distinct partial-tile bitmask
  std::vector<int32_t> order;   // row tiles, most tiles first (the launch order)
  int32_t busy_tiles = 0;       // row tiles with runs: order's first busy_tiles, the rest see nothing
  int32_t max_tiles = 0;        // the most scheduled tiles of one row tile: order's first one's
  // Forward only: the blocks go out in groups of this many heads (a divisor of the grid's heads),
  // each group's heads inner: 1, one head after another (heads outer); every head, all inner
  // (forward_heads_together).
  int32_t heads_together = 1;
  int64_t full_tiles = 0, partial_tiles = 0;
  int64_t idle_halves = 0;  // 64-row halves of tiles that see nothing (the idle bits set, summed)
  // Matched schedules only (build_matched_schedule), else empty: the 64-row block of each half of
  // each row tile, 2 a tile (half h of tile t: key_blocks[2 t + h]). An odd count's last half names
  // the block past the last row ((rows + 63) / 64), which sees nothing.
  std::vector<int32_t> key_blocks;
  // Split-KV only (split_row_tiles), else empty: row tile v of this schedule is a part of row tile
  // part_row[v] of the unsplit one, and its O and LSE go to place part_place[v] of the parts'
  // buffers (-1: a row tile not split, whose O and LSE are written as usual). The split row tiles
  // are split_rows[i], with their parts at places split_first[i] .. split_first[i + 1] - 1.
  std::vector<int32_t> part_row, part_place, split_rows, split_first;
};

// When the last block of a forward grid over the schedule ends (simulated): a block a (row tile,
// head), in the order the forward kernels launch them (forward_block: row tiles in `order`, heads in
// groups of heads_together, each group's heads inner), each costing its cells (64-key tiles x
// tile_rows) plus kForwardBlockTiles tiles' worth for its Q load, its lone first S and last P V and
// its finish (chosen, not timed), on `slots` SMs a block each. What plan() weighs the heads
// together by, and head dim 128's 192-row window tiles (kernels.hpp, wg3_window_grid_keeps_gain).
constexpr int64_t kForwardBlockTiles = 2;
int64_t simulated_forward_makespan(const TileSchedule& s, int32_t heads, int32_t slots);

// The forward's row tiles split along their keys ("split-KV"): row tile t's tiles, in walk order,
// cut into parts[t] pieces of as many 128-key steps as the parts can share evenly (the last piece
// may end on an odd tile); at most one part a step, so that every part has tiles (a row tile
// without runs stays whole). The virtual row tiles are each row tile's parts in turn (a whole one
// is one): their runs are the pieces of t's runs that fall in the part (a partial run's bitmask
// index moved with its begin), part_row / part_place / split_rows / split_first say whose they are
// and where a split one's O and LSE go. The order is the row tiles' own with each one's parts in
// turn, busiest first (stable); the rows, bitmasks and heads together are s's. No part above 1
// gives s. The forwards compute each part's O and LSE apart, and a pass combines them
// (forward_sm90.cuh, FwdParams::part_of).
TileSchedule split_row_tiles(const TileSchedule& s, const std::vector<int32_t>& parts);
// Every row tile in `parts` (as many as its steps allow).
TileSchedule split_row_tiles(const TileSchedule& s, int32_t parts);

// The parts the forward splits its row tiles into, by predicted time: of every row tile cut alike
// into 2-4 parts, of only the row tiles whose walks are longer than the longest one's 1/2, 1/3 or
// 1/4, each cut into as many parts of at most that length (at most 4), and of the last-dispatched
// row tiles cut into 2-4 parts (tail_parts: as many as the last, partly filled wave holds, give or
// take a wave's worth, the rest whole), the split whose predicted time is least, taken where it is
// at most kSplitKvGain of the unsplit forward's; else empty (no split). The time: the simulated
// dispatch of the split schedule's blocks (simulated_makespan), a block costing its tiles plus
// kSplitKvBlockTiles, plus the pass that combines the split rows' parts (bytes at
// kSplitKvCombineBytes a second, turned into cells at kSplitKvCellRate).
// Small grids (few heads, short sequences: heads 8:1 at 4K-16K) end on a partly empty last wave;
// split alike, the same cells end on fuller waves of shorter blocks; with only the last wave's row
// tiles cut, and heads out together as split_schedule picks them (a group's whole blocks before its
// parts), the whole blocks fill the waves before and the parts the time that is left (full at 4105
// tokens, 8:1, 192-row tiles: 22 row tiles a head, 176 blocks on 132 SMs; the last 6 row tiles in
// halves, 4 heads together, simulate 0.80 of unsplit and 0.89 of every row tile in halves). On an
// H100, against the two kinds alone in one run, the 18 cells whose plan the tail split changed
// (full and causal at 4105-22301 tokens, 8:1 to 32:32, d64 and d128; two of global_sliding's long
// splits, now in 4 parts with 4 heads together) ran 1.007-1.216x, median
// 1.049, the 20 it left 0.991-1.028x (docs/results/2026-12-07-h100-fwd-tail-split.md). A few walks
// far longer than the rest (the rows of global_sliding's global tokens, which see every key) end
// the forward alone however the others are dispatched; split, their parts run side by side.
// kSplitKvBlockTiles: a block's fixed cost (Q in, pipeline filled and drained, O out, launch) in 64-key
// tiles: full on an H200 at head dim 64 ran 0.71 us a tile in 64-tile blocks (4096 tokens, 8:1) and
// 0.61 in 256-tile blocks (16384, 32:32), about 10 tiles a block; 8 taken.
// kSplitKvCellRate: an SM's FLOP/s, about 4e12 (an H100's or H200's 132 SMs at 525 TFLOP/s), a cell
// (a row by a 64-key tile) being 256 x head_dim FLOPs; kSplitKvCombineBytes: HBM's ~3 TB/s.
// kSplitKvGain: the 3% a rule needs to beat the run's noise.
constexpr int64_t kSplitKvBlockTiles = 8;
constexpr double kSplitKvCellRate = 4.0e12;
constexpr double kSplitKvCombineBytes = 3.0e12;
constexpr double kSplitKvGain = 0.97;
constexpr int32_t kMaxSplitKvParts = 4;
// The predicted time (in cells of one SM) of the forward over s split as `parts` says (empty: not
// split), or every row tile into `parts`. With a cutoff, where the split's work spread evenly over
// the SMs (plus its combine) already reaches it, that bound instead (at least the cutoff, at most
// the time): forward_split_parts skips simulating splits that cannot beat the best so far.
double split_forward_cost(const TileSchedule& s, const std::vector<int32_t>& parts, int32_t heads, int32_t slots,
                          int32_t head_dim, double cutoff = std::numeric_limits<double>::infinity());
double split_forward_cost(const TileSchedule& s, int32_t parts, int32_t heads, int32_t slots, int32_t head_dim);
std::vector<int32_t> forward_split_parts(const TileSchedule& s, int32_t heads, int32_t slots, int32_t head_dim);
// No split of s ends sooner than this (in split_forward_cost's units): the unsplit blocks' tiles and
// fixed costs spread evenly over the SMs. A split only adds blocks' fixed costs and the combine.
double split_forward_bound(const TileSchedule& s, int32_t heads, int32_t slots);
// The tail split: the last `tiles` busy row tiles of s.order (the shortest, dispatched last) each in
// `parts` (as many as its steps allow), the rest whole.
std::vector<int32_t> tail_parts(const TileSchedule& s, int32_t tiles, int32_t parts);
// s split as `parts` says (split_row_tiles), its heads going out together as forward_heads_together
// takes them on the split schedule: plan() runs a split forward so, and split_forward_cost
// predicts it so.
TileSchedule split_schedule(const TileSchedule& s, const std::vector<int32_t>& parts, int32_t heads, int32_t slots);
// The long-walk split with cap max_tiles / `share` (the "fwd_split" option's long_N): each row tile
// with more tiles than that in as many parts of at most that many (at most kMaxSplitKvParts).
std::vector<int32_t> long_walk_parts(const TileSchedule& s, int32_t share);
// The largest number of parts in a split (1: none).
int32_t most_parts(const std::vector<int32_t>& parts);

// Forward block n of a grid of `tiles` row tiles by `heads` (query heads, or head pairs in the pair
// kernel; the persistent kernel's items likewise): `at` indexes the schedule's order. The heads go
// in groups of `together` (a divisor of heads; anything else is taken as 1): a group's blocks are
// every row tile in order, each with the group's heads inner; then the next group. together = 1 is
// heads outer, together = heads every head of a row tile before the next row tile. The kernels
// decode their blocks with it (constexpr: device code too).
struct ForwardBlock {
  int32_t at, head;
};
constexpr ForwardBlock forward_block(int64_t n, int32_t tiles, int32_t heads, int32_t together) {
  const int64_t g = together >= 1 && together <= heads && heads % together == 0 ? together : 1;
  const int64_t per_group = int64_t{tiles} * g, group = n / per_group, r = n % per_group;
  return {static_cast<int32_t>(r / g), static_cast<int32_t>(group * g + r % g)};
}

// How many heads go out together (TileSchedule::heads_together), by default. Heads outer, the
// order the grid had, a head's longest row tile starts only after every earlier head's row tiles:
// where the heads are many waves and some row tiles walk far longer than most (causal at short
// lengths, the last document of causal_blockwise, the rows of global_sliding's global tokens), the
// last heads' long walks start late and end the grid alone. Heads together start their long walks
// together. But the blocks that run at once then read the K and V of that many heads, where heads
// outer they share one head's in L2 (measured, H100, tools/dev/matrices/ab-fwd-heads-together.json:
// every head together ran 0.63-0.95x heads outer on full, causal and causal_blockwise with 32 kv
// heads at head dim 128, 7001-90001 tokens, where with one kv head it ran up to 1.53x).
// The rule: of the powers of two that divide the heads, and all the heads, the fewest whose simulated
// dispatch (simulated_forward_makespan) ends within kTogetherSlack of the soonest, where that is
// kTogetherGain sooner than heads outer; else 1.
// Both chosen, not tuned: the 5% of the backward's rules, and a slack under the run's noise.
constexpr double kTogetherGain = 0.95;
constexpr double kTogetherSlack = 1.02;
int32_t forward_heads_together(const TileSchedule& s, int32_t heads, int32_t slots);

// Of the 64-row halves of the schedule's tiles, the share that sees nothing (0 for no tiles): what
// the default Hopper forward picks its step width by (kernels.hpp, kIdleShareFor64Keys).
double idle_share(const TileSchedule& s);
// Scheduled tiles per row tile (0 for no row tiles): how long a forward block walks, or a backward
// one (query tiles a key tile sees); the default Hopper kernels are picked by it too (kernels.hpp).
double mean_tiles(const TileSchedule& s);
// Column tiles from each row tile's first scheduled one to its last, inclusive, per row tile (0 for
// no row tiles; a row tile without runs counts 0): the range a backward walk goes through, of
// which mean_tiles are visited. Their difference is what a walk passes over without visiting
// (kernels.hpp, kSkipPassedPlacesLimit): for a key tile of one short document, nearly nothing; of a
// block-sparse mask, most of the sequence.
double mean_span(const TileSchedule& s);
// How much more the column tiles the walks visit are shared than if each walk spread its visits
// evenly over its span: the mean over visits of the share of busy row tiles that visit the same
// column tile, over the visits' share of the spans (mean_tiles over mean_span). About 1 where the
// walks visit their spans evenly (block_sparse's random blocks: each column tile visited by the
// kept share of the walks, each walk visiting that share of its span); well over 1 where most
// visits go to a band every walk shares (global tokens, the document every other one sees) and
// the rest stay near the walk's own tile. 0 without visits.
// Of the visits to a column tile that some row tile visited before (row tiles walked in order, each
// visit a tile of every one of `group` heads), the share whose places walked since that last visit
// exceed capacity_places: visits whose data a cache of that many places would have dropped (the
// walked places between two visits bound the distinct ones from above).
double far_reuse_share(const TileSchedule& s, int32_t group, int64_t capacity_places);
double visit_concentration(const TileSchedule& s);

// by_query: rows are queries, columns keys (forward). Otherwise rows are keys (backward).
// tile_rows: 64, 128 or 192 (the three-consumer Hopper forward's). The mask must already be
// validated (slices in bounds, known types).
TileSchedule build_schedule(const lca_mask& mask, bool by_query, int32_t tile_rows = kTile);

// The kernels' schedule: wide_rows-row tiles, unless 64-row tiles take less time (masks that
// change within 64 rows: block-sparse masks of 64-token blocks, many short documents). Time is
// cells / rate: wide_speedup is how much faster a cell runs in the kernel of wide tiles than in
// that of 64-row tiles (1.25 between the two mma.sync kernels, about 2-2.7 where the wide tiles
// run the Hopper kernels; plan() asks wide_tile_speedup()).
TileSchedule build_adaptive_schedule(const lca_mask& mask, bool by_query, int32_t wide_rows,
                                     double wide_speedup = 1.25);

// One block of the Hopper backward (per kv head): one or two key tiles (row tiles of a backward
// schedule) walked one after the other, each over its query tiles and the query heads of its
// group: tiles outer and heads inner, or heads outer (kWalkHeadsInner), tiles first to last or
// last to first (kWalkDown0 / kWalkDown1 for tiles[0] / tiles[1]).
// A part of a split walk (split_long_walks) walks query tiles from_tile .. from_tile +
// query_tiles[0] - 1 of its key tile's (counted along the walk) and adds its dK and dV into the fp32
// accumulator of its tile's slot; the other items write dK and dV themselves (slot -1). Once placed
// (place_split_walks), a part's tiles[0] is a row tile of its own past the schedule's row_tiles,
// whose runs are that part of the key tile's: the kernel's walks stay as they are.
struct BwdItem {
  int32_t tiles[2];        // tiles[1] < 0: one tile
  int32_t query_tiles[2];  // how many query tiles each one sees (0 for an absent second tile)
  int32_t flags;
  int32_t slot = -1;
  int32_t from_tile = 0;
};
// kWalkLocal: a block of the document-local order (backward_items); the kernel reads only the
// other bits.
constexpr int32_t kWalkDown0 = 1, kWalkDown1 = 2, kWalkHeadsInner = 4, kWalkLocal = 8;

// Whether key tiles share blocks (backward_items): never, on causal-like masks (kAuto), always.
enum class BwdPairing { kNone, kAuto, kAll };
// Whether unpaired key tiles take the document-local order (backward_items): never, by the rule
// (kAuto), always.
enum class BwdLocal { kOff, kAuto, kOn };

// The blocks of the Hopper backward, in launch order (the grid runs them for one kv head, then
// the next). Unpaired, every key tile is a block of its own, longest first, walking its query
// tiles first to last, heads outer: the blocks of a wave (one kv head) then read a query tile
// two or so iterations after their neighbours do, which keeps it in L2 wherever the key tiles'
// query ranges are alike (full, windows, documents). On causal-like masks (at least 90% of the
// key tiles' query ranges end together, or start together, and have no gaps, and the longest
// range is over twice the shortest) unpaired blocks start at different query tiles and a wave's
// reads spread over all of them; there (kAuto) the i-th longest tile shares a block with the i-th
// shortest, heads inner, the long one walked from the end where the ranges meet and the short one
// back: every pair is as long and the blocks of a wave walk two fronts of query tiles in step
// (commit 88575d6). Pairs that would leave a last wave part empty are split back into
// single tiles, launched after the pairs: of at most a wave's worth (slots / heads_kv pairs), the
// fewest that bring the simulated dispatch onto `slots` SMs within 1.5% of its best (slots <= 0
// or kAll: none). Every row tile appears exactly once, empty ones too (their dK and dV are zeros
// to write).
// Document-local order (unpaired masks of many short causal documents: causal_document,
// prefix_lm_document, shared_question at 128K, seed 42): where at least half of the key tiles' query
// ranges end where other ranges end but start elsewhere (a document's key tiles: their ranges
// start at their diagonal and end at the document's end), 90% have no gaps and the mean walk is
// at most kLocalMeanTiles query tiles, longest first
// would run the key tiles of one document at different times and read a document's query tiles
// from DRAM once per key tile (H100, shared_question at 128K: L2 hit rate 36-45%). There (kAuto
// with pairing kAuto, or kOn on any unpaired mask) the blocks go out in tile order, each walking down from its range's end with
// heads inner (kWalkDown0 | kWalkHeadsInner | kWalkLocal): a document's blocks start together at
// its last query tile and read every (query tile, head) at the same step. Walks of over
// kLocalLongWalk x the mean stay plain and go first, longest first (split_long_walks may split
// them: the question of shared_question). Measured (H100, against longest first, commit 0c6ae90):
// causal_document, prefix_lm_document and shared_question (its question split either way)
// +43 / +41 / +63% at 128K (mean walks of 25-27 query tiles); with mean walks of ~200 and more,
// -1.4 to -1.9% at 64K, +3% at 256K, +0.5-1% at 512K: kLocalMeanTiles, chosen between 27 and 188,
// keeps those plain. On the windows, where ranges end apart, the same order lost 45%.
constexpr double kLocalLongWalk = 8.0;
constexpr double kLocalMeanTiles = 64.0;
std::vector<BwdItem> backward_items(const TileSchedule& s, int32_t heads_kv, int32_t group, int32_t slots,
                                    BwdPairing pairing, BwdLocal local = BwdLocal::kAuto);
// Whether the items are in the document-local order (any kWalkLocal block): the order of kv heads
// stays one after another there (kv_heads_together).
bool local_walks(const std::vector<BwdItem>& items);

// The iterations of the Hopper backward's block of `it` (its query tiles x heads of the group), and
// what the block costs: those plus an estimated fixed cost (K and V in, dK and dV out; for a part
// of a split walk, dK and dV added into fp32 and converted after), the dispatch simulations' unit.
int64_t item_iterations(const BwdItem& it, int32_t group);
int64_t item_cost(const BwdItem& it, int32_t group);

// Long walks split across blocks. A block walks its key tile's query tiles x the group's heads,
// and one long walk beside many short ones ends the backward late whatever the order:
// shared_question at 128K (seed 42) has a key tile of the question that every query tile sees,
// 16K iterations, more than the whole backward's work per SM (simulated dispatch 0.52 of the
// bound; measured 171 TFLOP/s against full's ~500, commit f57293c). global_sliding at 256K-512K: its 16
// key tiles of global keys walk everything, and one kv head after another leaves the last ones to
// start late (0.85). A part walks a range of its key tile's query tiles for every head of the
// group; the parts of a tile add dK and dV into an fp32 accumulator (BwdItem::slot), which a pass
// converts after the main kernel.
// split_items splits every plain walk (one key tile, up, heads outer, not yet split) of over
// `limit` iterations into as few parts of about equal query tiles as bring each to at most `limit`
// (limit 0: one query tile a part), but at most most_parts (0: no bound); slots are numbered from 0,
// one a split tile; sorted longest first, as backward_items' are, but the blocks of the
// document-local order stay after the rest in their order. The parts' runs are set by
// place_split_walks.
std::vector<BwdItem> split_items(const std::vector<BwdItem>& items, int32_t group, int64_t limit,
                                 int32_t most_parts = 0);
// The rule: of the splits that bring each walk to at most the longest plain walk's 1 / 2, 1 / 4, 1 / 8 or
// 1 / 16, the one whose simulated dispatch (on `slots` SMs, in the order kv_heads_together picks
// for it) ends soonest (more parts only where they end over 1% sooner), taken where it ends at
// least kSplitGain sooner than no split; else the items as they are (slots <= 0: as they are).
// Chosen, not tuned: the split's own cost is in item_cost. Where kv heads together already fix the
// order (global_sliding up to 64K: 0.97-0.99 of the bound) nothing is split.
constexpr double kSplitGain = 0.05;
std::vector<BwdItem> split_long_walks(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group,
                                      int32_t slots);
// Walks split by query ranges, for the skip kernel on sparse walks that pass over many places.
// A rotated walk that visits few of the (query head, query tile) places in its range drifts
// away from the other blocks of its kv head, and once the places between them hold more Q, dO
// and dQ than L2 keeps, every block reads its tiles from DRAM (kernels.hpp, kSkipPassedPlacesLimit).
// split_by_ranges cuts every plain walk (one key tile, up, heads outer, whole) that visits query
// tiles in more than one range of `range_tiles` query tiles ([0, range_tiles), [range_tiles,
// 2 range_tiles) ...) into a part a range it visits (slots numbered from 0, one a split tile), and
// puts the blocks in range order, the ranges' first query tile first, longest first within a range:
// the blocks that run together then read the places of one range. Walks inside one range stay whole
// (in that range's place); tiles that see nothing go last. The parts' runs are set by
// place_split_walks.
std::vector<BwdItem> split_by_ranges(const TileSchedule& s, const std::vector<BwdItem>& items, int32_t group,
                                     int32_t range_tiles);

// Gives each split part (slot >= 0) a row tile of its own: appended to the schedule past row_tiles
// (run_offsets grows by one a part; row_tiles stays), its runs the part's query tiles of its key
// tile, cut from that tile's runs (the same tiles and bitmasks). Returns the split key tiles by slot
// and sets the parts' tiles[0] to their own row tiles. Call it once, last.
std::vector<int32_t> place_split_walks(TileSchedule& s, std::vector<BwdItem>& items);

// The order the Hopper backward's blocks go out in: kv heads in groups of g (a divisor of
// heads_kv), one group after another, and in a group every kv head's first item, then every kv
// head's second ... g = 1 is one kv head after another; g = heads_kv, all kv heads inner.
// Items are sorted longest first, so g = 1 leaves the long items of the last kv heads to start
// late: global_sliding's 16 key tiles of global keys walk every query tile, 2052 iterations
// against the others' 532 at 16K, and the last kv head's start when the GPU has ~700 iterations an
// SM left (simulated: 0.83 of the work's bound, against 0.97 with g = 8). But a larger g runs the
// long walks of more kv heads at once, and there heads inner can fall apart (H100, commit f57293c, all
// kv heads inner against g = 1: full 0.58 / 0.53 at 32K / 64K, shared_question 0.63-0.79 at 32K and
// 64K, block_sparse 0.46-0.54 at 16K-64K; global_sliding at 64K 0.85-1.14 across four runs, and with
// g = 4 1.06 / 1.12).
// The rule: the largest g (a power of two) for which g times the longest walk is at most
// kKvHeadsWalkLimit iterations; taken if the simulated dispatch of the items on `slots` SMs ends at
// least kKvHeadsGain sooner with it than with g = 1, else g = 1 (slots <= 0, or items in the
// document-local order, whose blocks of a document run together: 1; with it, shared_question at
// 128K lost 15% to all kv heads together, commit 0c6ae90). Both chosen from
// those A/Bs, not tuned closer: heads inner sped up the masks simulated 8-16% sooner with walks of
// up to 4096 iterations (8 x 4096 = 32768 at once) and slowed those simulated 2-3% sooner
// (sliding_window_document and shared_question at 16K / 64K). The default also keeps the skip
// kernel at g = 1 (default_kv_heads_together, kernels.hpp).
constexpr double kKvHeadsGain = 0.05;
constexpr int64_t kKvHeadsWalkLimit = 49152;
int32_t kv_heads_together(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group, int32_t slots);
// When the last block ends if the items go out with g kv heads together (simulated; for the tests).
int64_t simulated_order_makespan(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group, int32_t slots,
                                 int32_t g);
// The same with g as kv_heads_together gives it for the items (the order the kernel without the skip
// runs them in): what split_long_walks and unpaired_under_a_wave (kernels.hpp) compare.
int64_t simulated_default_makespan(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group, int32_t slots);
// When the last of the items' blocks ends, going out g kv heads together on `slots` SMs (simulated
// as above), over their cost spread evenly over the SMs: 1.0 where the dispatch ends with the
// spread, more where a tail of long blocks runs on few SMs (plan_info's backward
// "dispatch_over_spread"; 0 without items or SMs). A model of the grid's dispatch: tile rates,
// L2 and the kernels' own differences are not in it.
double dispatch_over_spread(const std::vector<BwdItem>& items, int32_t heads_kv, int32_t group, int32_t slots,
                            int32_t g);

// Whether every block walks one key tile up with heads outer (no pairs, no flags, no split): the
// Hopper skip backward starts such walks where the running blocks of their kv head are (kernels.hpp,
// default_sm90_skip_backward).
bool plain_walks(const std::vector<BwdItem>& items);
// Whether the walks are plain and alike: the longest walks at most kAlikeWalkRatio times the
// shortest's query tiles. Only such walks rotate (kernels.hpp, default_sm90_rotate_backward): where
// every key tile walks (nearly) the same query tiles, a block that starts where the running ones
// are reads what they read. causal_blockwise at 512K (walks of 2 to 4452 query tiles) ran its
// backward at 0.71x rotated (commit cd142dc). Chosen, not tuned: above block_sparse's widest spread
// at 64K-512K (809 / 731 = 1.11 at 64K), far below the unlike masks' (hundreds or more).
constexpr double kAlikeWalkRatio = 1.25;
bool alike_walks(const std::vector<BwdItem>& items);

// The dQ accumulator's first writers. The backward adds every block's dQ of a (query tile, query
// head) into an fp32 accumulator, which prepare_kernel zeroes first: at 16K with 64 heads, 537 MB
// written at bandwidth, half of that pass and ~4% of sliding_window_causal's backward (commit 1498051,
// v34). Where one block is sure to reach a query tile before the others do, it can store its dQ
// there instead of adding it, and the tile needs no zeroing: the others wait for its store (a flag a
// (query tile, head), the call's number: BwdParams::dq_ready) before they add.
// dq_first_writers, for plain walks (one key tile, up, heads outer, no split; else nothing): the
// items in an order that puts such blocks first (walks of at least kFirstWriterLongWalk x the
// longest's query tiles first, the later walk start first: a window's key tiles from the last to the
// first, each the first to reach the query tiles its walk starts at; then the shorter ones as they
// were, longest first), and for each query tile the key tile whose block stores there (-1: zeroed by
// prepare_kernel). The first writer of a tile is the first of its visitors in that order (the kernel
// takes blocks in order by a ticket: it is running or done when the others wait, so waiting cannot
// deadlock); a tile keeps it only where every visitor that may run beside it (fewer than slots / g
// blocks later, g kv heads together) reaches the tile at least kFirstWriterLead iterations later than
// it does, in every head (a walk reaches tile c of head h at iteration h x its query tiles + c's place
// in it), so that its store is usually done before anyone waits. Nothing (the items stay
// as they are) where fewer than kFirstWriterShare of the visited tiles keep a first writer (full and
// the documents, whose key tiles reach a query tile together; shared_question at 64K keeps 50%), or
// where the new order's simulated dispatch (simulated_order_makespan) ends more than
// kFirstWriterDispatch later (causal_document, causal_blockwise and prefix_lm_document at 64K: 1.8-1.9%).
// Of the builtin masks at 16K-64K (heads 64:8, 132 SMs) the three windows keep first writers for
// 75-100% of their query tiles (test_flex_schedule). Not `timed` (for the tests): every tile a plain walk
// visits keeps its first visitor, even on full. Cost: one pass over the walks' tiles. Chosen, not
// tuned.
// A block is the first writer of at most kFirstWriterBlockTiles query tiles (the first it reaches;
// past them the tiles are zeroed and added into). A first writer's reducer waits for each store to
// land before it marks the tile, and every later visitor of the tile waits for that mark. In a
// window every block is the first visitor of the two query tiles its 128-key step moves the window
// by, and its followers wait twice a head; in causal documents of 2K-20K tokens at 100K-128K, or
// shared_question's prolong64k documents there, the order above makes each long document's first
// long walk the first visitor of its whole walk (up to 300 query tiles), and every other key tile
// of the document waits on it at every tile it visits. Measured on an H100 (heads 64:8 and 8:1,
// d128, 13593-125611 tokens, docs/results/2026-12-07-h100-bwd-first-writers.md): with first
// writers as before, those backwards ran 1.10-1.30x faster without them, sliding_window 1.08x
// faster with them (three of eight cells, the rest within the run's noise of 5%). Two: a window's.
constexpr int32_t kFirstWriterBlockTiles = 2;
constexpr int32_t kFirstWriterLead = 2;
constexpr double kFirstWriterShare = 0.6;
constexpr double kFirstWriterLongWalk = 0.5;
constexpr double kFirstWriterDispatch = 0.01;
struct FirstWriters {
  std::vector<BwdItem> items;     // reordered
  std::vector<int32_t> key_tile;  // per query tile (col_tiles), or -1
  int64_t tiles = 0;              // query tiles with a first writer
};
FirstWriters dq_first_writers(const TileSchedule& s, const std::vector<BwdItem>& items, int32_t heads_kv,
                              int32_t group, int32_t kv_heads_together, int32_t slots, bool timed = true);

// Does the schedule make (row, col) visible? For tests: walks the runs of row's tile. row counts
// the schedule's rows (tile t's are t x tile_rows ..): in a matched schedule, schedule_row_key's.
bool schedule_visible(const TileSchedule& s, int64_t row, int64_t col);
// The row of the mask (a key, in the backward) that row `row` of the schedule stands for: the same
// row, or in a matched schedule its place in its half's block (a row past the end: rows or more).
int64_t schedule_row_key(const TileSchedule& s, int64_t row);

// Key-block matching, for the Hopper skip backward. A 128-key tile whose two 64-key halves see
// different query tiles runs a half-idle iteration on every query tile that only one half sees,
// and the skip kernel runs such an iteration at ~0.7 of a busy one for half its work (commit 03adc3f).
// On a block-sparse mask of 64-token blocks kept at random, adjacent halves share a quarter of the
// query tiles and two thirds of the iterations are half-idle; halves that see many of the same
// query tiles, wherever their keys are, run more iterations busy and fewer in all.
// match_key_blocks pairs the row tiles of a 64-row backward schedule (key blocks) greedily, the
// pairs that see the most query tiles in common first (ties: lower blocks first, so that on masks
// whose blocks are alike the pairs are the adjacent ones), and returns them as key_blocks (the
// lower block first in each pair, pairs in order of their lower block); empty where there are
// more than kMatchMostBlocks blocks (the pairs are O(blocks^2)).
constexpr int32_t kMatchMostBlocks = 2048;
std::vector<int32_t> match_key_blocks(const TileSchedule& narrow);
// The 128-row schedule whose tile t is the 64-row tiles key_blocks[2 t] and key_blocks[2 t + 1] of
// narrow (a 64-row schedule), with the same runs, bitmasks and half bits as build_schedule would
// give that tile's keys.
TileSchedule build_matched_schedule(const TileSchedule& narrow, std::vector<int32_t> key_blocks);
// The modelled time of a 128-row backward schedule in the skip kernel, in iterations of one query
// head: a key tile costs its tiles, those with one idle half counted kHalfIdleCost (v30's rate: 0.7
// of a busy iteration), and the blocks (a key tile and a kv head each) go onto `slots` SMs, so the
// time is the larger of the whole cost over the slots and the dearest key tile (a short mask's
// blocks fill at most a wave, and the longest walk is the time). plan() takes the matched schedule
// where this is at least kMatchGain below the plain one's. Measured (H100, commit 10d4683, heads 64:8 at
// 1K-2K), matched against plain: shared_question at 2K 0.83x (its dearest tile 24.5 -> 29.9),
// causal_document and prefix_lm_document at 1K 0.91x / 0.90x (7.7 -> 8.7, 8.4 -> 9.0), whose summed
// cost alone fell 2-4%; block_sparse at 16K-64K (the sum's term) 1.02-1.04x (v32).
constexpr double kHalfIdleCost = 0.7;
constexpr double kMatchGain = 0.01;
double skip_backward_cost(const TileSchedule& s, int32_t heads_kv, int32_t slots);

}  // namespace lca_flex_flash
