// What the GPU tests of the peer plugins share (torch_sdpa_*, and torch_flex, fa4 and vsa_triton,
// which run Python): skips with the reason, a run through the C ABI with a mask of the test's
// own, the comparison with cpu_reference, and a kernel made without a GPU for plan()'s refusals.
// Used by tests/gpu/torch_peers, tests/gpu/fa4 and tests/gpu/vsa, on top of cuda_kernels/harness.
// Rule: a plugin that was not built, or a machine without a GPU, is a skip with the reason, never a failure.
#pragma once

#include "harness.hpp"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace lca::test::cuda {

#define LCA_SKIP_WITHOUT_GPU() \
  if (::lca::core::gpu::device_count() == 0) GTEST_SKIP() << "no CUDA device visible (driver or GPU absent)"

inline bool plugin_built(const std::string& plugin) {
  return std::filesystem::exists(plugin_dir() / ("liblca_" + plugin + ".so"));
}
#define LCA_SKIP_UNLESS_BUILT(name)                 \
  if (!::lca::test::cuda::plugin_built(name)) \
  GTEST_SKIP() << (name) << " was not built (see the configure output for why)"

inline void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

inline lca_tensor thd(int32_t dtype, void* data, int64_t tokens, int64_t heads, int64_t dim) {
  return lca_tensor{sizeof(lca_tensor), dtype, data, {tokens, heads, dim}, {heads * dim, dim, 1}};
}

inline lca_problem problem_of(const Problem& p) {
  return lca_problem{sizeof(lca_problem), p.dtype, LCA_DEVICE_CUDA, 0, p.seqlen_q, p.seqlen_k, p.heads_q,
                     p.heads_kv, p.head_dim, 1.0f / std::sqrt(static_cast<float>(p.head_dim))};
}

// The problem's slices, without a block-sparse form.
inline lca_mask slice_mask(const Problem& p) {
  return lca_mask{sizeof(lca_mask), p.seqlen_q, p.seqlen_k, static_cast<int64_t>(p.slices.size()), p.slices.data(),
                  nullptr, 0, nullptr};
}

// Self-attention: queries and keys of one length.
inline Problem make_problem(std::string name, int64_t s, int hq, int hkv, int d, int32_t dtype,
                            std::vector<lca_slice> slices) {
  return Problem{std::move(name), s, s, hq, hkv, d, dtype, std::move(slices)};
}

// The second backward call on one plan (lcahost's warm-up and repeats): on the gradients the first
// left, or on gradients poisoned again, so that one the second call leaves unwritten fails.
enum class SecondBackward { kAsLeft, kPoisoned };

// create -> plan -> forward -> backward (twice) -> destroy on device buffers through `alloc`, on
// `stream`; `mask` may carry a block-sparse form beside the slices. The plan's plan_info is
// printed, and kept in *plan_info where given.
inline Results run_peer(const std::string& name, const Problem& p, const lca_mask& mask, const Inputs& in,
                        core::gpu::DeviceAllocator& alloc, void* stream, SecondBackward second,
                        std::string* plan_info = nullptr, const std::string& config = "{}") {
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
  const int32_t hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim;
  const lca_fwd_args fwd{sizeof(lca_fwd_args), thd(t, q, p.seqlen_q, hq, d), thd(t, k, p.seqlen_k, hkv, d),
                         thd(t, v, p.seqlen_k, hkv, d), thd(t, o, p.seqlen_q, hq, d),
                         lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, lse, {hq, p.seqlen_q, 1}, {p.seqlen_q, 1, 1}}};
  const lca_bwd_args bwd{sizeof(lca_bwd_args), fwd.q, fwd.k, fwd.v, fwd.o, thd(t, d_o, p.seqlen_q, hq, d), fwd.lse,
                         thd(t, dq, p.seqlen_q, hq, d), thd(t, dk, p.seqlen_k, hkv, d), thd(t, dv, p.seqlen_k, hkv, d)};
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
  if (r.status == LCA_OK && second == SecondBackward::kPoisoned) {
    cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "stream sync");
    for (void* g : {dq, dk, dv}) cuda_check(cudaMemset(g, 0xFF, g == dq ? nq * es : nk * es), "poison");
  }
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
    if (plan_info != nullptr) *plan_info = info;
    vt.destroy_plan(kernel, plan, &exec);
  }
  if (kernel != nullptr) vt.destroy(kernel);
  for (void* ptr : bufs) alloc.release(ptr);
  return r;
}

// bf16 keeps 8 significant bits, f16 11; LSE is fp32 in every kernel.
inline void expect_close(const std::string& plugin, const Problem& p, const Results& got, const Results& ref) {
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

// The plugin against cpu_reference on p (whose slices are `mask`'s), forward and both backward
// calls, on an allocator and a stream of its own, which it must leave with nothing allocated.
inline void check_against_reference(const std::string& plugin, const Problem& p, const lca_mask& mask, uint64_t seed,
                                    SecondBackward second, std::string* plan_info = nullptr) {
  const Inputs in = make_inputs(p, seed);
  const Results ref = run_cpu_reference(p, in, true);
  ASSERT_EQ(ref.status, LCA_OK) << ref.error;
  core::gpu::DeviceAllocator alloc(0);
  core::gpu::Stream stream;
  const Results got = run_peer(plugin, p, mask, in, alloc, stream.handle(), second, plan_info);
  ASSERT_EQ(got.status, LCA_OK) << got.error;
  expect_close(plugin, p, got, ref);
  EXPECT_EQ(alloc.current_bytes(), 0u);
}

// A kernel of one plugin made without a GPU, for create()'s and plan()'s refusals, which come
// before any device call. Destroyed with the object; the plugin stays loaded as long.
class RefusingKernel {
 public:
  explicit RefusingKernel(const std::string& name, const std::string& config = "{}") : plugin_(name) {
    const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, config.c_str(),
                             nullptr, nullptr};
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
  lca_status plan(const Problem& p, const lca_mask& mask) {
    lca_allocator none{sizeof(lca_allocator), nullptr, nullptr, nullptr};
    const lca_exec exec{sizeof(lca_exec), nullptr, &none, 0};
    const lca_problem pr = problem_of(p);
    lca_plan* plan = nullptr;
    const lca_status status = vt().plan(kernel_, &pr, &mask, &exec, &plan);
    if (status != LCA_OK) EXPECT_EQ(plan, nullptr);
    return status;
  }
  lca_status plan(const Problem& p) { return plan(p, slice_mask(p)); }

 private:
  const lca_kernel_vtable& vt() const { return plugin_.kernel(); }
  PluginHandle plugin_;
  lca_kernel* kernel_ = nullptr;
  lca_status created_ = LCA_OK;
};

}  // namespace lca::test::cuda
