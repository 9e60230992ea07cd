// vsa_triton through the C ABI against cpu_reference (fp64 accumulation), forward (O, LSE) and
// backward (dQ, dK, dV, twice on one plan), on a stream of the test's own: the builtin
// block_sparse masks with blocks of 64 and 128 (a length that ends in a half block), every block
// kept, d64 and d128; and a hand-built form with queries and keys of different lengths and a
// query block that sees nothing. Refusals (GQA, f16, masks without a block-sparse form, lengths
// that are not whole tiles, unknown options) need no GPU and run wherever the plugin was built;
// so does starting its interpreter. Where the plugin was not built, every test skips with why.
#include "builtin_fixture.hpp"
#include "harness.hpp"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace lca::test::cuda {
namespace {

#define LCA_SKIP_WITHOUT_GPU() \
  if (core::gpu::device_count() == 0) GTEST_SKIP() << "no CUDA device visible (driver or GPU absent)"
#define LCA_SKIP_UNLESS_BUILT()                                          \
  if (!std::filesystem::exists(plugin_dir() / "liblca_vsa_triton.so")) \
  GTEST_SKIP() << "vsa_triton was not built (see the configure output for why)"

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

lca_tensor thd(int32_t dtype, void* data, int64_t tokens, int64_t heads, int64_t dim) {
  return lca_tensor{sizeof(lca_tensor), dtype, data, {tokens, heads, dim}, {heads * dim, dim, 1}};
}

lca_problem problem_of(const Problem& p) {
  return lca_problem{sizeof(lca_problem), p.dtype, LCA_DEVICE_CUDA, 0, p.seqlen_q, p.seqlen_k, p.heads_q,
                     p.heads_kv, p.head_dim, 1.0f / std::sqrt(static_cast<float>(p.head_dim))};
}

// create -> plan -> forward -> backward (twice) -> destroy on device buffers through `alloc`.
Results run_vsa(const Problem& p, const lca_mask& mask, const Inputs& in, core::gpu::DeviceAllocator& alloc,
                void* stream) {
  PluginHandle plugin("vsa_triton");
  const lca_kernel_vtable& vt = plugin.kernel();
  Results r;
  const int32_t t = p.dtype;
  const size_t es = dtype_size(t), nq = in.q.size(), nk = in.k.size(), nl = size_t(p.heads_q) * p.seqlen_q;
  std::vector<void*> bufs;
  auto dev = [&](size_t bytes) {
    void* ptr = nullptr;
    if (alloc.allocate(bytes, &ptr) != LCA_OK) throw std::runtime_error("test allocation: " + alloc.last_error());
    bufs.push_back(ptr);
    cuda_check(cudaMemset(ptr, 0xFF, bytes), "poison");
    return ptr;
  };
  auto upload = [&](const std::vector<float>& host) {
    std::vector<unsigned char> raw(host.size() * es);
    for (size_t i = 0; i < host.size(); ++i) store_from_double(raw.data(), t, int64_t(i), host[i]);
    void* ptr = dev(raw.size());
    cuda_check(cudaMemcpy(ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice), "upload");
    return ptr;
  };
  auto download = [&](const void* ptr, size_t n, int32_t dtype) {
    std::vector<unsigned char> raw(n * dtype_size(dtype));
    cuda_check(cudaMemcpy(raw.data(), ptr, raw.size(), cudaMemcpyDeviceToHost), "download");
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load_as_double(raw.data(), dtype, int64_t(i)));
    return out;
  };
  void *q = upload(in.q), *k = upload(in.k), *v = upload(in.v), *d_o = upload(in.d_o);
  void *o = dev(nq * es), *lse = dev(nl * 4), *dq = dev(nq * es), *dk = dev(nk * es), *dv = dev(nk * es);
  const int32_t h = p.heads_q, d = p.head_dim;
  const lca_fwd_args fwd{sizeof(lca_fwd_args), thd(t, q, p.seqlen_q, h, d), thd(t, k, p.seqlen_k, h, d),
                         thd(t, v, p.seqlen_k, h, d), thd(t, o, p.seqlen_q, h, d),
                         lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, lse, {h, p.seqlen_q, 1}, {p.seqlen_q, 1, 1}}};
  const lca_bwd_args bwd{sizeof(lca_bwd_args), fwd.q, fwd.k, fwd.v, fwd.o, thd(t, d_o, p.seqlen_q, h, d), fwd.lse,
                         thd(t, dq, p.seqlen_q, h, d), thd(t, dk, p.seqlen_k, h, d), thd(t, dv, p.seqlen_k, h, d)};
  cuda_check(cudaDeviceSynchronize(), "sync");
  const lca_problem pr = problem_of(p);
  const lca_exec exec{sizeof(lca_exec), stream, alloc.abi(), 0};
  const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, "{}", nullptr, nullptr};
  lca_kernel* kernel = nullptr;
  lca_plan* plan = nullptr;
  r.status = vt.create(&host, &kernel);
  if (r.status == LCA_OK) r.status = vt.plan(kernel, &pr, &mask, &exec, &plan);
  if (r.status == LCA_OK) r.status = vt.forward(kernel, plan, &fwd, &exec);
  if (r.status == LCA_OK) r.status = vt.backward(kernel, plan, &bwd, &exec);
  // Twice, the gradients poisoned between: lcahost's warm-up and repeats on one plan.
  if (r.status == LCA_OK) {
    cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "stream sync");
    for (void* g : {dq, dk, dv}) cuda_check(cudaMemset(g, 0xFF, g == dq ? nq * es : nk * es), "poison");
    r.status = vt.backward(kernel, plan, &bwd, &exec);
  }
  if (r.status != LCA_OK) r.error = vt.last_error();
  cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "stream sync");
  if (r.status == LCA_OK) {
    r.o = download(o, nq, t);
    r.lse = download(lse, nl, LCA_DTYPE_F32);
    r.dq = download(dq, nq, t);
    r.dk = download(dk, nk, t);
    r.dv = download(dv, nk, t);
  }
  if (plan != nullptr) {
    const std::string info = plan_info_text(vt, kernel, plan);
    std::printf("[ plan_info ] %s\n", info.empty() ? "(none)" : info.c_str());
    EXPECT_NE(info.find("\"compile_ms\""), std::string::npos) << info;
    EXPECT_NE(info.find("\"layout_copy_ms_bwd\""), std::string::npos) << info;
    vt.destroy_plan(kernel, plan, &exec);
  }
  if (kernel != nullptr) vt.destroy(kernel);
  for (void* ptr : bufs) alloc.release(ptr);
  return r;
}

