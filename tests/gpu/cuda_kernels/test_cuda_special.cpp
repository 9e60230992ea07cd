// cuda_reference on a strided head-subset view (what the host's long-sequence check does),
// cuda_naive's out-of-memory path (a status, memory released, the next call works), and a
// long causal run (cuda_reference against cuda_naive at 16K; cuda_reference's time at 64K).
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

struct Dev {
  gpu::DeviceAllocator& alloc;
  std::vector<void*> owned;
  void* get(size_t bytes, int fill = 0xFF) {
    void* p = nullptr;
    if (alloc.allocate(bytes, &p) != LCA_OK) throw std::runtime_error(alloc.last_error());
    owned.push_back(p);
    cudaMemset(p, fill, bytes);
    return p;
  }
  ~Dev() {
    for (void* p : owned) alloc.release(p);
  }
};

lca_tensor view(int32_t dtype, void* base, int64_t tokens, int64_t heads, int64_t dim, int64_t head0,
                int64_t full_heads) {
  char* data = static_cast<char*>(base) + head0 * dim * dtype_size(dtype);
  return lca_tensor{sizeof(lca_tensor), dtype, data, {tokens, heads, dim}, {full_heads * dim, dim, 1}};
}

lca_tensor lse_view(void* base, int64_t heads, int64_t tokens, int64_t head0) {
  return lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, static_cast<float*>(base) + head0 * tokens,
                    {heads, tokens, 1}, {tokens, 1, 1}};
}

struct Kernel {
  PluginHandle plugin;
  lca_kernel* kernel = nullptr;
  lca_plan* plan = nullptr;
  lca_exec exec;
  explicit Kernel(const char* name, const lca_exec& e) : plugin(name), exec(e) {
    lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, "{}", nullptr, nullptr};
    if (plugin.kernel().create(&host, &kernel) != LCA_OK) throw std::runtime_error(plugin.kernel().last_error());
  }
  lca_status make_plan(const lca_problem& pr, const std::vector<lca_slice>& slices) {
    drop_plan();
    lca_mask m{sizeof(lca_mask), pr.seqlen_q, pr.seqlen_k, int64_t(slices.size()), slices.data(), nullptr, 0, nullptr};
    return plugin.kernel().plan(kernel, &pr, &m, &exec, &plan);
  }
  lca_status fwd(const lca_fwd_args& a) { return plugin.kernel().forward(kernel, plan, &a, &exec); }
  lca_status bwd(const lca_bwd_args& a) { return plugin.kernel().backward(kernel, plan, &a, &exec); }
  std::string error() const { return plugin.kernel().last_error(); }
  void drop_plan() {
    if (plan != nullptr) plugin.kernel().destroy_plan(kernel, plan, &exec);
    plan = nullptr;
  }
  ~Kernel() {
    drop_plan();
    plugin.kernel().destroy(kernel);
  }
};

lca_problem problem(int64_t s, int hq, int hkv, int d, int32_t dtype) {
  lca_problem pr{sizeof(lca_problem), dtype, LCA_DEVICE_CUDA, 0, s, s, hq, hkv, d,
                 1.0f / std::sqrt(static_cast<float>(d))};
  return pr;
}

template <class T = unsigned char>
std::vector<T> fetch(const void* p, size_t bytes) {
  std::vector<T> out(bytes / sizeof(T));
  cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost);
  return out;
}

TEST(CudaReference, StridedHeadSubsetViewMatchesTheFullRun) {
  LCA_SKIP_WITHOUT_GPU();
  const int64_t s = 257;
  const int hq = 8, hkv = 4, d = 64, h0 = 2, nh = 4;  // query heads 2..5 = kv heads 1..2
  const int32_t t = LCA_DTYPE_BF16;
  gpu::DeviceAllocator alloc(0);
  gpu::Stream stream;
  Dev dev{alloc, {}};
  const size_t qb = s * hq * d * 2, kb = s * hkv * d * 2, lb = s * hq * 4;
  void *q = dev.get(qb), *k = dev.get(kb), *v = dev.get(kb), *d_o = dev.get(qb);
  for (auto [p, n, seed] : {std::tuple{q, qb / 2, 1}, {k, kb / 2, 2}, {v, kb / 2, 3}, {d_o, qb / 2, 4}})
    gpu::fill_random(p, int64_t(n), t, seed, 1.0f, stream.handle());
  void* outs[2][5];  // [full, view][o, lse, dq, dk, dv], all poisoned
  for (auto& set : outs) {
    set[0] = dev.get(qb), set[1] = dev.get(lb), set[2] = dev.get(qb), set[3] = dev.get(kb), set[4] = dev.get(kb);
  }
  const std::vector<lca_slice> causal{lca_slice{0, s, 0, s, LCA_SLICE_CAUSAL, 0}};
  lca_exec exec{sizeof(lca_exec), stream.handle(), alloc.abi(), 0};
  Kernel kernel("cuda_reference", exec);
  for (int run = 0; run < 2; ++run) {
    const bool sub = run == 1;
    const int64_t qh = sub ? nh : hq, kh = sub ? nh * hkv / hq : hkv, q0 = sub ? h0 : 0, k0 = q0 * hkv / hq;
    ASSERT_EQ(kernel.make_plan(problem(s, int(qh), int(kh), d, t), causal), LCA_OK) << kernel.error();
    lca_fwd_args f{sizeof(lca_fwd_args), view(t, q, s, qh, d, q0, hq), view(t, k, s, kh, d, k0, hkv),
                   view(t, v, s, kh, d, k0, hkv), view(t, outs[run][0], s, qh, d, q0, hq),
                   lse_view(outs[run][1], qh, s, q0)};
    ASSERT_EQ(kernel.fwd(f), LCA_OK) << kernel.error();
    lca_bwd_args b{sizeof(lca_bwd_args), f.q, f.k, f.v, f.o, view(t, d_o, s, qh, d, q0, hq), f.lse,
                   view(t, outs[run][2], s, qh, d, q0, hq), view(t, outs[run][3], s, kh, d, k0, hkv),
                   view(t, outs[run][4], s, kh, d, k0, hkv)};
    ASSERT_EQ(kernel.bwd(b), LCA_OK) << kernel.error();
  }
  ASSERT_EQ(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle())), cudaSuccess);
  // Inside the view: bit-identical to the full run. Outside it: still poison.
  const size_t bytes[5] = {qb, lb, qb, kb, kb};
  for (int i = 0; i < 5; ++i) {
    const auto full = fetch(outs[0][i], bytes[i]), sub = fetch(outs[1][i], bytes[i]);
    const bool is_kv = i >= 3, is_lse = i == 1;
    const int64_t heads = is_kv ? hkv : hq, first = is_kv ? h0 * hkv / hq : h0, count = is_kv ? nh * hkv / hq : nh;
    const size_t es = is_lse ? 4 : 2;
    int64_t mismatched = 0, overwritten = 0;
    for (size_t byte = 0; byte < bytes[i]; ++byte) {
      const size_t elem = byte / es;
      const int64_t head = is_lse ? int64_t(elem / s) : int64_t((elem / d) % heads);
      const bool inside = head >= first && head < first + count;
      if (inside) mismatched += sub[byte] != full[byte];
      else overwritten += sub[byte] != 0xFF;
    }
    EXPECT_EQ(mismatched, 0) << "output " << i << " differs inside the view";
    EXPECT_EQ(overwritten, 0) << "output " << i << " written outside the view";
  }
}

