// flex_flash against cpu_reference (fp64 accumulation on the same rounded inputs): hand-built
// masks of every slice type (rows that see nothing, rows shared by several slices, empty slices,
// q != k lengths) and the 14 builtin patterns, forward and backward, odd lengths, GQA 1/2/3/4/8,
// head dims 64/128, bf16 and f16, the backward run twice on one plan; refusals of what the
// manifest does not declare.
#include "builtin_fixture.hpp"
#include "harness.hpp"
#include "random_slices.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace lca::test::cuda {
namespace {

#define LCA_SKIP_WITHOUT_GPU() \
  if (core::gpu::device_count() == 0) GTEST_SKIP() << "no CUDA device visible (driver or GPU absent)"

// The flex_flash options every test here runs with: LCA_FLEX_TEST_OPTIONS, as option=value pairs
// separated by commas (CMake's variant runs of this binary set it, e.g. forward=mma,backward=mma),
// as a JSON object; {} where unset.
const nlohmann::json& flex_options() {
  static const nlohmann::json options = [] {
    nlohmann::json j = nlohmann::json::object();
    const char* env = std::getenv("LCA_FLEX_TEST_OPTIONS");
    std::string text = env != nullptr ? env : "";
    while (!text.empty()) {
      const size_t comma = text.find(',');
      const std::string pair = text.substr(0, comma);
      text = comma == std::string::npos ? "" : text.substr(comma + 1);
      const size_t eq = pair.find('=');
      if (eq == std::string::npos || eq == 0)
        throw std::runtime_error("LCA_FLEX_TEST_OPTIONS: '" + pair + "' is not option=value");
      j[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    return j;
  }();
  return options;
}
std::string flex_config() { return flex_options().dump(); }

struct Tolerance {
  double out, grad, lse;
};

// P and dS are rounded to the input dtype before their MMAs, as in every flash kernel.
Tolerance tolerance(int32_t dtype) {
  return dtype == LCA_DTYPE_BF16 ? Tolerance{1.5e-2, 2.5e-2, 2e-3} : Tolerance{3e-3, 5e-3, 2e-3};
}

void expect_matches_reference(const Problem& p) {
  const Inputs in = make_inputs(p, 2026);
  const Results ref = run_cpu_reference(p, in, true);
  ASSERT_EQ(ref.status, LCA_OK) << ref.error;
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  PluginHandle plugin("flex_flash");
  // Two backward calls on one plan, the second one's gradients checked: the plan keeps its fp32
  // dQ accumulator and delta between calls, and a call must not see the previous one's sums.
  const Results got =
      run_cuda(plugin, p, in, true, alloc, stream.handle(), /*backward_calls=*/2, flex_config());
  ASSERT_EQ(got.status, LCA_OK) << got.error;
  const Tolerance tol = tolerance(p.dtype);
  const double e_o = rel_l2(got.o, ref.o), e_lse = lse_max_abs(got.lse, ref.lse);
  const double e_dq = rel_l2(got.dq, ref.dq), e_dk = rel_l2(got.dk, ref.dk), e_dv = rel_l2(got.dv, ref.dv);
  std::printf("[flex_flash] %-46s o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", p.name.c_str(), e_o, e_lse, e_dq,
              e_dk, e_dv);
  EXPECT_LE(e_o, tol.out);
  EXPECT_LE(e_lse, tol.lse);
  EXPECT_LE(e_dq, tol.grad);
  EXPECT_LE(e_dk, tol.grad);
  EXPECT_LE(e_dv, tol.grad);
  EXPECT_EQ(alloc.current_bytes(), 0u) << "a plan kept device memory after destroy_plan";
}

Problem make(std::string name, int64_t sq, int64_t sk, int hq, int hkv, int d, int32_t dtype,
             std::vector<lca_slice> slices) {
  return Problem{std::move(name), sq, sk, hq, hkv, d, dtype, std::move(slices)};
}

// The slices of a builtin pattern at length s; where the provider refuses it, throws (which fails the
// test with the provider's message).
std::vector<lca_slice> builtin_slices(const std::string& name, const std::string& params, int64_t s, uint64_t seed) {
  auto g = BuiltinProvider::instance().generate(name, params, s, seed);
  if (g.status != LCA_OK) throw std::runtime_error("builtin mask " + name + ": " + g.error);
  return std::vector<lca_slice>(g.mask->slices, g.mask->slices + g.mask->num_slices);
}

// Rows [0, s) see a shared prefix [0, 100) fully and then themselves causally (two slices per
// row, one INV_CAUSAL band on top), plus an empty slice: several slices share query rows.
std::vector<lca_slice> mask_shared_rows(int64_t s) {
  return {slice(100, s, 0, 100, LCA_SLICE_FULL), slice(100, s, 100, s, LCA_SLICE_CAUSAL),
          slice(0, 100, 0, 100, LCA_SLICE_INV_CAUSAL), slice(50, 50, 0, s, LCA_SLICE_FULL)};
}

// Whole 128-row tiles that see nothing (rows 0-299 and 700-899) between busy ones: the persistent
// forward leaves those tiles to empty_rows_kernel, which must write O = 0 and LSE = -inf.
std::vector<lca_slice> mask_with_empty_tiles(int64_t s) {
  return {slice(300, 700, 0, 700, LCA_SLICE_CAUSAL), slice(900, s, 0, s / 2, LCA_SLICE_FULL)};
}

std::vector<Problem> hand_cases() {
  const int32_t bf = LCA_DTYPE_BF16, hf = LCA_DTYPE_F16;
  return {
      make("full_257_gqa1_d64_bf16", 257, 257, 4, 4, 64, bf, mask_full(257, 257)),
      make("full_37x1000_gqa2_d128_f16", 37, 1000, 4, 2, 128, hf, mask_full(37, 1000)),
      make("full_1000x37_gqa2_d64_bf16", 1000, 37, 4, 2, 64, bf, mask_full(1000, 37)),
      make("causal_1000_gqa2_d128_bf16", 1000, 1000, 4, 2, 128, bf, mask_causal(1000)),
      make("causal_37_gqa4_d64_f16", 37, 37, 4, 1, 64, hf, mask_causal(37)),
      make("causal_2048_gqa8_d128_bf16", 2048, 2048, 8, 1, 128, bf, mask_causal(2048)),
      make("documents_causal_257_gqa4_d128_bf16", 257, 257, 4, 1, 128, bf, mask_documents({100, 57, 1, 99}, true)),
      make("documents_full_1000_gqa2_d64_f16", 1000, 1000, 4, 2, 64, hf, mask_documents({300, 37, 600, 63}, false)),
      make("sliding_window_1000_gqa4_d64_bf16", 1000, 1000, 4, 1, 64, bf, mask_sliding_window(1000, 128)),
      make("sliding_window_257_gqa1_d128_f16", 257, 257, 2, 2, 128, hf, mask_sliding_window(257, 32)),
      make("inv_bi_causal_257x300_gqa2_d128_f16", 257, 300, 4, 2, 128, hf, mask_inv_bi(257, 300)),
      make("inv_bi_causal_1000_gqa1_d64_bf16", 1000, 1000, 2, 2, 64, bf, mask_inv_bi(1000, 1000)),
      make("empty_rows_257_gqa2_d64_bf16", 257, 257, 4, 2, 64, bf, mask_with_empty_rows(257)),
      make("empty_rows_1000_gqa3_d128_f16", 1000, 1000, 6, 2, 128, hf, mask_with_empty_rows(1000)),
      make("empty_tiles_1100_gqa2_d128_bf16", 1100, 1100, 4, 2, 128, bf, mask_with_empty_tiles(1100)),
      make("shared_rows_777_gqa2_d128_bf16", 777, 777, 4, 2, 128, bf, mask_shared_rows(777)),
      make("shared_rows_300_gqa1_d64_f16", 300, 300, 2, 2, 64, hf, mask_shared_rows(300)),
  };
}

class FlexFlashHand : public ::testing::TestWithParam<Problem> {};
TEST_P(FlexFlashHand, MatchesCpuReference) {
  LCA_SKIP_WITHOUT_GPU();
  expect_matches_reference(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Masks, FlexFlashHand, ::testing::ValuesIn(hand_cases()),
                         [](const auto& info) { return info.param.name; });

struct Pattern {
  std::string name, params;
};
std::vector<Pattern> builtin_patterns() {
  return {{"full", "{}"},
          {"causal", "{}"},
          {"full_document", R"({"dist":"uniform:1-700"})"},
          {"causal_document", R"({"dist":"uniform:1-700"})"},
          {"sliding_window", R"({"window":200})"},
          {"sliding_window_causal", R"({"window":150})"},
          {"sliding_window_document", R"({"window":100,"dist":"uniform:50-900"})"},
          {"shared_question", "{}"},
          {"causal_blockwise", "{}"},
          {"prefix_lm_causal", "{}"},
          {"prefix_lm_document", R"({"dist":"uniform:50-900"})"},
          {"global_sliding", "{}"},
          {"block_causal_document", "{}"},
          {"block_sparse", R"({"sparsity":0.3})"}};
}

class FlexFlashBuiltin : public ::testing::TestWithParam<Pattern> {};
TEST_P(FlexFlashBuiltin, MatchesCpuReference) {
  LCA_SKIP_WITHOUT_GPU();
  const Pattern& pat = GetParam();
  // bf16 d128 GQA 2 at an odd length; f16 d64 GQA 3 at another.
  const struct {
    int64_t seqlen;
    int hq, hkv, d;
    int32_t dtype;
  } shapes[] = {{1999, 4, 2, 128, LCA_DTYPE_BF16}, {1201, 6, 2, 64, LCA_DTYPE_F16}};
  for (const auto& sh : shapes) {
    std::vector<lca_slice> slices = builtin_slices(pat.name, pat.params, sh.seqlen, 11);
    const std::string label = pat.name + "_" + std::to_string(sh.seqlen) + "_d" + std::to_string(sh.d);
    SCOPED_TRACE(label);
    expect_matches_reference(make(label, sh.seqlen, sh.seqlen, sh.hq, sh.hkv, sh.d, sh.dtype, std::move(slices)));
  }
}
INSTANTIATE_TEST_SUITE_P(Patterns, FlexFlashBuiltin, ::testing::ValuesIn(builtin_patterns()),
                         [](const auto& info) { return info.param.name; });

// flex_flash's forward and two backward calls (accumulators must be zeroed each call) against
// cuda_reference on the same inputs: for problems too large for cpu_reference in a test.
void expect_matches_gpu_reference(const Problem& p, uint64_t seed) {
  const Inputs in = make_inputs(p, seed);
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  const Results ref = run_cuda(PluginHandle("cuda_reference"), p, in, true, alloc, stream.handle());
  ASSERT_EQ(ref.status, LCA_OK) << ref.error;
  const Results got = run_cuda(PluginHandle("flex_flash"), p, in, true, alloc, stream.handle(), /*backward_calls=*/2,
                               flex_config());
  ASSERT_EQ(got.status, LCA_OK) << got.error;
  const Tolerance tol = tolerance(p.dtype);
  const double e_o = rel_l2(got.o, ref.o), e_lse = lse_max_abs(got.lse, ref.lse);
  const double e_dq = rel_l2(got.dq, ref.dq), e_dk = rel_l2(got.dk, ref.dk), e_dv = rel_l2(got.dv, ref.dv);
  std::printf("[flex_flash vs cuda_reference] %s o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", p.name.c_str(), e_o, e_lse,
              e_dq, e_dk, e_dv);
  EXPECT_LE(e_o, tol.out);
  EXPECT_LE(e_lse, tol.lse);
  EXPECT_LE(e_dq, tol.grad);
  EXPECT_LE(e_dk, tol.grad);
  EXPECT_LE(e_dv, tol.grad);
}

// block_sparse at 8K with heads 16:8: the backward's 64 key tiles x 8 kv heads make 512 blocks, so
// most start after the first wave; the default skip backward starts those where the running blocks
// of their kv head are and wraps round their walk (backward_sm90.cuh, plain walks); its key tiles
// are matched 64-key blocks (test_flex_schedule checks that the default matches them). The forward
// is the pair kernel (group 2).
TEST(FlexFlash, LateBlocksOfTheSkipBackwardMatchTheGpuReference) {
  LCA_SKIP_WITHOUT_GPU();
  const int64_t s = 8192;
  expect_matches_gpu_reference(make("block_sparse_8k_gqa2_d128_bf16", s, s, 16, 8, 128, LCA_DTYPE_BF16,
                                    builtin_slices("block_sparse", "{}", s, 5)),
                               77);
}

// A question's key tile that every query sees, beside documents of 1024 tokens (8K, heads 16:8): by
// default the backward splits its walk across blocks (split_long_walks; test_flex_schedule checks
// that it does on 132 SMs), whose dK and dV go through an fp32 accumulator and kv_kernel, zeroed
// each backward call; the documents' key tiles take the document-local order.
TEST(FlexFlash, ALongWalkSplitAcrossBlocksMatchesTheGpuReference) {
  LCA_SKIP_WITHOUT_GPU();
  const int64_t s = 8192;
  expect_matches_gpu_reference(make("question_docs_8k_gqa2_d128_bf16", s, s, 16, 8, 128, LCA_DTYPE_BF16,
                                    lca::test::question_then_documents(s, 128, 1024)),
                               78);
}

// Two windows at 8K with heads 16:8 (64 key tiles x 8 kv heads: 512 blocks, most of them after the
// first wave): by default the backward's first writers store dQ where the other blocks add, and
// prepare_kernel zeroes only the tiles without one (test_flex_schedule checks that these cases have
// them); two calls on one plan, so the second waits for the second call's stores.
TEST(FlexFlash, FirstWritersOfDqMatchTheGpuReference) {
  LCA_SKIP_WITHOUT_GPU();
  const int64_t s = 8192;
  for (const char* name : {"sliding_window_causal", "sliding_window"}) {
    expect_matches_gpu_reference(make(std::string(name) + "_8k_gqa2_d128_bf16", s, s, 16, 8, 128, LCA_DTYPE_BF16,
                                      builtin_slices(name, "{}", s, 5)),
                                 79);
  }
}

// A grid whose last wave is partly filled (full at 4105 tokens, heads 8:1, head dim 64: 22 row tiles
// of 192 rows a head, 176 blocks on 132 SMs): by default split-KV cuts only the last wave's row
// tiles, the heads going out 4 together, and a pass combines the parts' O and LSE (the last row
// tile holds 73 rows). Causal likewise cuts its shortest row tiles.
TEST(FlexFlash, TheLastWavesSplitRowTilesMatchTheGpuReference) {
  LCA_SKIP_WITHOUT_GPU();
  const int64_t s = 4105;
  expect_matches_gpu_reference(make("full_4105_gqa8_d64_bf16", s, s, 8, 1, 64, LCA_DTYPE_BF16, mask_full(s, s)), 82);
  expect_matches_gpu_reference(make("causal_4105_gqa8_d64_f16", s, s, 8, 1, 64, LCA_DTYPE_F16, mask_causal(s)), 83);
}

// Head dim 64 with row tiles long enough for the 128-key kernel (causal and documents at 8K + 37)
// and heads enough (48:12) that the grid of 192-row tiles keeps their gain on an H100: by default the
// forward there runs three consumers on 192-row tiles (plan() builds the 192-row schedule; the last
// tile is partial, and causal's diagonal tiles are masked in 192-word bitmasks; test_flex_schedule's
// TheThreeConsumerGpuTestsMasksTakeThreeConsumers checks that the default takes them).
TEST(FlexFlash, ThreeConsumersAtHeadDim64MatchTheGpuReference) {
  LCA_SKIP_WITHOUT_GPU();
  const int64_t s = 8192 + 37;
  expect_matches_gpu_reference(make("causal_8k37_gqa4_d64_bf16", s, s, 48, 12, 64, LCA_DTYPE_BF16, mask_causal(s)), 80);
  expect_matches_gpu_reference(make("documents_8k37_gqa4_d64_f16", s, s, 48, 12, 64, LCA_DTYPE_F16,
                                    mask_documents({5000, 37, 2000, s - 7037}, true)),
                               81);
}

// Head dim 128 with a sliding window's short row tiles (the persistent kernel's class) at 16K + 37
// and heads 64:8, enough that the grid of 192-row tiles keeps their gain on an H100: by default the
// forward there runs three consumers on 192-row tiles in 64-key steps, each skipping the tiles its
// rows do not see (sm90_overlap_wg3; test_flex_schedule's TheWindowGpuTestsMasksTakeThreeConsumers
// checks that the default takes them). The last tile is partial; documents end inside tiles.
TEST(FlexFlash, ThreeConsumersInWindowsMatchTheGpuReference) {
  LCA_SKIP_WITHOUT_GPU();
  const int64_t s = 16384 + 37;
  int32_t seed = 82;
  for (const char* name : {"sliding_window_causal", "sliding_window_document"}) {
    expect_matches_gpu_reference(make(std::string(name) + "_16k37_gqa8_d128_bf16", s, s, 64, 8, 128, LCA_DTYPE_BF16,
                                      builtin_slices(name, "{}", s, 7)),
                                 seed++);
  }
}

// Short documents with one kv head (heads 8:1) at 6007 tokens: the backward's 47 key tiles fit in
// one wave, and by default the skip kernel runs their walks split (skip_split_walks;
// test_flex_schedule checks that it splits them on 132 SMs), the parts' dK and dV through the fp32
// accumulator. The last tile is partial; documents end inside tiles.
TEST(FlexFlash, SplitWalksOfTheSkipBackwardMatchTheGpuReference) {
  LCA_SKIP_WITHOUT_GPU();
  const int64_t s = 6007;
  expect_matches_gpu_reference(make("causal_document_6007_gqa8_d128_bf16", s, s, 8, 1, 128, LCA_DTYPE_BF16,
                                    builtin_slices("causal_document", R"({"dist":"uniform:250-650"})", s, 404)),
                               84);
  expect_matches_gpu_reference(make("prefix_lm_document_6007_gqa8_d64_bf16", s, s, 8, 1, 64, LCA_DTYPE_BF16,
                                    builtin_slices("prefix_lm_document", R"({"dist":"uniform:300-800"})", s, 404)),
                               85);
}

// plan_info names the kernels forward() and backward() launch (by the values of the "forward" and
// "backward" options that force them) and the schedules they walk. With the defaults on a Hopper
// GPU with the sm_90a build, on the problems of the GPU tests above: the pair forward and the matched
// skip backward on block_sparse (group 2), three consumers on the windows at head dim 128 and on
// causal at head dim 64, dQ's first writers on the windows, a split walk for a question beside
// documents; elsewhere the mma.sync kernels. Under a variant that forces a kernel, full's plan
// names that kernel.
TEST(FlexFlash, PlanInfoNamesTheKernelsThatRun) {
  LCA_SKIP_WITHOUT_GPU();
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  PluginHandle plugin("flex_flash");
  auto info_of = [&](const Problem& p) {
    const nlohmann::json j = nlohmann::json::parse(plan_info_of(plugin, p, alloc, stream.handle(), flex_config()));
    std::printf("[plan_info] %s: %s\n", p.name.c_str(), j.dump().c_str());
    return j;
  };
  auto builtin = [](const char* name, int64_t s, int hq, int hkv, int d) {
    return make(std::string(name) + "_" + std::to_string(s), s, s, hq, hkv, d, LCA_DTYPE_BF16,
                builtin_slices(name, "{}", s, 7));
  };
  const Problem full = make("full_8k", 8192, 8192, 16, 8, 128, LCA_DTYPE_BF16, mask_full(8192, 8192));
  const nlohmann::json f = info_of(full);
  for (const char* pass : {"forward", "backward"}) {
    ASSERT_TRUE(f.contains(pass) && f[pass].is_object()) << f.dump();
    EXPECT_TRUE(f[pass]["kernel"].is_string());
  }
  const int rows = f["forward"]["tile_rows"].get<int>();
  EXPECT_EQ(f["forward"]["row_tiles"].get<int>(), (8192 + rows - 1) / rows);
  EXPECT_EQ(f["backward"]["key_tiles"].get<int>(), 8192 / f["backward"]["tile_keys"].get<int>());
  EXPECT_TRUE(f["backward"]["dq_first_writers"].is_boolean());
  EXPECT_TRUE(f["backward"]["dv_first"].is_boolean());
  EXPECT_GE(f["backward"]["blocks"].get<int64_t>(), 8);
  // Full's equal walks fill whole waves but the last: their simulated dispatch ends near an even
  // spread (0 where mma.sync runs, which has no blocks of the Hopper kernels).
  const double dispatch = f["backward"]["dispatch_over_spread"].get<double>();
  if (f["backward"]["kernel"] == "mma") {
    EXPECT_EQ(dispatch, 0.0);
  } else {
    EXPECT_GE(dispatch, 1.0);
    EXPECT_LT(dispatch, 1.5);
  }

  const std::string forced_fwd = flex_options().value("forward", ""), forced_bwd = flex_options().value("backward", "");
  const bool variant = !flex_options().empty();
  const core::gpu::GpuInfo gpu = core::gpu::query(0);
#ifdef LCA_FLEX_TEST_SM90A
  const bool hopper = gpu.cc_major == 9 && gpu.cc_minor == 0;
#else
  const bool hopper = false;
#endif
  if (!hopper) {
    EXPECT_EQ(f["forward"]["kernel"], "mma");
    EXPECT_EQ(f["backward"]["kernel"], "mma");
    return;
  }
  if (variant) {
    // A forced 128-row forward runs on full's 128-row schedule; the pair kernels on its 64-row one
    // (group 2); sm90_k128_wg3 is a head dim 64 kernel: at 128 it asks for sm90_k128.
    if (!forced_fwd.empty())
      EXPECT_EQ(f["forward"]["kernel"], forced_fwd == "sm90_k128_wg3" ? "sm90_k128" : forced_fwd);
    for (const char* forced : {"mma", "sm90_atomic", "sm90_skip", "sm90_noskip"})
      if (forced_bwd == forced) EXPECT_EQ(f["backward"]["kernel"], forced);
    // dV first runs where the kernel without the skip does: full's default backward.
    if (flex_options().value("bwd_dv_first", "") == "on" && (forced_bwd.empty() || forced_bwd == "sm90_noskip"))
      EXPECT_EQ(f["backward"]["dv_first"], true);
    // A forced split (parts_N, long_N) splits full's row tiles (every one as long as the longest)
    // on the kernels that split: sm90_k128 (and sm90_k128_wg3 asked for at this head dim) and
    // sm90_persistent.
    const std::string split = flex_options().value("fwd_split", "auto");
    const std::string kernel = f["forward"]["kernel"].get<std::string>();
    if (split.rfind("parts_", 0) == 0 || split.rfind("long_", 0) == 0) {
      if (kernel == "sm90_k128" || kernel == "sm90_persistent") {
        EXPECT_GE(f["forward"]["splits"].get<int>(), 2) << f.dump();
        EXPECT_EQ(f["forward"]["split_row_tiles"].get<int>(), f["forward"]["row_tiles"].get<int>()) << f.dump();
      }
    } else if (split == "off") {
      EXPECT_EQ(f["forward"]["split_row_tiles"].get<int>(), 0) << f.dump();
    }
    return;
  }
  // full at 8K, 16 heads: 7.8 waves of even walks, not split.
  EXPECT_EQ(f["forward"]["split_row_tiles"].get<int>(), 0);
  EXPECT_EQ(f["forward"]["kernel"], "sm90_k128");
  // global_sliding's global rows (18 tokens, window 294) walk every key: at 8:1 their row tile
  // would end the forward alone; the default splits that row tile, not the others.
  const Problem gs = make("global_sliding_39936", 39936, 39936, 8, 1, 64, LCA_DTYPE_BF16,
                          builtin_slices("global_sliding", R"({"global_tokens": 18, "window": 294})", 39936, 7));
  const nlohmann::json g = info_of(gs);
  EXPECT_GE(g["forward"]["splits"].get<int>(), 2) << g.dump();
  EXPECT_GE(g["forward"]["split_row_tiles"].get<int>(), 1) << g.dump();
  EXPECT_LE(g["forward"]["split_row_tiles"].get<int>(), 2) << g.dump();
  EXPECT_EQ(f["backward"]["dv_first"], false);

  const nlohmann::json bs = info_of(builtin("block_sparse", 8192, 16, 8, 128));
  EXPECT_EQ(bs["forward"]["kernel"], "sm90_pair");
  EXPECT_EQ(bs["forward"]["tile_rows"], 64);
  EXPECT_EQ(bs["backward"]["kernel"], "sm90_skip");
  EXPECT_EQ(bs["backward"]["matched_key_blocks"], true);

  for (const char* window : {"sliding_window_causal", "sliding_window_document"}) {
    const nlohmann::json w = info_of(builtin(window, 16384 + 37, 64, 8, 128));
    EXPECT_EQ(w["forward"]["kernel"], "sm90_overlap_wg3") << window;
    EXPECT_EQ(w["forward"]["tile_rows"], 192) << window;
  }
  const nlohmann::json swc8k = info_of(builtin("sliding_window_causal", 8192, 16, 8, 128));
  EXPECT_EQ(swc8k["backward"]["kernel"], "sm90_noskip");
  EXPECT_EQ(swc8k["backward"]["dq_first_writers"], true);

  const int64_t s = 8192 + 37;
  const nlohmann::json c64 = info_of(make("causal_8k37_gqa4_d64", s, s, 48, 12, 64, LCA_DTYPE_BF16, mask_causal(s)));
  EXPECT_EQ(c64["forward"]["kernel"], "sm90_k128_wg3");
  EXPECT_EQ(c64["forward"]["tile_rows"], 192);

  const nlohmann::json qd = info_of(
      make("question_docs_8k", 8192, 8192, 16, 8, 128, LCA_DTYPE_BF16, lca::test::question_then_documents(8192, 128, 1024)));
  EXPECT_GT(qd["backward"]["split_walks"].get<int>(), 0);

  const nlohmann::json sd = info_of(make("causal_document_6007", 6007, 6007, 8, 1, 128, LCA_DTYPE_BF16,
                                         builtin_slices("causal_document", R"({"dist":"uniform:250-650"})", 6007, 404)));
  EXPECT_EQ(sd["backward"]["kernel"], "sm90_skip");
  EXPECT_GT(sd["backward"]["split_walks"].get<int>(), 0);

  // Full at 4105 tokens, 8:1, head dim 64: on 132 SMs split-KV cuts the last wave's 6 row tiles of
  // 192 rows in 2 and sends 4 heads out together (test_flex_schedule's
  // TailSplitCutsTheLastWavesRowTiles).
  if (gpu.sm_count == 132) {
    const nlohmann::json tail = info_of(make("full_4105_d64", 4105, 4105, 8, 1, 64, LCA_DTYPE_BF16, mask_full(4105, 4105)));
    EXPECT_EQ(tail["forward"]["kernel"], "sm90_k128_wg3") << tail.dump();
    EXPECT_EQ(tail["forward"]["splits"], 2) << tail.dump();
    EXPECT_EQ(tail["forward"]["split_row_tiles"], 6) << tail.dump();
    EXPECT_EQ(tail["forward"]["heads_together"], 4) << tail.dump();
  }
}

// Two instances of one process, created with other options, plan the same problem with the kernels
// their options force (a matrix's two labelled rows of flex_flash): the options are the instance's,
// not the process's. On a Hopper GPU with the sm_90a build; elsewhere both run mma.sync.
TEST(FlexFlash, EachInstanceRunsTheKernelsOfItsOptions) {
  LCA_SKIP_WITHOUT_GPU();
  if (!flex_options().empty()) GTEST_SKIP() << "a variant run: the plain run checks the instances' options";
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  PluginHandle plugin("flex_flash");
  const Problem full = make("full_4k", 4096, 4096, 16, 8, 128, LCA_DTYPE_BF16, mask_full(4096, 4096));
  auto info_with = [&](const std::string& config) {
    return nlohmann::json::parse(plan_info_of(plugin, full, alloc, stream.handle(), config));
  };
  const nlohmann::json plain = info_with("{}");
  const nlohmann::json forced = info_with(R"({"forward": "sm90_k128_pingpong", "backward": "sm90_atomic"})");
  const nlohmann::json mma = info_with(R"({"forward": "mma", "backward": "mma"})");
  const nlohmann::json again = info_with("{}");
  EXPECT_EQ(mma["forward"]["kernel"], "mma");
  EXPECT_EQ(mma["backward"]["kernel"], "mma");
  EXPECT_EQ(again, plain) << "an earlier instance's options leaked into a later one";
#ifdef LCA_FLEX_TEST_SM90A
  const core::gpu::GpuInfo gpu = core::gpu::query(0);
  if (gpu.cc_major == 9 && gpu.cc_minor == 0) {
    EXPECT_NE(plain["forward"]["kernel"], "sm90_k128_pingpong");
    EXPECT_NE(plain["backward"]["kernel"], "sm90_atomic");
    EXPECT_EQ(forced["forward"]["kernel"], "sm90_k128_pingpong");
    EXPECT_EQ(forced["backward"]["kernel"], "sm90_atomic");
  }
#endif
  // The forced instance computes the same attention.
  const Inputs in = make_inputs(full, 11);
  const Results a = run_cuda(plugin, full, in, true, alloc, stream.handle(), 1, "{}");
  const Results b =
      run_cuda(plugin, full, in, true, alloc, stream.handle(), 1, R"({"forward": "sm90_k128_pingpong", "backward": "sm90_atomic"})");
  ASSERT_EQ(a.status, LCA_OK) << a.error;
  ASSERT_EQ(b.status, LCA_OK) << b.error;
  EXPECT_LE(rel_l2(b.o, a.o), 1e-2);
  EXPECT_LE(rel_l2(b.dq, a.dq), 2e-2);
  EXPECT_LE(rel_l2(b.dk, a.dk), 2e-2);
}

// A bad option fails create(), before any device work (no GPU needed): the message names the option
// and the allowed values.
TEST(FlexFlashOptions, BadOptionsFailCreateNamingTheAllowedValues) {
  PluginHandle plugin("flex_flash");
  const lca_kernel_vtable& vt = plugin.kernel();
  for (const auto& [config, want] : {std::pair{R"({"forward": "sm90_k256"})", "sm90_overlap_wg3"},
                                     std::pair{R"({"bwd_split": "on"})", "off, all"},
                                     std::pair{R"({"fwd": "mma"})", "unknown option 'fwd'"},
                                     std::pair{"[1, 2]", "JSON object"}}) {
    lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, config, nullptr, nullptr};
    lca_kernel* kernel = nullptr;
    EXPECT_EQ(vt.create(&host, &kernel), LCA_ERR_INVALID_ARGUMENT) << config;
    EXPECT_EQ(kernel, nullptr);
    const std::string error = vt.last_error();
    EXPECT_NE(error.find(want), std::string::npos) << config << ": " << error;
  }
  lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr,
                     R"({"forward": "sm90_pair", "bwd_order": "kv_heads_2"})", nullptr, nullptr};
  lca_kernel* kernel = nullptr;
  ASSERT_EQ(vt.create(&host, &kernel), LCA_OK) << vt.last_error();
  vt.destroy(kernel);
}

TEST(FlexFlash, RefusesWhatTheManifestDoesNotDeclare) {
  LCA_SKIP_WITHOUT_GPU();
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  PluginHandle plugin("flex_flash");
  for (const auto& [p, want] :
       {std::pair{make("d96", 128, 128, 2, 2, 96, LCA_DTYPE_BF16, mask_causal(128)), "head_dim 96"},
        std::pair{make("f32", 128, 128, 2, 2, 64, LCA_DTYPE_F32, mask_causal(128)), "dtype f32"}}) {
    const Inputs in = make_inputs(p, 1);
    const Results got = run_cuda(plugin, p, in, false, alloc, stream.handle());
    EXPECT_EQ(got.status, LCA_ERR_UNSUPPORTED) << p.name;
    EXPECT_NE(got.error.find(want), std::string::npos) << got.error;
  }
}

}  // namespace
}  // namespace lca::test::cuda
