// balance.hpp: the areas it counts are the mask's cells, every group holds as many chunks, and
// the largest group's area beats the contiguous and zigzag splits on masks where work is uneven.
// options.hpp: balanced's default backward, and the explicit options a CP record keeps.
// cast_plan.hpp: the group-cast's messages pair up and merge segments that lie back to back.
#include "balance.hpp"
#include "cast_plan.hpp"
#include "options.hpp"

#include <lca/types.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using lca::cp::Balance;
using lca::cp::make_balance;

lca_slice sl(int64_t qb, int64_t qe, int64_t kb, int64_t ke, int32_t t) { return lca_slice{qb, qe, kb, ke, t, 0}; }

// Causal documents of lengths drawn from [lo, hi], covering [0, S).
std::vector<lca_slice> causal_documents(int64_t S, int64_t lo, int64_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<lca_slice> out;
  for (int64_t a = 0; a < S;) {
    const int64_t b = std::min(S, a + std::uniform_int_distribution<int64_t>(lo, hi)(rng));
    out.push_back(sl(a, b, a, b, LCA_SLICE_CAUSAL));
    a = b;
  }
  return out;
}

int64_t mask_area(const std::vector<lca_slice>& m) {
  int64_t a = 0;
  for (const auto& s : m) a += lca::slice_area(s);
  return a;
}

// The largest group's area when group g holds the token runs runs[g] (areas counted cell-exactly
// through chunk_areas on the runs' own bounds).
int64_t max_area_of_runs(const std::vector<lca_slice>& m, int64_t S, const std::vector<std::vector<int64_t>>& cuts_of) {
  int64_t worst = 0;
  for (const auto& cuts : cuts_of) {  // pairs [a, b) of one group
    int64_t a = 0;
    for (size_t i = 0; i + 1 < cuts.size(); i += 2) {
      const std::vector<int64_t> bounds{0, cuts[i], cuts[i + 1], S};
      const auto area = lca::cp::chunk_areas(m, bounds);
      for (int j = 0; j < 3; ++j) a += area[1 * 3 + j];
    }
    worst = std::max(worst, a);
  }
  return worst;
}

TEST(CpBalance, ChunkAreasAreTheCellsOneByOne) {
  std::mt19937_64 rng(11);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t S = 61;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<lca_slice> m;
    for (int n = pick(1, 4); n > 0; --n) {
      const int64_t qb = pick(0, S - 1), kb = pick(0, S - 1);
      m.push_back(sl(qb, pick(qb + 1, S), kb, pick(kb + 1, S), static_cast<int32_t>(pick(0, 3))));
    }
    const int n = static_cast<int>(pick(1, 9));
    const auto bounds = lca::cp::even_bounds(S, n);
    const auto area = lca::cp::chunk_areas(m, bounds);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        int64_t want = 0;
        for (int64_t q = bounds[i]; q < bounds[i + 1]; ++q)
          for (int64_t k = bounds[j]; k < bounds[j + 1]; ++k)
            for (const auto& s : m) want += lca::slice_contains(s, q, k) ? 1 : 0;
        ASSERT_EQ(area[i * n + j], want) << "trial " << trial << " chunks " << i << "," << j;
      }
  }
}

TEST(CpBalance, EveryGroupHoldsAsManyChunksAndAllChunksAreDealt) {
  const int64_t S = 100003;  // not a multiple of anything the chunks use
  const auto m = causal_documents(S, 500, 9000, 3);
  for (int groups : {1, 2, 3, 4, 7, 8}) {
    for (int per : {1, 4, 8}) {
      const Balance b = make_balance(m, S, groups, per);
      ASSERT_EQ(b.count(), groups * per);
      EXPECT_EQ(b.bounds.front(), 0);
      EXPECT_EQ(b.bounds.back(), S);
      std::vector<int> seen(b.count(), 0);
      int64_t total = 0;
      for (int g = 0; g < groups; ++g) {
        EXPECT_EQ(static_cast<int>(b.chunks[g].size()), per) << groups << " groups";
        EXPECT_TRUE(std::is_sorted(b.chunks[g].begin(), b.chunks[g].end()));
        for (int c : b.chunks[g]) {
          ++seen[c];
          EXPECT_EQ(b.owner[c], g);
        }
        total += b.group_area(g);
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), b.count());
      EXPECT_EQ(total, mask_area(m));
    }
  }
}

