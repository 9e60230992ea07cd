// slice_row_range / slice_col_range agree with slice_contains (the definition of the slice
// types) cell by cell on random slices of every type, including empty and degenerate ones;
// build_range_lists covers each row's visible cells exactly once; validate_mask refuses each
// kind of malformed mask with a message that names it.
#include "random_slices.hpp"

#include <lca/slice_ranges.hpp>
#include <lca/types.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace lca::test {
namespace {

lca_mask view(const std::vector<lca_slice>& slices, int64_t sq, int64_t sk) {
  return lca_mask{sizeof(lca_mask), sq, sk, static_cast<int64_t>(slices.size()), slices.data(), nullptr, 0, nullptr};
}

// A slice of `type` at a random place inside [0, extent)^2, lengths 0.. included (tall, wide,
// square, empty on either axis).
lca_slice random_slice(std::mt19937_64& rng, int32_t type, int64_t extent) {
  std::uniform_int_distribution<int64_t> pos(0, extent);
  int64_t q0 = pos(rng), q1 = pos(rng), k0 = pos(rng), k1 = pos(rng);
  if (q1 < q0) std::swap(q0, q1);
  if (k1 < k0) std::swap(k0, k1);
  return lca_slice{q0, q1, k0, k1, type, 0};
}

// Each range holds exactly the cells slice_contains accepts, on a grid one wider than the
// slice's extent on every side (rows and columns outside the slice get an empty range).
void expect_ranges_match(const lca_slice& s, int64_t extent) {
  const std::string where = std::string(slice_type_name(s.type)) + " [" + std::to_string(s.q_begin) + "," +
                            std::to_string(s.q_end) + ") x [" + std::to_string(s.k_begin) + "," +
                            std::to_string(s.k_end) + ")";
  for (int64_t q = -1; q <= extent; ++q) {
    int64_t first, last;
    slice_row_range(s, q, &first, &last);
    for (int64_t k = -1; k <= extent; ++k)
      ASSERT_EQ(k >= first && k < last, slice_contains(s, q, k)) << where << " row " << q << " key " << k;
  }
  for (int64_t k = -1; k <= extent; ++k) {
    int64_t first, last;
    slice_col_range(s, k, &first, &last);
    for (int64_t q = -1; q <= extent; ++q)
      ASSERT_EQ(q >= first && q < last, slice_contains(s, q, k)) << where << " key " << k << " row " << q;
  }
}

TEST(SliceRanges, RowAndColumnRangesMatchSliceContainsOnRandomSlices) {
  std::mt19937_64 rng(20260101);
  for (int32_t type = LCA_SLICE_FULL; type <= LCA_SLICE_BI_CAUSAL; ++type)
    for (int trial = 0; trial < 200; ++trial) {
      ASSERT_NO_FATAL_FAILURE(expect_ranges_match(random_slice(rng, type, 24), 24));
    }
}

TEST(SliceRanges, RowAndColumnRangesMatchSliceContainsOnRandomMasks) {
  std::mt19937_64 rng(7);
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{37, 37}, {29, 53}, {53, 29}, {1, 17}}) {
    for (const lca_slice& s : random_slices(rng, sq, sk))
      ASSERT_NO_FATAL_FAILURE(expect_ranges_match(s, std::max(sq, sk)));
  }
}

