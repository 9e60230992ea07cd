// Test support for the kernels' mask translations (tile schedules, block masks): random slice
// masks, and the dense truth of a slice mask to check them against cell by cell. Random masks:
// disjoint rectangles on a random grid of row and column bands, each of a random slice type or
// absent, plus one empty slice: rows see several slices and tiles mix types. Also a question
// followed by documents, whose backward has one long walk.
// Rule: the same rng state gives the same mask.
#pragma once

#include <lca/abi.h>
#include <lca/types.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace lca::test {

inline std::vector<lca_slice> random_slices(std::mt19937_64& rng, int64_t sq, int64_t sk, int cuts_per_axis = 6) {
  auto cuts = [&](int64_t n) {
    std::vector<int64_t> c{0, n};
    std::uniform_int_distribution<int64_t> pos(0, n);
    for (int i = 0; i < cuts_per_axis; ++i) c.push_back(pos(rng));
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    return c;
  };
  const auto rows = cuts(sq), cols = cuts(sk);
  std::uniform_int_distribution<int> type(-1, 3);
  std::vector<lca_slice> out;
  for (size_t i = 0; i + 1 < rows.size(); ++i)
    for (size_t j = 0; j + 1 < cols.size(); ++j)
      if (const int t = type(rng); t >= 0) out.push_back(lca_slice{rows[i], rows[i + 1], cols[j], cols[j + 1], t, 0});
  out.push_back(lca_slice{sq / 2, sq / 2, 0, sk, LCA_SLICE_FULL, 0});  // empty
  return out;
}

// A question of `question` tokens, causal, then documents of `doc` tokens (the last one shorter),
// each causal on itself and seeing the whole question: the question's key tiles are seen by every
// query, the others by one document's. At 8K (question 128, documents 1024) the backward's walk of
// the question's key tile is 16x the others' mean: the one that split_long_walks splits.
inline std::vector<lca_slice> question_then_documents(int64_t s, int64_t question, int64_t doc) {
  std::vector<lca_slice> out{lca_slice{0, question, 0, question, LCA_SLICE_CAUSAL, 0}};
  for (int64_t d = question; d < s; d += doc) {
    const int64_t end = std::min(s, d + doc);
    out.push_back(lca_slice{d, end, 0, question, LCA_SLICE_FULL, 0});
    out.push_back(lca_slice{d, end, d, end, LCA_SLICE_CAUSAL, 0});
  }
  return out;
}

// Row-major (q, k) visibility of a slice mask, from slice_contains.
inline std::vector<char> dense_truth(const lca_mask& m) {
  std::vector<char> t(static_cast<size_t>(m.seqlen_q * m.seqlen_k), 0);
  for (int64_t i = 0; i < m.num_slices; ++i) {
    const lca_slice& s = m.slices[i];
    for (int64_t q = s.q_begin; q < s.q_end; ++q)
      for (int64_t k = s.k_begin; k < s.k_end; ++k)
        if (lca::slice_contains(s, q, k)) t[q * m.seqlen_k + k] = 1;
  }
  return t;
}

}  // namespace lca::test