TEST(CpBalance, UnevenChunkCountsDifferByOne) {
  // 10 tokens, 4 groups x 8 chunks wanted: 10 one-token chunks, 3 + 3 + 2 + 2.
  const std::vector<lca_slice> full{sl(0, 10, 0, 10, LCA_SLICE_FULL)};
  const Balance b = make_balance(full, 10, 4, 8);
  ASSERT_EQ(b.count(), 10);
  std::vector<size_t> sizes;
  for (const auto& c : b.chunks) sizes.push_back(c.size());
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<size_t>{2, 2, 3, 3}));
}

TEST(CpBalance, LargestShareBeatsContiguousAndZigzag) {
  // Across lengths off the usual grid and several document draws, 4 groups.
  for (int64_t S : {24577, 65536, 98305}) {
    for (uint64_t seed : {1, 2, 3}) {
      for (const auto& m : {causal_documents(S, 1000, 12000, seed), causal_documents(S, 2000, 20000, seed + 10),
                            std::vector<lca_slice>{sl(0, S, 0, S, LCA_SLICE_CAUSAL)}}) {
        const int G = 4;
        const Balance b = make_balance(m, S, G, 8);
        int64_t worst = 0;
        for (int g = 0; g < G; ++g) worst = std::max(worst, b.group_area(g));
        const double mean = double(mask_area(m)) / G;
        std::vector<std::vector<int64_t>> contiguous, zigzag;
        for (int g = 0; g < G; ++g) {
          contiguous.push_back({S * g / G, S * (g + 1) / G});
          zigzag.push_back({S * g / (2 * G), S * (g + 1) / (2 * G), S * (2 * G - 1 - g) / (2 * G), S * (2 * G - g) / (2 * G)});
        }
        SCOPED_TRACE("S=" + std::to_string(S) + " seed " + std::to_string(seed) + " slices " + std::to_string(m.size()));
        EXPECT_LE(worst, max_area_of_runs(m, S, contiguous));
        // Zigzag splits one causal triangle exactly; chunks may round a little above it.
        EXPECT_LE(worst, 1.01 * max_area_of_runs(m, S, zigzag));
        // 32 chunks leave little to chance: within 6% of a perfect split.
        EXPECT_LE(worst, 1.06 * mean) << "largest " << worst << " mean " << mean;
      }
    }
  }
}

TEST(CpBalance, ChunkTileWeightsAreTheTilesOneByOne) {
  // Against a cell-by-cell search: tiles (chunk-local, tile_rows x tile_cols) with a cell of any
  // slice, plus the fixed cost of each row tile that has one, summed per row chunk.
  std::mt19937_64 rng(23);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t S = 53, R = 8, C = 4, fixed = 2;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<lca_slice> m;
    for (int n = pick(1, 5); n > 0; --n) {
      const int64_t qb = pick(0, S - 1), kb = pick(0, S - 1);
      m.push_back(sl(qb, pick(qb + 1, S), kb, pick(kb + 1, S), static_cast<int32_t>(pick(0, 3))));
    }
    const int n = static_cast<int>(pick(1, 7));
    const auto bounds = lca::cp::even_bounds(S, n);
    const auto got = lca::cp::chunk_tile_weights(m, bounds, R, C, fixed);
    for (int i = 0; i < n; ++i) {
      int64_t want = 0;
      for (int64_t a = bounds[i]; a < bounds[i + 1]; a += R) {
        int64_t tiles = 0;
        for (int j = 0; j < n; ++j)
          for (int64_t c = bounds[j]; c < bounds[j + 1]; c += C) {
            bool any = false;
            for (int64_t q = a; q < std::min(a + R, bounds[i + 1]) && !any; ++q)
              for (int64_t k = c; k < std::min(c + C, bounds[j + 1]) && !any; ++k)
                for (const auto& x : m) any = any || lca::slice_contains(x, q, k);
            tiles += any;
          }
        if (tiles > 0) want += tiles + fixed;
      }
      ASSERT_EQ(got[i], want) << "trial " << trial << " chunk " << i << " of " << n;
    }
  }
}

