// The host-side mask logic of the PyTorch peers, without torch or a GPU: per-row key intervals
// and the full/causal recogniser (torch_sdpa_*), and FlexAttention's mask data and BlockMask
// (torch_flex), each against the slice definition (lca::slice_contains) on the 14 builtin
// patterns at odd lengths and on random masks of disjoint slices. Also the peers' manifests.
#include "random_slices.hpp"
#include "builtin_fixture.hpp"

#include "core/plugin/manifest.hpp"
#include "plugins/kernels/torch_common/row_intervals.hpp"
#include "plugins/kernels/torch_flex/flex_mask.hpp"

#include <lca/error.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

namespace lca::test {
namespace {

using lca_torch::DenseForm;
using lca_torch_flex::FlexMask;

// Every cell, and every 128 x 128 block's classification, against the slices.
void expect_exact(const lca_mask& m, const std::string& label) {
  SCOPED_TRACE(label);
  const std::vector<char> truth = dense_truth(m);
  const FlexMask f = lca_torch_flex::build_flex_mask(m, 16);
  int64_t wrong = 0;
  for (int64_t q = 0; q < m.seqlen_q; ++q)
    for (int64_t k = 0; k < m.seqlen_k; ++k)
      if (f.sees(q, k) != (truth[q * m.seqlen_k + k] != 0) && wrong++ < 5)
        ADD_FAILURE() << "cell (" << q << ", " << k << "): flex mask " << f.sees(q, k);
  EXPECT_EQ(wrong, 0);
  // Rows past the sequence see nothing (the mask_mod may be asked about them).
  if (f.kind == FlexMask::Kind::intervals)
    for (int64_t q = m.seqlen_q; q < f.padded_rows; ++q)
      for (int32_t i = 0; i < f.width; ++i) ASSERT_GE(f.lo[q * f.width + i], f.hi[q * f.width + i]);

  const int64_t b = f.block;
  ASSERT_EQ(f.q_blocks, (m.seqlen_q + b - 1) / b);
  ASSERT_EQ(f.kv_blocks, (m.seqlen_k + b - 1) / b);
  int64_t partial = 0, full = 0;
  for (int64_t qb = 0; qb < f.q_blocks; ++qb) {
    std::vector<int> state(static_cast<size_t>(f.kv_blocks), 0);  // 0 empty, 1 partial, 2 full
    for (int32_t i = 0; i < f.kv_num[qb]; ++i) {
      const int32_t kb = f.kv_idx[qb * f.kv_blocks + i];
      if (i > 0) ASSERT_GT(kb, f.kv_idx[qb * f.kv_blocks + i - 1]) << "partial blocks not ascending";
      state[kb] = 1;
    }
    for (int32_t i = 0; i < f.full_num[qb]; ++i) {
      const int32_t kb = f.full_idx[qb * f.kv_blocks + i];
      if (i > 0) ASSERT_GT(kb, f.full_idx[qb * f.kv_blocks + i - 1]) << "full blocks not ascending";
      ASSERT_EQ(state[kb], 0) << "a block listed both partial and full";
      state[kb] = 2;
    }
    partial += f.kv_num[qb];
    full += f.full_num[qb];
    for (int64_t kb = 0; kb < f.kv_blocks; ++kb) {
      int64_t seen = 0, cells = 0;
      for (int64_t q = qb * b; q < std::min(m.seqlen_q, (qb + 1) * b); ++q)
        for (int64_t k = kb * b; k < std::min(m.seqlen_k, (kb + 1) * b); ++k, ++cells) seen += truth[q * m.seqlen_k + k];
      const bool inside = (qb + 1) * b <= m.seqlen_q && (kb + 1) * b <= m.seqlen_k;
      const int want = seen == 0 ? 0 : (seen == cells && inside) ? 2 : 1;
      ASSERT_EQ(state[kb], want) << "block (" << qb << ", " << kb << ") sees " << seen << " of " << cells;
    }
  }
  EXPECT_EQ(partial, f.partial_count);
  EXPECT_EQ(full, f.full_count);
}

TEST(FlexMask, BuiltinPatternsAreExact) {
  auto& p = BuiltinProvider::instance();
  for (int64_t seqlen : {1000, 1537}) {
    for (const auto& [name, params] : lca::test::patterns_near_1k()) {
      auto g = p.generate(name, params, seqlen, 7);
      ASSERT_EQ(g.status, LCA_OK) << name << ": " << g.error;
      const FlexMask f = lca_torch_flex::build_flex_mask(*g.mask, 16);
      EXPECT_EQ(f.kind == FlexMask::Kind::table, name == "block_sparse") << name;
      std::printf("[ torch_flex ] %-24s %5lld: %s\n", name.c_str(), static_cast<long long>(seqlen), f.describe().c_str());
      expect_exact(*g.mask, name + " " + std::to_string(seqlen));
    }
  }
}

TEST(FlexMask, RandomSliceMasksAreExact) {
  std::mt19937_64 rng(7);
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{300, 300}, {129, 500}, {513, 130}, {1, 77}, {256, 256}}) {
    for (int rep = 0; rep < 5; ++rep) {
      const auto slices = lca::test::random_slices(rng, sq, sk);
      const lca_mask m{sizeof(lca_mask), sq, sk, static_cast<int64_t>(slices.size()), slices.data(), nullptr, 0, nullptr};
      expect_exact(m, "random " + std::to_string(sq) + "x" + std::to_string(sk) + " #" + std::to_string(rep));
    }
  }
}

