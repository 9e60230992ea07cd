// Brute-force dense attention in fp64 for the cpu_reference tests: materialises the small
// Sq x Sk visibility matrix from lca::slice_contains and computes O, LSE, dQ, dK, dV directly.
// Also the hand-built slice masks the tests run over.
// Rule: only for small problems (it is O(Sq * Sk) in memory by design).
#pragma once

#include "harness.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace lca::test {

struct DenseForward {
  std::vector<double> o;    // {Sq, Hq, D} flat
  std::vector<double> lse;  // {Hq, Sq}
};

struct DenseBackward {
  std::vector<double> dq, dk, dv;  // THD flat
};

inline std::vector<char> visibility(const Problem& p) {
  std::vector<char> seen(static_cast<size_t>(p.seqlen_q * p.seqlen_k), 0);
  for (int64_t i = 0; i < p.seqlen_q; ++i)
    for (int64_t j = 0; j < p.seqlen_k; ++j)
      for (const auto& s : p.slices)
        if (slice_contains(s, i, j)) seen[i * p.seqlen_k + j] = 1;
  return seen;
}

// Scaled scores of head h, row i against every key (-inf where masked).
inline std::vector<double> dense_scores(const Problem& p, const std::vector<char>& seen,
                                        const Tensor& q, const Tensor& k, int64_t h, int64_t i) {
  const int64_t hk = h / (p.heads_q / p.heads_kv);
  std::vector<double> s(p.seqlen_k, -std::numeric_limits<double>::infinity());
  for (int64_t j = 0; j < p.seqlen_k; ++j) {
    if (!seen[i * p.seqlen_k + j]) continue;
    double acc = 0;
    for (int64_t d = 0; d < p.head_dim; ++d) acc += q.get(i, h, d) * k.get(j, hk, d);
    s[j] = static_cast<double>(p.softmax_scale) * acc;
  }
  return s;
}

inline DenseForward dense_forward(const Problem& p, const Tensor& q, const Tensor& k, const Tensor& v) {
  const auto seen = visibility(p);
  const int64_t D = p.head_dim, group = p.heads_q / p.heads_kv;
  DenseForward out{std::vector<double>(p.seqlen_q * p.heads_q * D, 0.0),
                   std::vector<double>(p.heads_q * p.seqlen_q, 0.0)};
  for (int64_t h = 0; h < p.heads_q; ++h) {
    for (int64_t i = 0; i < p.seqlen_q; ++i) {
      const auto s = dense_scores(p, seen, q, k, h, i);
      double m = -std::numeric_limits<double>::infinity();
      for (double x : s) m = std::max(m, x);
      double& lse = out.lse[h * p.seqlen_q + i];
      if (m == -std::numeric_limits<double>::infinity()) {
        lse = m;
        continue;
      }
      double l = 0;
      for (double x : s) l += std::exp(x - m);
      lse = m + std::log(l);
      for (int64_t j = 0; j < p.seqlen_k; ++j) {
        const double w = std::exp(s[j] - lse);
        if (w == 0) continue;
        for (int64_t d = 0; d < D; ++d) out.o[(i * p.heads_q + h) * D + d] += w * v.get(j, h / group, d);
      }
    }
  }
  return out;
}

