// The context-parallel stage inside one head share: the local queries of a context group
// against every group's KV, by ring (send/recv of KV blocks, dK/dV travelling with them), by
// all-gather (whole KV, dK/dV summed back with an all-to-all) or by group-cast (each group
// fetches only the KV chunks its rows touch, in stages, and sends their dK/dV back to the
// owners: the balanced strategy). Partial outputs merge through LSE in fp32. On CUDA the ring's
// and the group-cast's transfers run on a second stream (Lane) and overlap the kernel; all other
// work is on the exec stream. Used by the engine after the Ulysses exchange.
// Rule: kernel plans are made in plan() for every block pair and released with the plan.
#pragma once

#include "balance.hpp"
#include "buffers.hpp"
#include "cast_plan.hpp"
#include "device.hpp"
#include "layout.hpp"
#include "options.hpp"
#include "schedule.hpp"
#include "slice_clip.hpp"

#include <lca/cp_strategy.hpp>

#include <algorithm>
#include <limits>
#include <vector>

namespace lca::cp {

struct ContextStage {
  ContextMode mode = ContextMode::ring;
  Schedule sched;
  std::vector<LocalMask> masks;   // per ring step, per group-cast stage, or one (all-gather)
  std::vector<lca_plan*> plans;   // nullptr where the block pair has no cell
  lca_problem base{};             // the local problem, seqlen_k set per block

  // Group-cast (cast_plan.hpp): stage 0 is the group's own KV, stages 1.. fetched chunks.
  std::vector<CastStage> cast;
  // Per group-cast stage, the runs of local query rows its call has cells in: a later stage merges
  // (forward) or adds dQ (backward) only there; on short documents a fetched stage's are few.
  std::vector<std::vector<lca_token_range>> touched;
  // Group-cast in one call (per pass): masks[combined] is the own KV followed by every fetched
  // segment (cast_one), computed by one kernel call.
  bool one_call_fwd = false, one_call_bwd = false;
  size_t combined = 0;
  CastStage cast_one;  // every remote segment in one stage

  void prepare(const Layout& L, const lca_problem& global, const std::vector<lca_slice>& slices,
               ContextMode m, int window, const KernelRef& kernel, const lca_exec& exec,
               const Balance* balance = nullptr, int remote_stages = 1, bool one_fwd = false, bool one_bwd = false) {
    mode = m;
    base = global;
    base.heads_q = L.hq_l;
    base.heads_kv = L.hkv_l;
    base.seqlen_q = base.seqlen_k = L.group_rows[L.ctx_idx];
    const Segments& mine = L.group_segs[L.ctx_idx];
    if (mode == ContextMode::groupcast) {
      require(balance != nullptr, LCA_ERR_INTERNAL, "group-cast needs a balance");
      cast = plan_cast(L, *balance, remote_stages);
      masks.push_back(clip_mask(slices, mine, mine));
      for (size_t s = 1; s < cast.size(); ++s) {
        Segments fetched;
        int64_t at = 0;
        for (const Segments& segs : cast[s].from_segs)
          for (const Segment& g : segs) fetched.push_back({g.begin, g.end, at}), at += g.size();
        masks.push_back(clip_mask(slices, mine, fetched));
        masks.back().seqlen_k = at;
      }
      one_call_fwd = one_fwd && cast.size() > 1;
      one_call_bwd = one_bwd && cast.size() > 1;
      if (one_call_fwd || one_call_bwd) {
        cast_one = plan_cast(L, *balance, 1)[1];
        Segments keys = mine;
        int64_t at = L.group_rows[L.ctx_idx];
        for (const Segments& segs : cast_one.from_segs)
          for (const Segment& g : segs) keys.push_back({g.begin, g.end, at}), at += g.size();
        combined = masks.size();
        masks.push_back(clip_mask(slices, mine, keys));
        masks.back().seqlen_k = at;
      }
      for (const LocalMask& lm : masks) touched.push_back(rows_with_cells(lm));
    } else if (mode == ContextMode::ring) {
      sched = make_schedule(L.cp, L.ctx_idx, window);
      for (int b : sched.block) masks.push_back(clip_mask(slices, mine, L.group_segs[b]));
    } else {
      Segments all;
      int64_t offset = 0;
      for (int g = 0; g < L.cp; ++g) {
        for (Segment s : L.group_segs[g]) all.push_back({s.begin, s.end, s.offset + offset});
        offset += L.group_rows[g];
      }
      masks.push_back(clip_mask(slices, mine, all));
      masks.back().seqlen_k = offset;
    }
    for (const LocalMask& lm : masks) {
      lca_problem p = base;
      p.seqlen_k = lm.seqlen_k;
      const lca_mask view = lm.view();
      plans.push_back(lm.empty() ? nullptr : kernel.plan(p, view, exec));
    }
  }

