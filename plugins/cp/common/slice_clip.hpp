// Clipping a global slice mask to the block pair a rank computes: the slices that cover
// (q range x k range), re-based to the rank's local buffers. Used by every CP strategy plugin.
// Rule: a clipped piece covers exactly the cells lca::slice_contains() says the global slice
// covers inside the block pair; pieces of one mask never overlap.
#pragma once

#include <lca/abi.h>
#include <lca/types.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace lca::cp {

// A run of global tokens [begin, end) stored at local rows [offset, offset + end - begin).
struct Segment {
  int64_t begin = 0, end = 0, offset = 0;
  int64_t size() const { return end - begin; }
};
using Segments = std::vector<Segment>;

// No bound on one side of a diagonal band; large, but far from int64 overflow.
inline constexpr int64_t kUnbounded = int64_t(1) << 61;

// The cells of a slice are the rectangle intersected with the band lo <= k - q <= hi:
//   CAUSAL: k - q <= k_end - q_end, INV_CAUSAL: k - q >= k_begin - q_begin, BI_CAUSAL: both.
inline void slice_band(const lca_slice& s, int64_t* lo, int64_t* hi) {
  *lo = -kUnbounded;
  *hi = kUnbounded;
  if (s.type == LCA_SLICE_CAUSAL || s.type == LCA_SLICE_BI_CAUSAL) *hi = s.k_end - s.q_end;
  if (s.type == LCA_SLICE_INV_CAUSAL || s.type == LCA_SLICE_BI_CAUSAL) *lo = s.k_begin - s.q_begin;
}

// Emits slices covering {(q, k) in [q0,q1) x [k0,k1) : lo <= k - q <= hi}. Rows split where the
// band's edges start or stop cutting the rectangle; each piece is one slice type whose
// bottom-right (or top-left) alignment reproduces the band edge exactly. At most three pieces.
inline void emit_band(int64_t q0, int64_t q1, int64_t k0, int64_t k1, int64_t lo, int64_t hi,
                      std::vector<lca_slice>& out) {
  if (lo > hi) return;
  // Tighten to the rows and columns that hold at least one cell.
  const int64_t Q0 = std::max(q0, k0 - hi), Q1 = std::min(q1, k1 - lo);
  if (Q0 >= Q1) return;
  const int64_t K0 = std::max(k0, Q0 + lo), K1 = std::min(k1, Q1 + hi);
  if (K0 >= K1) return;
  // Rows q >= ql start at q + lo (the lower edge cuts); rows q < qh end at q + hi.
  const int64_t ql = std::clamp(K0 - lo, Q0, Q1), qh = std::clamp(K1 - hi, Q0, Q1);
  int64_t cuts[4] = {Q0, std::min(ql, qh), std::max(ql, qh), Q1};
  for (int c = 0; c < 3; ++c) {
    const int64_t r0 = cuts[c], r1 = cuts[c + 1];
    if (r0 >= r1) continue;
    const bool lower = r0 >= ql, upper = r1 <= qh;
    lca_slice s{};
    s.q_begin = r0;
    s.q_end = r1;
    s.k_begin = lower ? r0 + lo : K0;
    s.k_end = upper ? r1 + hi : K1;
    s.type = lower && upper ? LCA_SLICE_BI_CAUSAL
             : lower        ? LCA_SLICE_INV_CAUSAL
             : upper        ? LCA_SLICE_CAUSAL
                            : LCA_SLICE_FULL;
    if (s.k_begin < s.k_end) out.push_back(s);
  }
}

// Appends the part of global slice s inside [qa,qb) x [ka,kb), in global coordinates.
inline void clip_slice(const lca_slice& s, int64_t qa, int64_t qb, int64_t ka, int64_t kb,
                       std::vector<lca_slice>& out) {
  int64_t lo, hi;
  slice_band(s, &lo, &hi);
  emit_band(std::max(s.q_begin, qa), std::min(s.q_end, qb), std::max(s.k_begin, ka),
            std::min(s.k_end, kb), lo, hi, out);
}

// The mask a kernel sees for local queries q_segs against local keys k_segs.
struct LocalMask {
  std::vector<lca_slice> slices;
  int64_t seqlen_q = 0, seqlen_k = 0;
  bool empty() const { return slices.empty() || seqlen_q == 0 || seqlen_k == 0; }
  lca_mask view() const {
    return lca_mask{sizeof(lca_mask), seqlen_q, seqlen_k, static_cast<int64_t>(slices.size()),
                    slices.data(), nullptr, 0, nullptr};
  }
};

// The runs of local query rows that hold a cell of `m`, ascending and merged. A superset would be
// harmless to its users (a row without cells has LSE -inf and merges or adds as nothing); rows
// with cells are never left out.
inline std::vector<lca_token_range> rows_with_cells(const LocalMask& m) {
  std::vector<lca_token_range> runs;
  for (const lca_slice& s : m.slices) {
    if (slice_area(s) <= 0) continue;
    int64_t lo, hi;
    slice_band(s, &lo, &hi);
    // Row q has a cell when its band [q + lo, q + hi] meets [k_begin, k_end).
    const int64_t a = hi == kUnbounded ? s.q_begin : std::max(s.q_begin, s.k_begin - hi);
    const int64_t b = lo == -kUnbounded ? s.q_end : std::min(s.q_end, s.k_end - lo);
    if (a < b) runs.push_back({a, b});
  }
  std::sort(runs.begin(), runs.end(), [](const auto& x, const auto& y) { return x.begin < y.begin; });
  std::vector<lca_token_range> out;
  for (const auto& r : runs)
    if (!out.empty() && r.begin <= out.back().end) out.back().end = std::max(out.back().end, r.end);
    else out.push_back(r);
  return out;
}

inline int64_t total_rows(const Segments& segs) {
  int64_t n = 0;
  for (const auto& s : segs) n = std::max(n, s.offset + s.size());
  return n;
}

inline LocalMask clip_mask(const std::vector<lca_slice>& global, const Segments& q_segs,
                           const Segments& k_segs) {
  LocalMask m;
  m.seqlen_q = total_rows(q_segs);
  m.seqlen_k = total_rows(k_segs);
  std::vector<lca_slice> pieces;
  for (const Segment& q : q_segs) {
    for (const Segment& k : k_segs) {
      if (q.size() <= 0 || k.size() <= 0) continue;
      for (const lca_slice& s : global) {
        if (s.q_end <= q.begin || s.q_begin >= q.end || s.k_end <= k.begin || s.k_begin >= k.end)
          continue;
        pieces.clear();
        clip_slice(s, q.begin, q.end, k.begin, k.end, pieces);
        for (lca_slice p : pieces) {  // translation keeps each piece's alignment
          p.q_begin += q.offset - q.begin;
          p.q_end += q.offset - q.begin;
          p.k_begin += k.offset - k.begin;
          p.k_end += k.offset - k.begin;
          m.slices.push_back(p);
        }
      }
    }
  }
  return m;
}

}  // namespace lca::cp