// bf16 keeps 8 significant bits; LSE is fp32.
void expect_close(const Problem& p, const Results& got, const Results& ref) {
  const double e_o = rel_l2(got.o, ref.o), e_lse = lse_max_abs(got.lse, ref.lse);
  const double e_dq = rel_l2(got.dq, ref.dq), e_dk = rel_l2(got.dk, ref.dk), e_dv = rel_l2(got.dv, ref.dv);
  std::printf("[vsa_triton] %-40s o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", p.name.c_str(), e_o, e_lse, e_dq, e_dk,
              e_dv);
  EXPECT_LE(e_o, 1.5e-2);
  EXPECT_LE(e_lse, 5e-3);
  EXPECT_LE(e_dq, 2e-2);
  EXPECT_LE(e_dk, 2e-2);
  EXPECT_LE(e_dv, 2e-2);
}

void check_against_reference(Problem p, const lca_mask& mask, uint64_t seed) {
  p.slices.assign(mask.slices, mask.slices + mask.num_slices);
  const Inputs in = make_inputs(p, seed);
  const Results ref = run_cpu_reference(p, in, true);
  ASSERT_EQ(ref.status, LCA_OK) << ref.error;
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  const Results got = run_vsa(p, mask, in, alloc, stream.handle());
  ASSERT_EQ(got.status, LCA_OK) << got.error;
  expect_close(p, got, ref);
  EXPECT_EQ(alloc.current_bytes(), 0u);
}

struct BuiltinCase {
  std::string name, params;
  int64_t seqlen;
  int32_t heads, head_dim;
};

class VsaBuiltin : public ::testing::TestWithParam<BuiltinCase> {};