  void release(const KernelRef& kernel, const lca_exec& exec) {
    for (lca_plan*& p : plans) kernel.destroy_plan(p, exec), p = nullptr;
  }

  struct Ctx {
    const Layout& L;
    const Comm& comm;  // the context group's ring communicator
    const KernelRef& kernel;
    const lca_exec& exec;
    const Device& dev;  // on the exec stream
    const Lane& lane;   // the ring's communication stream (CUDA)
    int64_t dim;
    int32_t dtype;
    int64_t kv_elems(int g) const { return L.group_rows[g] * L.hkv_l * dim; }
  };

  // q, k, v packed in the problem dtype -> o [N, hq_l, D] and lse [hq_l, N] (fp32). o has room
  // for fp32; returns the dtype written there: fp32 (ring, all-gather: many parts accumulate) or
  // the problem dtype (group-cast: the first part lands in place, later ones merge into it).
  int32_t forward(const Ctx& c, const void* q, const void* k, const void* v, void* o_out, float* lse) const {
    const int64_t N = base.seqlen_q, D = c.dim, Hq = base.heads_q;
    const size_t esz = dtype_size(c.dtype);
    if (mode == ContextMode::groupcast) return one_call_fwd ? one_call_forward(c, q, k, v, o_out, lse)
                                                            : cast_forward(c, q, k, v, o_out, lse);
    float* o = static_cast<float*>(o_out);
    c.dev.fill(o, N * Hq * D, 0.0f);
    c.dev.fill(lse, Hq * N, -std::numeric_limits<float>::infinity());
    Buffer o_part(c.exec.allocator, N * Hq * D * esz);
    Buffer lse_part(c.exec.allocator, N * Hq * sizeof(float));
    auto run = [&](size_t step, const void* kb, const void* vb) {
      if (plans[step] == nullptr) return;
      const int64_t nk = masks[step].seqlen_k;
      lca_fwd_args a{sizeof(lca_fwd_args), thd_tensor(const_cast<void*>(q), c.dtype, N, Hq, D),
                     thd_tensor(const_cast<void*>(kb), c.dtype, nk, base.heads_kv, D),
                     thd_tensor(const_cast<void*>(vb), c.dtype, nk, base.heads_kv, D),
                     thd_tensor(o_part.data(), c.dtype, N, Hq, D), lse_tensor(lse_part.as<float>(), Hq, N)};
      c.kernel.forward(plans[step], a, c.exec);
      c.dev.merge(o, lse, o_part.data(), c.dtype, lse_part.as<float>(), N, Hq, D);
    };
    if (mode == ContextMode::allgather) {
      Buffer kall, vall;
      gather_kv(c, k, v, kall, vall);
      run(0, kall.data(), vall.data());
      return LCA_DTYPE_F32;
    }
    KvRing ring(c, *this, k, v);
    for (size_t t = 0; t < sched.block.size(); ++t) {
      ring.post_next(t);  // on CUDA it moves on the lane while the block below computes
      run(t, ring.k(), ring.v());
      ring.advance();
    }
    c.lane.join(c.exec.stream);
    return LCA_DTYPE_F32;
  }