inline DenseBackward dense_backward(const Problem& p, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& d_o) {
  const auto seen = visibility(p);
  const auto fwd = dense_forward(p, q, k, v);
  const int64_t D = p.head_dim, group = p.heads_q / p.heads_kv;
  const double scale = p.softmax_scale;
  DenseBackward g{std::vector<double>(p.seqlen_q * p.heads_q * D, 0.0),
                  std::vector<double>(p.seqlen_k * p.heads_kv * D, 0.0),
                  std::vector<double>(p.seqlen_k * p.heads_kv * D, 0.0)};
  for (int64_t h = 0; h < p.heads_q; ++h) {
    const int64_t hk = h / group;
    for (int64_t i = 0; i < p.seqlen_q; ++i) {
      const auto s = dense_scores(p, seen, q, k, h, i);
      const double lse = fwd.lse[h * p.seqlen_q + i];
      double delta = 0;  // rowsum(dO * O)
      for (int64_t d = 0; d < D; ++d) delta += d_o.get(i, h, d) * fwd.o[(i * p.heads_q + h) * D + d];
      for (int64_t j = 0; j < p.seqlen_k; ++j) {
        if (!seen[i * p.seqlen_k + j]) continue;
        const double prob = std::exp(s[j] - lse);
        double dp = 0;
        for (int64_t d = 0; d < D; ++d) dp += d_o.get(i, h, d) * v.get(j, hk, d);
        const double ds = prob * (dp - delta);
        for (int64_t d = 0; d < D; ++d) {
          g.dq[(i * p.heads_q + h) * D + d] += scale * ds * k.get(j, hk, d);
          g.dk[(j * p.heads_kv + hk) * D + d] += scale * ds * q.get(i, h, d);
          g.dv[(j * p.heads_kv + hk) * D + d] += prob * d_o.get(i, h, d);
        }
      }
    }
  }
  return g;
}

// ---- masks built by hand as slices (square, S x S) -----------------------------------------
struct NamedMask {
  std::string name;
  std::function<std::vector<lca_slice>(int64_t)> build;
};

// gtest prints the parameter by name instead of dumping its bytes.
inline void PrintTo(const NamedMask& mask, std::ostream* os) { *os << mask.name; }

inline lca_slice slice(int64_t q0, int64_t q1, int64_t k0, int64_t k1, int32_t type) {
  return lca_slice{q0, q1, k0, k1, type, 0};
}

inline std::vector<NamedMask> hand_masks() {
  return {
      {"full", [](int64_t S) { return std::vector{slice(0, S, 0, S, LCA_SLICE_FULL)}; }},
      {"causal", [](int64_t S) { return std::vector{slice(0, S, 0, S, LCA_SLICE_CAUSAL)}; }},
      {"inv_causal", [](int64_t S) { return std::vector{slice(0, S, 0, S, LCA_SLICE_INV_CAUSAL)}; }},
      // Three documents of uneven lengths: causal, full, causal.
      {"documents", [](int64_t S) {
         const int64_t a = S / 4, b = S * 2 / 3;
         return std::vector{slice(0, a, 0, a, LCA_SLICE_CAUSAL), slice(a, b, a, b, LCA_SLICE_FULL),
                            slice(b, S, b, S, LCA_SLICE_CAUSAL)};
       }},
      // Causal sliding window of w keys: a CAUSAL square for the first w rows, then one
      // BI_CAUSAL band (query q sees keys q-w+1 .. q).
      {"sliding_window", [](int64_t S) {
         const int64_t w = 9;
         return std::vector{slice(0, w, 0, w, LCA_SLICE_CAUSAL), slice(w, S, 1, S, LCA_SLICE_BI_CAUSAL)};
       }},
      // Rows [5, 12) and the last rows see nothing; a CAUSAL slice wider than tall and one
      // taller than wide (whose top rows see nothing).
      {"empty_rows", [](int64_t S) {
         return std::vector{slice(0, 5, 0, 11, LCA_SLICE_CAUSAL), slice(12, S - 4, 3, 9, LCA_SLICE_CAUSAL),
                            slice(12, S - 4, 20, S, LCA_SLICE_FULL)};
       }},
      // Slices sharing rows: global keys, a causal band, a block in the middle; listed out of
      // q order on purpose.
      {"shared_rows", [](int64_t S) {
         return std::vector{slice(4, S, 8, S, LCA_SLICE_CAUSAL), slice(0, S, 0, 4, LCA_SLICE_FULL),
                            slice(0, 4, 4, 8, LCA_SLICE_INV_CAUSAL), slice(4, 8, 4, 8, LCA_SLICE_CAUSAL),
                            slice(8, S, 4, 8, LCA_SLICE_FULL)};
       }},
      {"no_slices", [](int64_t) { return std::vector<lca_slice>{}; }},
  };
}

}  // namespace lca::test
