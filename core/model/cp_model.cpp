// The scaling model: an event simulation of every rank's exec stream and communication lane,
// step by step as the engine issues its work (plugins/cp/common/engine.hpp, context_stage.hpp).
#include "core/model/cp_model.hpp"

#include "core/model/kernel_tiles.hpp"

#include "balance.hpp"
#include "cast_plan.hpp"
#include "layout.hpp"
#include "options.hpp"
#include "schedule.hpp"

#include <lca/error.hpp>
#include <lca/types.hpp>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace lca::core::model {

namespace {

using cp::Layout;
using cp::Segment;
using cp::Segments;

// Cells of (q segments x k segments) from a table over every boundary the layout has: the
// segments are unions of its chunks, so sums of chunk pairs are exact.
class AreaTable {
 public:
  AreaTable(const std::vector<lca_slice>& slices, const Layout& L) {
    bounds_ = {0, L.seqlen};
    for (const auto& rs : L.ranges)
      for (const auto& r : rs) bounds_.push_back(r.begin), bounds_.push_back(r.end);
    std::sort(bounds_.begin(), bounds_.end());
    bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
    n_ = static_cast<int>(bounds_.size()) - 1;
    area_ = cp::chunk_areas(slices, bounds_);
  }
  int64_t cells(const Segments& q, const Segments& k) const {
    int64_t a = 0;
    for (const Segment& qs : q) {
      const int q0 = index(qs.begin), q1 = index(qs.end);
      for (const Segment& ks : k) {
        const int k0 = index(ks.begin), k1 = index(ks.end);
        for (int i = q0; i < q1; ++i)
          for (int j = k0; j < k1; ++j) a += area_[int64_t(i) * n_ + j];
      }
    }
    return a;
  }

 private:
  int index(int64_t t) const {
    return static_cast<int>(std::lower_bound(bounds_.begin(), bounds_.end(), t) - bounds_.begin());
  }
  std::vector<int64_t> bounds_, area_;
  int n_ = 0;
};

double curve_ms(double GBps, double latency_us, const std::vector<std::pair<double, double>>& points, double bytes) {
  if (bytes <= 0) return 0.0;
  if (points.empty() || bytes <= points.front().first) return latency_us * 1e-3 + bytes / (GBps * 1e9) * 1e3;
  for (size_t i = 1; i < points.size(); ++i)
    if (bytes <= points[i].first) {
      const auto& [b0, t0] = points[i - 1];
      const auto& [b1, t1] = points[i];
      return t0 + (t1 - t0) * (bytes - b0) / (b1 - b0);
    }
  return points.back().second + (bytes - points.back().first) / (GBps * 1e9) * 1e3;
}

// Bytes a rank sends and receives in one call, split by the link they cross, and to how many
// peers at once.
struct Traffic {
  double send[2] = {0, 0}, recv[2] = {0, 0};  // [0] intra-node, [1] inter-node
  int to[2] = {0, 0}, from[2] = {0, 0};       // peers sent to, received from
  int extra_msgs = 0;                         // messages posted beyond one each way a peer
};

// Messages beyond one each way a peer that the group-cast posts to or from a peer for `segs`:
// K and V a message run on the way out (context_stage.hpp, fetch(); cast_plan.hpp, message_runs()),
// one of each a peer home (reduce()).
int extra_messages(const Segments& segs, bool home) {
  return home ? 1 : std::max(0, 2 * int(cp::message_runs(segs).size()) - 1);
}

struct Sim {
  const Problem& P;
  const Machine& M;
  const KernelRate& R;
  const Layout& L;
  std::vector<double> exec, lane;
  std::vector<RankTime> t;