  // -> dq [N, hq_l, D], dk, dv [N, hkv_l, D], fp32, for this group's own rows.
  void backward(const Ctx& c, const void* q, const void* k, const void* v, const void* o,
                const void* d_o, const float* lse, float* dq, float* dk, float* dv) const {
    const int64_t N = base.seqlen_q, D = c.dim, Hq = base.heads_q, Hkv = base.heads_kv;
    const size_t esz = dtype_size(c.dtype);
    int64_t max_k = 0;
    for (const auto& m : masks) max_k = std::max(max_k, m.seqlen_k);
    Buffer dq_part(c.exec.allocator, N * Hq * D * esz);
    Buffer dk_part(c.exec.allocator, max_k * Hkv * D * esz), dv_part(c.exec.allocator, max_k * Hkv * D * esz);
    if (mode == ContextMode::groupcast) {
      if (one_call_bwd) one_call_backward(c, q, k, v, o, d_o, lse, dq, dk, dv, dq_part, dk_part, dv_part);
      else cast_backward(c, q, k, v, o, d_o, lse, dq, dk, dv, dq_part, dk_part, dv_part);
      return;
    }
    c.dev.zero(dq, static_cast<size_t>(N * Hq * D) * sizeof(float));
    // The block pair's gradients: dQ added into dq now; dK/dV left in dk_part/dv_part.
    auto run = [&](size_t step, const void* kb, const void* vb) {
      if (plans[step] == nullptr) return false;
      const int64_t nk = masks[step].seqlen_k;
      auto T = [&](const void* p, int64_t rows, int64_t heads) {
        return thd_tensor(const_cast<void*>(p), c.dtype, rows, heads, D);
      };
      lca_bwd_args a{sizeof(lca_bwd_args), T(q, N, Hq), T(kb, nk, Hkv), T(vb, nk, Hkv), T(o, N, Hq),
                     T(d_o, N, Hq), lse_tensor(const_cast<float*>(lse), Hq, N), T(dq_part.data(), N, Hq),
                     T(dk_part.data(), nk, Hkv), T(dv_part.data(), nk, Hkv)};
      c.kernel.backward(plans[step], a, c.exec);
      c.dev.copy(flat(dq_part.data(), c.dtype, N * Hq * D), flat(dq, LCA_DTYPE_F32, N * Hq * D), 1, 1, N * Hq * D, true);
      return true;
    };
    auto add_kv = [&](size_t step, float* dk_acc, float* dv_acc) {
      const int64_t count = masks[step].seqlen_k * Hkv * D;
      c.dev.copy(flat(dk_part.data(), c.dtype, count), flat(dk_acc, LCA_DTYPE_F32, count), 1, 1, count, true);
      c.dev.copy(flat(dv_part.data(), c.dtype, count), flat(dv_acc, LCA_DTYPE_F32, count), 1, 1, count, true);
    };
    if (mode == ContextMode::allgather) {
      Buffer kall, vall;
      gather_kv(c, k, v, kall, vall);
      const int64_t total = masks[0].seqlen_k * Hkv * D;
      Buffer dk_all(c.exec.allocator, total * sizeof(float)), dv_all(c.exec.allocator, total * sizeof(float));
      c.dev.zero(dk_all.data(), dk_all.bytes());
      c.dev.zero(dv_all.data(), dv_all.bytes());
      if (run(0, kall.data(), vall.data())) add_kv(0, dk_all.as<float>(), dv_all.as<float>());
      sum_back(c, dk_all.as<float>(), dk);
      sum_back(c, dv_all.as<float>(), dv);
      return;
    }
    KvRing ring(c, *this, k, v);
    const int64_t max_elems = max_k * Hkv * D;
    Buffer acc[2][2] = {{Buffer(c.exec.allocator, max_elems * 4), Buffer(c.exec.allocator, max_elems * 4)},
                        {Buffer(c.exec.allocator, max_elems * 4), Buffer(c.exec.allocator, max_elems * 4)}};
    int cur = 0;
    c.dev.zero(acc[cur][0].data(), acc[cur][0].bytes());
    c.dev.zero(acc[cur][1].data(), acc[cur][1].bytes());
    for (size_t t = 0; t < sched.block.size(); ++t) {
      ring.post_next(t);
      const bool computed = run(t, ring.k(), ring.v());
      // The accumulator of this block arrived on the lane (CUDA) while the kernel ran.
      c.lane.main_waits(kGradients, c.exec.stream);
      if (computed) add_kv(t, acc[cur][0].as<float>(), acc[cur][1].as<float>());
      ring.advance();
      if (t + 1 == sched.block.size()) break;
      // The gradient travels with its block, one step behind the KV.
      c.lane.side_waits(c.exec.stream);
      void* side = c.lane.stream();
      c.comm.group_start();
      for (int x = 0; x < 2; ++x) {
        c.comm.send(acc[cur][x].data(), c.kv_elems(sched.block[t]), LCA_DTYPE_F32, sched.send_to[t], side);
        c.comm.recv(acc[1 - cur][x].data(), c.kv_elems(sched.block[t + 1]), LCA_DTYPE_F32, sched.recv_from[t], side);
      }
      c.comm.group_end();
      c.lane.mark(kGradients);
      cur = 1 - cur;
    }
    const int64_t own = c.kv_elems(c.L.ctx_idx);
    if (sched.return_to == c.L.ctx_idx) {
      c.dev.copy(flat(acc[cur][0].data(), LCA_DTYPE_F32, own), flat(dk, LCA_DTYPE_F32, own), 1, 1, own);
      c.dev.copy(flat(acc[cur][1].data(), LCA_DTYPE_F32, own), flat(dv, LCA_DTYPE_F32, own), 1, 1, own);
      c.lane.join(c.exec.stream);
      return;
    }
    c.lane.side_waits(c.exec.stream);
    void* side = c.lane.stream();
    c.comm.group_start();
    c.comm.send(acc[cur][0].data(), c.kv_elems(sched.block.back()), LCA_DTYPE_F32, sched.return_to, side);
    c.comm.send(acc[cur][1].data(), c.kv_elems(sched.block.back()), LCA_DTYPE_F32, sched.return_to, side);
    c.comm.recv(dk, own, LCA_DTYPE_F32, sched.return_from, side);
    c.comm.recv(dv, own, LCA_DTYPE_F32, sched.return_from, side);
    c.comm.group_end();
    c.lane.join(c.exec.stream);
  }

