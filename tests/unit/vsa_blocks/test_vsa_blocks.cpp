// vsa_triton's host side without torch or a GPU: VSA's per-tile key lists built from the
// block-sparse form, cell by cell against the slices (lca::slice_contains) of the builtin
// block_sparse masks (blocks of 64 and 128, lengths that end in a short block) and of hand-built
// forms (blocks of 256, queries and keys of different lengths); the refusals with their reasons;
// and the manifest, whose capabilities decide which cells lcahost skips before plan().
#include "builtin_fixture.hpp"
#include "random_slices.hpp"

#include "core/plugin/manifest.hpp"
#include "plugins/kernels/vsa/vsa_blocks.hpp"

#include <lca/error.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace lca::test {
namespace {

using lca_vsa::VsaBlocks;

// Every cell against the slices, and the lists in the form VSA's kernels read them.
void expect_exact(const lca_mask& m, const VsaBlocks& v, const std::string& label) {
  SCOPED_TRACE(label);
  ASSERT_EQ(v.q_tiles, m.seqlen_q / 64);
  ASSERT_EQ(v.kv_tiles, m.seqlen_k / 64);
  ASSERT_EQ(v.q2k_idx.size(), static_cast<size_t>(v.q_tiles * v.max_kv));
  ASSERT_EQ(v.q2k_num.size(), static_cast<size_t>(v.q_tiles));
  ASSERT_EQ(v.kv_sizes, std::vector<int32_t>(static_cast<size_t>(v.kv_tiles), 64));
  int64_t kept = 0;
  int32_t widest = 0;
  for (int64_t t = 0; t < v.q_tiles; ++t) {
    const int32_t n = v.q2k_num[t];
    ASSERT_GE(n, 0);
    ASSERT_LE(n, v.max_kv);
    const int32_t* row = v.q2k_idx.data() + t * v.max_kv;
    for (int32_t i = 0; i < n; ++i) {
      ASSERT_GE(row[i], 0);
      ASSERT_LT(row[i], v.kv_tiles);
      if (i > 0) ASSERT_GT(row[i], row[i - 1]) << "tile " << t << ": key tiles not ascending";
    }
    for (int32_t i = n; i < v.max_kv; ++i) ASSERT_EQ(row[i], -1) << "tile " << t << ": padding";
    kept += n;
    widest = std::max(widest, n);
  }
  EXPECT_EQ(kept, v.kept_tiles);
  EXPECT_EQ(std::max(widest, 1), v.max_kv);
  const std::vector<char> truth = dense_truth(m);
  int64_t wrong = 0;
  for (int64_t q = 0; q < m.seqlen_q; ++q)
    for (int64_t k = 0; k < m.seqlen_k; ++k)
      if (v.sees(q, k) != (truth[q * m.seqlen_k + k] != 0) && wrong++ < 5)
        ADD_FAILURE() << "cell (" << q << ", " << k << "): VSA's lists say " << v.sees(q, k);
  EXPECT_EQ(wrong, 0);
}

TEST(VsaBlocks, BuiltinBlockSparseIsExact) {
  auto& p = BuiltinProvider::instance();
  // 1088 = 17 tiles: with blocks of 128 the last block is one tile.
  for (int block : {64, 128})
    for (int64_t seqlen : {1024, 1088, 2048})
      for (double sparsity : {0.1, 0.5, 1.0}) {
        const std::string params = nlohmann::json{{"block", block}, {"sparsity", sparsity}}.dump();
        auto g = p.generate("block_sparse", params, seqlen, 5);
        ASSERT_EQ(g.status, LCA_OK) << g.error;
        ASSERT_NE(g.mask->block_sparse, nullptr);
        const VsaBlocks v = lca_vsa::build_vsa_blocks(*g.mask);
        EXPECT_EQ(v.block, block);
        std::printf("[ vsa ] %5lld %s: %s\n", static_cast<long long>(seqlen), params.c_str(), v.describe().c_str());
        expect_exact(*g.mask, v, std::to_string(seqlen) + " " + params);
      }
}

// A block-sparse form written by hand, with slices that say the same (one FULL slice a block).
struct HandMask {
  std::vector<int64_t> row_offsets, col_indices;
  std::vector<lca_slice> slices;
  lca_block_sparse bs{};
  lca_mask mask{};