TEST(CudaNaive, OutOfMemoryIsAStatusAndTheNextCallWorks) {
  LCA_SKIP_WITHOUT_GPU();
  const int32_t t = LCA_DTYPE_BF16;
  const int d = 64;
  gpu::DeviceAllocator alloc(0);
  gpu::Stream stream;
  lca_exec exec{sizeof(lca_exec), stream.handle(), alloc.abi(), 0};
  Kernel kernel("cuda_naive", exec);
  auto attempt = [&](int64_t s, bool backward) {
    Dev dev{alloc, {}};
    const size_t qb = size_t(s) * d * 2;
    void *q = dev.get(qb), *k = dev.get(qb), *v = dev.get(qb), *o = dev.get(qb), *lse = dev.get(s * 4);
    void *d_o = dev.get(qb), *dq = dev.get(qb), *dk = dev.get(qb), *dv = dev.get(qb);
    for (void* p : {q, k, v, d_o}) gpu::fill_random(p, s * d, t, 7, 1.0f, stream.handle());
    const std::vector<lca_slice> causal{lca_slice{0, s, 0, s, LCA_SLICE_CAUSAL, 0}};
    EXPECT_EQ(kernel.make_plan(problem(s, 1, 1, d, t), causal), LCA_OK) << kernel.error();
    const size_t held = alloc.current_bytes();
    lca_fwd_args f{sizeof(lca_fwd_args), view(t, q, s, 1, d, 0, 1), view(t, k, s, 1, d, 0, 1),
                   view(t, v, s, 1, d, 0, 1), view(t, o, s, 1, d, 0, 1), lse_view(lse, 1, s, 0)};
    lca_bwd_args b{sizeof(lca_bwd_args), f.q, f.k, f.v, f.o, view(t, d_o, s, 1, d, 0, 1), f.lse,
                   view(t, dq, s, 1, d, 0, 1), view(t, dk, s, 1, d, 0, 1), view(t, dv, s, 1, d, 0, 1)};
    lca_status st = kernel.fwd(f);
    if (st == LCA_OK && backward) st = kernel.bwd(b);
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle()));
    EXPECT_EQ(alloc.current_bytes(), held) << "workspace not released";
    std::string err = st == LCA_OK ? "" : kernel.error();
    kernel.drop_plan();
    return std::pair{st, err};
  };
  // 300K tokens: the fp32 score matrix alone is 360 GB, past any single GPU.
  for (bool backward : {false, true}) {
    auto [st, err] = attempt(300000, backward);
    EXPECT_EQ(st, LCA_ERR_OUT_OF_MEMORY) << err;
    EXPECT_NE(err.find("bytes"), std::string::npos) << err;
    std::printf("[cuda_naive] 300K tokens: %s\n", err.c_str());
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    auto [ok, err2] = attempt(257, backward);
    EXPECT_EQ(ok, LCA_OK) << err2;
  }
  // A per-cell limit below the S^2 workspace (4096^2 * 6 bytes = 96 MiB) refuses it the same way.
  alloc.set_limit(size_t{80} << 20);
  auto [st, err] = attempt(4096, false);
  EXPECT_EQ(st, LCA_ERR_OUT_OF_MEMORY) << err;
  alloc.set_limit(0);
  alloc.reset_peak();
  const size_t before = alloc.current_bytes();
  EXPECT_EQ(attempt(4096, false).first, LCA_OK);
  EXPECT_GE(alloc.peak_bytes() - before, size_t{4096} * 4096 * 6) << "the S^2 workspace went around the allocator";
}

}  // namespace
}  // namespace lca::test::cuda