// The split by tiles: every chunk dealt once, equal chunk counts (so tokens within a chunk's
// rounding), and a largest group's tile load never above the split by cells' on random masks.
TEST(CpBalance, SplitByTilesIsNeverWorseInTilesThanByCells) {
  std::mt19937_64 rng(31);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int better = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t S = pick(3000, 40000);
    const int G = static_cast<int>(pick(2, 8)), per = static_cast<int>(pick(1, 16));
    std::vector<lca_slice> m = causal_documents(S, pick(16, 300), pick(400, 12000), trial);
    if (trial % 3 == 1)  // a long last document that sees everything before it
      m.push_back(sl(S - S / 5, S, 0, S - S / 5, LCA_SLICE_FULL));
    const Balance by_cells = make_balance(m, S, G, per);
    const Balance by_tiles = make_balance(m, S, G, per, lca::cp::BalanceBy::tiles);
    ASSERT_EQ(by_tiles.bounds, by_cells.bounds);
    const int n = by_tiles.count();
    std::vector<int> seen(n, 0);
    size_t most = 0, least = n;
    for (int g = 0; g < G; ++g) {
      for (int c : by_tiles.chunks[g]) {
        ++seen[c];
        EXPECT_EQ(by_tiles.owner[c], g);
      }
      most = std::max(most, by_tiles.chunks[g].size()), least = std::min(least, by_tiles.chunks[g].size());
    }
    for (int c = 0; c < n; ++c) EXPECT_EQ(seen[c], 1) << "chunk " << c;
    EXPECT_LE(most - least, 1u);
    const auto tiles = lca::cp::chunk_tile_weights(m, by_tiles.bounds);
    const int64_t t = lca::cp::largest_load(tiles, by_tiles.owner, G), c = lca::cp::largest_load(tiles, by_cells.owner, G);
    EXPECT_LE(t, c) << "trial " << trial;
    better += t < c;
  }
  EXPECT_GT(better, 0);  // the tiles' split must be able to differ
}

TEST(CpBalance, TooFewTokensOrChunksAreRefusedByName) {
  const std::vector<lca_slice> full{sl(0, 3, 0, 3, LCA_SLICE_FULL)};
  try {
    make_balance(full, 3, 4, 8);
    FAIL() << "3 tokens over 4 groups was accepted";
  } catch (const lca::Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 tokens"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_balance(full, 3, 1, -1), lca::Error);
}

// Left out, the chunk count is the mask's: more chunks only where they lower the heaviest group's
// cells by more than doubling costs (auto_chunks). Documents of 1024 causal tokens whose last 1024
// rows also see the whole sequence (a causal_blockwise-like last document): with 8 chunks a group
// of 4, its chunk alone outweighs a group's share; the split picked holds far less in its heaviest
// group. The documents alone, and a problem too short for longer splits, keep 8.
TEST(CpBalance, TheChunkCountDoublesOnlyWhereItRebalances) {
  using lca::cp::auto_chunks;
  using lca::cp::largest_group_cells;
  const int64_t S = 32768;
  const int groups = 4;
  std::vector<lca_slice> docs;
  for (int64_t a = 0; a < S; a += 1024) docs.push_back(sl(a, a + 1024, a, a + 1024, LCA_SLICE_CAUSAL));
  EXPECT_EQ(auto_chunks(docs, S, groups), 8);
  std::vector<lca_slice> heavy = docs;
  heavy.push_back(sl(S - 1024, S, 0, S - 1024, LCA_SLICE_FULL));
  const int picked = auto_chunks(heavy, S, groups);
  EXPECT_GT(picked, 8);
  EXPECT_LE(picked, lca::cp::kMostChunks);
  const int64_t by8 = largest_group_cells(heavy, S, groups, 8);
  const int64_t chosen = largest_group_cells(heavy, S, groups, picked);
  EXPECT_LT(double(chosen) * (1.0 + lca::cp::kChunkDoublingCost), double(by8)) << picked;
  // make_balance with 0 runs the count picked; chunks no shorter than kMinChunkTokens.
  const Balance b = make_balance(heavy, S, groups, 0);
  EXPECT_EQ(b.count(), groups * picked);
  EXPECT_GE(S / b.count(), lca::cp::kMinChunkTokens);
  const std::vector<lca_slice> short_heavy{sl(0, 1024, 0, 1024, LCA_SLICE_CAUSAL),
                                           sl(896, 1024, 0, 896, LCA_SLICE_FULL)};
  EXPECT_EQ(auto_chunks(short_heavy, 1024, groups), 8);
}

TEST(CpCastPlan, BackToBackSegmentsTravelAsOneMessage) {
  using lca::cp::message_runs;
  using lca::cp::Segments;
  const Segments segs{{0, 10, 0}, {30, 40, 10}, {50, 60, 30}, {70, 70, 40}, {90, 95, 40}};
  const auto runs = message_runs(segs);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].offset, 0);
  EXPECT_EQ(runs[0].rows, 20);
  EXPECT_EQ(runs[1].offset, 30);
  EXPECT_EQ(runs[1].rows, 15);  // the empty segment neither splits nor adds
  EXPECT_TRUE(message_runs({}).empty());
}

