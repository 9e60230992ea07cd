// The context-parallel stage inside one head share: the local queries of a context group
// against every group's KV, by ring (send/recv of KV blocks, dK/dV travelling with them) or by
// all-gather (whole KV, dK/dV summed back with an all-to-all). Partial outputs merge through
// LSE in fp32. Used by the engine after the Ulysses exchange.
// Rule: kernel plans are made in plan() for every block pair and released with the plan.
#pragma once

#include "buffers.hpp"
#include "layout.hpp"
#include "lse_merge.hpp"
#include "schedule.hpp"
#include "slice_clip.hpp"

#include <lca/cp_strategy.hpp>

#include <algorithm>
#include <vector>

namespace lca::cp {

enum class ContextMode { ring, allgather };

struct ContextStage {
  ContextMode mode = ContextMode::ring;
  Schedule sched;
  std::vector<LocalMask> masks;   // per ring step, or one (all-gather)
  std::vector<lca_plan*> plans;   // nullptr where the block pair has no cell
  lca_problem base{};             // the local problem, seqlen_k set per block

  void prepare(const Layout& L, const lca_problem& global, const std::vector<lca_slice>& slices,
               ContextMode m, int window, const KernelRef& kernel, const lca_exec& exec) {
    mode = m;
    base = global;
    base.heads_q = L.hq_l;
    base.heads_kv = L.hkv_l;
    base.seqlen_q = base.seqlen_k = L.group_rows[L.ctx_idx];
    const Segments& mine = L.group_segs[L.ctx_idx];
    if (mode == ContextMode::ring) {
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
    int64_t kv_elems(int g) const { return L.group_rows[g] * L.hkv_l * dim; }
    int64_t dim;
    int32_t dtype;
  };

  // q, k, v packed in the problem dtype -> o [N, hq_l, D] and lse [hq_l, N], fp32.
  void forward(const Ctx& c, const void* q, const void* k, const void* v, float* o, float* lse) const {
    const int64_t N = base.seqlen_q, D = c.dim;
    const size_t esz = dtype_size(c.dtype);
    LseMerge merge(o, lse, N, base.heads_q, D);
    Buffer o_part(c.exec.allocator, N * base.heads_q * D * esz);
    Buffer lse_part(c.exec.allocator, N * base.heads_q * sizeof(float));
    auto run = [&](size_t step, const void* kb, const void* vb) {
      if (plans[step] == nullptr) return;
      const int64_t nk = masks[step].seqlen_k;
      lca_fwd_args a{sizeof(lca_fwd_args), thd_tensor(const_cast<void*>(q), c.dtype, N, base.heads_q, D),
                     thd_tensor(const_cast<void*>(kb), c.dtype, nk, base.heads_kv, D),
                     thd_tensor(const_cast<void*>(vb), c.dtype, nk, base.heads_kv, D),
                     thd_tensor(o_part.data(), c.dtype, N, base.heads_q, D),
                     lse_tensor(lse_part.as<float>(), base.heads_q, N)};
      c.kernel.forward(plans[step], a, c.exec);
      merge.add(o_part.data(), c.dtype, lse_part.as<float>());
    };
    if (mode == ContextMode::allgather) {
      Buffer kall, vall;
      gather_kv(c, k, v, kall, vall);
      run(0, kall.data(), vall.data());
      return;
    }
    KvRing ring(c, *this, k, v);
    for (size_t t = 0; t < sched.block.size(); ++t) {
      ring.post_next(t);  // on GPU this overlaps the compute below; on CPU it completes first
      run(t, ring.k(), ring.v());
      ring.advance();
    }
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
    std::fill(dq, dq + N * Hq * D, 0.0f);
    // Adds the block pair's dQ into dq and its dK/dV into (dk_acc, dv_acc); false when empty.
    auto run = [&](size_t step, const void* kb, const void* vb, float* dk_acc, float* dv_acc) {
      if (plans[step] == nullptr) return;
      const int64_t nk = masks[step].seqlen_k;
      auto T = [&](const void* p, int64_t rows, int64_t heads) {
        return thd_tensor(const_cast<void*>(p), c.dtype, rows, heads, D);
      };
      lca_bwd_args a{sizeof(lca_bwd_args), T(q, N, Hq), T(kb, nk, Hkv), T(vb, nk, Hkv), T(o, N, Hq),
                     T(d_o, N, Hq), lse_tensor(const_cast<float*>(lse), Hq, N), T(dq_part.data(), N, Hq),
                     T(dk_part.data(), nk, Hkv), T(dv_part.data(), nk, Hkv)};
      c.kernel.backward(plans[step], a, c.exec);
      add_into(dq, dq_part.data(), c.dtype, N * Hq * D);
      add_into(dk_acc, dk_part.data(), c.dtype, nk * Hkv * D);
      add_into(dv_acc, dv_part.data(), c.dtype, nk * Hkv * D);
    };
    if (mode == ContextMode::allgather) {
      Buffer kall, vall;
      gather_kv(c, k, v, kall, vall);
      const int64_t total = masks[0].seqlen_k * Hkv * D;
      Buffer dk_all(c.exec.allocator, total * sizeof(float)), dv_all(c.exec.allocator, total * sizeof(float));
      dk_all.zero();
      dv_all.zero();
      run(0, kall.data(), vall.data(), dk_all.as<float>(), dv_all.as<float>());
      sum_back(c, dk_all.as<float>(), dk);
      sum_back(c, dv_all.as<float>(), dv);
      return;
    }
    KvRing ring(c, *this, k, v);
    const int64_t max_elems = max_k * Hkv * D;
    Buffer acc[2][2] = {{Buffer(c.exec.allocator, max_elems * 4), Buffer(c.exec.allocator, max_elems * 4)},
                        {Buffer(c.exec.allocator, max_elems * 4), Buffer(c.exec.allocator, max_elems * 4)}};
    int cur = 0;
    acc[cur][0].zero();
    acc[cur][1].zero();
    for (size_t t = 0; t < sched.block.size(); ++t) {
      ring.post_next(t);
      run(t, ring.k(), ring.v(), acc[cur][0].as<float>(), acc[cur][1].as<float>());
      ring.advance();
      if (t + 1 == sched.block.size()) break;
      // The gradient travels with its block, one step behind the KV.
      c.comm.group_start();
      for (int x = 0; x < 2; ++x) {
        c.comm.send(acc[cur][x].data(), c.kv_elems(sched.block[t]), LCA_DTYPE_F32, sched.send_to[t], c.exec.stream);
        c.comm.recv(acc[1 - cur][x].data(), c.kv_elems(sched.block[t + 1]), LCA_DTYPE_F32, sched.recv_from[t], c.exec.stream);
      }
      c.comm.group_end();
      cur = 1 - cur;
    }
    const int64_t own = c.kv_elems(L_ctx(c));
    if (sched.return_to == L_ctx(c)) {
      std::copy(acc[cur][0].as<float>(), acc[cur][0].as<float>() + own, dk);
      std::copy(acc[cur][1].as<float>(), acc[cur][1].as<float>() + own, dv);
      return;
    }
    c.comm.group_start();
    c.comm.send(acc[cur][0].data(), c.kv_elems(sched.block.back()), LCA_DTYPE_F32, sched.return_to, c.exec.stream);
    c.comm.send(acc[cur][1].data(), c.kv_elems(sched.block.back()), LCA_DTYPE_F32, sched.return_to, c.exec.stream);
    c.comm.recv(dk, own, LCA_DTYPE_F32, sched.return_from, c.exec.stream);
    c.comm.recv(dv, own, LCA_DTYPE_F32, sched.return_from, c.exec.stream);
    c.comm.group_end();
  }

 private:
  static int L_ctx(const Ctx& c) { return c.L.ctx_idx; }

  // The KV block in hand and the one arriving, double-buffered.
  class KvRing {
   public:
    KvRing(const Ctx& c, const ContextStage& s, const void* k, const void* v) : c_(c), s_(s) {
      int64_t max_elems = 0;
      for (int g = 0; g < c.L.cp; ++g) max_elems = std::max(max_elems, c.kv_elems(g));
      const size_t bytes = max_elems * dtype_size(c.dtype);
      for (auto& b : bufs_) b = Buffer(c.exec.allocator, bytes);
      cur_k_ = k;
      cur_v_ = v;
    }
    const void* k() const { return cur_k_; }
    const void* v() const { return cur_v_; }
    void post_next(size_t t) {
      if (t + 1 >= s_.sched.block.size()) return;
      nxt_ = (nxt_ + 2) % 4;
      c_.comm.group_start();
      c_.comm.send(cur_k_, c_.kv_elems(s_.sched.block[t]), c_.dtype, s_.sched.send_to[t], c_.exec.stream);
      c_.comm.send(cur_v_, c_.kv_elems(s_.sched.block[t]), c_.dtype, s_.sched.send_to[t], c_.exec.stream);
      c_.comm.recv(bufs_[nxt_].data(), c_.kv_elems(s_.sched.block[t + 1]), c_.dtype, s_.sched.recv_from[t], c_.exec.stream);
      c_.comm.recv(bufs_[nxt_ + 1].data(), c_.kv_elems(s_.sched.block[t + 1]), c_.dtype, s_.sched.recv_from[t], c_.exec.stream);
      c_.comm.group_end();
      pending_ = true;
    }
    void advance() {
      if (!pending_) return;
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
    std::fill(mine, mine + own, 0.0f);
    for (int g = 0; g < cp; ++g) add_into(mine, parts.as<float>() + g * own, LCA_DTYPE_F32, own);
  }
};

}  // namespace lca::cp
