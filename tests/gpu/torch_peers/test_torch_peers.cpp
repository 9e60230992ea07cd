// The PyTorch peers through the C ABI against cpu_reference (fp64 accumulation), forward (O,
// LSE) and backward (dQ, dK, dV), on the host's own stream:
//   torch_sdpa_flash / _efficient / _cudnn on full and causal, bf16 and f16, d64 and d128,
//   MHA, GQA and MQA, odd lengths;
//   torch_flex on hand-built masks of every slice type (documents, windows, INV/BI_CAUSAL,
//   rows that see nothing) and on the 14 builtin patterns (block_sparse through its table).
// Refusals (masks an SDPA backend cannot run, dtypes) need no GPU and run everywhere; so does
// starting torch_flex's interpreter. A plugin that was not built is skipped with the reason.
#include "builtin_fixture.hpp"
#include "harness.hpp"
#include "tests/gpu/python_peers_common.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace lca::test::cuda {
namespace {

// ---- torch_sdpa_* ------------------------------------------------------------------------------
std::vector<Problem> sdpa_cases() {
  const int32_t bf = LCA_DTYPE_BF16, hf = LCA_DTYPE_F16;
  return {
      make_problem("full_397_mha_d64_bf16", 397, 4, 4, 64, bf, mask_full(397, 397)),
      make_problem("causal_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_causal(1000)),
      make_problem("causal_397_mqa_d64_f16", 397, 8, 1, 64, hf, mask_causal(397)),
      make_problem("full_1000_gqa4_d128_f16", 1000, 8, 2, 128, hf, mask_full(1000, 1000)),
      make_problem("causal_129_mha_d128_bf16", 129, 4, 4, 128, bf, mask_causal(129)),
      // Causal as several slices is still causal.
      make_problem("causal_sliced_300_gqa2_d64_bf16", 300, 4, 2, 64, bf,
           {slice(0, 100, 0, 100, LCA_SLICE_CAUSAL), slice(100, 300, 0, 100, LCA_SLICE_FULL),
            slice(100, 300, 100, 300, LCA_SLICE_CAUSAL)}),
  };
}

struct SdpaCase {
  std::string plugin;
  Problem problem;
};

std::vector<SdpaCase> sdpa_matrix() {
  std::vector<SdpaCase> out;
  for (const char* plugin : {"torch_sdpa_flash", "torch_sdpa_efficient", "torch_sdpa_cudnn"})
    for (const Problem& p : sdpa_cases()) out.push_back({plugin, p});
  return out;
}

class TorchSdpa : public ::testing::TestWithParam<SdpaCase> {};

TEST_P(TorchSdpa, MatchesCpuReference) {
  const SdpaCase& c = GetParam();
  LCA_SKIP_UNLESS_BUILT(c.plugin);
  LCA_SKIP_WITHOUT_GPU();
  const Inputs in = make_inputs(c.problem, 2026);
  const Results ref = run_cpu_reference(c.problem, in, true);
  ASSERT_EQ(ref.status, LCA_OK) << ref.error;
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  const Results got = run_peer(c.plugin, c.problem, slice_mask(c.problem), in, alloc, stream.handle(),
                               SecondBackward::kAsLeft);
  // Which shapes a backend takes is SDPA's dispatcher's call and changes between torch
  // versions; a refusal is what lcahost records as X, so it shows here as a skip with the reason.
  if (got.status == LCA_ERR_UNSUPPORTED) GTEST_SKIP() << "refused: " << got.error;
  ASSERT_EQ(got.status, LCA_OK) << got.error;
  expect_close(c.plugin, c.problem, got, ref);
  EXPECT_EQ(alloc.current_bytes(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Peers, TorchSdpa, ::testing::ValuesIn(sdpa_matrix()),
                         [](const auto& info) { return info.param.plugin + "_" + info.param.problem.name; });

TEST(TorchSdpaRefusal, MasksOtherThanFullAndCausalAreUnsupported) {
  for (const char* name : {"torch_sdpa_flash", "torch_sdpa_efficient", "torch_sdpa_cudnn"}) {
    if (!plugin_built(name)) continue;
    SCOPED_TRACE(name);
    RefusingKernel kernel(name);
    ASSERT_EQ(kernel.created(), LCA_OK) << kernel.last_error();
    EXPECT_EQ(kernel.plan(make_problem("window", 300, 4, 4, 64, LCA_DTYPE_BF16, mask_sliding_window(300, 32))),
              LCA_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(kernel.last_error()).find("full and causal masks only"), std::string::npos)
        << kernel.last_error();
    EXPECT_EQ(kernel.plan(make_problem("causal", 300, 4, 4, 64, LCA_DTYPE_F32, mask_causal(300))), LCA_ERR_UNSUPPORTED);
  }
}

// ---- torch_flex --------------------------------------------------------------------------------
std::vector<Problem> flex_cases() {
  const int32_t bf = LCA_DTYPE_BF16, hf = LCA_DTYPE_F16;
  return {
      make_problem("full_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_full(1000, 1000)),
      make_problem("causal_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_causal(1000)),
      make_problem("documents_causal_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf,
                   mask_documents({300, 37, 600, 63}, true)),
      make_problem("sliding_window_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_sliding_window(1000, 128)),
      make_problem("inv_bi_causal_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_inv_bi(1000, 1000)),
      make_problem("empty_rows_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_with_empty_rows(1000)),
      make_problem("causal_397_mha_d64_f16", 397, 4, 4, 64, hf, mask_causal(397)),
      make_problem("documents_full_129_mqa_d128_bf16", 129, 8, 1, 128, bf, mask_documents({100, 29}, false)),
  };
}

class TorchFlex : public ::testing::TestWithParam<Problem> {};

TEST_P(TorchFlex, MatchesCpuReference) {
  LCA_SKIP_UNLESS_BUILT("torch_flex");
  LCA_SKIP_WITHOUT_GPU();
  const Problem& p = GetParam();
  const Inputs in = make_inputs(p, 2027);
  const Results ref = run_cpu_reference(p, in, true);
  ASSERT_EQ(ref.status, LCA_OK) << ref.error;
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  const Results got = run_peer("torch_flex", p, slice_mask(p), in, alloc, stream.handle(), SecondBackward::kAsLeft);
  ASSERT_EQ(got.status, LCA_OK) << got.error;
  expect_close("torch_flex", p, got, ref);
}

INSTANTIATE_TEST_SUITE_P(Masks, TorchFlex, ::testing::ValuesIn(flex_cases()),
                         [](const auto& info) { return info.param.name; });

// The 14 builtin patterns at one odd length, as lcahost hands them over (block_sparse with its
// block table).
TEST(TorchFlexBuiltin, EveryPatternMatchesCpuReference) {
  LCA_SKIP_UNLESS_BUILT("torch_flex");
  LCA_SKIP_WITHOUT_GPU();
  auto& provider = BuiltinProvider::instance();
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  const std::vector<std::pair<std::string, std::string>> patterns = {
      {"full", "{}"}, {"causal", "{}"}, {"full_document", "{}"}, {"causal_document", "{}"},
      {"sliding_window", R"({"window":100})"}, {"sliding_window_causal", R"({"window":70})"},
      {"sliding_window_document", R"({"window":50})"}, {"shared_question", "{}"}, {"causal_blockwise", "{}"},
      {"prefix_lm_causal", "{}"}, {"prefix_lm_document", "{}"}, {"global_sliding", "{}"},
      {"block_causal_document", "{}"}, {"block_sparse", R"({"sparsity":0.3})"}};
  for (const auto& [name, params] : patterns) {
    SCOPED_TRACE(name);
    auto g = provider.generate(name, params, 1000, 11);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    Problem p = make_problem(name + "_1000_gqa4_d128_bf16", 1000, 8, 2, 128, LCA_DTYPE_BF16, {});
    p.slices.assign(g.mask->slices, g.mask->slices + g.mask->num_slices);
    const Inputs in = make_inputs(p, 2028);
    const Results ref = run_cpu_reference(p, in, true);
    ASSERT_EQ(ref.status, LCA_OK) << ref.error;
    const Results got = run_peer("torch_flex", p, *g.mask, in, alloc, stream.handle(), SecondBackward::kAsLeft);
    ASSERT_EQ(got.status, LCA_OK) << got.error;
    expect_close("torch_flex", p, got, ref);
  }
}

// Python starts, torch imports, and plan() refuses what it cannot run, without a GPU.
TEST(TorchFlexRefusal, StartsPythonAndRefusesWithoutTouchingTheGpu) {
  LCA_SKIP_UNLESS_BUILT("torch_flex");
  RefusingKernel kernel("torch_flex");
  ASSERT_EQ(kernel.created(), LCA_OK) << kernel.last_error();
  // f32 is outside the manifest.
  EXPECT_EQ(kernel.plan(make_problem("causal", 300, 4, 4, 64, LCA_DTYPE_F32, mask_causal(300))), LCA_ERR_UNSUPPORTED);
  // A row of 50 separate key ranges and no block-sparse form.
  Problem holes = make_problem("holes", 100, 4, 4, 64, LCA_DTYPE_BF16, {});
  for (int64_t k = 0; k < 100; k += 2) holes.slices.push_back(slice(0, 1, k, k + 1, LCA_SLICE_FULL));
  EXPECT_EQ(kernel.plan(holes), LCA_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(kernel.last_error()).find("separate key ranges"), std::string::npos) << kernel.last_error();
}

}  // namespace
}  // namespace lca::test::cuda