 private:
  static constexpr int kBlocks = 0, kGradients = 1;  // Lane marks

  // Group-cast forward: stage 0 (own KV) computes while stage 1's fetch runs on the lane, and so
  // on. The first stage with cells writes O (problem dtype) and LSE in place; later ones merge in.
  int32_t cast_forward(const Ctx& c, const void* q, const void* k, const void* v, void* o, float* lse) const {
    const int64_t N = base.seqlen_q, D = c.dim, Hq = base.heads_q;
    const size_t esz = dtype_size(c.dtype);
    std::vector<Buffer> kb(cast.size()), vb(cast.size());
    alloc_stage_kv(c, kb, vb);
    Buffer o_part, lse_part;
    bool have = false;
    c.lane.side_waits(c.exec.stream);  // own K/V come from the head exchange on the exec stream
    for (size_t s = 0; s < cast.size(); ++s) {
      if (s >= 1) c.lane.main_waits(kBlocks, c.exec.stream);  // stage s's KV has arrived
      if (s + 1 < cast.size()) fetch(c, cast[s + 1], k, v, kb[s + 1].data(), vb[s + 1].data());
      if (plans[s] == nullptr) continue;
      if (have && !o_part.data()) {
        o_part = Buffer(c.exec.allocator, N * Hq * D * esz);
        lse_part = Buffer(c.exec.allocator, N * Hq * sizeof(float));
      }
      const int64_t nk = masks[s].seqlen_k;
      void* out = have ? o_part.data() : o;
      float* out_lse = have ? lse_part.as<float>() : lse;
      lca_fwd_args a{sizeof(lca_fwd_args), thd_tensor(const_cast<void*>(q), c.dtype, N, Hq, D),
                     thd_tensor(const_cast<void*>(s ? kb[s].data() : k), c.dtype, nk, base.heads_kv, D),
                     thd_tensor(const_cast<void*>(s ? vb[s].data() : v), c.dtype, nk, base.heads_kv, D),
                     thd_tensor(out, c.dtype, N, Hq, D), lse_tensor(out_lse, Hq, N)};
      c.kernel.forward(plans[s], a, c.exec);
      if (have)
        for (const lca_token_range& run : touched[s])
          c.dev.merge(advance(o, c.dtype, run.begin * Hq * D), c.dtype, lse + run.begin,
                      advance(o_part.data(), c.dtype, run.begin * Hq * D), c.dtype, lse_part.as<float>() + run.begin,
                      run.end - run.begin, Hq, D, /*lse_ld=*/N);
      have = true;
    }
    if (!have) {  // no cell at all: O = 0, LSE = -inf
      c.dev.zero(o, static_cast<size_t>(N * Hq * D) * esz);
      c.dev.fill(lse, Hq * N, -std::numeric_limits<float>::infinity());
    }
    c.lane.join(c.exec.stream);
    return c.dtype;
  }