  Sim(const Problem& p, const Machine& m, const KernelRate& r, const Layout& l)
      : P(p), M(m), R(r), L(l), exec(l.world, 0.0), lane(l.world, 0.0), t(l.world) {
    for (int i = 0; i < l.world; ++i) t[i].rank = i;
  }
  int node(int r) const { return r / M.gpus_per_node; }
  int link(int a, int b) const { return node(a) == node(b) ? 0 : 1; }
  // One peer's part of a call (callers add each peer once a call).
  void add(Traffic& x, int me, int peer, double out, double in) const {
    if (peer == me) return;
    const int c = link(me, peer);
    x.send[c] += out;
    x.recv[c] += in;
    x.to[c] += out > 0;
    x.from[c] += in > 0;
  }
  // A grouped call: the intra- and inter-node parts move at once; each pays its latency once, at
  // the one-peer or the several-peer figures of its link, the latter with the mean load of the
  // call's ranks on that link (`call`: every rank's traffic in the call).
  double transfer_ms(const Traffic& x, const std::vector<Traffic>& call) const {
    double ms = 0;
    const Link* links[2] = {&M.intra, &M.inter};
    for (int c = 0; c < 2; ++c) {
      double total = 0;
      int movers = 0;
      for (const Traffic& y : call)
        if (y.to[c] + y.from[c] > 0) total += std::max(y.send[c], y.recv[c]), ++movers;
      const double mean = movers > 0 ? total / movers : 0.0;
      ms = std::max(ms, links[c]->ms(std::max(x.send[c], x.recv[c]), std::max(x.to[c], x.from[c]), mean));
    }
    return ms + x.extra_msgs * M.message_us * 1e-3;
  }
  // The exec stream idles until `when` (a transfer's arrival, a collective's end).
  void wait_until(int r, double when) {
    if (when <= exec[r]) return;
    t[r].exposed_ms += when - exec[r];
    exec[r] = when;
  }
  double memory_ms(double bytes) const { return bytes / (M.hbm_GBps * 1e9) * 1e3; }
  void pass(int r, double bytes) {
    const double ms = memory_ms(bytes);
    exec[r] += ms;
    t[r].memory_ms += ms;
  }
  double flops_of(int64_t cells) const {
    return 4.0 * double(cells) * P.head_dim * L.hq_l * (P.backward ? 2.5 : 1.0);
  }
  // The tile units of the local call of queries q against keys k (segments at their offsets in
  // the kernel's buffers, as the engine clips the mask); 0 where calls are timed by FLOPs.
  double units(const Segments& q, const Segments& k, int64_t seqlen_k = -1) const {
    if (R.unit_ms <= 0) return 0.0;
    cp::LocalMask m = cp::clip_mask(P.slices, q, k);
    if (seqlen_k >= 0) m.seqlen_k = seqlen_k;
    if (m.empty()) return 0.0;
    // Many block pairs see the same local mask (full and causal pairs of a ring, alike zigzag
    // pieces): simulate each distinct one once.
    std::string key(reinterpret_cast<const char*>(&m.seqlen_q), sizeof m.seqlen_q);
    key.append(reinterpret_cast<const char*>(&m.seqlen_k), sizeof m.seqlen_k);
    key.append(reinterpret_cast<const char*>(m.slices.data()), m.slices.size() * sizeof(lca_slice));
    const auto it = unit_cache.find(key);
    if (it != unit_cache.end()) return it->second;
    return unit_cache[key] = tile_units(m.view(), P.backward, L.hq_l, L.hkv_l, M.sms, R.heads_together, R.fwd_split,
                                        P.head_dim, R.l2_bytes);
  }
  mutable std::unordered_map<std::string, double> unit_cache;
  void kernel(int r, int64_t cells, double units) {
    if (cells <= 0) return;
    const double f = flops_of(cells);
    const double ms = (R.unit_ms > 0 ? units * R.unit_ms : f / (R.tflops * 1e12) * 1e3) + R.call_us * 1e-3;
    exec[r] += ms;
    t[r].kernel_ms += ms;
    t[r].area_ms += f / (R.tflops * 1e12) * 1e3;
    t[r].flops += f;
    t[r].calls += 1;
  }
  // A collective over `members`: it starts when the last member arrives and ends for all when
  // the slowest member's part is done.
  void collective(const std::vector<int>& members, const std::vector<Traffic>& traffic) {
    double start = 0, len = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      start = std::max(start, exec[members[i]]);
      len = std::max(len, transfer_ms(traffic[i], traffic));
    }
    for (size_t i = 0; i < members.size(); ++i) {
      wait_until(members[i], start + len);
      t[members[i]].comm_ms += len;
    }
  }
  // Point-to-point calls on the lanes of `ranks`, posted once each rank's exec stream reaches
  // this point; a call completes when its peers have posted theirs too.
  void lane_calls(const std::vector<int>& ranks, const std::vector<std::vector<int>>& peers,
                  const std::vector<Traffic>& traffic, std::vector<double>* done) {
    std::vector<double> ready(L.world, 0.0);
    for (int r : ranks) ready[r] = std::max(lane[r], exec[r]);
    for (size_t i = 0; i < ranks.size(); ++i) {
      const int r = ranks[i];
      double start = ready[r];
      for (int q : peers[i]) start = std::max(start, ready[q]);
      const double len = transfer_ms(traffic[i], traffic);
      lane[r] = start + len;
      t[r].comm_ms += len;
      if (done) (*done)[r] = lane[r];
    }
  }
  // The ranks of the context ring of head-group member m, indexed by context group.
  std::vector<int> ring_ranks(int m) const {
    std::vector<int> v;
    for (int c = 0; c < L.cp; ++c) v.push_back(L.world_rank(c, m));
    return v;
  }
};