TEST_P(VsaBuiltin, MatchesCpuReference) {
  LCA_SKIP_UNLESS_BUILT();
  LCA_SKIP_WITHOUT_GPU();
  const BuiltinCase& c = GetParam();
  auto g = BuiltinProvider::instance().generate("block_sparse", c.params, c.seqlen, 13);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  const Problem p{c.name, c.seqlen, c.seqlen, c.heads, c.heads, c.head_dim, LCA_DTYPE_BF16, {}};
  check_against_reference(p, *g.mask, 2029);
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
  LCA_SKIP_UNLESS_BUILT();
  LCA_SKIP_WITHOUT_GPU();
  const int64_t sq = 192, sk = 448;
  std::vector<int64_t> offsets{0, 2, 2, 7}, cols{0, 6, 1, 2, 3, 4, 5};
  std::vector<lca_slice> slices;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i)
      slices.push_back(lca_slice{b * 64, b * 64 + 64, cols[i] * 64, cols[i] * 64 + 64, LCA_SLICE_FULL, 0});
  const lca_block_sparse bs{sizeof(lca_block_sparse), 64, 64, 3, 7, offsets.data(), cols.data()};
  const lca_mask mask{sizeof(lca_mask), sq, sk, static_cast<int64_t>(slices.size()), slices.data(), &bs, 0, nullptr};
  check_against_reference(Problem{"cross_192x448_h2_d64", sq, sk, 2, 2, 64, LCA_DTYPE_BF16, {}}, mask, 2030);
}

// Python starts, torch and VSA's kernels import, and plan() refuses, without touching the GPU.
TEST(VsaRefusal, StartsPythonAndRefusesWithoutTouchingTheGpu) {
  LCA_SKIP_UNLESS_BUILT();
  PluginHandle plugin("vsa_triton");
  const lca_kernel_vtable& vt = plugin.kernel();
  const lca_host_info bad{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, R"({"block":64})",
                          nullptr, nullptr};
  lca_kernel* kernel = nullptr;
  EXPECT_EQ(vt.create(&bad, &kernel), LCA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vt.last_error()).find("unknown option 'block'"), std::string::npos) << vt.last_error();
  const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, "{}", nullptr, nullptr};
  ASSERT_EQ(vt.create(&host, &kernel), LCA_OK) << vt.last_error();
  lca_allocator none{sizeof(lca_allocator), nullptr, nullptr, nullptr};
  const lca_exec exec{sizeof(lca_exec), nullptr, &none, 0};
  auto& provider = BuiltinProvider::instance();
  auto sparse = provider.generate("block_sparse", R"({"block":64,"sparsity":0.5})", 1024, 3);
  auto causal = provider.generate("causal", "{}", 1024, 3);
  auto odd = provider.generate("block_sparse", R"({"block":64,"sparsity":0.5})", 1000, 3);
  ASSERT_EQ(sparse.status, LCA_OK);
  ASSERT_EQ(causal.status, LCA_OK);
  ASSERT_EQ(odd.status, LCA_OK);
  auto refuses = [&](const Problem& p, const lca_mask& m, const std::string& words) {
    SCOPED_TRACE(p.name);
    const lca_problem pr = problem_of(p);
    lca_plan* plan = nullptr;
    EXPECT_EQ(vt.plan(kernel, &pr, &m, &exec, &plan), LCA_ERR_UNSUPPORTED);
    EXPECT_EQ(plan, nullptr);
    EXPECT_NE(std::string(vt.last_error()).find(words), std::string::npos) << vt.last_error();
  };
  refuses(Problem{"gqa", 1024, 1024, 8, 2, 128, LCA_DTYPE_BF16, {}}, *sparse.mask, "no GQA");
  refuses(Problem{"f16", 1024, 1024, 4, 4, 128, LCA_DTYPE_F16, {}}, *sparse.mask, "bf16 only");
  refuses(Problem{"d256", 1024, 1024, 4, 4, 256, LCA_DTYPE_BF16, {}}, *sparse.mask, "head_dim 256");
  refuses(Problem{"causal", 1024, 1024, 4, 4, 128, LCA_DTYPE_BF16, {}}, *causal.mask, "block-sparse masks only");
  refuses(Problem{"odd", 1000, 1000, 4, 4, 128, LCA_DTYPE_BF16, {}}, *odd.mask, "not a multiple of 64");
  vt.destroy(kernel);
}

}  // namespace
}  // namespace lca::test::cuda
