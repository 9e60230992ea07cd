// cuda_reference and cuda_naive against cpu_reference (fp64 accumulation) on hand-built slice
// masks: full, causal, documents, sliding window, INV_CAUSAL / BI_CAUSAL, rows that see nothing,
// odd lengths, GQA 1/2/3/4/8, head dims 64/128 (and 96, 256), bf16 / f16 (/ f32), fwd and bwd.
#include "harness.hpp"

#include <lca/slice_ranges.hpp>

#include <gtest/gtest.h>

#include <cstdio>

namespace lca::test::cuda {
namespace {

#define LCA_SKIP_WITHOUT_GPU() \
  if (core::gpu::device_count() == 0) GTEST_SKIP() << "no CUDA device visible (driver or GPU absent)"

struct Tolerance {
  double out, grad, lse;
};

// bf16 inputs and outputs carry ~2^-9 relative rounding; naive also rounds P and dS to the dtype.
Tolerance tolerance(const std::string& plugin, int32_t dtype) {
  const bool naive = plugin == "cuda_naive";
  switch (dtype) {
    case LCA_DTYPE_BF16: return naive ? Tolerance{1.5e-2, 2.5e-2, 2e-3} : Tolerance{1e-2, 1e-2, 2e-3};
    case LCA_DTYPE_F16: return naive ? Tolerance{3e-3, 5e-3, 2e-3} : Tolerance{2e-3, 2e-3, 2e-3};
    default: return Tolerance{1e-5, 1e-5, 1e-4};
  }
}

Problem make(std::string name, int64_t sq, int64_t sk, int hq, int hkv, int d, int32_t dtype,
             std::vector<lca_slice> slices) {
  return Problem{std::move(name), sq, sk, hq, hkv, d, dtype, std::move(slices)};
}

std::vector<Problem> cases() {
  const int32_t bf = LCA_DTYPE_BF16, hf = LCA_DTYPE_F16;
  return {
      make("full_257_gqa1_d64_bf16", 257, 257, 4, 4, 64, bf, mask_full(257, 257)),
      make("full_37x1000_gqa2_d128_f16", 37, 1000, 4, 2, 128, hf, mask_full(37, 1000)),
      make("causal_1000_gqa2_d128_bf16", 1000, 1000, 4, 2, 128, bf, mask_causal(1000)),
      make("causal_37_gqa4_d64_f16", 37, 37, 4, 1, 64, hf, mask_causal(37)),
      make("causal_257_gqa4_d256_bf16", 257, 257, 4, 1, 256, bf, mask_causal(257)),
      make("documents_causal_257_gqa4_d128_bf16", 257, 257, 4, 1, 128, bf, mask_documents({100, 57, 1, 99}, true)),
      make("documents_full_1000_gqa2_d64_f16", 1000, 1000, 4, 2, 64, hf, mask_documents({300, 37, 600, 63}, false)),
      make("sliding_window_1000_gqa4_d64_bf16", 1000, 1000, 4, 1, 64, bf, mask_sliding_window(1000, 128)),
      make("sliding_window_257_gqa1_d128_f16", 257, 257, 2, 2, 128, hf, mask_sliding_window(257, 32)),
      make("inv_bi_causal_257x300_gqa2_d128_f16", 257, 300, 4, 2, 128, hf, mask_inv_bi(257, 300)),
      make("inv_bi_causal_1000_gqa1_d64_bf16", 1000, 1000, 2, 2, 64, bf, mask_inv_bi(1000, 1000)),
      make("empty_rows_257_gqa2_d64_bf16", 257, 257, 4, 2, 64, bf, mask_with_empty_rows(257)),
      make("empty_rows_1000_gqa1_d96_f16", 1000, 1000, 2, 2, 96, hf, mask_with_empty_rows(1000)),
      make("causal_257_gqa8_d64_bf16", 257, 257, 8, 1, 64, bf, mask_causal(257)),
      make("documents_causal_257_gqa3_d128_f16", 257, 257, 6, 2, 128, hf, mask_documents({128, 129}, true)),
      make("causal_257_gqa2_d64_f32", 257, 257, 4, 2, 64, LCA_DTYPE_F32, mask_causal(257)),
  };
}

class CudaKernels : public ::testing::TestWithParam<Problem> {};

TEST_P(CudaKernels, MatchCpuReference) {
  LCA_SKIP_WITHOUT_GPU();
  const Problem& p = GetParam();
  const Inputs in = make_inputs(p, 2026);
  const Results ref = run_cpu_reference(p, in, true);
  ASSERT_EQ(ref.status, LCA_OK) << ref.error;
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  for (const char* name : {"cuda_reference", "cuda_naive"}) {
    SCOPED_TRACE(name);
    PluginHandle plugin(name);
    const Results got = run_cuda(plugin, p, in, true, alloc, stream.handle());
    if (std::string(name) == "cuda_naive" && p.dtype == LCA_DTYPE_F32) {
      EXPECT_EQ(got.status, LCA_ERR_UNSUPPORTED) << "cuda_naive declares bf16/f16 only";
      continue;
    }
    ASSERT_EQ(got.status, LCA_OK) << got.error;
    const Tolerance tol = tolerance(name, p.dtype);
    const double e_o = rel_l2(got.o, ref.o), e_lse = lse_max_abs(got.lse, ref.lse);
    const double e_dq = rel_l2(got.dq, ref.dq), e_dk = rel_l2(got.dk, ref.dk), e_dv = rel_l2(got.dv, ref.dv);
    std::printf("[%s] %-40s o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", name, p.name.c_str(), e_o, e_lse, e_dq,
                e_dk, e_dv);
    EXPECT_LE(e_o, tol.out);
    EXPECT_LE(e_lse, tol.lse);
    EXPECT_LE(e_dq, tol.grad);
    EXPECT_LE(e_dk, tol.grad);
    EXPECT_LE(e_dv, tol.grad);
    EXPECT_EQ(alloc.current_bytes(), 0u) << "a plan kept device memory after destroy_plan";
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, CudaKernels, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// The column ranges cuda_reference derives for dK/dV agree with slice_contains, the definition.
TEST(SliceLists, ColumnRangesMatchSliceContains) {
  for (int type = LCA_SLICE_FULL; type <= LCA_SLICE_BI_CAUSAL; ++type) {
    for (auto [lq, lk] : {std::pair<int64_t, int64_t>{7, 7}, {5, 9}, {9, 5}, {1, 4}}) {
      const lca_slice s = slice(3, 3 + lq, 2, 2 + lk, static_cast<lca_slice_type>(type));
      for (int64_t k = 0; k < 20; ++k) {
        int64_t a, b;
        lca::slice_col_range(s, k, &a, &b);
        for (int64_t q = 0; q < 20; ++q)
          EXPECT_EQ(q >= a && q < b, lca::slice_contains(s, q, k))
              << slice_type_name(type) << " lq " << lq << " lk " << lk << " q " << q << " k " << k;
      }
    }
  }
}

TEST(SliceLists, RowListsCoverExactlyTheMask) {
  const int64_t s = 257;
  for (const auto& sl : {mask_inv_bi(s, s), mask_with_empty_rows(s), mask_sliding_window(s, 32)}) {
    lca_mask m{sizeof(lca_mask), s, s, int64_t(sl.size()), sl.data(), nullptr, 0, nullptr};
    for (bool by_query : {true, false}) {
      const auto lists = lca::build_range_lists(m, by_query);
      for (int64_t r = 0; r < s; ++r) {
        std::vector<char> seen(s, 0);
        for (int64_t e = lists.offsets[r]; e < lists.offsets[r + 1]; ++e)
          for (int64_t x = lists.ranges[2 * e]; x < lists.ranges[2 * e + 1]; ++x) seen[x] += 1;
        for (int64_t x = 0; x < s; ++x) {
          bool want = false;
          for (const auto& one : sl) want |= by_query ? slice_contains(one, r, x) : slice_contains(one, x, r);
          ASSERT_EQ(seen[x], want ? 1 : 0) << (by_query ? "row " : "col ") << r << " at " << x;
        }
      }
    }
  }
}

}  // namespace
}  // namespace lca::test::cuda
