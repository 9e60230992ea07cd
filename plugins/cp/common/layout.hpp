// Where tokens and heads live: a world of W ranks as u-member head groups (Ulysses) times
// cp = W / u context groups (rings), token dispatch (contiguous or zigzag chunks, uneven
// lengths allowed) and the head split with GQA replication. Used by every CP strategy plugin.
// Rule: world rank r is member r % u of head group r / u; all ranks compute the same Layout.
#pragma once

#include "slice_clip.hpp"

#include <lca/abi.h>
#include <lca/error.hpp>

#include <string>
#include <vector>

namespace lca::cp {

struct Layout {
  int world = 1, rank = 0;
  int u = 1, cp = 1;             // head-group members, context groups
  int head_idx = 0, ctx_idx = 0;  // this rank's place in both
  int64_t seqlen = 0;
  int hq_l = 0, hkv_l = 0;        // heads per member after the head exchange
  std::vector<int> q_head_first, kv_head_first;       // per head-group member
  std::vector<std::vector<lca_token_range>> ranges;   // per world rank, in buffer order
  std::vector<Segments> group_segs;                   // per context group, rows after exchange
  std::vector<int64_t> group_rows;

  int world_rank(int ctx, int member) const { return ctx * u + member; }
  int64_t rows_of(int r) const {
    int64_t n = 0;
    for (const auto& x : ranges[r]) n += x.end - x.begin;
    return n;
  }
};

// Why a head degree cannot work for these heads; empty when it can.
inline std::string head_degree_problem(int u, int heads_q, int heads_kv) {
  if (u < 1) return "the head degree must be >= 1";
  if (heads_q % u != 0)
    return "heads_q = " + std::to_string(heads_q) + " is not divisible by the head degree " +
           std::to_string(u);
  if (heads_kv % u != 0 && u % heads_kv != 0)
    return "heads_kv = " + std::to_string(heads_kv) + " neither divides nor is divisible by the " +
           "head degree " + std::to_string(u) + " (KV heads can be sharded or replicated, not both)";
  return {};
}

// The largest divisor of `world` not above `cap` that the heads allow (1 always works).
inline int largest_head_degree(int world, int cap, int heads_q, int heads_kv) {
  int best = 1;
  for (int d = 1; d <= world && d <= cap; ++d)
    if (world % d == 0 && head_degree_problem(d, heads_q, heads_kv).empty()) best = d;
  return best;
}

// Token runs per context group, in buffer order (a dispatch chosen elsewhere, e.g. balance.hpp).
using GroupRuns = std::vector<std::vector<lca_token_range>>;

// `runs`, when given, replaces the contiguous or zigzag chunks: group g holds runs[g].
inline Layout make_layout(int world, int rank, int u, bool zigzag, const lca_problem& p,
                          const GroupRuns* runs = nullptr) {
  require(world >= 1 && u >= 1 && world % u == 0, LCA_ERR_INVALID_ARGUMENT,
          "the head degree " + std::to_string(u) + " does not divide the world size " +
              std::to_string(world));
  const std::string why = head_degree_problem(u, p.heads_q, p.heads_kv);
  require(why.empty(), LCA_ERR_UNSUPPORTED, why);
  require(p.seqlen_q == p.seqlen_k, LCA_ERR_UNSUPPORTED,
          "context parallelism needs seqlen_q == seqlen_k (self-attention), got " +
              std::to_string(p.seqlen_q) + " x " + std::to_string(p.seqlen_k));
  Layout L;
  L.world = world;
  L.rank = rank;
  L.u = u;
  L.cp = world / u;
  L.head_idx = rank % u;
  L.ctx_idx = rank / u;
  L.seqlen = p.seqlen_q;
  L.hq_l = p.heads_q / u;
  const bool shard_kv = p.heads_kv % u == 0;
  L.hkv_l = shard_kv ? p.heads_kv / u : 1;
  const int group = p.heads_q / p.heads_kv;
  for (int i = 0; i < u; ++i) {
    L.q_head_first.push_back(i * L.hq_l);
    L.kv_head_first.push_back(shard_kv ? i * L.hkv_l : (i * L.hq_l) / group);
  }
  // Chunks of the sequence; context group g holds chunk g, or chunks g and 2cp-1-g (zigzag).
  const int chunks = zigzag ? 2 * L.cp : L.cp;
  auto bound = [&](int64_t i, int64_t n, int64_t a, int64_t b) { return a + (b - a) * i / n; };
  L.ranges.assign(world, {});
  L.group_segs.assign(L.cp, {});
  L.group_rows.assign(L.cp, 0);
  require(runs == nullptr || int(runs->size()) == L.cp, LCA_ERR_INTERNAL, "layout: one run list per context group");
  for (int g = 0; g < L.cp; ++g) {
    std::vector<lca_token_range> mine;
    if (runs) {
      mine = (*runs)[g];
    } else {
      mine.push_back({bound(g, chunks, 0, L.seqlen), bound(g + 1, chunks, 0, L.seqlen)});
      if (zigzag) mine.push_back({bound(chunks - 1 - g, chunks, 0, L.seqlen), bound(chunks - g, chunks, 0, L.seqlen)});
    }
    for (const lca_token_range& run : mine) {
      const int64_t a = run.begin, b = run.end;
      for (int i = 0; i < u; ++i) {  // each member takes one piece of every chunk
        const int64_t pa = bound(i, u, a, b), pb = bound(i + 1, u, a, b);
        if (pb > pa) L.ranges[L.world_rank(g, i)].push_back({pa, pb});
      }
    }
    for (int i = 0; i < u; ++i)
      for (const auto& r : L.ranges[L.world_rank(g, i)]) {
        L.group_segs[g].push_back({r.begin, r.end, L.group_rows[g]});
        L.group_rows[g] += r.end - r.begin;
      }
  }
  return L;
}

}  // namespace lca::cp
