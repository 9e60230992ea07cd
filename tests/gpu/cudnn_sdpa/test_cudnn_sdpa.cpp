// cudnn_sdpa against cpu_reference through the C ABI: every declared mask, forward (O, LSE) and
// backward (dQ, dK, dV), bf16 and f16, head dims 64 and 128, GQA 1 and 8, an odd total length
// with odd document lengths. Plus refusals in plan(), which need no GPU.
#include "device_fill.hpp"
#include "harness.hpp"
#include "masks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

namespace lca::test {
namespace {

constexpr int32_t kHeadsQ = 8;
constexpr int64_t kWindow = 37;

struct Case {
  std::string mask;
  int32_t dtype;
  int32_t head_dim;
  int32_t heads_kv;
  bool long_sequence = false;  // 1531 tokens, one document past 1024, window 300
};

// Past 1024 keys cuDNN picks other tilings (and 9.14.0 had a window bug there).
std::vector<int64_t> long_doc_lengths() { return {1100, 3, 257, 171}; }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return c.mask + "_" + dtype_name(c.dtype) + "_d" + std::to_string(c.head_dim) + "_gqa" +
         std::to_string(kHeadsQ / c.heads_kv) + (c.long_sequence ? "_long" : "");
}

lca_problem problem_for(const Case& c, int64_t s) {
  return lca_problem{sizeof(lca_problem), c.dtype, LCA_DEVICE_CUDA, 0, s, s, kHeadsQ, c.heads_kv, c.head_dim,
                     1.0f / std::sqrt(static_cast<float>(c.head_dim))};
}

class CudnnSdpaVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(CudnnSdpaVsReference, ForwardAndBackward) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
  const Case c = GetParam();
  const TestMask m = c.long_sequence ? mask_by_name(c.mask, 300, long_doc_lengths()) : mask_by_name(c.mask, kWindow);
  ASSERT_GT(m.seqlen, 0) << "unknown mask " << c.mask;
  const int64_t s = m.seqlen, hq = kHeadsQ, hkv = c.heads_kv, d = c.head_dim;
  const lca_mask mask = m.view();