  HandMask(int64_t sq, int64_t sk, int32_t block_q, int32_t block_k, const std::vector<std::vector<int64_t>>& rows) {
    row_offsets.push_back(0);
    for (size_t b = 0; b < rows.size(); ++b) {
      for (int64_t c : rows[b]) {
        col_indices.push_back(c);
        const int64_t q0 = int64_t(b) * block_q, k0 = c * block_k;
        slices.push_back(lca_slice{q0, std::min(sq, q0 + block_q), k0, std::min(sk, k0 + block_k), LCA_SLICE_FULL, 0});
      }
      row_offsets.push_back(static_cast<int64_t>(col_indices.size()));
    }
    bs = lca_block_sparse{sizeof(lca_block_sparse), block_q, block_k, static_cast<int64_t>(rows.size()),
                          (sk + block_k - 1) / block_k, row_offsets.data(), col_indices.data()};
    mask = lca_mask{sizeof(lca_mask), sq, sk, static_cast<int64_t>(slices.size()), slices.data(), &bs, 0, nullptr};
  }
  HandMask(const HandMask&) = delete;
};

TEST(VsaBlocks, Blocks256AndCrossLengthsAreExact) {
  // 640 tokens in blocks of 256: the last block is two tiles of its four.
  HandMask b256(640, 640, 256, 256, {{0, 2}, {1}, {0, 1, 2}});
  const VsaBlocks v = lca_vsa::build_vsa_blocks(b256.mask);
  expect_exact(b256.mask, v, "blocks of 256");
  EXPECT_EQ(v.q2k_num, (std::vector<int32_t>{6, 6, 6, 6, 4, 4, 4, 4, 10, 10}));
  // 192 queries over 448 keys, a query block that sees nothing.
  HandMask cross(192, 448, 64, 64, {{0, 6}, {}, {1, 2, 3, 4, 5}});
  const VsaBlocks c = lca_vsa::build_vsa_blocks(cross.mask);
  expect_exact(cross.mask, c, "cross");
  EXPECT_EQ(c.q2k_num, (std::vector<int32_t>{2, 0, 5}));
  EXPECT_EQ(c.max_kv, 5);
}

void expect_refused(const lca_mask& m, lca_status status, const std::string& words) {
  try {
    lca_vsa::build_vsa_blocks(m);
    ADD_FAILURE() << "accepted; expected: " << words;
  } catch (const lca::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(VsaBlocks, RefusesWhatVsaCannotRun) {
  auto& p = BuiltinProvider::instance();
  auto causal = p.generate("causal", "{}", 1024, 1);
  ASSERT_EQ(causal.status, LCA_OK) << causal.error;
  expect_refused(*causal.mask, LCA_ERR_UNSUPPORTED, "block-sparse masks only");
  auto odd = p.generate("block_sparse", R"({"block":64,"sparsity":0.5})", 1000, 1);
  ASSERT_EQ(odd.status, LCA_OK) << odd.error;
  expect_refused(*odd.mask, LCA_ERR_UNSUPPORTED, "seqlen_q 1000 is not a multiple of 64");

  HandMask rect(256, 256, 64, 128, {{0}, {1}, {0, 1}, {1}});
  expect_refused(rect.mask, LCA_ERR_UNSUPPORTED, "VSA's blocks are square");
  HandMask small(128, 128, 32, 32, {{0}, {1}, {2}, {3}});
  expect_refused(small.mask, LCA_ERR_UNSUPPORTED, "blocks of 32 tokens");
}

TEST(VsaBlocks, RefusesABlockSparseFormThatContradictsItself) {
  HandMask descending(256, 256, 64, 64, {{2, 1}, {0}, {0}, {0}});
  expect_refused(descending.mask, LCA_ERR_INVALID_ARGUMENT, "not ascending");
  HandMask outside(256, 256, 64, 64, {{0}, {4}, {0}, {0}});
  expect_refused(outside.mask, LCA_ERR_INVALID_ARGUMENT, "not ascending inside [0, 4)");
  HandMask short_form(256, 256, 64, 64, {{0}, {1}, {2}});
  expect_refused(short_form.mask, LCA_ERR_INVALID_ARGUMENT, "does not cover 256 x 256 tokens");
}

// The manifest parses against the schema and declares what plan() would otherwise refuse, so
// that lcahost skips those cells (X) without starting Python.
TEST(VsaManifest, DeclaresBlockSparseMhaBf16) {
  const std::string root = LCA_TEST_SOURCE_DIR;
  std::ifstream schema_file(root + "/manifests/manifest.schema.json");
  const nlohmann::json schema = nlohmann::json::parse(schema_file);
  const auto m = core::parse_manifest(root + "/manifests/plugins/vsa_triton.json", schema);
  EXPECT_EQ(m.name, "vsa_triton");
  EXPECT_EQ(m.kind, "kernel");
  EXPECT_EQ(m.library, "liblca_vsa_triton.so");
  EXPECT_EQ(m.kernel.device, "cuda");
  EXPECT_TRUE(m.kernel.backward);
  EXPECT_FALSE(m.kernel.gqa);
  EXPECT_FALSE(m.kernel.varlen);
  EXPECT_FALSE(m.kernel.any_mask);
  EXPECT_TRUE(m.kernel.supports_mask("block_sparse"));
  for (const char* other : {"full", "causal", "causal_document", "sliding_window"}) EXPECT_FALSE(m.kernel.supports_mask(other));
  EXPECT_TRUE(m.kernel.supports_dtype("bf16"));
  EXPECT_FALSE(m.kernel.supports_dtype("f16"));
  EXPECT_FALSE(m.kernel.supports_dtype("f32"));
  EXPECT_TRUE(m.kernel.supports_head_dim(64));
  EXPECT_TRUE(m.kernel.supports_head_dim(128));
  EXPECT_FALSE(m.kernel.supports_head_dim(256));
  EXPECT_EQ(m.json.at("limits").at("block_sizes"), (nlohmann::json{64, 128, 256}));
}

}  // namespace
}  // namespace lca::test
