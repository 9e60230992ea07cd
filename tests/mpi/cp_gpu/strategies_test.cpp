// Every CP strategy (with its option sets) x every builtin mask and two hand-built ones x fwd/bwd
// on the GPU, flex_flash computing the local blocks, against cpu_reference (fp64 accumulate) on
// the whole problem: each rank compares its own shard of O, LSE, dQ, dK, dV. Odd lengths, GQA
// 4 and 8 (sharded and replicated KV heads), documents that end mid-shard, bf16 d128 and f16 d64.
#include "cp_shards.hpp"
#include "builtin_fixture.hpp"
#include "device_buffer.hpp"
#include "gpu_world.hpp"
#include "harness.hpp"

#include "core/cuda/gpu.hpp"

#include <lca/lca.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lca::test::cuda {
namespace {

PluginHandle& plugin(const std::string& name) {
  static std::map<std::string, std::unique_ptr<PluginHandle>> loaded;
  auto& p = loaded[name];
  if (!p) p = std::make_unique<PluginHandle>(name);
  return *p;
}

// One flex_flash instance for the whole process, lent to every strategy.
lca_kernel_ref flex_flash() {
  static lca_kernel* k = nullptr;
  const auto& vt = plugin("flex_flash").kernel();
  if (!k) {
    lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, "{}", nullptr, nullptr};
    if (vt.create(&host, &k) != LCA_OK) throw std::runtime_error(vt.last_error());
  }
  return lca_kernel_ref{sizeof(lca_kernel_ref), &vt, k};
}

struct Shape {
  int64_t seqlen;
  int hq, hkv, d;
  int32_t dtype;
};

// flex_flash's own tolerances against the fp64 reference (tests/gpu/flex_flash); the merge of
// partial outputs and the sum of partial gradients run in fp32 and stay inside them.
struct Tolerance {
  double out, grad, lse;
};
Tolerance tolerance(int32_t dtype) {
  return dtype == LCA_DTYPE_BF16 ? Tolerance{1.5e-2, 2.5e-2, 2e-3} : Tolerance{3e-3, 5e-3, 2e-3};
}

// Rank 0's reference, shared with every rank through the host world (the others add zeros).
// Made once a problem for all strategies: every rank asks in the same order, so the cache hits
// alike everywhere.
Results shared_reference(const Problem& p, const Inputs& in);
const Results& reference_for(const Problem& p, const Inputs& in) {
  static std::map<std::string, Results> cache;
  auto it = cache.find(p.name);
  if (it == cache.end()) it = cache.emplace(p.name, shared_reference(p, in)).first;
  return it->second;
}

Results shared_reference(const Problem& p, const Inputs& in) {
  Results r;
  float failed = 0;
  if (control().rank() == 0) {
    r = run_cpu_reference(p, in, true);
    failed = r.status == LCA_OK ? 0.0f : 1.0f;
  }
  float any = failed;
  control().all_reduce(&failed, &any, 1, LCA_DTYPE_F32, LCA_REDUCE_MAX, nullptr);
  r.status = any > 0 ? LCA_ERR_INTERNAL : LCA_OK;
  if (r.status != LCA_OK) return r;
  auto share = [&](std::vector<float>& x, size_t n) {
    x.resize(n, 0.0f);
    std::vector<float> sum(n);
    control().all_reduce(x.data(), sum.data(), static_cast<int64_t>(n), LCA_DTYPE_F32, LCA_REDUCE_SUM, nullptr);
    x = std::move(sum);
  };
  const size_t nq = in.q.size(), nk = in.k.size();
  share(r.o, nq);
  share(r.lse, size_t(p.heads_q) * p.seqlen_q);
  share(r.dq, nq);
  share(r.dk, nk);
  share(r.dv, nk);
  return r;
}

std::vector<unsigned char> to_dtype(const std::vector<float>& x, int32_t dtype) {
  std::vector<unsigned char> raw(x.size() * dtype_size(dtype));
  for (size_t i = 0; i < x.size(); ++i) store_from_double(raw.data(), dtype, int64_t(i), x[i]);
  return raw;
}

std::vector<float> from_dtype(const std::vector<unsigned char>& raw, int32_t dtype) {
  std::vector<float> out(raw.size() / dtype_size(dtype));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(load_as_double(raw.data(), dtype, int64_t(i)));
  return out;
}

lca_tensor thd(void* data, int32_t dtype, int64_t t, int64_t h, int64_t d) {
  return lca_tensor{sizeof(lca_tensor), dtype, data, {t, h, d}, {h * d, d, 1}};
}