// What group g sends to group r in a stage is what r receives from g, message by message, and the
// messages carry every fetched row once; on causal masks the fetched chunks of a peer lie back to
// back in its buffer, so most of them travel together.
TEST(CpCastPlan, SendsAndReceivesPairUpMessageByMessage) {
  using lca::cp::message_runs;
  const int64_t S = 8192;
  for (const auto& [mask, head_degree] :
       {std::pair{causal_documents(S, 200, 3000, 5), 1}, std::pair{causal_documents(S, 200, 3000, 9), 2},
        std::pair{std::vector<lca_slice>{sl(0, S, 0, S, LCA_SLICE_CAUSAL)}, 1}}) {
    const int world = 8, groups = world / head_degree;
    const Balance b = make_balance(mask, S, groups, 8);
    lca::cp::GroupRuns runs;
    for (const auto& chunks : b.chunks) {
      runs.emplace_back();
      for (int c : chunks) runs.back().push_back({b.bounds[c], b.bounds[c + 1]});
    }
    lca_problem p{};
    p.seqlen_q = p.seqlen_k = S;
    p.heads_q = 8;
    p.heads_kv = 2;
    const lca::cp::Layout L = lca::cp::make_layout(world, 0, head_degree, false, p, &runs);
    size_t segments = 0, messages = 0;
    for (int me = 0; me < groups; ++me) {
      const auto cast = lca::cp::plan_cast(L, b, 2, me);
      for (size_t s = 1; s < cast.size(); ++s)
        for (size_t i = 0; i < cast[s].from.size(); ++i) {
          const int g = cast[s].from[i];
          const auto theirs = lca::cp::plan_cast(L, b, 2, g);
          const auto& st = theirs[s];
          const auto at = std::find(st.to.begin(), st.to.end(), me);
          ASSERT_NE(at, st.to.end()) << "group " << g << " does not serve " << me << " in stage " << s;
          const auto sent = message_runs(st.to_segs[at - st.to.begin()]);
          const auto got = message_runs(cast[s].from_segs[i]);
          ASSERT_EQ(sent.size(), got.size());
          int64_t rows = 0, seg_rows = 0;
          for (size_t m = 0; m < sent.size(); ++m) {
            EXPECT_EQ(sent[m].offset, got[m].offset);
            EXPECT_EQ(sent[m].rows, got[m].rows);
            rows += got[m].rows;
          }
          for (const auto& x : cast[s].from_segs[i]) seg_rows += x.size();
          EXPECT_EQ(rows, seg_rows);
          segments += cast[s].from_segs[i].size();
          messages += got.size();
        }
    }
    EXPECT_GT(segments, 0u);
    EXPECT_LE(messages, segments);
    if (mask.size() == 1) EXPECT_LT(2 * messages, segments) << "causal: a peer's fetched chunks are a prefix";
  }
}

