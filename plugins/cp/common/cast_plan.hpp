// The group-cast plan of the balanced strategy: which KV segments each context group fetches in
// each stage, and which of its own it serves. Used by context_stage.hpp and by the scaling
// model (core/model), so that both move the same rows.
// Rule: every member of a context group computes the same plan from the same (Layout, Balance).
#pragma once

#include "balance.hpp"
#include "layout.hpp"
#include "slice_clip.hpp"

#include <algorithm>
#include <vector>

namespace lca::cp {

// Stage 0 is the group's own KV; stage s >= 1 fetches from the groups at ring distances d whose
// stage is s, and serves the groups at the same distances behind it.
struct CastStage {
  std::vector<int> from;                  // groups this stage fetches from
  std::vector<Segments> from_segs;        // their local segments fetched, in order
  std::vector<int> to;                    // groups that fetch from this one in this stage
  std::vector<Segments> to_segs;          // this group's local segments each of them takes
  int64_t rows = 0;                       // rows fetched (the stage's KV buffer)
  int64_t served = 0;                     // rows served (their gradients come back)
};

// One message of a fetch: `rows` rows from `offset` in the owner's buffer. Segments listed one after
// the other that also lie back to back in the owner's buffer travel as one message; the fetcher
// stores a peer's segments back to back in list order, so one receive takes the same run. Both
// sides derive the runs from the same segment list (plan_cast), so sends and receives pair up.
struct MessageRun {
  int64_t offset = 0, rows = 0;
};

inline std::vector<MessageRun> message_runs(const Segments& segs) {
  std::vector<MessageRun> runs;
  for (const Segment& g : segs) {
    if (g.size() <= 0) continue;
    if (!runs.empty() && runs.back().offset + runs.back().rows == g.offset) runs.back().rows += g.size();
    else runs.push_back({g.offset, g.size()});
  }
  return runs;
}

// The stages of context group `me` (default: the layout's own): group r fetches a segment of
// group g when r's rows touch that segment's chunk (balance.touches).
inline std::vector<CastStage> plan_cast(const Layout& L, const Balance& b, int remote_stages, int me = -1) {
  const int cp = L.cp;
  if (me < 0) me = L.ctx_idx;
  const int stages = cp > 1 ? std::clamp(remote_stages, 1, cp - 1) : 0;
  std::vector<CastStage> cast(1 + stages);
  auto needed = [&](int r, int g) {
    Segments out;
    for (const Segment& seg : L.group_segs[g])
      if (b.touches(r, b.chunk_of(seg.begin))) out.push_back(seg);
    return out;
  };
  for (int d = 1; d < cp; ++d) {
    CastStage& st = cast[1 + int64_t(d - 1) * stages / (cp - 1)];
    const int g = (me + d) % cp, r = (me - d + cp) % cp;
    Segments from = needed(me, g), to = needed(r, me);
    for (const Segment& x : from) st.rows += x.size();
    for (const Segment& x : to) st.served += x.size();
    if (!from.empty()) st.from.push_back(g), st.from_segs.push_back(std::move(from));
    if (!to.empty()) st.to.push_back(r), st.to_segs.push_back(std::move(to));
  }
  return cast;
}

}  // namespace lca::cp