// The Ulysses all-to-all of one tensor of `heads_total` heads (h_l a member), element bytes `esz`
// (scatter: my rows out, the group's rows in; gather: the reverse). `replicated`: every member
// receives the same head (KV heads fewer than members), so `h_l` is 1. `packed`: an input tensor
// in the problem dtype, which a rank alone in its head group computes on in place (no copy).
void head_exchange(Sim& s, int h_l, double esz, bool gather, bool packed = false) {
  const Layout& L = s.L;
  const double D = s.P.head_dim;
  for (int c = 0; c < L.cp; ++c) {
    std::vector<int> members;
    std::vector<Traffic> traffic(L.u);
    for (int m = 0; m < L.u; ++m) members.push_back(L.world_rank(c, m));
    for (int m = 0; m < L.u; ++m) {
      const int me = members[m];
      const double mine = double(L.rows_of(me)) * h_l * D * esz;
      for (int i = 0; i < L.u; ++i) {
        const double theirs = double(L.rows_of(members[i])) * h_l * D * esz;
        s.add(traffic[m], me, members[i], gather ? theirs : mine, gather ? mine : theirs);
      }
      // Packing every member's heads of my rows into the send buffer (or out of the receive
      // buffer); with one member, the copy into place, or nothing for a packed input.
      if (L.u > 1 || gather || !packed) s.pass(me, 2.0 * mine * L.u);
    }
    if (L.u > 1) s.collective(members, traffic);
  }
}


// The ring (or double ring) over the context groups, for every head-group member's ring.
void ring_stage(Sim& s, const AreaTable& A, int window) {
  const Layout& L = s.L;
  const Problem& P = s.P;
  const double D = P.head_dim, esz = P.dtype_bytes;
  const int cp = L.cp;
  auto kv_bytes = [&](int g, double e) { return 2.0 * double(L.group_rows[g]) * L.hkv_l * D * e; };
  std::vector<cp::Schedule> sched;
  for (int c = 0; c < cp; ++c) sched.push_back(cp::make_schedule(cp, c, window));
  // Every head-group member's ring computes the same block pairs.
  std::vector<std::vector<int64_t>> cells(cp, std::vector<int64_t>(cp, 0));
  std::vector<std::vector<double>> units(cp, std::vector<double>(cp, 0.0));
  for (int c = 0; c < cp; ++c)
    for (int t = 0; t < cp; ++t) {
      const int b = sched[c].block[t];
      cells[c][t] = A.cells(L.group_segs[c], L.group_segs[b]);
      if (cells[c][t] > 0) units[c][t] = s.units(L.group_segs[c], L.group_segs[b]);
    }
  for (int m = 0; m < L.u; ++m) {
    const std::vector<int> ranks = s.ring_ranks(m);
    const double q_elems_row = double(L.hq_l) * D;
    for (int c = 0; c < cp; ++c) {  // fills of the fp32 output (or dQ) and LSE
      const double rows = double(L.group_rows[c]);
      s.pass(ranks[c], rows * q_elems_row * 4 + (P.backward ? 0 : rows * L.hq_l * 4));
    }
    std::vector<double> grad_done(L.world, 0.0);
    for (int t = 0; t < cp; ++t) {
      if (t + 1 < cp) {  // the next KV block, posted on the lane before this one computes
        std::vector<std::vector<int>> peers(cp);
        std::vector<Traffic> traffic(cp);
        for (int c = 0; c < cp; ++c) {
          const auto& sc = sched[c];
          const int to = ranks[sc.send_to[t]], from = ranks[sc.recv_from[t]];
          peers[c] = {to, from};
          s.add(traffic[c], ranks[c], to, kv_bytes(sc.block[t], esz), 0);
          s.add(traffic[c], ranks[c], from, 0, kv_bytes(sc.block[t + 1], esz));
        }
        s.lane_calls(ranks, peers, traffic, nullptr);
      }
      for (int c = 0; c < cp; ++c) {
        const int r = ranks[c], b = sched[c].block[t];
        s.kernel(r, cells[c][t], units[c][t]);
        if (cells[c][t] <= 0) continue;
        const double rows = double(L.group_rows[c]), k_rows = double(L.group_rows[b]);
        if (!P.backward) {
          s.pass(r, rows * q_elems_row * (esz + 8));  // the LSE merge into the fp32 output
        } else {
          s.wait_until(r, grad_done[r]);  // this block's dK/dV accumulator arrived
          s.pass(r, rows * q_elems_row * (esz + 8) + 2 * k_rows * L.hkv_l * D * (esz + 8));
        }
      }
      for (int c = 0; c < cp; ++c)
        if (t + 1 < cp) s.wait_until(ranks[c], s.lane[ranks[c]]);
      if (P.backward && t + 1 < cp) {  // the gradient travels one step behind its block
        std::vector<std::vector<int>> peers(cp);
        std::vector<Traffic> traffic(cp);
        for (int c = 0; c < cp; ++c) {
          const auto& sc = sched[c];
          const int to = ranks[sc.send_to[t]], from = ranks[sc.recv_from[t]];
          peers[c] = {to, from};
          s.add(traffic[c], ranks[c], to, kv_bytes(sc.block[t], 4), 0);
          s.add(traffic[c], ranks[c], from, 0, kv_bytes(sc.block[t + 1], 4));
        }
        s.lane_calls(ranks, peers, traffic, &grad_done);
      }
    }
    if (P.backward && cp > 1) {  // the gradient of the last block held goes home
      std::vector<std::vector<int>> peers(cp);
      std::vector<Traffic> traffic(cp);
      std::vector<int> movers;
      for (int c = 0; c < cp; ++c) {
        const auto& sc = sched[c];
        if (sc.return_to == c) continue;
        movers.push_back(ranks[c]);
        peers[movers.size() - 1] = {ranks[sc.return_to], ranks[sc.return_from]};
        s.add(traffic[movers.size() - 1], ranks[c], ranks[sc.return_to], kv_bytes(sc.block.back(), 4), 0);
        s.add(traffic[movers.size() - 1], ranks[c], ranks[sc.return_from], 0, kv_bytes(c, 4));
      }
      peers.resize(movers.size());
      traffic.resize(movers.size());
      s.lane_calls(movers, peers, traffic, nullptr);
    }
    for (int r : ranks) s.wait_until(r, s.lane[r]);
  }
}

