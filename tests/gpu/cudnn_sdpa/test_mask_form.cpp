// The cudnn_sdpa mask recogniser on the CPU: each supported pattern gives the band it is, for any
// slicing of the same cells; anything else is refused with LCA_ERR_UNSUPPORTED.
#include "masks.hpp"

#include "plugins/kernels/cudnn_sdpa/mask_form.hpp"

#include <lca/error.hpp>

#include <gtest/gtest.h>

#include <cstdlib>

namespace lca::test {
namespace {

using lca_cudnn_sdpa::MaskForm;
using lca_cudnn_sdpa::recognise;

MaskForm of(const TestMask& m) {
  const lca_mask view = m.view();
  return recognise(view);
}

lca_status refusal(const TestMask& m) {
  try {
    of(m);
  } catch (const lca::Error& e) {
    return e.status();
  }
  return LCA_OK;
}

TEST(MaskForm, FullAndCausal) {
  const MaskForm full = of(full_mask(97));
  EXPECT_EQ(full.left, -1);
  EXPECT_EQ(full.right, -1);
  EXPECT_FALSE(full.ragged());
  const MaskForm causal = of(causal_mask(97));
  EXPECT_EQ(causal.left, -1);
  EXPECT_EQ(causal.right, 0);
  EXPECT_EQ(causal.describe(), "causal");
}

TEST(MaskForm, Documents) {
  const std::vector<int64_t> lens{31, 1, 64, 7};
  const MaskForm full = of(document_mask(lens, false));
  EXPECT_TRUE(full.ragged());
  EXPECT_EQ(full.num_docs(), 4);
  EXPECT_EQ(full.max_doc_len, 64);
  EXPECT_EQ(full.left, -1);
  EXPECT_EQ(full.right, -1);
  const MaskForm causal = of(document_mask(lens, true));
  EXPECT_EQ(causal.right, 0);
  EXPECT_EQ(causal.left, -1);
  EXPECT_EQ(causal.doc_offsets, offsets_of(lens));
}

TEST(MaskForm, SlidingWindows) {
  for (int64_t w : {1, 5, 37}) {
    const MaskForm both = of(sliding_window_mask(203, w));
    EXPECT_EQ(both.left, w);
    EXPECT_EQ(both.right, w);
    const MaskForm causal = of(sliding_window_causal_mask(203, w));
    EXPECT_EQ(causal.left, w);
    EXPECT_EQ(causal.right, 0);
    const MaskForm docs = of(sliding_window_document_mask({50, 3, 100, 50}, w));
    EXPECT_TRUE(docs.ragged());
    EXPECT_EQ(docs.left, w);
    EXPECT_EQ(docs.right, w);
  }
  // A window as wide as the sequence is the full mask.
  const MaskForm wide = of(sliding_window_document_mask({80}, 200));
  EXPECT_EQ(wide.left, -1);
  EXPECT_EQ(wide.right, -1);
}

TEST(MaskForm, SlicingDoesNotMatter) {
  // The causal mask as one FULL slice a row.
  TestMask rows{"rows", 64, {}, {}};
  for (int64_t q = 0; q < 64; ++q) rows.slices.push_back(slice(q, q + 1, 0, q + 1, LCA_SLICE_FULL));
  const MaskForm f = of(rows);
  EXPECT_EQ(f.right, 0);
  EXPECT_EQ(f.left, -1);
}

TEST(MaskForm, RefusesWhatIsNotABand) {
  EXPECT_EQ(refusal(prefix_lm_mask(128, 32)), LCA_ERR_UNSUPPORTED);
  EXPECT_EQ(refusal(holes_mask(128, 16)), LCA_ERR_UNSUPPORTED);
  TestMask empty_row = causal_mask(16);
  empty_row.slices[0].q_begin = 1;  // row 0 sees nothing
  EXPECT_EQ(refusal(empty_row), LCA_ERR_UNSUPPORTED);
  // Documents whose offsets disagree with the cells.
  TestMask lying = document_mask({10, 20}, false);
  lying.docs = {0, 15, 30};
  EXPECT_EQ(refusal(lying), LCA_ERR_UNSUPPORTED);
  // A slice outside the mask is malformed, not merely unsupported.
  TestMask outside = full_mask(16);
  outside.slices[0].k_end = 17;
  EXPECT_EQ(refusal(outside), LCA_ERR_INVALID_ARGUMENT);
}

TEST(MaskForm, TestMasksMatchTheirDefinitions) {
  const int64_t w = 5;
  const TestMask sw = sliding_window_mask(40, w), swc = sliding_window_causal_mask(40, w);
  for (int64_t q = 0; q < 40; ++q)
    for (int64_t k = 0; k < 40; ++k) {
      EXPECT_EQ(sw.sees(q, k), std::abs(q - k) <= w) << q << "," << k;
      EXPECT_EQ(swc.sees(q, k), q - k >= 0 && q - k <= w) << q << "," << k;
    }
}

}  // namespace
}  // namespace lca::test