// One strategy with one option set on one problem; every rank checks its shard.
void run_strategy(const std::string& strategy, const std::string& options, const Problem& p, const Inputs& in,
                  const Results& ref) {
  SCOPED_TRACE(strategy + " " + options + " " + p.name);
  const int64_t S = p.seqlen_q, D = p.head_dim;
  const int32_t dt = p.dtype;
  const lca_problem pr{sizeof(lca_problem), dt, LCA_DEVICE_CUDA, device(), S, S, p.heads_q, p.heads_kv, p.head_dim,
                       1.0f / std::sqrt(float(D))};
  const lca_mask mask{sizeof(lca_mask), S, S, int64_t(p.slices.size()), p.slices.data(), nullptr, 0, nullptr};
  core::gpu::DeviceAllocator alloc(device());
  core::gpu::Stream stream;
  const lca_exec exec{sizeof(lca_exec), stream.handle(), alloc.abi(), 0};
  const auto& vt = plugin(strategy).cp_strategy();
  lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, options.c_str(), nullptr, nullptr};
  lca_cp_strategy* strat = nullptr;
  ASSERT_EQ(vt.create(&host, &strat), LCA_OK) << vt.last_error();
  const lca_cp_config cfg{sizeof(lca_cp_config), core::comm::as_comm_ref(lent()), flex_flash(), &pr, &mask,
                          options.c_str()};
  lca_cp_plan* plan = nullptr;
  const lca_status ps = vt.plan(strat, &cfg, &exec, &plan);
  // Degrees that do not divide this world are refused alike on every rank.
  if (ps == LCA_ERR_UNSUPPORTED && options != "{}") {
    if (control().rank() == 0) std::printf("[cp_gpu] %s %s: refused here (%s)\n", strategy.c_str(), options.c_str(), vt.last_error());
    vt.destroy(strat);
    return;
  }
  ASSERT_EQ(ps, LCA_OK) << vt.last_error();
  int64_t count = 0;
  ASSERT_EQ(vt.dispatch(strat, plan, control().rank(), nullptr, 0, &count), LCA_OK);
  std::vector<lca_token_range> ranges(count);
  ASSERT_EQ(vt.dispatch(strat, plan, control().rank(), ranges.data(), count, &count), LCA_OK);
  auto shard = [&](const std::vector<float>& x, int64_t heads) { return lca::test::shard_rows(x, ranges, heads, D); };
  auto shard_lse = [&](const std::vector<float>& x) { return lca::test::shard_lse(x, ranges, p.heads_q, S); };
  const int64_t n = int64_t(shard(in.q, p.heads_q).size()) / (p.heads_q * D);
  const size_t es = dtype_size(dt), nq = size_t(n * p.heads_q * D), nk = size_t(n * p.heads_kv * D);
  DeviceBuffer q(to_dtype(shard(in.q, p.heads_q), dt)), k(to_dtype(shard(in.k, p.heads_kv), dt)),
      v(to_dtype(shard(in.v, p.heads_kv), dt)), d_o(to_dtype(shard(in.d_o, p.heads_q), dt));
  DeviceBuffer o(nq * es), lse(size_t(p.heads_q * n) * 4), dq(nq * es), dk(nk * es), dv(nk * es);
  for (const DeviceBuffer* b : {&o, &lse, &dq, &dk, &dv})  // poison: an unwritten element is NaN
    cuda_ok(cudaMemsetAsync(b->data(), 0xFF, b->bytes(), static_cast<cudaStream_t>(stream.handle())), "cudaMemsetAsync");
  const lca_fwd_args fa{sizeof(lca_fwd_args), thd(q.data(), dt, n, p.heads_q, D), thd(k.data(), dt, n, p.heads_kv, D),
                        thd(v.data(), dt, n, p.heads_kv, D), thd(o.data(), dt, n, p.heads_q, D),
                        lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, lse.data(), {p.heads_q, n, 1}, {n, 1, 1}}};
  EXPECT_EQ(vt.forward(strat, plan, &fa, &exec), LCA_OK) << vt.last_error();
  const lca_bwd_args ba{sizeof(lca_bwd_args), fa.q, fa.k, fa.v, fa.o, thd(d_o.data(), dt, n, p.heads_q, D), fa.lse,
                        thd(dq.data(), dt, n, p.heads_q, D), thd(dk.data(), dt, n, p.heads_kv, D),
                        thd(dv.data(), dt, n, p.heads_kv, D)};
  EXPECT_EQ(vt.backward(strat, plan, &ba, &exec), LCA_OK) << vt.last_error();
  stream.synchronize();
  auto fetch = [&](const DeviceBuffer& b, int32_t dtype) { return from_dtype(b.to_host<unsigned char>(), dtype); };
  const Tolerance tol = tolerance(dt);
  const double e_o = rel_l2(fetch(o, dt), shard(ref.o, p.heads_q));
  const double e_lse = lse_max_abs(fetch(lse, LCA_DTYPE_F32), shard_lse(ref.lse));
  const double e_dq = rel_l2(fetch(dq, dt), shard(ref.dq, p.heads_q));
  const double e_dk = rel_l2(fetch(dk, dt), shard(ref.dk, p.heads_kv));
  const double e_dv = rel_l2(fetch(dv, dt), shard(ref.dv, p.heads_kv));
  if (control().rank() == 0)
    std::printf("[cp_gpu] %-14s %-38s %-44s o %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n", strategy.c_str(), options.c_str(),
                p.name.c_str(), e_o, e_lse, e_dq, e_dk, e_dv);
  EXPECT_LE(e_o, tol.out);
  EXPECT_LE(e_lse, tol.lse);
  EXPECT_LE(e_dq, tol.grad);
  EXPECT_LE(e_dk, tol.grad);
  EXPECT_LE(e_dv, tol.grad);
  vt.destroy_plan(strat, plan, &exec);
  vt.destroy(strat);
  EXPECT_EQ(alloc.current_bytes(), 0u) << "the strategy kept device memory after destroy_plan";
}