// The record says the chunk count that ran: "auto" resolved on the mask, an explicit count kept.
TEST(CpBalancedOptions, TheRecordNamesTheChunkCountThatRan) {
  lca_problem p{};
  p.heads_q = 8, p.heads_kv = 1, p.head_dim = 128;
  nlohmann::json kept =
      lca::cp::explicit_options("balanced", lca::cp::choose_strategy("balanced", nlohmann::json::object(), 4, 4, p));
  EXPECT_EQ(kept["chunks_per_rank"], "auto");
  std::vector<lca_slice> heavy;
  const int64_t S = 32768;
  for (int64_t a = 0; a < S; a += 1024) heavy.push_back(sl(a, a + 1024, a, a + 1024, LCA_SLICE_CAUSAL));
  heavy.push_back(sl(S - 1024, S, 0, S - 1024, LCA_SLICE_FULL));
  lca_mask mask{};
  mask.struct_size = sizeof(lca_mask);
  mask.seqlen_q = mask.seqlen_k = S;
  mask.num_slices = static_cast<int64_t>(heavy.size());
  mask.slices = heavy.data();
  lca::cp::resolve_chunks(kept, mask, 4);
  ASSERT_TRUE(kept["chunks_per_rank"].is_number_integer()) << kept.dump();
  EXPECT_EQ(kept["chunks_per_rank"].get<int>(), lca::cp::auto_chunks(heavy, S, 4));
  nlohmann::json fixed = lca::cp::explicit_options(
      "balanced", lca::cp::choose_strategy("balanced", nlohmann::json::parse(R"({"chunks_per_rank":5})"), 4, 4, p));
  lca::cp::resolve_chunks(fixed, mask, 4);
  EXPECT_EQ(fixed["chunks_per_rank"], 5);
  EXPECT_THROW(lca::cp::choose_strategy("balanced", nlohmann::json::parse(R"({"chunks_per_rank":"many"})"), 4, 4, p),
               lca::Error);
}

}  // namespace

// balanced's default passes: one kernel call where every rank shares a node (the fetch goes
// over NVLink), the staged, overlapped ones across nodes or where "stages" is asked for.
// Explicit one_call wins either way.
TEST(CpBalancedOptions, OneCallByDefaultOnlyWithinANode) {
  lca_problem p{};
  p.heads_q = 64, p.heads_kv = 8, p.head_dim = 128;
  auto choose = [&](const char* text, int world, int local) {
    return lca::cp::choose_balanced(nlohmann::json::parse(text), world, local, p);
  };
  const auto one_node = choose("{}", 4, 4);
  EXPECT_TRUE(one_node.one_call_bwd);
  EXPECT_TRUE(one_node.one_call_fwd);
  EXPECT_TRUE(choose("{}", 8, 8).one_call_bwd);
  EXPECT_TRUE(choose("{}", 8, 8).one_call_fwd);
  EXPECT_FALSE(choose("{}", 16, 8).one_call_bwd);    // two nodes
  EXPECT_FALSE(choose("{}", 16, 8).one_call_fwd);
  EXPECT_FALSE(choose("{}", 96, 8).one_call_bwd);
  EXPECT_FALSE(choose(R"({"stages":2})", 4, 4).one_call_bwd);
  EXPECT_FALSE(choose(R"({"stages":2})", 4, 4).one_call_fwd);
  EXPECT_FALSE(choose(R"({"stages":1})", 4, 4).one_call_bwd);
  EXPECT_FALSE(choose(R"({"one_call":false})", 4, 4).one_call_bwd);
  EXPECT_FALSE(choose(R"({"one_call":"fwd"})", 4, 4).one_call_bwd);
  EXPECT_TRUE(choose(R"({"one_call":"fwd"})", 4, 4).one_call_fwd);
  EXPECT_TRUE(choose(R"({"one_call":"bwd"})", 16, 8).one_call_bwd);  // asked for across nodes
  EXPECT_TRUE(choose(R"({"one_call":"bwd","stages":2})", 4, 4).one_call_bwd);
  const auto both = choose(R"({"one_call":true})", 16, 8);
  EXPECT_TRUE(both.one_call_fwd && both.one_call_bwd);
}

