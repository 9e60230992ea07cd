// The scaling model against the strategies' own planning code: every cell of the mask is
// computed exactly once over all ranks, the balanced layouts give each rank its share, more
// bandwidth never costs time, bad input is refused by name, and 96 GPUs x 6 strategies is fast;
// the local kernel's tiles against hand counts, and transfers to several peers at their figures.
#include "core/model/cp_model.hpp"
#include "core/model/kernel_tiles.hpp"
#include "plugins/kernels/flex_flash/kernels.hpp"

#include "balance.hpp"
#include "layout.hpp"
#include "slice_clip.hpp"

#include <lca/error.hpp>
#include <lca/types.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

namespace {

using lca::core::model::KernelRate;
using lca::core::model::Machine;
using lca::core::model::predict;
using lca::core::model::Problem;
using lca::core::model::count_tiles;

lca_slice slice(int64_t q0, int64_t q1, int64_t k0, int64_t k1, lca_slice_type t) {
  lca_slice s{};
  s.q_begin = q0, s.q_end = q1, s.k_begin = k0, s.k_end = k1, s.type = t;
  return s;
}

// Causal documents of random lengths (seeded), one CAUSAL slice each.
std::vector<lca_slice> documents(int64_t S, int64_t mean, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> len(1, 2 * mean);
  std::vector<lca_slice> out;
  for (int64_t a = 0; a < S;) {
    const int64_t b = std::min(S, a + len(rng));
    out.push_back(slice(a, b, a, b, LCA_SLICE_CAUSAL));
    a = b;
  }
  return out;
}

Problem problem(std::vector<lca_slice> slices, int64_t S, int hq, int hkv, bool bwd = false) {
  Problem p;
  p.slices = std::move(slices);
  p.seqlen = S;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.head_dim = 128;
  p.backward = bwd;
  return p;
}

const KernelRate kRate{600.0, 0.0};

// Masks with every slice type: full, causal, documents, a band (BI_CAUSAL) with an INV_CAUSAL piece.
std::vector<std::pair<std::string, std::vector<lca_slice>>> masks(int64_t S) {
  return {{"full", {slice(0, S, 0, S, LCA_SLICE_FULL)}},
          {"causal", {slice(0, S, 0, S, LCA_SLICE_CAUSAL)}},
          {"documents", documents(S, S / 13, 5)},
          {"band+inv", {slice(0, S, 0, S / 2, LCA_SLICE_BI_CAUSAL), slice(S / 2, S, S / 2, S, LCA_SLICE_INV_CAUSAL)}}};
}

TEST(CpModel, RanksComputeEveryCellOnce) {
  const int64_t S = 4099;  // odd: uneven chunks everywhere
  for (const auto& [name, slices] : masks(S))
    for (int W : {2, 4, 6, 8, 16})
      for (bool bwd : {false, true})
        for (const std::string& st : lca::core::model::strategy_names()) {
          const Problem P = problem(slices, S, 16, 4, bwd);
          Machine m;
          m.gpus_per_node = 4;
          const auto pr = predict(P, st, nlohmann::json::object(), W, m, kRate);
          if (!pr.refused.empty()) continue;  // ulysses at W = 6: heads not divisible
          double sum = 0;
          for (const auto& r : pr.ranks) sum += r.flops;
          EXPECT_NEAR(sum, pr.total_flops, 1e-9 * pr.total_flops) << st << " " << name << " W=" << W;
          EXPECT_GT(pr.time_ms, 0) << st << " " << name;
        }
}

TEST(CpModel, BreakdownAddsUpToTheSlowestRank) {
  // Every rank's exec stream is its kernels, memory passes and waits; the slowest rank's time is the
  // ideal (one GPU / world) plus imbalance, tiles, exposed transfers and memory, by tiles and by area.
  const int64_t S = 8192;
  for (const auto& [name, slices] : masks(S))
    for (int W : {2, 4, 8})
      for (bool bwd : {false, true})
        for (const std::string& st : lca::core::model::strategy_names()) {
          const Problem P = problem(slices, S, 16, 4, bwd);
          Machine m;
          m.gpus_per_node = 4;
          KernelRate r = kRate;
          for (bool tiles : {false, true}) {
            r.unit_ms = tiles ? lca::core::model::calibrate_tiles(P, 2.0, 132) : 0.0;
            const auto pr = predict(P, st, nlohmann::json::object(), W, m, r);
            if (!pr.refused.empty()) continue;
            const std::string what = st + " " + name + " W=" + std::to_string(W) + (bwd ? " bwd" : " fwd");
            for (const auto& x : pr.ranks)
              EXPECT_NEAR(x.total_ms, x.kernel_ms + x.memory_ms + x.exposed_ms, 1e-9 * x.total_ms) << what;
            const auto& b = pr.breakdown;
            EXPECT_NEAR(pr.time_ms, b.ideal_ms + b.imbalance_ms + b.tiles_ms + b.exposed_ms + b.memory_ms,
                        1e-9 * pr.time_ms) << what;
            EXPECT_NEAR(b.ideal_ms, pr.total_flops / W / (kRate.tflops * 1e12) * 1e3, 1e-9 * b.ideal_ms) << what;
            EXPECT_GE(b.exposed_ms, 0) << what;
            EXPECT_LE(b.mean_total_ms, pr.time_ms * (1 + 1e-12)) << what;
            if (!tiles) EXPECT_NEAR(b.tiles_ms, 0, 1e-9) << what;  // by area a call is its FLOPs
          }
        }
}

TEST(SliceClip, RowsWithCellsHoldEveryRowThatHasACell) {
  // Against a row-by-row count of the local mask: no row with a cell is left out, and the runs are
  // tight for these masks (each run's first and last rows have cells).
  const int64_t S = 1500;
  for (const auto& [name, slices] : masks(S)) {
    const lca::cp::Segments q = {{100, 700, 0}, {900, 1300, 600}}, k = {{0, 300, 0}, {650, 1100, 300}};
    const lca::cp::LocalMask m = lca::cp::clip_mask(slices, q, k);
    const auto runs = lca::cp::rows_with_cells(m);
    auto in_runs = [&](int64_t r) {
      for (const auto& x : runs)
        if (r >= x.begin && r < x.end) return true;
      return false;
    };
    std::vector<bool> has(m.seqlen_q, false);
    for (int64_t r = 0; r < m.seqlen_q; ++r)
      for (int64_t c = 0; c < m.seqlen_k && !has[r]; ++c)
        for (const lca_slice& x : m.slices)
          if (lca::slice_contains(x, r, c)) {
            has[r] = true;
            break;
          }
    int64_t with = 0;
    for (int64_t r = 0; r < m.seqlen_q; ++r) {
      with += has[r];
      if (has[r]) EXPECT_TRUE(in_runs(r)) << name << " row " << r;
    }
    for (const auto& x : runs) {
      EXPECT_TRUE(has[x.begin]) << name << " run from " << x.begin;
      EXPECT_TRUE(has[x.end - 1]) << name << " run to " << x.end;
    }
    if (name != "full") EXPECT_GT(with, 0) << name;
  }
}

TEST(CpModel, BlockPairAreasMatchTheClippedMasks) {
  // The area table's sums against clip_mask (what the kernels are planned on), for zigzag pieces.
  const int64_t S = 3001;
  const auto slices = documents(S, 97, 11);
  lca_problem p{};
  p.seqlen_q = p.seqlen_k = S;
  p.heads_q = 8, p.heads_kv = 2;
  const auto L = lca::cp::make_layout(8, 0, 2, true, p);
  int64_t total = 0;
  for (int a = 0; a < L.cp; ++a)
    for (int b = 0; b < L.cp; ++b) {
      const auto m = lca::cp::clip_mask(slices, L.group_segs[a], L.group_segs[b]);
      for (const auto& x : m.slices) total += lca::slice_area(x);
    }
  int64_t area = 0;
  for (const auto& x : slices) area += lca::slice_area(x);
  ASSERT_EQ(total, area);
  const auto pr = predict(problem(slices, S, 8, 2), "usp", {{"ulysses_degree", 2}}, 8, Machine{}, kRate);
  ASSERT_TRUE(pr.refused.empty()) << pr.refused;
  EXPECT_EQ(pr.head_degree, 2);
  double sum = 0;
  for (const auto& r : pr.ranks) sum += r.flops;
  EXPECT_NEAR(sum, 4.0 * double(area) * 128 * 8, 1.0);
}

TEST(CpModel, FullMaskGivesEveryGpuItsShareAtEveryWorldSize) {
  // Fixed tokens a GPU on full: every rank computes total / W, so the compute share is constant.
  for (int W : {8, 16, 32}) {
    const int64_t S = 2048 * W;
    const Problem P = problem({slice(0, S, 0, S, LCA_SLICE_FULL)}, S, 64, 8);
    for (const std::string& st : lca::core::model::strategy_names()) {
      const auto pr = predict(P, st, nlohmann::json::object(), W, Machine{}, kRate);
      if (!pr.refused.empty()) continue;
      for (const auto& r : pr.ranks)
        EXPECT_NEAR(r.flops, pr.total_flops / W, 1e-6 * pr.total_flops / W) << st << " W=" << W << " rank " << r.rank;
      EXPECT_LE(pr.tflops_per_gpu, kRate.tflops * (1 + 1e-9)) << st;
    }
  }
}

TEST(CpModel, MoreBandwidthIsNeverSlower) {
  const int64_t S = 32768 * 16;
  for (const auto& [name, slices] : masks(S))
    for (bool bwd : {false, true})
      for (const std::string& st : lca::core::model::strategy_names()) {
        const Problem P = problem(slices, S, 64, 8, bwd);
        Machine slow;
        slow.intra = {50, 20};
        slow.inter = {5, 30};
        const auto base = predict(P, st, nlohmann::json::object(), 16, slow, kRate);
        if (!base.refused.empty()) continue;
        Machine fast_intra = slow, fast_inter = slow, low_latency = slow, fan = slow, faster_fan = slow;
        fast_intra.intra.GBps *= 4;
        fast_inter.inter.GBps *= 4;
        low_latency.intra.latency_us = low_latency.inter.latency_us = 0;
        fan.intra.fanout = {60, 20, {}};
        fan.inter.fanout = {6, 30, {}};
        faster_fan = fan;
        faster_fan.intra.fanout.GBps *= 4;
        faster_fan.inter.fanout.GBps *= 4;
        for (const Machine& m : {fast_intra, fast_inter, low_latency, fan}) {
          const auto pr = predict(P, st, nlohmann::json::object(), 16, m, kRate);
          EXPECT_LE(pr.time_ms, base.time_ms * (1 + 1e-12)) << st << " " << name << (bwd ? " bwd" : " fwd");
        }
        // The same by tiles (on documents, whose calls the tiles change most), and with the
        // several-peer figures raised.
        if (name == "documents") {
          KernelRate tiles = kRate;
          tiles.unit_ms = lca::core::model::calibrate_tiles(P, 50.0, 132);
          const auto tb = predict(P, st, nlohmann::json::object(), 16, fan, tiles);
          const Machine& m = faster_fan;
          EXPECT_LE(predict(P, st, nlohmann::json::object(), 16, m, kRate).time_ms,
                    predict(P, st, nlohmann::json::object(), 16, fan, kRate).time_ms * (1 + 1e-12))
              << st << " " << name;
          EXPECT_LE(predict(P, st, nlohmann::json::object(), 16, m, tiles).time_ms, tb.time_ms * (1 + 1e-12))
              << st << " " << name;
        }
        // Inter-node links slow enough to matter: a cross-node strategy must feel them.
        Machine slower = slow;
        slower.inter.GBps /= 100;
        const auto pr = predict(P, st, nlohmann::json::object(), 16, slower, kRate);
        EXPECT_GT(pr.time_ms, base.time_ms) << st << " " << name;
      }
}

// A message's own cost (Machine::message_us) falls on balanced's group-cast, which posts K and V a
// fetched segment: it costs a finer split more, and leaves the ring strategies (one K and one V a
// peer a step) as they were.
TEST(CpModel, MessagesCostTheGroupCastByMessageRun) {
  // balanced's fetch posts a K and a V message a run of segments that lie back to back in the
  // owner's buffer (cast_plan.hpp, message_runs). On causal a peer's fetched chunks are a prefix of
  // its buffer: one run whatever the chunk count. On short documents the chunks a rank's rows touch
  // are scattered in their owners' buffers: more chunks, more runs.
  const int64_t S = 32768 * 4;
  Machine plain, per_message;
  per_message.message_us = 20;
  auto extra = [&](const Problem& P, int chunks) {  // the ranks' time in transfers the messages add
    double ms = 0;
    const nlohmann::json options = {{"chunks_per_rank", chunks}};
    for (const auto& r : predict(P, "balanced", options, 4, per_message, kRate).ranks) ms += r.comm_ms;
    for (const auto& r : predict(P, "balanced", options, 4, plain, kRate).ranks) ms -= r.comm_ms;
    return ms;
  };
  const Problem causal = problem({slice(0, S, 0, S, LCA_SLICE_CAUSAL)}, S, 8, 1);
  EXPECT_GT(extra(causal, 8), 0.0);
  EXPECT_NEAR(extra(causal, 32), extra(causal, 8), 1e-9);
  const Problem docs = problem(documents(S, 3000, 5), S, 8, 1);
  EXPECT_GT(extra(docs, 32), 1.5 * extra(docs, 8)) << extra(docs, 8) << " " << extra(docs, 32);
  for (const char* ring : {"ring_p2p", "ring_allgather"})
    EXPECT_DOUBLE_EQ(predict(causal, ring, nlohmann::json::object(), 4, per_message, kRate).time_ms,
                     predict(causal, ring, nlohmann::json::object(), 4, plain, kRate).time_ms)
        << ring;
}

TEST(CpModel, TheStagedForwardWritesTheRowsItsFetchedStageHasNoCellsIn) {
  // balanced's staged forward calls the kernel on every local query row for a fetched stage, and
  // the kernel writes O = 0 and LSE = -inf on the rows without cells. Two ranks, a chunk each:
  // documents [0, 2000), [2000, 2100), [2100, 4096); the rank holding [2048, 4096) fetches keys
  // [2000, 2048) for its rows [2048, 2100) alone. Its memory passes beyond the other rank's (which
  // fetches nothing; both share the rest): the fetched call's 1996 empty rows (O and LSE) and the
  // merge of its 52 rows (read both parts, write O).
  const int64_t S = 4096;
  const Problem P = problem({slice(0, 2000, 0, 2000, LCA_SLICE_CAUSAL), slice(2000, 2100, 2000, 2100, LCA_SLICE_CAUSAL),
                             slice(2100, S, 2100, S, LCA_SLICE_CAUSAL)},
                            S, 8, 1);
  const nlohmann::json staged = {{"chunks_per_rank", 1}, {"one_call", false}};
  Machine m;
  const auto pr = predict(P, "balanced", staged, 2, m, kRate);
  ASSERT_TRUE(pr.refused.empty()) << pr.refused;
  const double row_o = 8.0 * 128 * 2;  // heads x head_dim x 2 bytes
  const double expected = (1996 * (row_o + 8 * 4) + 52 * row_o * 3) / (m.hbm_GBps * 1e9) * 1e3;
  ASSERT_EQ(pr.ranks.size(), 2u);
  const double most = std::max(pr.ranks[0].memory_ms, pr.ranks[1].memory_ms);
  const double least = std::min(pr.ranks[0].memory_ms, pr.ranks[1].memory_ms);
  EXPECT_NEAR(most - least, expected, 1e-9 * expected);
}

lca_mask view(const std::vector<lca_slice>& slices, int64_t sq, int64_t sk) {
  return lca_mask{sizeof(lca_mask), sq, sk, static_cast<int64_t>(slices.size()), slices.data(), nullptr, 0, nullptr};
}

// Tiles are 128 rows (queries forward, keys backward) x 64 columns, counted by hand.
TEST(KernelTiles, AlignedFullAndCausal) {
  const std::vector<lca_slice> full = {slice(0, 256, 0, 256, LCA_SLICE_FULL)};
  for (bool bwd : {false, true}) {
    const auto c = count_tiles(view(full, 256, 256), bwd);
    EXPECT_EQ(c.tiles, 8);  // 2 row tiles x 4 column tiles
    EXPECT_EQ(c.partial, 0);
    EXPECT_EQ(c.row_tiles, 2);
  }
  // Forward: query tile 0 sees column tiles 0 and 1, each cut by the diagonal; query tile 1 sees 0
  // and 1 whole and 2 and 3 cut. Backward: key tile 0 sees query tiles 0 and 1 cut, 2 and 3 whole;
  // key tile 1 sees 2 and 3 cut.
  const std::vector<lca_slice> causal = {slice(0, 256, 0, 256, LCA_SLICE_CAUSAL)};
  for (bool bwd : {false, true}) {
    const auto c = count_tiles(view(causal, 256, 256), bwd);
    EXPECT_EQ(c.tiles, 6) << bwd;
    EXPECT_EQ(c.partial, 4) << bwd;
    EXPECT_EQ(c.row_tiles, 2) << bwd;
  }
}

TEST(KernelTiles, UnalignedLengths) {
  // 200 queries x 100 keys, full: forward 2 query tiles (128 + 72) x 2 key tiles (64 + 36);
  // backward 1 key tile x 4 query tiles (64, 64, 64, 8).
  const std::vector<lca_slice> full = {slice(0, 200, 0, 100, LCA_SLICE_FULL)};
  auto c = count_tiles(view(full, 200, 100), false);
  EXPECT_EQ(c.tiles, 4);
  EXPECT_EQ(c.row_tiles, 2);
  c = count_tiles(view(full, 200, 100), true);
  EXPECT_EQ(c.tiles, 4);
  EXPECT_EQ(c.row_tiles, 1);
  // An empty row tile pays nothing: queries 0..127 see no key.
  const std::vector<lca_slice> late = {slice(128, 200, 0, 100, LCA_SLICE_FULL)};
  c = count_tiles(view(late, 200, 100), false);
  EXPECT_EQ(c.tiles, 2);
  EXPECT_EQ(c.row_tiles, 1);
}

TEST(KernelTiles, ChunksThatCutADocument) {
  // Documents of 64 tokens at 0, 64, 128, 192 (causal). Whole, forward: query tile 0 holds two
  // documents, each on its diagonal tile: 2 tiles a query tile, 4 in all.
  std::vector<lca_slice> docs;
  for (int64_t a = 0; a < 256; a += 64) docs.push_back(slice(a, a + 64, a, a + 64, LCA_SLICE_CAUSAL));
  auto c = count_tiles(view(docs, 256, 256), false);
  EXPECT_EQ(c.tiles, 4);
  EXPECT_EQ(c.partial, 4);
  // A rank that holds tokens 32..95 and 160..223 (two chunks, 128 local rows): each chunk holds
  // the ends of two documents, 32 tokens each. Its call on its own keys: local query rows 0..31
  // see keys 0..31, rows 32..63 keys 32..63 (tile 0); rows 64..95 keys 64..95, 96..127 keys
  // 96..127 (tile 1): the same 2 tiles as a whole query tile, for half the cells.
  const lca::cp::Segments mine = {{32, 96, 0}, {160, 224, 64}};
  const auto local = lca::cp::clip_mask(docs, mine, mine);
  c = count_tiles(local.view(), false);
  EXPECT_EQ(c.tiles, 2);
  EXPECT_EQ(c.partial, 2);
  EXPECT_EQ(c.row_tiles, 1);
  int64_t area = 0, whole = 0;
  for (const auto& x : local.slices) area += lca::slice_area(x);
  for (const auto& x : docs) whole += lca::slice_area(x);
  EXPECT_EQ(area, 4 * (32 * 33 / 2));  // the four document ends, 32 x 33 / 2 cells each
  EXPECT_LT(double(area) / c.tiles, double(whole) / 4);  // fewer cells a tile than whole
}

TEST(KernelTiles, TheForwardsHeadsGoOutAsThePlanGroupsThem) {
  // Short causal documents and a last one that sees every earlier token (causal_blockwise's shape)
  // at 8 heads on 132 SMs: heads outer, the last heads' long row tiles start late and end the grid
  // alone; grouped as plan() groups them (forward_heads_together) they start early. The backward
  // does not group its heads that way: the same either way.
  const int64_t S = 32768, last = 2048;
  std::vector<lca_slice> m;
  for (int64_t a = 0; a < S - last; a += 1024) m.push_back(slice(a, a + 1024, a, a + 1024, LCA_SLICE_CAUSAL));
  m.push_back(slice(S - last, S, 0, S - last, LCA_SLICE_FULL));
  m.push_back(slice(S - last, S, S - last, S, LCA_SLICE_CAUSAL));
  const auto v = view(m, S, S);
  const double outer = lca::core::model::tile_units(v, false, 8, 1, 132, false);
  const double grouped = lca::core::model::tile_units(v, false, 8, 1, 132, true);
  EXPECT_LT(grouped, 0.95 * outer);
  EXPECT_EQ(lca::core::model::tile_units(v, true, 8, 1, 132, false), lca::core::model::tile_units(v, true, 8, 1, 132, true));
  // One head: nothing to group.
  EXPECT_EQ(lca::core::model::tile_units(v, false, 1, 1, 132, false), lca::core::model::tile_units(v, false, 1, 1, 132, true));
}

TEST(KernelTiles, TheForwardsLongWalksSplitAsThePlanSplitsThem) {
  // A few rows that see every key beside a narrow band (global_sliding's shape: 18 global tokens, a
  // 294-token window) at 8 heads: whole, the global rows' 8 blocks end the grid alone; split as
  // plan() splits them (fwd_split, the default since split-KV's long-walk split) the model's call
  // ends sooner. Full has no long walk: the same either way. The backward does not split this way.
  const int64_t S = 39936, g = 18, w = 294;
  std::vector<lca_slice> m = {slice(0, g, 0, S, LCA_SLICE_FULL), slice(g, S, 0, g, LCA_SLICE_FULL)};
  for (int64_t a = g; a < S; a += 128) {  // the band, 128 rows at a time
    const int64_t b = std::min(S, a + 128);
    m.push_back(slice(a, b, std::max(g, a - w), std::min(S, b + w), LCA_SLICE_FULL));
  }
  const auto v = view(m, S, S);
  const double whole = lca::core::model::tile_units(v, false, 8, 1, 132, true, false, 64);
  const double split = lca::core::model::tile_units(v, false, 8, 1, 132, true, true, 64);
  EXPECT_LT(split, 0.8 * whole);
  EXPECT_EQ(lca::core::model::tile_units(v, true, 8, 1, 132, true, false, 64),
            lca::core::model::tile_units(v, true, 8, 1, 132, true, true, 64));
  const std::vector<lca_slice> f = {slice(0, S, 0, S, LCA_SLICE_FULL)};
  const auto fv = view(f, S, S);
  EXPECT_EQ(lca::core::model::tile_units(fv, false, 8, 1, 132, true, false, 64),
            lca::core::model::tile_units(fv, false, 8, 1, 132, true, true, 64));
}

TEST(KernelTiles, TheBackwardsBlocksAreThePlans) {
  // A ring's block pair of shared_question with chatqa documents at 4 GPUs (128K, heads 8:1): a
  // question of 353 keys that every local query sees, beside a document's answers. Its first three
  // key tiles walk all 32768 query rows. The kernel's plan splits such walks by query ranges
  // (default_backward_blocks), and the model takes the plan's blocks, so the call costs what those
  // blocks cost. Before, the model paired and split the walks by its own rule: 5.7x those units here,
  // and the busiest rank's kernels predicted 16.0 ms against 5.1 measured (ring_p2p, 4 H200s,
  // docs/results/2026-11-28-h200x4-cp-3ac27bc-np4.jsonl).
  namespace ff = lca_flex_flash;
  const int64_t S = 32768;
  const std::vector<lca_slice> m = {slice(0, 16384, 0, 353, LCA_SLICE_FULL), slice(0, 5279, 2362, 16384, LCA_SLICE_FULL),
                                    slice(16384, S, 0, 353, LCA_SLICE_FULL)};
  const auto v = view(m, S, S);
  const double units = lca::core::model::tile_units(v, true, 8, 1, 132);
  const ff::TileSchedule s = ff::default_backward_schedule(v, ff::kSm90WideTileSpeedup(false), 8, 1, 132, ff::BwdMatch::kAuto);
  const ff::BackwardBlocks b = ff::default_backward_blocks(s, 1, 8, 132, ff::BwdPairing::kAuto);
  EXPECT_EQ(units, double(ff::simulated_order_makespan(b.items, 1, 8, 132, b.kv_heads_together)));
  const ff::TileSchedule plain = ff::build_schedule(v, /*by_query=*/false, 128);
  const double own_rule = double(ff::simulated_default_makespan(
      ff::split_long_walks(ff::backward_items(plain, 1, 8, 132, ff::BwdPairing::kAuto), 1, 8, 132), 1, 8, 132));
  EXPECT_LT(4.0 * units, own_rule);
}

TEST(CpModel, TilesCalibratedOnTheWholeMaskGiveItsTimeOnOneRank) {
  // One rank computes the whole mask in one call: by tiles, exactly the calibration's time.
  const int64_t S = 16384;
  for (const auto& [name, slices] : masks(S))
    for (bool bwd : {false, true}) {
      const Problem P = problem(slices, S, 16, 4, bwd);
      KernelRate r = kRate;
      r.unit_ms = lca::core::model::calibrate_tiles(P, 3.0, 132);
      ASSERT_GT(r.unit_ms, 0) << name;
      const auto pr = predict(P, "ring_p2p", nlohmann::json::object(), 1, Machine{}, r);
      ASSERT_TRUE(pr.refused.empty()) << pr.refused;
      EXPECT_NEAR(pr.slowest.kernel_ms, 3.0, 1e-9) << name << (bwd ? " bwd" : " fwd");
    }
}

TEST(CpModel, SeveralPeersAtOnceUseTheirOwnFigures) {
  // The all-gather's all-to-all (3 peers a rank at 4 GPUs) moves at the several-peer figures;
  // the ring's send/recv (one peer each way) does not.
  const int64_t S = 65536;
  const Problem P = problem({slice(0, S, 0, S, LCA_SLICE_CAUSAL)}, S, 8, 8);
  Machine slow;
  slow.gpus_per_node = 4;
  slow.intra = {2, 0};
  Machine fanout = slow;
  fanout.intra.fanout = {8, 0, {}};
  for (const char* st : {"ring_allgather", "ring_p2p"}) {
    const auto a = predict(P, st, nlohmann::json::object(), 4, slow, kRate);
    const auto b = predict(P, st, nlohmann::json::object(), 4, fanout, kRate);
    if (std::string(st) == "ring_allgather") EXPECT_LT(b.time_ms, 0.5 * a.time_ms) << st;
    else EXPECT_DOUBLE_EQ(b.time_ms, a.time_ms) << st;
  }
  // Measured sizes interpolate: 1 MB in 1 ms and 3 MB in 2 ms give 2 MB in 1.5 ms.
  lca::core::model::LinkCurve c{1.0, 0.0, {{1e6, 1.0}, {3e6, 2.0}}};
  EXPECT_DOUBLE_EQ(c.ms(2e6), 1.5);
  EXPECT_DOUBLE_EQ(c.ms(4e6), 3.0);  // past the largest, at GBps
}

// A lone sender's figure (the probe's one_to_all) lets a rank of an uneven several-peer call move
// faster than the even all-to-all, down to what the all-to-all gives the call's mean rank; an even
// call, a one-peer call and a lone figure slower than the all-to-all's (NVLink) change nothing.
TEST(CpModel, ALoneSenderFigureSpeedsUnevenSeveralPeerCallsOnly) {
  lca::core::model::Link l{2, 0};
  l.fanout = {2, 0, {}};
  const double b = 4e9;  // 2000 ms at 2 GB/s
  EXPECT_DOUBLE_EQ(l.ms(b, 3, b / 2), l.ms(b, 3));  // no lone figure
  l.lone = {4, 0, {}};
  EXPECT_DOUBLE_EQ(l.ms(b, 3, b), 2000.0);      // even: the all-to-all
  EXPECT_DOUBLE_EQ(l.ms(b, 3, b / 2), 1000.0);  // twice the mean: the lone sender's 1000 ms
  EXPECT_DOUBLE_EQ(l.ms(b, 3, b / 4), 1000.0);  // not faster than the lone sender
  EXPECT_DOUBLE_EQ(l.ms(b, 3, b / 1.5), 4e9 / 1.5 / 2e9 * 1e3);  // the mean rank's all-to-all
  EXPECT_DOUBLE_EQ(l.ms(b, 1, b / 2), 2000.0);  // one peer: the ring's figures
  l.lone = {1, 0, {}};
  EXPECT_DOUBLE_EQ(l.ms(b, 3, b / 2), 2000.0);  // a lone sender slower than the all-to-all
  // Over a whole prediction: balanced on documents at 4 GPUs gains, never loses; ring_p2p (one
  // peer a step) and ulysses (even all-to-alls) keep their times.
  const int64_t S = 65536;
  for (const auto& [name, slices] : masks(S))
    for (bool bwd : {false, true}) {
      const Problem P = problem(slices, S, 64, 8, bwd);
      Machine m;
      m.gpus_per_node = 4;
      m.intra = {2, 50};
      m.intra.fanout = {2, 50, {}};
      Machine lone = m;
      lone.intra.lone = {4, 30, {}};
      for (const char* st : {"balanced", "ring_p2p", "ulysses"}) {
        const auto a = predict(P, st, nlohmann::json::object(), 4, m, kRate);
        const auto c = predict(P, st, nlohmann::json::object(), 4, lone, kRate);
        if (!a.refused.empty()) continue;
        EXPECT_LE(c.time_ms, a.time_ms * (1 + 1e-12)) << st << " " << name;
        if (std::string(st) == "ring_p2p") EXPECT_DOUBLE_EQ(c.time_ms, a.time_ms) << name;
        if (std::string(st) == "balanced" && name == "documents") EXPECT_LT(c.time_ms, a.time_ms) << (bwd ? "bwd" : "fwd");
      }
    }
}

TEST(CpModel, BadInputIsRefusedByName) {
  const int64_t S = 8192;
  const Problem P = problem({slice(0, S, 0, S, LCA_SLICE_CAUSAL)}, S, 64, 8);
  auto message = [&](const std::string& st, int W, Machine m, KernelRate r, nlohmann::json o = nlohmann::json::object()) {
    try {
      predict(P, st, o, W, m, r);
    } catch (const lca::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message("ring", 8, Machine{}, kRate).find("unknown CP strategy 'ring'"), std::string::npos);
  Machine m;
  m.inter.GBps = -1;
  EXPECT_NE(message("usp", 8, m, kRate).find("inter-node bandwidth"), std::string::npos);
  m = Machine{};
  m.intra.GBps = std::nan("");
  EXPECT_NE(message("usp", 8, m, kRate).find("intra-node bandwidth"), std::string::npos);
  EXPECT_NE(message("usp", 8, Machine{}, KernelRate{0, 0}).find("rate (TFLOP/s)"), std::string::npos);
  EXPECT_NE(message("usp", 0, Machine{}, kRate).find("world size"), std::string::npos);
  EXPECT_NE(message("usp", 8, Machine{}, kRate, {{"zigzag", 3}}).find("\"zigzag\""), std::string::npos);
  EXPECT_NE(message("balanced", 8, Machine{}, kRate, {{"chunk", 3}}).find("unknown option \"chunk\""),
            std::string::npos);
  // A world the strategy cannot run is a refusal in the prediction, with the plugin's reason.
  const auto pr = predict(P, "ulysses", nlohmann::json::object(), 96, Machine{}, kRate);
  EXPECT_NE(pr.refused.find("not divisible"), std::string::npos) << pr.refused;
}

TEST(CpModel, NinetySixGpusOfSixStrategiesInSeconds) {
  // Documents of ~1K tokens at 32K a GPU: ~3000 slices, 768 balanced chunks.
  const int64_t S = 32768LL * 96;
  const Problem P = problem(documents(S, 1024, 3), S, 64, 8, true);
  const auto t0 = std::chrono::steady_clock::now();
  KernelRate tiles = kRate;
  tiles.unit_ms = lca::core::model::calibrate_tiles(P, 100.0, 132);
  for (const KernelRate& r : {kRate, tiles})
    for (const std::string& st : lca::core::model::strategy_names()) {
      const auto pr = predict(P, st, nlohmann::json::object(), 96, Machine{}, r);
      if (pr.refused.empty()) {
        EXPECT_GT(pr.tflops_per_gpu, 0) << st;
      }
    }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0) << "96 GPUs x 6 strategies took " << s << " s";
  std::printf("[cp_model] 96 GPUs x 6 strategies, %zu slices, backward, by area and by tiles: %.2f s\n", P.slices.size(), s);
}

}  // namespace
