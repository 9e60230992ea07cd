// Long causal sequences with 8 query heads in one kv group: cuda_reference against cuda_naive
// at 16K tokens (fwd + bwd), and cuda_reference's own time at 64K (it must stay a few seconds).
#include "harness.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

namespace lca::test::cuda {
namespace {

namespace gpu = core::gpu;

#define LCA_SKIP_WITHOUT_GPU() \
  if (gpu::device_count() == 0) GTEST_SKIP() << "no CUDA device visible (driver or GPU absent)"

TEST(CudaLong, ReferenceMatchesNaiveAt16K) {
  LCA_SKIP_WITHOUT_GPU();
  const int64_t s = 16384;
  const Problem p{"causal_16k", s, s, 8, 1, 128, LCA_DTYPE_BF16, mask_causal(s)};
  const Inputs in = make_inputs(p, 16);
  gpu::DeviceAllocator alloc(0);
  gpu::Stream stream;
  const Results ref = run_cuda(PluginHandle("cuda_reference"), p, in, true, alloc, stream.handle());
  ASSERT_EQ(ref.status, LCA_OK) << ref.error;
  const Results naive = run_cuda(PluginHandle("cuda_naive"), p, in, true, alloc, stream.handle());
  ASSERT_EQ(naive.status, LCA_OK) << naive.error;
  const double e_o = rel_l2(naive.o, ref.o), e_lse = lse_max_abs(naive.lse, ref.lse);
  const double e_dq = rel_l2(naive.dq, ref.dq), e_dk = rel_l2(naive.dk, ref.dk), e_dv = rel_l2(naive.dv, ref.dv);
  std::printf("[16K causal, 8:1 heads, d128, bf16] naive vs reference: o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
              e_o, e_lse, e_dq, e_dk, e_dv);
  EXPECT_LE(e_o, 1.5e-2);
  EXPECT_LE(e_lse, 2e-3);
  EXPECT_LE(e_dq, 2.5e-2);
  EXPECT_LE(e_dk, 2.5e-2);
  EXPECT_LE(e_dv, 2.5e-2);
}

TEST(CudaLong, ReferenceTimeAt64K) {
  LCA_SKIP_WITHOUT_GPU();
  const int64_t s = 65536;
  const int hq = 8, hkv = 1, d = 128;
  const int32_t t = LCA_DTYPE_BF16;
  gpu::DeviceAllocator alloc(0);
  gpu::Stream stream;
  const size_t qb = size_t(s) * hq * d * 2, kb = size_t(s) * hkv * d * 2, lb = size_t(s) * hq * 4;
  std::vector<void*> bufs;
  auto get = [&](size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(alloc.allocate(bytes, &p), LCA_OK);
    bufs.push_back(p);
    return p;
  };
  void *q = get(qb), *k = get(kb), *v = get(kb), *o = get(qb), *lse = get(lb), *d_o = get(qb);
  void *dq = get(qb), *dk = get(kb), *dv = get(kb);
  gpu::fill_random(q, s * hq * d, t, 1, 1.0f, stream.handle());
  gpu::fill_random(k, s * hkv * d, t, 2, 1.0f, stream.handle());
  gpu::fill_random(v, s * hkv * d, t, 3, 1.0f, stream.handle());
  gpu::fill_random(d_o, s * hq * d, t, 4, 1.0f, stream.handle());
  auto tensor = [&](void* p, int64_t heads) {
    return lca_tensor{sizeof(lca_tensor), t, p, {s, heads, d}, {heads * d, d, 1}};
  };
  const lca_tensor lse_t{sizeof(lca_tensor), LCA_DTYPE_F32, lse, {hq, s, 1}, {s, 1, 1}};
  const lca_problem pr{sizeof(lca_problem), t, LCA_DEVICE_CUDA, 0, s, s, hq, hkv, d, 1.0f / std::sqrt(128.0f)};
  const lca_slice causal{0, s, 0, s, LCA_SLICE_CAUSAL, 0};
  const lca_mask mask{sizeof(lca_mask), s, s, 1, &causal, nullptr, 0, nullptr};
  lca_exec exec{sizeof(lca_exec), stream.handle(), alloc.abi(), 0};
  PluginHandle plugin("cuda_reference");
  const auto& vt = plugin.kernel();
  lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, "{}", nullptr, nullptr};
  lca_kernel* kernel = nullptr;
  ASSERT_EQ(vt.create(&host, &kernel), LCA_OK);
  lca_plan* plan = nullptr;
  ASSERT_EQ(vt.plan(kernel, &pr, &mask, &exec, &plan), LCA_OK) << vt.last_error();
  lca_fwd_args f{sizeof(lca_fwd_args), tensor(q, hq), tensor(k, hkv), tensor(v, hkv), tensor(o, hq), lse_t};
  lca_bwd_args b{sizeof(lca_bwd_args), f.q, f.k, f.v, f.o, tensor(d_o, hq), lse_t, tensor(dq, hq), tensor(dk, hkv),
                 tensor(dv, hkv)};
  gpu::EventTimer fwd_timer, bwd_timer;
  fwd_timer.start(stream.handle());
  ASSERT_EQ(vt.forward(kernel, plan, &f, &exec), LCA_OK) << vt.last_error();
  fwd_timer.stop(stream.handle());
  bwd_timer.start(stream.handle());
  ASSERT_EQ(vt.backward(kernel, plan, &b, &exec), LCA_OK) << vt.last_error();
  bwd_timer.stop(stream.handle());
  const float fwd_ms = fwd_timer.elapsed_ms(), bwd_ms = bwd_timer.elapsed_ms();
  const double area = double(s) * (s + 1) / 2, flops = 4.0 * area * d * hq;
  std::printf("[cuda_reference] 64K causal, 8:1 heads, d128, bf16: fwd %.0f ms (%.2f TFLOP/s), bwd %.0f ms "
              "(%.2f TFLOP/s at 2.5x), peak %.1f MiB\n",
              fwd_ms, flops / fwd_ms / 1e9, bwd_ms, 2.5 * flops / bwd_ms / 1e9, alloc.peak_bytes() / 1048576.0);
  std::vector<float> lse_host(size_t(s) * hq);
  ASSERT_EQ(cudaMemcpy(lse_host.data(), lse, lb, cudaMemcpyDeviceToHost), cudaSuccess);
  int64_t bad = 0;
  for (float x : lse_host) bad += !std::isfinite(x);
  EXPECT_EQ(bad, 0);
  EXPECT_LT(fwd_ms + bwd_ms, 60000.0f);
  vt.destroy_plan(kernel, plan, &exec);
  vt.destroy(kernel);
  for (void* p : bufs) alloc.release(p);
}

}  // namespace
}  // namespace lca::test::cuda
