// vsa_triton through the C ABI against cpu_reference (fp64 accumulation), forward (O, LSE) and
// backward (dQ, dK, dV, twice on one plan), on a stream of the test's own: the builtin
// block_sparse masks with blocks of 64 and 128 (a length that ends in a half block), every block
// kept, d64 and d128; and a hand-built form with queries and keys of different lengths and a
// query block that sees nothing. Refusals (GQA, f16, masks without a block-sparse form, lengths
// that are not whole tiles, unknown options) need no GPU and run wherever the plugin was built;
// so does starting its interpreter. Where the plugin was not built, every test skips with why.
#include "builtin_fixture.hpp"
#include "harness.hpp"
#include "tests/gpu/python_peers_common.hpp"

#include <gtest/gtest.h>

#include <string>

namespace lca::test::cuda {
namespace {

// Both backward calls on one plan, the gradients poisoned between; plan_info names the compile
// and the layout copies.
void check_vsa(Problem p, const lca_mask& mask, uint64_t seed) {
  p.slices.assign(mask.slices, mask.slices + mask.num_slices);
  std::string info;
  check_against_reference("vsa_triton", p, mask, seed, SecondBackward::kPoisoned, &info);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_NE(info.find("\"compile_ms\""), std::string::npos) << info;
  EXPECT_NE(info.find("\"layout_copy_ms_bwd\""), std::string::npos) << info;
}

struct BuiltinCase {
  std::string name, params;
  int64_t seqlen;
  int32_t heads, head_dim;
};

class VsaBuiltin : public ::testing::TestWithParam<BuiltinCase> {};

TEST_P(VsaBuiltin, MatchesCpuReference) {
  LCA_SKIP_UNLESS_BUILT("vsa_triton");
  LCA_SKIP_WITHOUT_GPU();
  const BuiltinCase& c = GetParam();
  auto g = BuiltinProvider::instance().generate("block_sparse", c.params, c.seqlen, 13);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  const Problem p{c.name, c.seqlen, c.seqlen, c.heads, c.heads, c.head_dim, LCA_DTYPE_BF16, {}};
  check_vsa(p, *g.mask, 2029);
}

INSTANTIATE_TEST_SUITE_P(
    Masks, VsaBuiltin,
    ::testing::Values(BuiltinCase{"b64_s30_1024_h4_d128", R"({"block":64,"sparsity":0.3})", 1024, 4, 128},
                      BuiltinCase{"b128_s50_1088_h2_d64", R"({"block":128,"sparsity":0.5})", 1088, 2, 64},
                      BuiltinCase{"b64_s100_512_h3_d128", R"({"block":64,"sparsity":1.0})", 512, 3, 128},
                      BuiltinCase{"b128_s10_2048_h2_d128", R"({"block":128,"sparsity":0.1})", 2048, 2, 128}),
    [](const auto& info) { return info.param.name; });

// 192 queries over 448 keys; query block 1 sees nothing (O 0, LSE -inf, dQ 0).
TEST(VsaHandBuilt, CrossLengthsAndAnEmptyQueryBlock) {
  LCA_SKIP_UNLESS_BUILT("vsa_triton");
  LCA_SKIP_WITHOUT_GPU();
  const int64_t sq = 192, sk = 448;
  std::vector<int64_t> offsets{0, 2, 2, 7}, cols{0, 6, 1, 2, 3, 4, 5};
  std::vector<lca_slice> slices;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i)
      slices.push_back(lca_slice{b * 64, b * 64 + 64, cols[i] * 64, cols[i] * 64 + 64, LCA_SLICE_FULL, 0});
  const lca_block_sparse bs{sizeof(lca_block_sparse), 64, 64, 3, 7, offsets.data(), cols.data()};
  const lca_mask mask{sizeof(lca_mask), sq, sk, static_cast<int64_t>(slices.size()), slices.data(), &bs, 0, nullptr};
  check_vsa(Problem{"cross_192x448_h2_d64", sq, sk, 2, 2, 64, LCA_DTYPE_BF16, {}}, mask, 2030);
}

// Python starts, torch and VSA's kernels import, and plan() refuses, without touching the GPU.
TEST(VsaRefusal, StartsPythonAndRefusesWithoutTouchingTheGpu) {
  LCA_SKIP_UNLESS_BUILT("vsa_triton");
  {
    RefusingKernel bad("vsa_triton", R"({"block":64})");
    EXPECT_EQ(bad.created(), LCA_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(bad.last_error()).find("unknown option 'block'"), std::string::npos) << bad.last_error();
  }
  RefusingKernel kernel("vsa_triton");
  ASSERT_EQ(kernel.created(), LCA_OK) << kernel.last_error();
  auto& provider = BuiltinProvider::instance();
  auto sparse = provider.generate("block_sparse", R"({"block":64,"sparsity":0.5})", 1024, 3);
  auto causal = provider.generate("causal", "{}", 1024, 3);
  auto odd = provider.generate("block_sparse", R"({"block":64,"sparsity":0.5})", 1000, 3);
  ASSERT_EQ(sparse.status, LCA_OK);
  ASSERT_EQ(causal.status, LCA_OK);
  ASSERT_EQ(odd.status, LCA_OK);
  auto refuses = [&](const Problem& p, const lca_mask& m, const std::string& words) {
    SCOPED_TRACE(p.name);
    EXPECT_EQ(kernel.plan(p, m), LCA_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(kernel.last_error()).find(words), std::string::npos) << kernel.last_error();
  };
  refuses(Problem{"gqa", 1024, 1024, 8, 2, 128, LCA_DTYPE_BF16, {}}, *sparse.mask, "no GQA");
  refuses(Problem{"f16", 1024, 1024, 4, 4, 128, LCA_DTYPE_F16, {}}, *sparse.mask, "bf16 only");
  refuses(Problem{"d256", 1024, 1024, 4, 4, 256, LCA_DTYPE_BF16, {}}, *sparse.mask, "head_dim 256");
  refuses(Problem{"causal", 1024, 1024, 4, 4, 128, LCA_DTYPE_BF16, {}}, *causal.mask, "block-sparse masks only");
  refuses(Problem{"odd", 1000, 1000, 4, 4, 128, LCA_DTYPE_BF16, {}}, *odd.mask, "not a multiple of 64");
}

}  // namespace
}  // namespace lca::test::cuda