// Documents cut at odd places (mid-shard for any world) and every slice type.
std::vector<std::pair<std::string, std::vector<lca_slice>>> hand_masks(int64_t S) {
  std::vector<std::pair<std::string, std::vector<lca_slice>>> out;
  out.push_back({"hand_causal_docs", mask_documents({37, 4, 149, S - 190}, true)});
  out.push_back({"hand_inv_bi", {slice(0, 150, 40, 280, LCA_SLICE_INV_CAUSAL), slice(150, S, 130, S, LCA_SLICE_BI_CAUSAL),
                                 slice(230, S, 0, 47, LCA_SLICE_FULL)}});
  return out;
}

// bf16 d128 with 8:2 heads at one odd length, f16 d64 with 4:1 at another.
const Shape kShapes[] = {{777, 8, 2, 128, LCA_DTYPE_BF16}, {613, 4, 1, 64, LCA_DTYPE_F16}};

std::string shape_label(const Shape& s) {
  return std::to_string(s.seqlen) + " " + std::to_string(s.hq) + ":" + std::to_string(s.hkv) + " d" +
         std::to_string(s.d) + " " + dtype_name(s.dtype);
}

void run_all(const std::string& strategy, const std::vector<std::string>& options) {
  for (const Shape& sh : kShapes) {
    std::vector<Problem> problems;
    for (auto& [name, slices] : hand_masks(sh.seqlen))
      problems.push_back(Problem{name + " " + shape_label(sh), sh.seqlen, sh.seqlen, sh.hq, sh.hkv, sh.d, sh.dtype, slices});
    for (const auto& [name, params] : patterns_near_1k()) {
      auto g = BuiltinProvider::instance().generate(name, params, sh.seqlen, 11);
      ASSERT_EQ(g.status, LCA_OK) << name << ": " << g.error;
      problems.push_back(Problem{name + " " + shape_label(sh), sh.seqlen, sh.seqlen, sh.hq, sh.hkv,
                                 sh.d, sh.dtype,
                                 std::vector<lca_slice>(g.mask->slices, g.mask->slices + g.mask->num_slices)});
    }
    for (const Problem& p : problems) {
      const Inputs in = make_inputs(p, 2026);
      const Results& ref = reference_for(p, in);
      ASSERT_EQ(ref.status, LCA_OK) << "cpu_reference on " << p.name;
      for (const auto& opt : options) run_strategy(strategy, opt, p, in, ref);
    }
  }
}

}  // namespace

TEST(CpGpu, Ulysses) {
  LCA_SKIP_UNLESS_READY();
  run_all("ulysses", {"{}"});
}
TEST(CpGpu, RingP2P) {
  LCA_SKIP_UNLESS_READY();
  run_all("ring_p2p", {"{}", R"({"zigzag":false})"});
}
TEST(CpGpu, RingAllGather) {
  LCA_SKIP_UNLESS_READY();
  run_all("ring_allgather", {"{}", R"({"zigzag":false})"});
}
TEST(CpGpu, Usp) {
  LCA_SKIP_UNLESS_READY();
  run_all("usp", {"{}", R"({"ulysses_degree":2})", R"({"ulysses_degree":1})"});
}
TEST(CpGpu, LoongTrain) {
  LCA_SKIP_UNLESS_READY();
  run_all("loongtrain", {"{}", R"({"head_degree":1,"window_size":2})", R"({"head_degree":2,"window_size":1})"});
}
TEST(CpGpu, Balanced) {
  LCA_SKIP_UNLESS_READY();
  run_all("balanced", {"{}", R"({"chunks_per_rank":5,"stages":2})", R"({"head_degree":2})", R"({"one_call":false})",
                       R"({"one_call":true,"balance_by":"tiles"})", R"({"one_call":"bwd","head_degree":2})"});
}

}  // namespace lca::test::cuda