// All-gather: the whole KV in one all-to-all each for K and V, one kernel call; backward sums
// dK/dV back to their owners with an fp32 all-to-all each.
void allgather_stage(Sim& s, const AreaTable& A) {
  const Layout& L = s.L;
  const Problem& P = s.P;
  const double D = P.head_dim, esz = P.dtype_bytes;
  const int cp = L.cp;
  auto kv = [&](int g, double e) { return double(L.group_rows[g]) * L.hkv_l * D * e; };
  // Every group's KV in group order, as the engine gathers it.
  Segments all;
  int64_t gathered = 0;
  for (int g = 0; g < cp; ++g) {
    for (const Segment& x : L.group_segs[g]) all.push_back({x.begin, x.end, x.offset + gathered});
    gathered += L.group_rows[g];
  }
  std::vector<int64_t> cells(cp);
  std::vector<double> units(cp, 0.0);
  for (int c = 0; c < cp; ++c) {
    cells[c] = A.cells(L.group_segs[c], all);
    if (cells[c] > 0) units[c] = s.units(L.group_segs[c], all, gathered);
  }
  for (int m = 0; m < L.u; ++m) {
    const std::vector<int> ranks = s.ring_ranks(m);
    std::vector<Traffic> gather(cp), back(cp);
    for (int c = 0; c < cp; ++c)
      for (int g = 0; g < cp; ++g) {
        s.add(gather[c], ranks[c], ranks[g], kv(c, esz), kv(g, esz));
        s.add(back[c], ranks[c], ranks[g], kv(g, 4), kv(c, 4));
      }
    s.collective(ranks, gather);  // K
    s.collective(ranks, gather);  // V
    double total_rows = 0;
    for (int g = 0; g < cp; ++g) total_rows += L.group_rows[g];
    for (int c = 0; c < cp; ++c) {
      const int r = ranks[c];
      const double rows = double(L.group_rows[c]);
      s.kernel(r, cells[c], units[c]);
      if (!P.backward) {
        s.pass(r, rows * L.hq_l * D * (4 + esz + 8));
      } else {
        s.pass(r, rows * L.hq_l * D * (4 + esz + 8) + 2 * total_rows * L.hkv_l * D * (4 + esz + 8));
      }
    }
    if (P.backward) {
      s.collective(ranks, back);  // dK
      s.collective(ranks, back);  // dV
      for (int c = 0; c < cp; ++c) s.pass(ranks[c], 2 * double(cp + 1) * kv(c, 4));
    }
  }
}