  // cuDNN on the device.
  PluginHandle cudnn_lib("cudnn_sdpa");
  Kernel cudnn(cudnn_lib, "{}");
  Allocator dev(true);
  const lca_exec exec{sizeof(lca_exec), nullptr, &dev.abi, 0};
  const lca_problem problem = problem_for(c, s);
  Tensor q(c.dtype, {s, hq, d}, true), k(c.dtype, {s, hkv, d}, true), v(c.dtype, {s, hkv, d}, true);
  Tensor o(c.dtype, {s, hq, d}, true), d_o(c.dtype, {s, hq, d}, true), lse(LCA_DTYPE_F32, {hq, s, 1}, true);
  Tensor dq(c.dtype, {s, hq, d}, true), dk(c.dtype, {s, hkv, d}, true), dv(c.dtype, {s, hkv, d}, true);
  const uint64_t seed = std::hash<std::string>{}(case_name({c, 0}));
  cuda_ok(device_fill_uniform(q.data(), c.dtype, q.numel(), seed + 1, 2.f, nullptr), "fill q");
  cuda_ok(device_fill_uniform(k.data(), c.dtype, k.numel(), seed + 2, 2.f, nullptr), "fill k");
  cuda_ok(device_fill_uniform(v.data(), c.dtype, v.numel(), seed + 3, 1.f, nullptr), "fill v");
  cuda_ok(device_fill_uniform(d_o.data(), c.dtype, d_o.numel(), seed + 4, 1.f, nullptr), "fill d_o");
  {
    auto plan = cudnn.plan(problem, mask, exec);
    ASSERT_EQ(plan.status, LCA_OK) << plan.message;
    cudnn.forward(plan, lca_fwd_args{sizeof(lca_fwd_args), q.view(), k.view(), v.view(), o.view(), lse.view()}, exec);
    cudnn.backward(plan,
                   lca_bwd_args{sizeof(lca_bwd_args), q.view(), k.view(), v.view(), o.view(), d_o.view(),
                                lse.view(), dq.view(), dk.view(), dv.view()},
                   exec);
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  EXPECT_EQ(dev.live, 0u) << "plan left device memory behind";

  // The reference in fp32 storage and fp64 accumulation, on the very same (rounded) inputs.
  PluginHandle ref_lib("cpu_reference");
  Kernel ref(ref_lib, "{\"accumulate\":\"f64\"}");
  Allocator host(false);
  const lca_exec hexec{sizeof(lca_exec), nullptr, &host.abi, 0};
  lca_problem hproblem = problem;
  hproblem.dtype = LCA_DTYPE_F32;
  hproblem.device_type = LCA_DEVICE_CPU;
  const int32_t f32 = LCA_DTYPE_F32;
  Tensor rq(f32, {s, hq, d}, false), rk(f32, {s, hkv, d}, false), rv(f32, {s, hkv, d}, false);
  Tensor ro(f32, {s, hq, d}, false), rdo(f32, {s, hq, d}, false), rlse(f32, {hq, s, 1}, false);
  Tensor rdq(f32, {s, hq, d}, false), rdk(f32, {s, hkv, d}, false), rdv(f32, {s, hkv, d}, false);
  rq.assign(q.values());
  rk.assign(k.values());
  rv.assign(v.values());
  rdo.assign(d_o.values());
  {
    auto plan = ref.plan(hproblem, mask, hexec);
    ASSERT_EQ(plan.status, LCA_OK) << plan.message;
    ref.forward(plan, lca_fwd_args{sizeof(lca_fwd_args), rq.view(), rk.view(), rv.view(), ro.view(), rlse.view()},
                hexec);
    ref.backward(plan,
                 lca_bwd_args{sizeof(lca_bwd_args), rq.view(), rk.view(), rv.view(), ro.view(), rdo.view(),
                              rlse.view(), rdq.view(), rdk.view(), rdv.view()},
                 hexec);
  }

  // bf16 keeps 8 significant bits, f16 11: the tolerances differ by about that factor.
  const bool bf16 = c.dtype == LCA_DTYPE_BF16;
  const double tol_o = bf16 ? 1.5e-2 : 4e-3, tol_grad = bf16 ? 2e-2 : 6e-3, tol_lse = 1e-3;
  const double e_o = rel_l2(o.values(), ro.values()), e_lse = rel_l2(lse.values(), rlse.values());
  const double e_dq = rel_l2(dq.values(), rdq.values()), e_dk = rel_l2(dk.values(), rdk.values()),
               e_dv = rel_l2(dv.values(), rdv.values());
  std::printf("[ errors   ] %-48s o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", case_name({c, 0}).c_str(), e_o,
              e_lse, e_dq, e_dk, e_dv);
  EXPECT_LT(e_o, tol_o);
  EXPECT_LT(e_lse, tol_lse);
  EXPECT_LT(e_dq, tol_grad);
  EXPECT_LT(e_dk, tol_grad);
  EXPECT_LT(e_dv, tol_grad);
}

// Each mask in both dtypes, both head dims and both GQA ratios (four combinations a mask cover
// every value of every axis in each dtype); the band masks again past 1024 tokens.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* mask : {"full", "causal", "full_document", "causal_document", "sliding_window",
                           "sliding_window_causal", "sliding_window_document"}) {
    out.push_back({mask, LCA_DTYPE_BF16, 128, kHeadsQ});
    out.push_back({mask, LCA_DTYPE_BF16, 64, 1});
    out.push_back({mask, LCA_DTYPE_F16, 128, 1});
    out.push_back({mask, LCA_DTYPE_F16, 64, kHeadsQ});
  }
  for (const char* mask : {"causal", "causal_document", "sliding_window", "sliding_window_causal",
                           "sliding_window_document"})
    out.push_back({mask, LCA_DTYPE_BF16, 64, 1, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Masks, CudnnSdpaVsReference, ::testing::ValuesIn(cases()), case_name);

// Refusals happen in plan() before any device work, so these run without a GPU.
TEST(CudnnSdpaRefusal, MasksThatAreNotBandsAreUnsupported) {
  PluginHandle lib("cudnn_sdpa");
  Kernel cudnn(lib, "{}");
  Allocator dev(true);
  const lca_exec exec{sizeof(lca_exec), nullptr, &dev.abi, 0};
  for (const TestMask& m : {prefix_lm_mask(300, 64), holes_mask(300, 16)}) {
    const lca_problem p = problem_for({m.name, LCA_DTYPE_BF16, 128, 8}, m.seqlen);
    const lca_mask mask = m.view();
    auto plan = cudnn.plan(p, mask, exec);
    EXPECT_EQ(plan.status, LCA_ERR_UNSUPPORTED) << m.name;
    EXPECT_NE(plan.message.find("mask not expressible"), std::string::npos) << plan.message;
    EXPECT_EQ(plan.plan, nullptr);
  }
}

TEST(CudnnSdpaRefusal, ProblemsOutsideTheManifestAreUnsupported) {
  PluginHandle lib("cudnn_sdpa");
  Kernel cudnn(lib, "{}");
  Allocator dev(true);
  const lca_exec exec{sizeof(lca_exec), nullptr, &dev.abi, 0};
  const TestMask m = causal_mask(256);
  const lca_mask mask = m.view();
  lca_problem f32 = problem_for({"causal", LCA_DTYPE_F32, 128, 8}, 256);
  EXPECT_EQ(cudnn.plan(f32, mask, exec).status, LCA_ERR_UNSUPPORTED);
  lca_problem odd_dim = problem_for({"causal", LCA_DTYPE_BF16, 100, 8}, 256);
  EXPECT_EQ(cudnn.plan(odd_dim, mask, exec).status, LCA_ERR_UNSUPPORTED);
  lca_problem cpu = problem_for({"causal", LCA_DTYPE_BF16, 128, 8}, 256);
  cpu.device_type = LCA_DEVICE_CPU;
  EXPECT_EQ(cudnn.plan(cpu, mask, exec).status, LCA_ERR_UNSUPPORTED);
}

TEST(CudnnSdpaRefusal, UnknownOffsetsOptionNamesTheChoices) {
  PluginHandle lib("cudnn_sdpa");
  try {
    Kernel cudnn(lib, R"({"offsets": "int16"})");
    FAIL() << "create() took offsets = int16";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("offsets"), std::string::npos) << what;
    EXPECT_NE(what.find("int64, int32"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(Kernel(lib, R"({"offsets": "int32"})"));
}

}  // namespace
}  // namespace lca::test