TEST(FlexMask, TooManyIntervalsWithoutATableIsUnsupported) {
  // Query row 0 sees every other key: 50 intervals.
  std::vector<lca_slice> slices;
  for (int64_t k = 0; k < 100; k += 2) slices.push_back(lca_slice{0, 1, k, k + 1, LCA_SLICE_FULL, 0});
  const lca_mask m{sizeof(lca_mask), 100, 100, static_cast<int64_t>(slices.size()), slices.data(), nullptr, 0, nullptr};
  try {
    lca_torch_flex::build_flex_mask(m, 16);
    FAIL() << "accepted";
  } catch (const lca::Error& e) {
    EXPECT_EQ(e.status(), LCA_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("query row 0 sees 50 separate key ranges"), std::string::npos) << e.what();
  }
}

TEST(DenseForm, FullAndCausalOnlyWhateverTheSlicing) {
  auto& p = BuiltinProvider::instance();
  for (int64_t seqlen : {129, 397, 1024}) {
    for (const auto& [name, unused] : lca::test::patterns_near_1k()) {
      auto g = p.generate(name, "{}", seqlen, 3);
      ASSERT_EQ(g.status, LCA_OK) << name << ": " << g.error;
      std::string why;
      const DenseForm form = lca_torch::dense_form(*g.mask, &why);
      // Some patterns can coincide with full or causal (a prefix of the whole sequence, one
      // document): the cells decide.
      const auto truth = dense_truth(*g.mask);
      bool full = true, causal = true;
      for (int64_t q = 0; q < seqlen; ++q)
        for (int64_t k = 0; k < seqlen; ++k) {
          full &= truth[q * seqlen + k] == 1;
          causal &= truth[q * seqlen + k] == (k <= q);
        }
      const DenseForm want = full ? DenseForm::full : causal ? DenseForm::causal : DenseForm::other;
      EXPECT_EQ(form, want) << name << " " << seqlen << ": " << why;
      if (form == DenseForm::other) EXPECT_FALSE(why.empty()) << name;
    }
  }
  // Causal made of many slices is still causal; with a piece missing it is not.
  std::vector<lca_slice> pieces{{0, 100, 0, 100, LCA_SLICE_CAUSAL, 0}, {100, 300, 0, 100, LCA_SLICE_FULL, 0},
                                {100, 300, 100, 300, LCA_SLICE_CAUSAL, 0}};
  lca_mask m{sizeof(lca_mask), 300, 300, 3, pieces.data(), nullptr, 0, nullptr};
  EXPECT_EQ(lca_torch::dense_form(m, nullptr), DenseForm::causal);
  pieces[1].q_begin = 101;  // row 100 loses keys [0, 100)
  std::string why;
  EXPECT_EQ(lca_torch::dense_form(m, &why), DenseForm::other);
  EXPECT_NE(why.find("query row 100 sees keys [100, 101)"), std::string::npos) << why;
}

// The peers' manifests parse against the schema and declare what the plugins do.
TEST(TorchManifests, DeclareTheirMasksAndPasses) {
  const std::string root = LCA_TEST_SOURCE_DIR;
  std::ifstream schema_file(root + "/manifests/manifest.schema.json");
  const nlohmann::json schema = nlohmann::json::parse(schema_file);
  for (const char* name : {"torch_sdpa_flash", "torch_sdpa_efficient", "torch_sdpa_cudnn", "torch_flex"}) {
    SCOPED_TRACE(name);
    const auto m = core::parse_manifest(root + "/manifests/plugins/" + name + ".json", schema);
    EXPECT_EQ(m.name, name);
    EXPECT_EQ(m.kind, "kernel");
    EXPECT_EQ(m.library, std::string("liblca_") + name + ".so");
    EXPECT_EQ(m.kernel.device, "cuda");
    EXPECT_TRUE(m.kernel.backward);
    EXPECT_TRUE(m.kernel.gqa);
    EXPECT_TRUE(m.kernel.supports_dtype("bf16"));
    EXPECT_FALSE(m.kernel.supports_dtype("f32"));
    EXPECT_TRUE(m.kernel.supports_head_dim(128));
    if (std::string(name) == "torch_flex") {
      EXPECT_TRUE(m.kernel.any_mask);
    } else {
      EXPECT_FALSE(m.kernel.any_mask);
      EXPECT_EQ(m.kernel.masks, (std::vector<std::string>{"full", "causal"}));
    }
  }
}

}  // namespace
}  // namespace lca::test