// Group-cast (balanced): forward computes stage 0 (the own KV) first, overlapping the fetch of
// stage 1; backward computes the fetched stages first (stage 1's fetch exposed) and the own KV
// last, each fetched stage's dK/dV going home while the next one computes. Stage s waits for
// its fetch.
void groupcast_stage(Sim& s, const AreaTable& A, const cp::Balance& B, int remote_stages) {
  const Layout& L = s.L;
  const Problem& P = s.P;
  const double D = P.head_dim, esz = P.dtype_bytes, row = double(L.hkv_l) * D;
  const int cp = L.cp;
  std::vector<std::vector<cp::CastStage>> plans;
  for (int c = 0; c < cp; ++c) plans.push_back(cp::plan_cast(L, B, remote_stages, c));
  const size_t stages = plans[0].size();
  // The keys of each stage's call, as the engine lays them out (stage 0 the own KV, a fetched
  // stage its segments one after another), and the call's cells and tile units.
  std::vector<std::vector<Segments>> keys(cp, std::vector<Segments>(stages));
  std::vector<std::vector<int64_t>> cells(cp, std::vector<int64_t>(stages, 0));
  std::vector<std::vector<double>> units(cp, std::vector<double>(stages, 0.0));
  // The rows each call has cells in: where a later stage merges (forward) or adds dQ (backward).
  std::vector<std::vector<double>> touched(cp, std::vector<double>(stages, 0.0));
  for (int c = 0; c < cp; ++c)
    for (size_t st = 0; st < stages; ++st) {
      int64_t at = 0;
      if (st == 0) keys[c][st] = L.group_segs[c], at = L.group_rows[c];
      else
        for (const Segments& segs : plans[c][st].from_segs)
          for (const Segment& g : segs) keys[c][st].push_back({g.begin, g.end, at}), at += g.size();
      cells[c][st] = A.cells(L.group_segs[c], keys[c][st]);
      if (cells[c][st] > 0) units[c][st] = s.units(L.group_segs[c], keys[c][st], at);
      if (cells[c][st] > 0)
        for (const lca_token_range& run : cp::rows_with_cells(cp::clip_mask(P.slices, L.group_segs[c], keys[c][st])))
          touched[c][st] += double(run.end - run.begin);
    }
  for (int m = 0; m < L.u; ++m) {
    const std::vector<int> ranks = s.ring_ranks(m);
    // Backward: dK and dV of the own rows start at zero. (The forward's first stage with cells
    // writes O in place: no fill.)
    if (P.backward)
      for (int c = 0; c < cp; ++c) s.pass(ranks[c], 2 * double(L.group_rows[c]) * row * 4);
    std::vector<bool> have(cp, false);  // a stage with cells has run (later ones merge or add)
    std::vector<double> fetched(L.world, 0.0);
    // A stage's group-cast on the lanes: each rank sends the rows it serves (`to`) and receives the
    // ones it fetches (`from`), `e` bytes an element; `home` the reverse (dK/dV going home).
    auto cast = [&](size_t st, double e, bool home, std::vector<double>* done) {
      std::vector<std::vector<int>> peers(cp);
      std::vector<Traffic> traffic(cp);
      for (int c = 0; c < cp; ++c) {
        const cp::CastStage& x = plans[c][st];
        for (int dir = 0; dir < 2; ++dir) {
          const bool sends = dir == 0, served = sends != home;  // served: the `to` side
          const auto& others = served ? x.to : x.from;
          const auto& segs = served ? x.to_segs : x.from_segs;
          for (size_t i = 0; i < others.size(); ++i) {
            double n = 0;
            for (const Segment& g : segs[i]) n += g.size();
            peers[c].push_back(ranks[others[i]]);
            const double bytes = 2 * n * row * e;
            s.add(traffic[c], ranks[c], ranks[others[i]], sends ? bytes : 0, sends ? 0 : bytes);
            traffic[c].extra_msgs += extra_messages(segs[i], home);
          }
        }
      }
      s.lane_calls(ranks, peers, traffic, done);
    };
    std::vector<size_t> order;
    for (size_t st = P.backward ? 1 : 0; st < stages; ++st) order.push_back(st);
    if (P.backward) order.push_back(0);
    if (order[0] >= 1) cast(order[0], esz, false, &fetched);
    // Backward: dQ is zeroed first where the first stage with cells has them in few rows (as the
    // engine chooses, after posting the first fetch); else that stage's part converts whole.
    std::vector<bool> have_dq(cp, false);
    if (P.backward)
      for (int c = 0; c < cp; ++c)
        for (size_t st : order) {
          if (cells[c][st] <= 0) continue;
          const double rows = double(L.group_rows[c]);
          if (rows > 0 && touched[c][st] / rows < esz / (esz + 8)) {
            have_dq[c] = true;
            s.pass(ranks[c], rows * L.hq_l * D * 4);
          }
          break;
        }
    for (size_t i = 0; i < order.size(); ++i) {
      const size_t st = order[i];
      if (st >= 1)
        for (int r : ranks) s.wait_until(r, fetched[r]);
      if (i + 1 < order.size() && order[i + 1] >= 1) cast(order[i + 1], esz, false, &fetched);
      for (int c = 0; c < cp; ++c) {
        const int r = ranks[c];
        s.kernel(r, cells[c][st], units[c][st]);
        if (cells[c][st] <= 0) continue;
        double k_rows = 0;
        for (const Segment& g : keys[c][st]) k_rows += g.size();
        const double q_elems = double(L.group_rows[c]) * L.hq_l * D, touched_elems = touched[c][st] * L.hq_l * D;
        if (!P.backward) {
          // The call writes O = 0 and LSE = -inf on the group's rows it has no cells in too (flex_flash
          // writes every row; on a fetched stage of short documents most of them): not in its tiles,
          // charged at the memory's speed.
          s.pass(r, (double(L.group_rows[c]) - touched[c][st]) * L.hq_l * (D * esz + 4));
          // Later stages merge their part into O in the problem dtype on their rows with cells:
          // read both, write O.
          if (have[c]) s.pass(r, touched_elems * 3 * esz);
        } else {
          // dQ's part converts into fp32 whole (the first) or adds on its rows with cells; dK/dV's
          // parts fill the stage's fp32 accumulator (the own stage adds into dK/dV).
          s.pass(r, (have_dq[c] ? touched_elems * (esz + 8) : q_elems * (esz + 4)) +
                        2 * k_rows * row * (esz + 4 + (st == 0 ? 4 : 0)));
          have_dq[c] = true;
        }
        have[c] = true;
      }
      // Backward: dK/dV of the fetched rows go home, the reverse of the fetch, in fp32.
      if (P.backward && st >= 1) cast(st, 4, true, nullptr);
    }
    for (int r : ranks) s.wait_until(r, s.lane[r]);
    if (P.backward)  // the served rows' partials that came home add into dK and dV
      for (int c = 0; c < cp; ++c) {
        double served = 0;
        for (size_t st = 1; st < stages; ++st) served += double(plans[c][st].served);
        s.pass(ranks[c], 2 * served * row * 12);
      }
  }
}