TEST(RangeLists, CoverEachVisibleCellExactlyOnceBothWays) {
  std::mt19937_64 rng(11);
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{64, 64}, {41, 90}, {90, 41}}) {
    const std::vector<lca_slice> slices = random_slices(rng, sq, sk);
    const lca_mask m = view(slices, sq, sk);
    ASSERT_NO_THROW(validate_mask(m, sq, sk));
    const std::vector<char> truth = dense_truth(m);
    for (bool by_query : {true, false}) {
      const RangeLists lists = build_range_lists(m, by_query);
      const int64_t rows = by_query ? sq : sk, cols = by_query ? sk : sq;
      ASSERT_EQ(static_cast<int64_t>(lists.offsets.size()), rows + 1);
      ASSERT_EQ(static_cast<int64_t>(lists.ranges.size()), 2 * lists.offsets[rows]);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<int> seen(static_cast<size_t>(cols), 0);
        for (int64_t e = lists.offsets[r]; e < lists.offsets[r + 1]; ++e) {
          ASSERT_LT(lists.ranges[2 * e], lists.ranges[2 * e + 1]) << "empty ranges are left out";
          for (int64_t x = lists.ranges[2 * e]; x < lists.ranges[2 * e + 1]; ++x) seen[x] += 1;
        }
        for (int64_t x = 0; x < cols; ++x) {
          const char want = by_query ? truth[r * sk + x] : truth[x * sk + r];
          ASSERT_EQ(seen[x], want ? 1 : 0) << (by_query ? "row " : "column ") << r << " at " << x;
        }
      }
    }
  }
}

TEST(RangeLists, EmptyMaskHasNoRanges) {
  const lca_mask m = view({}, 5, 3);
  const RangeLists rows = build_range_lists(m, true), cols = build_range_lists(m, false);
  EXPECT_EQ(rows.offsets, std::vector<int64_t>(6, 0));
  EXPECT_EQ(cols.offsets, std::vector<int64_t>(4, 0));
  EXPECT_TRUE(rows.ranges.empty());
  EXPECT_TRUE(cols.ranges.empty());
}

// validate_mask's refusal as (status, message); status LCA_OK when it accepts.
std::pair<lca_status, std::string> refusal(const lca_mask& m, int64_t sq, int64_t sk) {
  try {
    validate_mask(m, sq, sk);
    return {LCA_OK, ""};
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
}

TEST(ValidateMask, RefusesEachMalformedMaskNamingTheFault) {
  std::vector<lca_slice> ok{{0, 16, 0, 16, LCA_SLICE_CAUSAL, 0}};
  EXPECT_EQ(refusal(view(ok, 16, 16), 16, 16).first, LCA_OK);
  const auto expect = [](const std::pair<lca_status, std::string>& got, const std::string& fragment) {
    EXPECT_EQ(got.first, LCA_ERR_INVALID_ARGUMENT) << got.second;
    EXPECT_NE(got.second.find(fragment), std::string::npos) << got.second;
  };
  expect(refusal(view(ok, 16, 16), 16, 17), "mask is 16 x 16 but the problem is 16 x 17");
  lca_mask null_slices = view(ok, 16, 16);
  null_slices.slices = nullptr;
  expect(refusal(null_slices, 16, 16), "null slices");
  lca_mask negative = view(ok, 16, 16);
  negative.num_slices = -1;
  expect(refusal(negative, 16, 16), "negative slice count");
  const std::vector<lca_slice> past_k{{0, 16, 4, 20, LCA_SLICE_FULL, 0}};
  expect(refusal(view(past_k, 16, 16), 16, 16), "slice 0 [0,16) x [4,20) lies outside the mask");
  const std::vector<lca_slice> reversed{ok[0], {9, 3, 0, 16, LCA_SLICE_FULL, 0}};
  expect(refusal(view(reversed, 16, 16), 16, 16), "slice 1 [9,3) x [0,16) lies outside the mask");
  const std::vector<lca_slice> negative_begin{{-1, 4, 0, 16, LCA_SLICE_FULL, 0}};
  expect(refusal(view(negative_begin, 16, 16), 16, 16), "lies outside the mask");
  const std::vector<lca_slice> unknown{{0, 16, 0, 16, 7, 0}};
  expect(refusal(view(unknown, 16, 16), 16, 16), "has unknown type 7");
  const std::vector<lca_slice> below{{0, 16, 0, 16, -1, 0}};
  expect(refusal(view(below, 16, 16), 16, 16), "has unknown type -1");
  const std::vector<lca_slice> empty{{4, 4, 0, 16, LCA_SLICE_FULL, 0}};
  EXPECT_EQ(refusal(view(empty, 16, 16), 16, 16).first, LCA_OK) << "an empty slice is allowed";
}

}  // namespace
}  // namespace lca::test
