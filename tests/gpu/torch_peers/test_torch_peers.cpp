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

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace lca::test::cuda {
namespace {

#define LCA_SKIP_WITHOUT_GPU() \
  if (core::gpu::device_count() == 0) GTEST_SKIP() << "no CUDA device visible (driver or GPU absent)"

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

bool built(const std::string& plugin) {
  return std::filesystem::exists(plugin_dir() / ("liblca_" + plugin + ".so"));
}
#define LCA_SKIP_UNLESS_BUILT(name) \
  if (!built(name)) GTEST_SKIP() << name << " was not built (see the configure output for why)"

lca_tensor thd(int32_t dtype, void* data, int64_t tokens, int64_t heads, int64_t dim) {
  return lca_tensor{sizeof(lca_tensor), dtype, data, {tokens, heads, dim}, {heads * dim, dim, 1}};
}

lca_problem problem_of(const Problem& p) {
  return lca_problem{sizeof(lca_problem), p.dtype, LCA_DEVICE_CUDA, 0, p.seqlen_q, p.seqlen_k, p.heads_q,
                     p.heads_kv, p.head_dim, 1.0f / std::sqrt(static_cast<float>(p.head_dim))};
}

// create -> plan -> forward -> backward -> destroy on device buffers through `alloc`, on a
// stream of the test's own; `mask` may carry a block-sparse form beside the slices.
Results run_peer(const std::string& name, const Problem& p, const lca_mask& mask, const Inputs& in,
                 core::gpu::DeviceAllocator& alloc, void* stream, const std::string& config = "{}") {
  PluginHandle plugin(name);
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
  const lca_fwd_args fwd{sizeof(lca_fwd_args), thd(t, q, p.seqlen_q, p.heads_q, p.head_dim),
                         thd(t, k, p.seqlen_k, p.heads_kv, p.head_dim), thd(t, v, p.seqlen_k, p.heads_kv, p.head_dim),
                         thd(t, o, p.seqlen_q, p.heads_q, p.head_dim),
                         lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, lse, {p.heads_q, p.seqlen_q, 1}, {p.seqlen_q, 1, 1}}};
  const lca_bwd_args bwd{sizeof(lca_bwd_args), fwd.q, fwd.k, fwd.v, fwd.o, thd(t, d_o, p.seqlen_q, p.heads_q, p.head_dim),
                         fwd.lse, thd(t, dq, p.seqlen_q, p.heads_q, p.head_dim),
                         thd(t, dk, p.seqlen_k, p.heads_kv, p.head_dim), thd(t, dv, p.seqlen_k, p.heads_kv, p.head_dim)};
  cuda_check(cudaDeviceSynchronize(), "sync");
  const lca_problem pr = problem_of(p);
  const lca_exec exec{sizeof(lca_exec), stream, alloc.abi(), 0};
  const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, config.c_str(),
                           nullptr, nullptr};
  lca_kernel* kernel = nullptr;
  lca_plan* plan = nullptr;
  r.status = vt.create(&host, &kernel);
  if (r.status == LCA_OK) r.status = vt.plan(kernel, &pr, &mask, &exec, &plan);
  if (r.status == LCA_OK) r.status = vt.forward(kernel, plan, &fwd, &exec);
  if (r.status == LCA_OK) r.status = vt.backward(kernel, plan, &bwd, &exec);
  // Twice: a second backward on the same plan (lcahost's warm-up and repeats) gives the same.
  if (r.status == LCA_OK) r.status = vt.backward(kernel, plan, &bwd, &exec);
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
  }
  if (plan != nullptr) vt.destroy_plan(kernel, plan, &exec);
  if (kernel != nullptr) vt.destroy(kernel);
  for (void* ptr : bufs) alloc.release(ptr);
  return r;
}

lca_mask slice_mask(const Problem& p) {
  return lca_mask{sizeof(lca_mask), p.seqlen_q, p.seqlen_k, static_cast<int64_t>(p.slices.size()), p.slices.data(),
                  nullptr, 0, nullptr};
}