// Group-cast in one call (balanced's one_call): every rank fetches all its remote segments first,
// copies its own KV in front of them, and computes everything in one kernel call; backward then
// sends the fetched rows' dK/dV home (exposed) and adds what came back.
void groupcast_one_call(Sim& s, const AreaTable& A, const cp::Balance& B) {
  const Layout& L = s.L;
  const Problem& P = s.P;
  const double D = P.head_dim, esz = P.dtype_bytes, row = double(L.hkv_l) * D;
  const int cp = L.cp;
  std::vector<cp::CastStage> plans;
  for (int c = 0; c < cp; ++c) plans.push_back(cp::plan_cast(L, B, 1, c)[1]);
  std::vector<int64_t> cells(cp, 0);
  std::vector<double> units(cp, 0.0), keys_rows(cp, 0.0);
  for (int c = 0; c < cp; ++c) {
    Segments keys = L.group_segs[c];
    int64_t at = L.group_rows[c];
    for (const Segments& segs : plans[c].from_segs)
      for (const Segment& g : segs) keys.push_back({g.begin, g.end, at}), at += g.size();
    keys_rows[c] = double(at);
    cells[c] = A.cells(L.group_segs[c], keys);
    if (cells[c] > 0) units[c] = s.units(L.group_segs[c], keys, at);
  }
  // One lane call a rank, to and from every peer of the cast: KV out and in (e), or back (reverse).
  auto lane_call = [&](const std::vector<int>& ranks, double e, bool reverse, std::vector<double>* done) {
    std::vector<std::vector<int>> peers(cp);
    std::vector<Traffic> traffic(cp);
    for (int c = 0; c < cp; ++c) {
      const cp::CastStage& x = plans[c];
      for (size_t i = 0; i < x.to.size(); ++i) {
        double n = 0;
        for (const Segment& g : x.to_segs[i]) n += g.size();
        peers[c].push_back(ranks[x.to[i]]);
        s.add(traffic[c], ranks[c], ranks[x.to[i]], reverse ? 0 : 2 * n * row * e, reverse ? 2 * n * row * e : 0);
        traffic[c].extra_msgs += extra_messages(x.to_segs[i], reverse);
      }
      for (size_t i = 0; i < x.from.size(); ++i) {
        double n = 0;
        for (const Segment& g : x.from_segs[i]) n += g.size();
        peers[c].push_back(ranks[x.from[i]]);
        s.add(traffic[c], ranks[c], ranks[x.from[i]], reverse ? 2 * n * row * e : 0, reverse ? 0 : 2 * n * row * e);
        traffic[c].extra_msgs += extra_messages(x.from_segs[i], reverse);
      }
    }
    s.lane_calls(ranks, peers, traffic, done);
  };
  for (int m = 0; m < L.u; ++m) {
    const std::vector<int> ranks = s.ring_ranks(m);
    std::vector<double> fetched(L.world, 0.0);
    lane_call(ranks, esz, false, &fetched);
    for (int c = 0; c < cp; ++c) {
      const int r = ranks[c];
      const double own = double(L.group_rows[c]);
      s.pass(r, 2 * own * row * esz * 2);  // the own K and V copied in front of the fetched rows
      s.wait_until(r, fetched[r]);
      s.kernel(r, cells[c], units[c]);
      const double q_elems = own * L.hq_l * D;
      if (cells[c] <= 0) {
        s.pass(r, P.backward ? (q_elems + 2 * keys_rows[c] * row) * 4 : q_elems * esz);
      } else if (P.backward) {
        s.pass(r, (q_elems + 2 * keys_rows[c] * row) * (esz + 4));  // dQ, dK, dV parts into fp32
      }
    }
    if (P.backward) {
      lane_call(ranks, 4, true, nullptr);
      for (int c = 0; c < cp; ++c) {
        s.wait_until(ranks[c], s.lane[ranks[c]]);
        s.pass(ranks[c], 2 * double(plans[c].served) * row * 12);  // the partials that came home add in
      }
    }
    for (int r : ranks) s.wait_until(r, s.lane[r]);
  }
}

void require_finite(double v, double lo, const std::string& what) {
  require(std::isfinite(v) && v > lo, LCA_ERR_INVALID_ARGUMENT,
          what + " must be a finite number above " + std::to_string(lo).substr(0, 3) + ", got " + std::to_string(v));
}

}  // namespace