  // Group-cast backward: the fetched stages first, each one's dK/dV going home on the lane while
  // the next computes, the own KV last (it needs no transfer and hides the last group-reduce).
  // dQ: the first stage with cells converts into dq, later ones add.
  void cast_backward(const Ctx& c, const void* q, const void* k, const void* v, const void* o, const void* d_o,
                     const float* lse, float* dq, float* dk, float* dv, Buffer& dq_part, Buffer& dk_part,
                     Buffer& dv_part) const {
    const int64_t N = base.seqlen_q, D = c.dim, Hq = base.heads_q, Hkv = base.heads_kv;
    const int64_t row = Hkv * D, own = c.kv_elems(c.L.ctx_idx);
    c.dev.zero(dk, static_cast<size_t>(own) * sizeof(float));
    c.dev.zero(dv, static_cast<size_t>(own) * sizeof(float));
    const size_t S = cast.size();
    std::vector<Buffer> kb(S), vb(S), dk_acc(S), dv_acc(S), dk_back(S), dv_back(S);
    alloc_stage_kv(c, kb, vb);
    for (size_t s = 1; s < S; ++s) {
      dk_acc[s] = Buffer(c.exec.allocator, cast[s].rows * row * sizeof(float));
      dv_acc[s] = Buffer(c.exec.allocator, cast[s].rows * row * sizeof(float));
      dk_back[s] = Buffer(c.exec.allocator, cast[s].served * row * sizeof(float));
      dv_back[s] = Buffer(c.exec.allocator, cast[s].served * row * sizeof(float));
    }
    std::vector<size_t> order;
    for (size_t s = 1; s < S; ++s) order.push_back(s);
    order.push_back(0);
    auto T = [&](const void* p, int64_t rows, int64_t heads) {
      return thd_tensor(const_cast<void*>(p), c.dtype, rows, heads, D);
    };
    c.lane.side_waits(c.exec.stream);
    if (S > 1) fetch(c, cast[1], k, v, kb[1].data(), vb[1].data());
    // dQ: the first stage with cells converts its part whole into dq and later ones add on their
    // rows with cells; where that first stage has cells in few rows, zeroing dq and adding only
    // there moves fewer bytes (4 + f (esz + 8) against esz + 4 an element, f its share of rows).
    // (After the first fetch is posted: the zeroing overlaps it.)
    bool have_dq = false;
    for (size_t s : order) {
      if (plans[s] == nullptr) continue;
      int64_t rows = 0;
      for (const lca_token_range& run : touched[s]) rows += run.end - run.begin;
      const double esz = double(dtype_size(c.dtype));
      if (N > 0 && double(rows) / double(N) < esz / (esz + 8)) {
        c.dev.zero(dq, static_cast<size_t>(N * Hq * D) * sizeof(float));
        have_dq = true;
      }
      break;
    }
    for (size_t i = 0; i < order.size(); ++i) {
      const size_t s = order[i];
      if (s >= 1) c.lane.main_waits(kBlocks, c.exec.stream);  // stage s's KV has arrived
      if (i + 1 < order.size() && order[i + 1] >= 1)
        fetch(c, cast[order[i + 1]], k, v, kb[order[i + 1]].data(), vb[order[i + 1]].data());
      const int64_t nk = masks[s].seqlen_k;
      float* acc_k = s ? dk_acc[s].as<float>() : dk;
      float* acc_v = s ? dv_acc[s].as<float>() : dv;
      if (plans[s] != nullptr) {
        lca_bwd_args a{sizeof(lca_bwd_args), T(q, N, Hq), T(s ? kb[s].data() : k, nk, Hkv),
                       T(s ? vb[s].data() : v, nk, Hkv), T(o, N, Hq), T(d_o, N, Hq),
                       lse_tensor(const_cast<float*>(lse), Hq, N), T(dq_part.data(), N, Hq),
                       T(dk_part.data(), nk, Hkv), T(dv_part.data(), nk, Hkv)};
        c.kernel.backward(plans[s], a, c.exec);
        if (!have_dq) {
          c.dev.copy(flat(dq_part.data(), c.dtype, N * Hq * D), flat(dq, LCA_DTYPE_F32, N * Hq * D), 1, 1, N * Hq * D);
        } else {
          for (const lca_token_range& run : touched[s]) {
            const int64_t n = (run.end - run.begin) * Hq * D, at = run.begin * Hq * D;
            c.dev.copy(flat(advance(dq_part.data(), c.dtype, at), c.dtype, n), flat(dq + at, LCA_DTYPE_F32, n), 1, 1, n,
                       /*add=*/true);
          }
        }
        have_dq = true;
        // A fetched stage's partials fill its own buffer whole (copy); the own KV adds into dk/dv.
        const int64_t count = nk * row;
        c.dev.copy(flat(dk_part.data(), c.dtype, count), flat(acc_k, LCA_DTYPE_F32, count), 1, 1, count, s == 0);
        c.dev.copy(flat(dv_part.data(), c.dtype, count), flat(acc_v, LCA_DTYPE_F32, count), 1, 1, count, s == 0);
      } else if (s >= 1) {
        c.dev.zero(acc_k, static_cast<size_t>(cast[s].rows * row) * sizeof(float));
        c.dev.zero(acc_v, static_cast<size_t>(cast[s].rows * row) * sizeof(float));
      }
      if (s >= 1) {  // the fetched chunks' gradients go home while the next stage computes
        c.lane.side_waits(c.exec.stream);
        reduce(c, cast[s], acc_k, acc_v, dk_back[s].as<float>(), dv_back[s].as<float>());
      }
    }
    if (!have_dq) c.dev.zero(dq, static_cast<size_t>(N * Hq * D) * sizeof(float));
    c.lane.join(c.exec.stream);
    for (size_t s = 1; s < S; ++s) add_home(c, cast[s], dk_back[s].as<float>(), dv_back[s].as<float>(), dk, dv);
  }

  // The partials of this group's rows that stage s's fetchers sent back add into dk/dv.
  void add_home(const Ctx& c, const CastStage& st, const float* back_k, const float* back_v, float* dk, float* dv) const {
    const int64_t row = c.L.hkv_l * c.dim;
    int64_t at = 0;
    for (const Segments& segs : st.to_segs)
      for (const Segment& g : segs) {
        const int64_t n = g.size() * row;
        c.dev.copy(flat(back_k + at * row, LCA_DTYPE_F32, n), flat(dk + g.offset * row, LCA_DTYPE_F32, n), 1, 1, n, true);
        c.dev.copy(flat(back_v + at * row, LCA_DTYPE_F32, n), flat(dv + g.offset * row, LCA_DTYPE_F32, n), 1, 1, n, true);
        at += g.size();
      }
  }