// bf16 keeps 8 significant bits, f16 11; LSE is fp32 in every kernel.
void expect_close(const std::string& plugin, const Problem& p, const Results& got, const Results& ref) {
  const bool bf16 = p.dtype == LCA_DTYPE_BF16;
  const double tol_o = bf16 ? 1.5e-2 : 4e-3, tol_grad = bf16 ? 2e-2 : 6e-3, tol_lse = 5e-3;
  const double e_o = rel_l2(got.o, ref.o), e_lse = lse_max_abs(got.lse, ref.lse);
  const double e_dq = rel_l2(got.dq, ref.dq), e_dk = rel_l2(got.dk, ref.dk), e_dv = rel_l2(got.dv, ref.dv);
  std::printf("[%s] %-44s o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", plugin.c_str(), p.name.c_str(), e_o, e_lse,
              e_dq, e_dk, e_dv);
  EXPECT_LE(e_o, tol_o);
  EXPECT_LE(e_lse, tol_lse);
  EXPECT_LE(e_dq, tol_grad);
  EXPECT_LE(e_dk, tol_grad);
  EXPECT_LE(e_dv, tol_grad);
}

Problem make(std::string name, int64_t s, int hq, int hkv, int d, int32_t dtype, std::vector<lca_slice> slices) {
  return Problem{std::move(name), s, s, hq, hkv, d, dtype, std::move(slices)};
}