// What a CP record keeps as the configuration that ran (explicit_options) gives the same engine
// configuration again, for every strategy, option set, world and node size the choice takes, and
// names every default: a later change of a default leaves it as it was.
TEST(CpStrategyOptions, ExplicitOptionsGiveTheSameConfigurationBack) {
  using lca::cp::choose_strategy;
  using lca::cp::EngineOptions;
  using lca::cp::explicit_options;
  auto same = [](const EngineOptions& a, const EngineOptions& b) {
    return a.head_degree == b.head_degree && a.zigzag == b.zigzag && a.mode == b.mode && a.window == b.window &&
           a.chunks_per_group == b.chunks_per_group && a.remote_stages == b.remote_stages &&
           a.balance_by == b.balance_by && a.one_call_fwd == b.one_call_fwd && a.one_call_bwd == b.one_call_bwd;
  };
  const std::vector<std::pair<std::string, std::vector<const char*>>> cases = {
      {"ulysses", {"{}"}},
      {"ring_p2p", {"{}", R"({"zigzag":false})"}},
      {"ring_allgather", {"{}", R"({"zigzag":false})"}},
      {"usp", {"{}", R"({"ulysses_degree":2})", R"({"ulysses_degree":1,"zigzag":false})"}},
      {"loongtrain", {"{}", R"({"head_degree":1,"window_size":2})", R"({"head_degree":2})"}},
      {"balanced",
       {"{}", R"({"one_call":false})", R"({"stages":2,"chunks_per_rank":3})", R"({"one_call":true})",
        R"({"one_call":"fwd","stages":3})", R"({"one_call":"bwd","balance_by":"tiles","head_degree":2})"}}};
  int checked = 0;
  for (const auto& [name, option_sets] : cases)
    for (const char* text : option_sets)
      for (const auto& [world, local] : std::vector<std::pair<int, int>>{{2, 2}, {4, 4}, {8, 8}, {16, 8}, {96, 8}})
        for (const auto& [hq, hkv] : std::vector<std::pair<int, int>>{{64, 8}, {8, 1}, {32, 32}}) {
          lca_problem p{};
          p.heads_q = hq, p.heads_kv = hkv, p.head_dim = 128;
          EngineOptions first;
          try {
            first = choose_strategy(name, nlohmann::json::parse(text), world, local, p);
          } catch (const lca::Error&) {
            continue;  // refused (heads that do not shard, a degree that does not divide): nothing ran
          }
          const nlohmann::json kept = explicit_options(name, first);
          ASSERT_TRUE(kept.is_object()) << name;
          const EngineOptions again = choose_strategy(name, kept, world, local, p);
          EXPECT_TRUE(same(first, again)) << name << " " << text << " at " << world << "/" << local << ": "
                                          << kept.dump();
          EXPECT_EQ(explicit_options(name, again), kept) << name << " " << text;
          ++checked;
        }
  EXPECT_GT(checked, 100);
  // balanced's default passes are named: one call within a node, staged across nodes.
  lca_problem p{};
  p.heads_q = 64, p.heads_kv = 8, p.head_dim = 128;
  EXPECT_EQ(explicit_options("balanced", choose_strategy("balanced", nlohmann::json::object(), 4, 4, p))["one_call"],
            true);
  EXPECT_EQ(explicit_options("balanced", choose_strategy("balanced", nlohmann::json::object(), 16, 8, p))["one_call"],
            false);
  EXPECT_TRUE(explicit_options("someone_elses", EngineOptions{}).is_null());
}