  // One call: every fetched segment lands behind the own KV in one buffer, then a single kernel
  // call computes it all (the fetch is not overlapped; no merge follows).
  void one_call_kv(const Ctx& c, const void* k, const void* v, Buffer& kall, Buffer& vall) const {
    const int64_t own = c.L.group_rows[c.L.ctx_idx], row = c.L.hkv_l * c.dim, nk = masks[combined].seqlen_k;
    kall = Buffer(c.exec.allocator, nk * row * dtype_size(c.dtype));
    vall = Buffer(c.exec.allocator, nk * row * dtype_size(c.dtype));
    c.lane.side_waits(c.exec.stream);  // own K/V come from the head exchange on the exec stream
    fetch(c, cast_one, k, v, kall.data(), vall.data(), own);
    c.dev.copy(flat(k, c.dtype, own * row), flat(kall.data(), c.dtype, own * row), 1, 1, own * row);
    c.dev.copy(flat(v, c.dtype, own * row), flat(vall.data(), c.dtype, own * row), 1, 1, own * row);
    c.lane.main_waits(kBlocks, c.exec.stream);
  }

  int32_t one_call_forward(const Ctx& c, const void* q, const void* k, const void* v, void* o, float* lse) const {
    const int64_t N = base.seqlen_q, D = c.dim, Hq = base.heads_q, nk = masks[combined].seqlen_k;
    Buffer kall, vall;
    one_call_kv(c, k, v, kall, vall);
    if (plans[combined] != nullptr) {
      lca_fwd_args a{sizeof(lca_fwd_args), thd_tensor(const_cast<void*>(q), c.dtype, N, Hq, D),
                     thd_tensor(kall.data(), c.dtype, nk, base.heads_kv, D),
                     thd_tensor(vall.data(), c.dtype, nk, base.heads_kv, D), thd_tensor(o, c.dtype, N, Hq, D),
                     lse_tensor(lse, Hq, N)};
      c.kernel.forward(plans[combined], a, c.exec);
    } else {
      c.dev.zero(o, static_cast<size_t>(N * Hq * D) * dtype_size(c.dtype));
      c.dev.fill(lse, Hq * N, -std::numeric_limits<float>::infinity());
    }
    c.lane.join(c.exec.stream);
    return c.dtype;
  }

  void one_call_backward(const Ctx& c, const void* q, const void* k, const void* v, const void* o, const void* d_o,
                         const float* lse, float* dq, float* dk, float* dv, Buffer& dq_part, Buffer& dk_part,
                         Buffer& dv_part) const {
    const int64_t N = base.seqlen_q, D = c.dim, Hq = base.heads_q, Hkv = base.heads_kv, row = Hkv * D;
    const int64_t own = c.L.group_rows[c.L.ctx_idx], nk = masks[combined].seqlen_k, fetched = nk - own;
    Buffer kall, vall;
    one_call_kv(c, k, v, kall, vall);
    Buffer acc_k(c.exec.allocator, fetched * row * sizeof(float)), acc_v(c.exec.allocator, fetched * row * sizeof(float));
    Buffer back_k(c.exec.allocator, cast_one.served * row * sizeof(float));
    Buffer back_v(c.exec.allocator, cast_one.served * row * sizeof(float));
    if (plans[combined] != nullptr) {
      auto T = [&](const void* p, int64_t rows, int64_t heads) {
        return thd_tensor(const_cast<void*>(p), c.dtype, rows, heads, D);
      };
      lca_bwd_args a{sizeof(lca_bwd_args), T(q, N, Hq), T(kall.data(), nk, Hkv), T(vall.data(), nk, Hkv), T(o, N, Hq),
                     T(d_o, N, Hq), lse_tensor(const_cast<float*>(lse), Hq, N), T(dq_part.data(), N, Hq),
                     T(dk_part.data(), nk, Hkv), T(dv_part.data(), nk, Hkv)};
      c.kernel.backward(plans[combined], a, c.exec);
      c.dev.copy(flat(dq_part.data(), c.dtype, N * Hq * D), flat(dq, LCA_DTYPE_F32, N * Hq * D), 1, 1, N * Hq * D);
      // The own rows' dK/dV convert into dk/dv; the fetched rows' into the buffers that go home.
      c.dev.copy(flat(dk_part.data(), c.dtype, own * row), flat(dk, LCA_DTYPE_F32, own * row), 1, 1, own * row);
      c.dev.copy(flat(dv_part.data(), c.dtype, own * row), flat(dv, LCA_DTYPE_F32, own * row), 1, 1, own * row);
      c.dev.copy(flat(advance(dk_part.data(), c.dtype, own * row), c.dtype, fetched * row),
                 flat(acc_k.data(), LCA_DTYPE_F32, fetched * row), 1, 1, fetched * row);
      c.dev.copy(flat(advance(dv_part.data(), c.dtype, own * row), c.dtype, fetched * row),
                 flat(acc_v.data(), LCA_DTYPE_F32, fetched * row), 1, 1, fetched * row);
    } else {
      c.dev.zero(dq, static_cast<size_t>(N * Hq * D) * sizeof(float));
      c.dev.zero(dk, static_cast<size_t>(own * row) * sizeof(float));
      c.dev.zero(dv, static_cast<size_t>(own * row) * sizeof(float));
      c.dev.zero(acc_k.data(), acc_k.bytes());
      c.dev.zero(acc_v.data(), acc_v.bytes());
    }
    c.lane.side_waits(c.exec.stream);
    reduce(c, cast_one, acc_k.as<float>(), acc_v.as<float>(), back_k.as<float>(), back_v.as<float>());
    c.lane.join(c.exec.stream);
    add_home(c, cast_one, back_k.as<float>(), back_v.as<float>(), dk, dv);
  }