// ---- torch_sdpa_* ------------------------------------------------------------------------------
std::vector<Problem> sdpa_cases() {
  const int32_t bf = LCA_DTYPE_BF16, hf = LCA_DTYPE_F16;
  return {
      make("full_397_mha_d64_bf16", 397, 4, 4, 64, bf, mask_full(397, 397)),
      make("causal_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_causal(1000)),
      make("causal_397_mqa_d64_f16", 397, 8, 1, 64, hf, mask_causal(397)),
      make("full_1000_gqa4_d128_f16", 1000, 8, 2, 128, hf, mask_full(1000, 1000)),
      make("causal_129_mha_d128_bf16", 129, 4, 4, 128, bf, mask_causal(129)),
      // Causal as several slices is still causal.
      make("causal_sliced_300_gqa2_d64_bf16", 300, 4, 2, 64, bf,
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
  const Results got = run_peer(c.plugin, c.problem, slice_mask(c.problem), in, alloc, stream.handle());
  // Which shapes a backend takes is SDPA's dispatcher's call and changes between torch
  // versions; a refusal is what lcahost records as X, so it shows here as a skip with the reason.
  if (got.status == LCA_ERR_UNSUPPORTED) GTEST_SKIP() << "refused: " << got.error;
  ASSERT_EQ(got.status, LCA_OK) << got.error;
  expect_close(c.plugin, c.problem, got, ref);
  EXPECT_EQ(alloc.current_bytes(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Peers, TorchSdpa, ::testing::ValuesIn(sdpa_matrix()),
                         [](const auto& info) { return info.param.plugin + "_" + info.param.problem.name; });

// A kernel of one plugin made without a GPU, for plan()'s refusals, which come before any torch
// call. Destroyed with the object; the plugin stays loaded as long.
class RefusingKernel {
 public:
  explicit RefusingKernel(const std::string& name) : plugin_(name) {
    const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, "{}", nullptr, nullptr};
    created_ = vt().create(&host, &kernel_);
  }
  ~RefusingKernel() {
    if (kernel_ != nullptr) vt().destroy(kernel_);
  }
  RefusingKernel(const RefusingKernel&) = delete;
  RefusingKernel& operator=(const RefusingKernel&) = delete;

  lca_status created() const { return created_; }
  const char* last_error() const { return vt().last_error(); }
  // plan() of p with no allocator and no stream; a refusal must leave no plan behind.
  lca_status plan(const Problem& p) {
    lca_allocator none{sizeof(lca_allocator), nullptr, nullptr, nullptr};
    const lca_exec exec{sizeof(lca_exec), nullptr, &none, 0};
    const lca_problem pr = problem_of(p);
    const lca_mask mask = slice_mask(p);
    lca_plan* plan = nullptr;
    const lca_status status = vt().plan(kernel_, &pr, &mask, &exec, &plan);
    if (status != LCA_OK) EXPECT_EQ(plan, nullptr);
    return status;
  }

 private:
  const lca_kernel_vtable& vt() const { return plugin_.kernel(); }
  PluginHandle plugin_;
  lca_kernel* kernel_ = nullptr;
  lca_status created_ = LCA_OK;
};

TEST(TorchSdpaRefusal, MasksOtherThanFullAndCausalAreUnsupported) {
  for (const char* name : {"torch_sdpa_flash", "torch_sdpa_efficient", "torch_sdpa_cudnn"}) {
    if (!built(name)) continue;
    SCOPED_TRACE(name);
    RefusingKernel kernel(name);
    ASSERT_EQ(kernel.created(), LCA_OK) << kernel.last_error();
    EXPECT_EQ(kernel.plan(make("window", 300, 4, 4, 64, LCA_DTYPE_BF16, mask_sliding_window(300, 32))),
              LCA_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(kernel.last_error()).find("full and causal masks only"), std::string::npos)
        << kernel.last_error();
    EXPECT_EQ(kernel.plan(make("causal", 300, 4, 4, 64, LCA_DTYPE_F32, mask_causal(300))), LCA_ERR_UNSUPPORTED);
  }
}

// ---- torch_flex --------------------------------------------------------------------------------
std::vector<Problem> flex_cases() {
  const int32_t bf = LCA_DTYPE_BF16, hf = LCA_DTYPE_F16;
  return {
      make("full_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_full(1000, 1000)),
      make("causal_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_causal(1000)),
      make("documents_causal_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_documents({300, 37, 600, 63}, true)),
      make("sliding_window_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_sliding_window(1000, 128)),
      make("inv_bi_causal_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_inv_bi(1000, 1000)),
      make("empty_rows_1000_gqa4_d128_bf16", 1000, 8, 2, 128, bf, mask_with_empty_rows(1000)),
      make("causal_397_mha_d64_f16", 397, 4, 4, 64, hf, mask_causal(397)),
      make("documents_full_129_mqa_d128_bf16", 129, 8, 1, 128, bf, mask_documents({100, 29}, false)),
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
  const Results got = run_peer("torch_flex", p, slice_mask(p), in, alloc, stream.handle());
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
    Problem p = make(name + "_1000_gqa4_d128_bf16", 1000, 8, 2, 128, LCA_DTYPE_BF16, {});
    p.slices.assign(g.mask->slices, g.mask->slices + g.mask->num_slices);
    const Inputs in = make_inputs(p, 2028);
    const Results ref = run_cpu_reference(p, in, true);
    ASSERT_EQ(ref.status, LCA_OK) << ref.error;
    const Results got = run_peer("torch_flex", p, *g.mask, in, alloc, stream.handle());
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
  EXPECT_EQ(kernel.plan(make("causal", 300, 4, 4, 64, LCA_DTYPE_F32, mask_causal(300))), LCA_ERR_UNSUPPORTED);
  // A row of 50 separate key ranges and no block-sparse form.
  Problem holes = make("holes", 100, 4, 4, 64, LCA_DTYPE_BF16, {});
  for (int64_t k = 0; k < 100; k += 2) holes.slices.push_back(slice(0, 1, k, k + 1, LCA_SLICE_FULL));
  EXPECT_EQ(kernel.plan(holes), LCA_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(kernel.last_error()).find("separate key ranges"), std::string::npos) << kernel.last_error();
}

}  // namespace
}  // namespace lca::test::cuda