double LinkCurve::ms(double bytes) const { return curve_ms(GBps, latency_us, points, bytes); }

double Link::ms(double bytes, int peers) const {
  if (peers > 1 && fanout.GBps > 0) return fanout.ms(bytes);
  return curve_ms(GBps, latency_us, points, bytes);
}

double Link::ms(double bytes, int peers, double mean_bytes) const {
  const double even = ms(bytes, peers);
  if (peers <= 1 || fanout.GBps <= 0 || lone.GBps <= 0) return even;
  return std::max(std::min(even, lone.ms(bytes)), fanout.ms(std::min(mean_bytes, bytes)));
}

double calibrate_tiles(const Problem& P, double measured_ms, int sms, bool heads_together, bool fwd_split,
                       int64_t l2_bytes) {
  require(std::isfinite(measured_ms) && measured_ms > 0, LCA_ERR_INVALID_ARGUMENT,
          "the one-GPU time to calibrate tiles by must be a finite number above 0 ms");
  require(sms >= 1, LCA_ERR_INVALID_ARGUMENT, "the SMs a GPU must be >= 1, got " + std::to_string(sms));
  const lca_mask m{sizeof(lca_mask), P.seqlen, P.seqlen, static_cast<int64_t>(P.slices.size()), P.slices.data(),
                   nullptr, 0, nullptr};
  const double u =
      tile_units(m, P.backward, P.heads_q, P.heads_kv, sms, heads_together, fwd_split, P.head_dim, l2_bytes);
  return u > 0 ? measured_ms / u : 0.0;
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"ulysses", "ring_p2p", "ring_allgather", "usp", "loongtrain",
                                                 "balanced"};
  return names;
}

double mask_flops(const Problem& P) {
  int64_t area = 0;
  for (const lca_slice& x : P.slices) area += slice_area(x);
  return 4.0 * double(area) * P.head_dim * P.heads_q * (P.backward ? 2.5 : 1.0);
}