  void alloc_stage_kv(const Ctx& c, std::vector<Buffer>& kb, std::vector<Buffer>& vb) const {
    const size_t row_bytes = c.L.hkv_l * c.dim * dtype_size(c.dtype);
    for (size_t s = 1; s < cast.size(); ++s) {
      kb[s] = Buffer(c.exec.allocator, cast[s].rows * row_bytes);
      vb[s] = Buffer(c.exec.allocator, cast[s].rows * row_bytes);
    }
  }

  // Stage s's KV moves on the lane: this group's segments out to those that take them, the
  // fetched ones into kb/vb in from_segs order, K and V a message run (message_runs). Marks kBlocks.
  // first_row: where in kb/vb the first fetched row lands.
  void fetch(const Ctx& c, const CastStage& st, const void* k, const void* v, void* kb, void* vb,
             int64_t first_row = 0) const {
    const int64_t row = c.L.hkv_l * c.dim;
    void* side = c.lane.stream();
    c.comm.group_start();
    for (size_t i = 0; i < st.to.size(); ++i)
      for (const MessageRun& m : message_runs(st.to_segs[i])) {
        c.comm.send(advance(k, c.dtype, m.offset * row), m.rows * row, c.dtype, st.to[i], side);
        c.comm.send(advance(v, c.dtype, m.offset * row), m.rows * row, c.dtype, st.to[i], side);
      }
    int64_t at = first_row;
    for (size_t i = 0; i < st.from.size(); ++i)
      for (const MessageRun& m : message_runs(st.from_segs[i])) {
        c.comm.recv(advance(kb, c.dtype, at * row), m.rows * row, c.dtype, st.from[i], side);
        c.comm.recv(advance(vb, c.dtype, at * row), m.rows * row, c.dtype, st.from[i], side);
        at += m.rows;
      }
    c.comm.group_end();
    c.lane.mark(kBlocks);
  }

  // Stage s's dK/dV partials (fp32, rows of the fetched buffer) go back to their owners, one
  // message per owner; the partials of this group's served segments arrive in back_k/back_v.
  void reduce(const Ctx& c, const CastStage& st, const float* acc_k, const float* acc_v, float* back_k,
              float* back_v) const {
    const int64_t row = c.L.hkv_l * c.dim;
    void* side = c.lane.stream();
    c.comm.group_start();
    int64_t at = 0;
    for (size_t i = 0; i < st.from.size(); ++i) {
      int64_t n = 0;
      for (const Segment& g : st.from_segs[i]) n += g.size();
      c.comm.send(acc_k + at * row, n * row, LCA_DTYPE_F32, st.from[i], side);
      c.comm.send(acc_v + at * row, n * row, LCA_DTYPE_F32, st.from[i], side);
      at += n;
    }
    at = 0;
    for (size_t i = 0; i < st.to.size(); ++i) {
      int64_t n = 0;
      for (const Segment& g : st.to_segs[i]) n += g.size();
      c.comm.recv(back_k + at * row, n * row, LCA_DTYPE_F32, st.to[i], side);
      c.comm.recv(back_v + at * row, n * row, LCA_DTYPE_F32, st.to[i], side);
      at += n;
    }
    c.comm.group_end();
    c.lane.mark(kGradients);
  }

