// Clipping a slice to a block pair keeps exactly the cells of slice_contains(), for every type.
#include "slice_clip.hpp"

#include <lca/types.hpp>

#include <gtest/gtest.h>

#include <random>

TEST(SliceClip, MatchesThePredicateCellByCell) {
  std::mt19937_64 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 3000; ++trial) {
    lca_slice s{};
    s.q_begin = pick(0, 20);
    s.q_end = s.q_begin + pick(0, 20);
    s.k_begin = pick(0, 20);
    s.k_end = s.k_begin + pick(0, 20);
    s.type = static_cast<int32_t>(pick(0, 3));
    const int64_t qa = pick(0, 40), qb = qa + pick(0, 20), ka = pick(0, 40), kb = ka + pick(0, 20);
    std::vector<lca_slice> out;
    lca::cp::clip_slice(s, qa, qb, ka, kb, out);
    for (int64_t q = 0; q < 62; ++q)
      for (int64_t k = 0; k < 62; ++k) {
        const bool want = q >= qa && q < qb && k >= ka && k < kb && lca::slice_contains(s, q, k);
        int hits = 0;
        for (const auto& p : out) hits += lca::slice_contains(p, q, k) ? 1 : 0;
        ASSERT_EQ(hits, want ? 1 : 0) << "trial " << trial << " type " << s.type << " cell " << q << "," << k;
      }
  }
}