Prediction predict(const Problem& P, const std::string& strategy, const nlohmann::json& options, int world,
                   const Machine& M, const KernelRate& R) {
  require(world >= 1 && world <= 65536, LCA_ERR_INVALID_ARGUMENT,
          "the world size must be 1 to 65536 GPUs, got " + std::to_string(world));
  require(M.gpus_per_node >= 1, LCA_ERR_INVALID_ARGUMENT,
          "GPUs a node must be >= 1, got " + std::to_string(M.gpus_per_node));
  require_finite(M.intra.GBps, 0, "the intra-node bandwidth (GB/s)");
  require_finite(M.inter.GBps, 0, "the inter-node bandwidth (GB/s)");
  require(std::isfinite(M.intra.latency_us) && M.intra.latency_us >= 0, LCA_ERR_INVALID_ARGUMENT,
          "the intra-node latency (us) must be a finite number >= 0");
  require(std::isfinite(M.inter.latency_us) && M.inter.latency_us >= 0, LCA_ERR_INVALID_ARGUMENT,
          "the inter-node latency (us) must be a finite number >= 0");
  require_finite(M.hbm_GBps, 0, "the memory bandwidth (GB/s)");
  require(std::isfinite(M.message_us) && M.message_us >= 0, LCA_ERR_INVALID_ARGUMENT,
          "the cost of a message (us) must be a finite number >= 0");
  require(M.sms >= 1, LCA_ERR_INVALID_ARGUMENT, "the SMs a GPU must be >= 1, got " + std::to_string(M.sms));
  require(std::isfinite(R.unit_ms) && R.unit_ms >= 0, LCA_ERR_INVALID_ARGUMENT,
          "the time of a tile unit (ms) must be a finite number >= 0");
  for (const Link* l : {&M.intra, &M.inter})
    require(std::isfinite(l->fanout.GBps) && l->fanout.GBps >= 0 && std::isfinite(l->fanout.latency_us) &&
                l->fanout.latency_us >= 0 && std::isfinite(l->lone.GBps) && l->lone.GBps >= 0 &&
                std::isfinite(l->lone.latency_us) && l->lone.latency_us >= 0,
            LCA_ERR_INVALID_ARGUMENT, "the several-peer bandwidth and latency must be finite numbers >= 0");
  require_finite(R.tflops, 0, "the local kernel's rate (TFLOP/s)");
  require(std::isfinite(R.call_us) && R.call_us >= 0, LCA_ERR_INVALID_ARGUMENT,
          "the local kernel's cost a call (us) must be a finite number >= 0");
  require(P.seqlen >= 1 && P.heads_q >= 1 && P.heads_kv >= 1 && P.head_dim >= 1 && P.heads_q % P.heads_kv == 0,
          LCA_ERR_INVALID_ARGUMENT,
          "the problem needs seqlen, heads and head_dim >= 1 with heads_q a multiple of heads_kv");
  const auto& names = strategy_names();
  require(std::find(names.begin(), names.end(), strategy) != names.end(), LCA_ERR_INVALID_ARGUMENT,
          "unknown CP strategy '" + strategy + "' (known: ulysses, ring_p2p, ring_allgather, usp, loongtrain, balanced)");

  Prediction out;
  out.strategy = strategy;
  out.world = world;
  out.total_flops = mask_flops(P);
  lca_problem p{};
  p.struct_size = sizeof(lca_problem);
  p.seqlen_q = p.seqlen_k = P.seqlen;
  p.heads_q = P.heads_q;
  p.heads_kv = P.heads_kv;
  p.head_dim = P.head_dim;
  cp::EngineOptions o;
  Layout L;
  cp::Balance B;
  try {
    o = cp::choose_strategy(strategy, options, world, std::min(world, M.gpus_per_node), p);
    cp::GroupRuns runs;
    if (o.mode == cp::ContextMode::groupcast) {
      require(o.head_degree >= 1 && world % o.head_degree == 0, LCA_ERR_UNSUPPORTED,
              "the head degree " + std::to_string(o.head_degree) + " does not divide the world size " +
                  std::to_string(world));
      B = cp::make_balance(P.slices, P.seqlen, world / o.head_degree, o.chunks_per_group, o.balance_by);
      for (const auto& chunks : B.chunks) {
        runs.emplace_back();
        for (int c : chunks) runs.back().push_back({B.bounds[c], B.bounds[c + 1]});
      }
    }
    L = cp::make_layout(world, 0, o.head_degree, o.zigzag, p, runs.empty() ? nullptr : &runs);
  } catch (const Error& e) {
    if (e.status() == LCA_ERR_INVALID_ARGUMENT) throw Error(e.status(), strategy + ": " + e.what());
    out.refused = e.what();
    return out;
  }
  out.head_degree = L.u;
  out.context_degree = L.cp;
  out.zigzag = o.zigzag;
  out.window = o.mode == cp::ContextMode::ring ? (o.window > 0 ? o.window : L.cp) : 0;

  const AreaTable A(P.slices, L);
  Sim s(P, M, R, L);
  const double esz = P.dtype_bytes;
  const bool shard_kv = P.heads_kv % L.u == 0;
  // Head exchange in: Q, K, V (and O, dO, LSE for backward).
  head_exchange(s, L.hq_l, esz, false, true);
  head_exchange(s, L.hkv_l, esz, false, true);
  head_exchange(s, L.hkv_l, esz, false, true);
  if (P.backward) {
    head_exchange(s, L.hq_l, esz, false, true);
    head_exchange(s, L.hq_l, esz, false, true);
    head_exchange(s, L.hq_l, 4.0 / P.head_dim, false);
  }
  if (o.mode == cp::ContextMode::ring) ring_stage(s, A, o.window);
  else if (o.mode == cp::ContextMode::allgather) allgather_stage(s, A);
  else if ((P.backward ? o.one_call_bwd : o.one_call_fwd) && L.cp > 1) groupcast_one_call(s, A, B);
  else groupcast_stage(s, A, B, o.remote_stages);
  // Head exchange out: O and LSE, or dQ, dK, dV (replicated KV heads add up in fp32). Group-cast
  // on a rank alone in its head group writes O in place.
  if (P.backward || !(o.mode == cp::ContextMode::groupcast && L.u == 1)) head_exchange(s, L.hq_l, esz, true);
  if (!P.backward) {
    head_exchange(s, L.hq_l, 4.0 / P.head_dim, true);
  } else {
    head_exchange(s, L.hkv_l, shard_kv ? esz : 4.0, true);
    head_exchange(s, L.hkv_l, shard_kv ? esz : 4.0, true);
  }
  for (int r = 0; r < world; ++r) {
    s.wait_until(r, s.lane[r]);
    s.t[r].total_ms = s.exec[r];
  }
  out.ranks = s.t;
  out.slowest = *std::max_element(out.ranks.begin(), out.ranks.end(),
                                  [](const RankTime& a, const RankTime& b) { return a.total_ms < b.total_ms; });
  Breakdown& b = out.breakdown;
  b.ideal_ms = out.total_flops / world / (R.tflops * 1e12) * 1e3;
  for (const RankTime& x : out.ranks) b.mean_total_ms += x.total_ms / world;
  b.imbalance_ms = out.slowest.area_ms - b.ideal_ms;
  b.tiles_ms = out.slowest.kernel_ms - out.slowest.area_ms;
  b.exposed_ms = out.slowest.exposed_ms;
  b.memory_ms = out.slowest.memory_ms;
  out.time_ms = out.slowest.total_ms;
  out.tflops_per_gpu = out.time_ms > 0 ? out.total_flops / world / (out.time_ms * 1e-3) / 1e12 : 0.0;
  out.share = out.tflops_per_gpu / R.tflops;
  return out;
}

}  // namespace lca::core::model