  // The KV block in hand and the one arriving, double-buffered. On CUDA the transfer runs on the
  // lane: it starts once the exec stream has produced (or finished computing on) the buffers it
  // touches, and the exec stream waits for its arrival only when it moves on to that block.
  class KvRing {
   public:
    KvRing(const Ctx& c, const ContextStage& s, const void* k, const void* v) : c_(c), s_(s) {
      int64_t max_elems = 0;
      for (int g = 0; g < c.L.cp; ++g) max_elems = std::max(max_elems, c.kv_elems(g));
      const size_t bytes = max_elems * dtype_size(c.dtype);
      if (s.sched.block.size() > 1)
        for (auto& b : bufs_) b = Buffer(c.exec.allocator, bytes);
      cur_k_ = k;
      cur_v_ = v;
    }
    const void* k() const { return cur_k_; }
    const void* v() const { return cur_v_; }
    void post_next(size_t t) {
      if (t + 1 >= s_.sched.block.size()) return;
      nxt_ = (nxt_ + 2) % 4;
      // The block in hand is complete, and the pair refilled now was last computed on (and sent
      // from) two steps ago: both are behind everything the exec stream holds.
      c_.lane.side_waits(c_.exec.stream);
      void* side = c_.lane.stream();
      const Schedule& sc = s_.sched;
      c_.comm.group_start();
      c_.comm.send(cur_k_, c_.kv_elems(sc.block[t]), c_.dtype, sc.send_to[t], side);
      c_.comm.send(cur_v_, c_.kv_elems(sc.block[t]), c_.dtype, sc.send_to[t], side);
      c_.comm.recv(bufs_[nxt_].data(), c_.kv_elems(sc.block[t + 1]), c_.dtype, sc.recv_from[t], side);
      c_.comm.recv(bufs_[nxt_ + 1].data(), c_.kv_elems(sc.block[t + 1]), c_.dtype, sc.recv_from[t], side);
      c_.comm.group_end();
      c_.lane.mark(kBlocks);
      pending_ = true;
    }
    void advance() {
      if (!pending_) return;
      c_.lane.main_waits(kBlocks, c_.exec.stream);
      cur_k_ = bufs_[nxt_].data();
      cur_v_ = bufs_[nxt_ + 1].data();
      pending_ = false;
    }

   private:
    const Ctx& c_;
    const ContextStage& s_;
    Buffer bufs_[4];  // two (k, v) pairs: the one in hand and the one arriving
    int nxt_ = 2;
    bool pending_ = false;
    const void* cur_k_;
    const void* cur_v_;
  };

  // Every group's KV, in group order (an all-gather with uneven counts, as an all-to-all).
  void gather_kv(const Ctx& c, const void* k, const void* v, Buffer& kall, Buffer& vall) const {
    const int cp = c.L.cp;
    const size_t esz = dtype_size(c.dtype);
    std::vector<int64_t> sc(cp, c.kv_elems(c.L.ctx_idx)), sd(cp, 0), rc(cp), rd(cp, 0);
    for (int g = 0; g < cp; ++g) rc[g] = c.kv_elems(g), rd[g] = g ? rd[g - 1] + rc[g - 1] : 0;
    kall = Buffer(c.exec.allocator, (rd[cp - 1] + rc[cp - 1]) * esz);
    vall = Buffer(c.exec.allocator, (rd[cp - 1] + rc[cp - 1]) * esz);
    c.comm.all_to_all(k, sc.data(), sd.data(), kall.data(), rc.data(), rd.data(), c.dtype, c.exec.stream);
    c.comm.all_to_all(v, sc.data(), sd.data(), vall.data(), rc.data(), rd.data(), c.dtype, c.exec.stream);
  }

  // Each group's part of a gradient over all KV goes home, where the parts add up in fp32.
  void sum_back(const Ctx& c, const float* all, float* mine) const {
    const int cp = c.L.cp;
    const int64_t own = c.kv_elems(c.L.ctx_idx);
    std::vector<int64_t> sc(cp), sd(cp, 0), rc(cp, own), rd(cp);
    for (int g = 0; g < cp; ++g) sc[g] = c.kv_elems(g), sd[g] = g ? sd[g - 1] + sc[g - 1] : 0, rd[g] = g * own;
    Buffer parts(c.exec.allocator, cp * own * sizeof(float));
    c.comm.all_to_all(all, sc.data(), sd.data(), parts.data(), rc.data(), rd.data(), LCA_DTYPE_F32, c.exec.stream);
    c.dev.zero(mine, static_cast<size_t>(own) * sizeof(float));
    for (int g = 0; g < cp; ++g)
      c.dev.copy(flat(parts.as<float>() + g * own, LCA_DTYPE_F32, own), flat(mine, LCA_DTYPE_F32, own), 1, 1, own,
                 /*add=*/true);
  }
};

}  // namespace lca::cp
