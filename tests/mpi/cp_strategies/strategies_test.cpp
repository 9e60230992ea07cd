// Every CP strategy x mask x head config, forward and backward, against cpu_reference: each
// rank compares its own shard (its dispatch ranges) of O, LSE, dQ, dK, dV with the reference.
#include "cp_shards.hpp"
#include "mpi_world.hpp"
#include "plugin_handle.hpp"

#include <lca/lca.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using lca::test::PluginHandle;
using lca::test::world;

lca_status heap_alloc(void*, size_t bytes, void** out) {
  *out = std::malloc(bytes ? bytes : 1);
  return *out ? LCA_OK : LCA_ERR_OUT_OF_MEMORY;
}
void heap_free(void*, void* p) { std::free(p); }
const lca_allocator kAllocator{sizeof(lca_allocator), nullptr, &heap_alloc, &heap_free};
const lca_exec kExec{sizeof(lca_exec), nullptr, &kAllocator, 1};

PluginHandle& plugin(const std::string& name) {
  static std::map<std::string, std::unique_ptr<PluginHandle>> loaded;
  auto& p = loaded[name];
  if (!p) p = std::make_unique<PluginHandle>(name);
  return *p;
}

// One cpu_reference instance per config, kept for the whole process.
lca_kernel_ref kernel(const char* config) {
  static std::map<std::string, lca_kernel*> made;
  const auto& vt = plugin("cpu_reference").kernel();
  lca_kernel*& k = made[config];
  if (!k) {
    lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, config, nullptr, nullptr};
    if (vt.create(&host, &k) != LCA_OK) throw std::runtime_error(vt.last_error());
  }
  return lca_kernel_ref{sizeof(lca_kernel_ref), &vt, k};
}

struct NamedMask {
  std::string name;
  std::vector<lca_slice> slices;
};

// Hand-built masks that use every slice type, with documents that end mid-shard.
std::vector<NamedMask> hand_masks(int64_t S) {
  auto sl = [](int64_t qb, int64_t qe, int64_t kb, int64_t ke, int32_t t) { return lca_slice{qb, qe, kb, ke, t, 0}; };
  std::vector<NamedMask> out;
  out.push_back({"hand_causal_docs", {}});
  const int64_t cuts[] = {0, 37, 41, 90, S};
  for (int i = 0; i < 4; ++i) out.back().slices.push_back(sl(cuts[i], cuts[i + 1], cuts[i], cuts[i + 1], LCA_SLICE_CAUSAL));
  // Rows [0, 50) see [10, 70) top-left aligned; rows [50, S) see a band of 20 after a shift.
  out.push_back({"hand_inv_bi", {sl(0, 50, 10, 70, LCA_SLICE_INV_CAUSAL), sl(50, S, 30, S, LCA_SLICE_BI_CAUSAL),
                                 sl(60, S, 0, 12, LCA_SLICE_FULL)}});
  return out;
}

std::vector<NamedMask> builtin_masks(int64_t S) {
  std::vector<NamedMask> out;
  if (!std::filesystem::exists(std::filesystem::path(LCA_TEST_PLUGIN_DIR) / "liblca_builtin.so")) return out;
  const auto& vt = plugin("builtin").mask_provider();
  lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, "{}", nullptr, nullptr};
  lca_mask_provider* prov = nullptr;
  if (vt.create(&host, &prov) != LCA_OK) throw std::runtime_error(vt.last_error());
  const std::pair<const char*, const char*> patterns[] = {
      {"full", "{}"}, {"causal", "{}"}, {"full_document", "{}"}, {"causal_document", "{}"},
      {"sliding_window", "{\"window\":16}"}, {"sliding_window_causal", "{\"window\":16}"},
      {"sliding_window_document", "{\"window\":16}"}, {"shared_question", "{}"},
      {"causal_blockwise", "{}"}, {"prefix_lm_causal", "{}"}, {"prefix_lm_document", "{}"},
      {"global_sliding", "{\"window\":16}"}, {"block_causal_document", "{\"block\":16}"},
      {"block_sparse", "{\"block\":64}"}};
  for (auto [name, params] : patterns) {
    lca_mask_request req{sizeof(lca_mask_request), name, params, S, 1234};
    lca_mask_handle* h = nullptr;
    if (vt.generate(prov, &req, &h) != LCA_OK)
      throw std::runtime_error(std::string(name) + ": " + vt.last_error());
    const lca_mask* m = vt.get(h);
    out.push_back({name, std::vector<lca_slice>(m->slices, m->slices + m->num_slices)});
    vt.release(prov, h);
  }
  vt.destroy(prov);
  return out;
}

struct Tensors {
  std::vector<float> q, k, v, o, d_o, dq, dk, dv, lse;
};

lca_tensor thd(std::vector<float>& data, int64_t t, int64_t h, int64_t d) {
  return lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, data.data(), {t, h, d}, {h * d, d, 1}};
}
lca_tensor lse_t(std::vector<float>& data, int64_t h, int64_t t) {
  return lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, data.data(), {h, t, 1}, {t, 1, 1}};
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    if (!(std::fabs(got[i] - want[i]) <= 1e-5 + 1e-4 * std::fabs(want[i]))) {
      ++bad;
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
    }
  }
}

struct Case {
  int64_t S;
  int hq, hkv, dim;
};

// Runs one strategy on one mask and compares this rank's shard with the reference.
void check(const std::string& strategy, const char* options, const NamedMask& nm, const Case& c) {
  SCOPED_TRACE(strategy + " " + options + " mask " + nm.name + " S=" + std::to_string(c.S) + " heads " +
               std::to_string(c.hq) + ":" + std::to_string(c.hkv));
  const int64_t S = c.S, D = c.dim;
  lca_problem p{sizeof(lca_problem), LCA_DTYPE_F32, LCA_DEVICE_CPU, 0, S, S, c.hq, c.hkv, c.dim,
                1.0f / std::sqrt(float(D))};
  lca_mask mask{sizeof(lca_mask), S, S, int64_t(nm.slices.size()), nm.slices.data(), nullptr, 0, nullptr};
  // The global problem, the same on every rank.
  Tensors g;
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](std::vector<float>& x, int64_t n) { x.resize(n); for (auto& e : x) e = u(rng); };
  fill(g.q, S * c.hq * D), fill(g.k, S * c.hkv * D), fill(g.v, S * c.hkv * D), fill(g.d_o, S * c.hq * D);
  g.o.resize(S * c.hq * D), g.lse.resize(c.hq * S), g.dq.resize(S * c.hq * D), g.dk.resize(S * c.hkv * D), g.dv.resize(S * c.hkv * D);
  {
    lca_kernel_ref ref = kernel("{\"accumulate\":\"f64\"}");
    lca_plan* plan = nullptr;
    ASSERT_EQ(ref.vtable->plan(ref.kernel, &p, &mask, &kExec, &plan), LCA_OK) << ref.vtable->last_error();
    lca_fwd_args fa{sizeof(lca_fwd_args), thd(g.q, S, c.hq, D), thd(g.k, S, c.hkv, D), thd(g.v, S, c.hkv, D),
                    thd(g.o, S, c.hq, D), lse_t(g.lse, c.hq, S)};
    ASSERT_EQ(ref.vtable->forward(ref.kernel, plan, &fa, &kExec), LCA_OK) << ref.vtable->last_error();
    lca_bwd_args ba{sizeof(lca_bwd_args), thd(g.q, S, c.hq, D), thd(g.k, S, c.hkv, D), thd(g.v, S, c.hkv, D),
                    thd(g.o, S, c.hq, D), thd(g.d_o, S, c.hq, D), lse_t(g.lse, c.hq, S),
                    thd(g.dq, S, c.hq, D), thd(g.dk, S, c.hkv, D), thd(g.dv, S, c.hkv, D)};
    ASSERT_EQ(ref.vtable->backward(ref.kernel, plan, &ba, &kExec), LCA_OK) << ref.vtable->last_error();
    ref.vtable->destroy_plan(ref.kernel, plan, &kExec);
  }
  // The strategy on this rank's shard.
  const auto& vt = plugin(strategy).cp_strategy();
  lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, options, nullptr, nullptr};
  lca_cp_strategy* strat = nullptr;
  ASSERT_EQ(vt.create(&host, &strat), LCA_OK) << vt.last_error();
  lca_cp_config cfg{sizeof(lca_cp_config), lca::core::comm::as_comm_ref(world()), kernel("{}"), &p, &mask, options};
  lca_cp_plan* plan = nullptr;
  ASSERT_EQ(vt.plan(strat, &cfg, &kExec, &plan), LCA_OK) << vt.last_error();
  int64_t count = 0;
  ASSERT_EQ(vt.dispatch(strat, plan, world().rank(), nullptr, 0, &count), LCA_OK);
  std::vector<lca_token_range> ranges(count);
  ASSERT_EQ(vt.dispatch(strat, plan, world().rank(), ranges.data(), count, &count), LCA_OK);
  // Shards in dispatch order: rows of [T, H, D] and columns of LSE [H, T].
  auto shard = [&](const std::vector<float>& x, int64_t heads) { return lca::test::shard_rows(x, ranges, heads, D); };
  auto shard_lse = [&](const std::vector<float>& x) { return lca::test::shard_lse(x, ranges, c.hq, S); };
  Tensors l;
  l.q = shard(g.q, c.hq), l.k = shard(g.k, c.hkv), l.v = shard(g.v, c.hkv), l.d_o = shard(g.d_o, c.hq);
  const int64_t n = int64_t(l.q.size()) / (c.hq * D);
  l.o.resize(l.q.size()), l.lse.resize(c.hq * n), l.dq.resize(l.q.size()), l.dk.resize(l.k.size()), l.dv.resize(l.k.size());
  lca_fwd_args fa{sizeof(lca_fwd_args), thd(l.q, n, c.hq, D), thd(l.k, n, c.hkv, D), thd(l.v, n, c.hkv, D),
                  thd(l.o, n, c.hq, D), lse_t(l.lse, c.hq, n)};
  EXPECT_EQ(vt.forward(strat, plan, &fa, &kExec), LCA_OK) << vt.last_error();
  expect_close(l.o, shard(g.o, c.hq), "O");
  expect_close(l.lse, shard_lse(g.lse), "LSE");
  lca_bwd_args ba{sizeof(lca_bwd_args), thd(l.q, n, c.hq, D), thd(l.k, n, c.hkv, D), thd(l.v, n, c.hkv, D),
                  thd(l.o, n, c.hq, D), thd(l.d_o, n, c.hq, D), lse_t(l.lse, c.hq, n),
                  thd(l.dq, n, c.hq, D), thd(l.dk, n, c.hkv, D), thd(l.dv, n, c.hkv, D)};
  EXPECT_EQ(vt.backward(strat, plan, &ba, &kExec), LCA_OK) << vt.last_error();
  expect_close(l.dq, shard(g.dq, c.hq), "dQ");
  expect_close(l.dk, shard(g.dk, c.hkv), "dK");
  expect_close(l.dv, shard(g.dv, c.hkv), "dV");
  vt.destroy_plan(strat, plan, &kExec);
  vt.destroy(strat);
}

void run_all(const std::string& strategy, const std::vector<std::string>& options) {
  const Case cases[] = {{157, 8, 2, 16}, {131, 4, 1, 16}};
  for (const Case& c : cases) {
    auto masks = hand_masks(c.S);
    for (auto& m : builtin_masks(c.S)) masks.push_back(std::move(m));
    for (const auto& opt : options)
      for (const auto& m : masks) check(strategy, opt.c_str(), m, c);
  }
}

}  // namespace

TEST(CpStrategies, Ulysses) { run_all("ulysses", {"{}"}); }
TEST(CpStrategies, RingP2P) { run_all("ring_p2p", {"{}", "{\"zigzag\":false}"}); }
TEST(CpStrategies, RingAllGather) { run_all("ring_allgather", {"{}", "{\"zigzag\":false}"}); }
TEST(CpStrategies, Usp) { run_all("usp", {"{}", "{\"ulysses_degree\":2}", "{\"ulysses_degree\":1}"}); }
TEST(CpStrategies, LoongTrain) {
  run_all("loongtrain", {"{}", "{\"head_degree\":1,\"window_size\":2}", "{\"head_degree\":2,\"window_size\":1}"});
}
// The defaults (the ranks share a node here: the backward in one call); the staged backward; odd
// chunk counts in two overlapped stages; one-token chunks (S < W x chunks); Ulysses inside; chunks
// dealt out by tiles; every stage in one call (also with Ulysses inside and with one-token chunks).
TEST(CpStrategies, Balanced) {
  run_all("balanced", {"{}", "{\"one_call\":false}", "{\"chunks_per_rank\":3,\"stages\":2}",
                       "{\"chunks_per_rank\":64,\"stages\":3}", "{\"head_degree\":2}",
                       "{\"balance_by\":\"tiles\",\"chunks_per_rank\":5}", "{\"one_call\":true}",
                       "{\"one_call\":\"bwd\",\"head_degree\":2,\"balance_by\":\"tiles\"}",
                       "{\"one_call\":\"fwd\",\"chunks_per_rank\":64,\"stages\":2}"});
}

TEST(CpStrategies, BalancedRefusesBadOptionsByName) {
  const int64_t S = 64;
  lca_problem p{sizeof(lca_problem), LCA_DTYPE_F32, LCA_DEVICE_CPU, 0, S, S, 4, 1, 16, 0.25f};
  std::vector<lca_slice> full{{0, S, 0, S, LCA_SLICE_FULL, 0}};
  lca_mask mask{sizeof(lca_mask), S, S, 1, full.data(), nullptr, 0, nullptr};
  const auto& vt = plugin("balanced").cp_strategy();
  const std::pair<const char*, const char*> bad[] = {{"{\"chunk\":4}", "unknown option \"chunk\""},
                                                     {"{\"chunks_per_rank\":0}", "chunks_per_rank"},
                                                     {"{\"stages\":0}", "stages"},
                                                     {"{\"balance_by\":\"area\"}", "balance_by"},
                                                     {"{\"one_call\":\"both\"}", "one_call"},
                                                     {"{\"one_call\":true,\"stages\":2}", "one_call"},
                                                     {"{\"head_degree\":3}", "head_degree 3"}};
  for (auto [options, says] : bad) {
    lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, options, nullptr, nullptr};
    lca_cp_strategy* strat = nullptr;
    ASSERT_EQ(vt.create(&host, &strat), LCA_OK);
    lca_cp_config cfg{sizeof(lca_cp_config), lca::core::comm::as_comm_ref(world()), kernel("{}"), &p, &mask, options};
    lca_cp_plan* plan = nullptr;
    EXPECT_NE(vt.plan(strat, &cfg, &kExec, &plan), LCA_OK) << options;
    EXPECT_NE(std::string(vt.last_error()).find(says), std::string::npos) << options << ": " << vt.last_error();
    vt.destroy(strat);
  }
}

// Every rank holds as many tokens (within one chunk's rounding), whatever the mask.
TEST(CpStrategies, BalancedDispatchesEqualTokens) {
  const int W = world().size();
  const int64_t S = 4099;
  lca_problem p{sizeof(lca_problem), LCA_DTYPE_F32, LCA_DEVICE_CPU, 0, S, S, 4, 1, 16, 0.25f};
  for (auto& nm : builtin_masks(S)) {
    lca_mask mask{sizeof(lca_mask), S, S, int64_t(nm.slices.size()), nm.slices.data(), nullptr, 0, nullptr};
    const auto& vt = plugin("balanced").cp_strategy();
    lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, "{}", nullptr, nullptr};
    lca_cp_strategy* strat = nullptr;
    ASSERT_EQ(vt.create(&host, &strat), LCA_OK);
    lca_cp_config cfg{sizeof(lca_cp_config), lca::core::comm::as_comm_ref(world()), kernel("{}"), &p, &mask, "{}"};
    lca_cp_plan* plan = nullptr;
    ASSERT_EQ(vt.plan(strat, &cfg, &kExec, &plan), LCA_OK) << vt.last_error();
    int64_t total = 0, largest = 0, smallest = S;
    for (int r = 0; r < W; ++r) {
      int64_t count = 0;
      ASSERT_EQ(vt.dispatch(strat, plan, r, nullptr, 0, &count), LCA_OK);
      std::vector<lca_token_range> ranges(count);
      ASSERT_EQ(vt.dispatch(strat, plan, r, ranges.data(), count, &count), LCA_OK);
      int64_t n = 0;
      for (const auto& x : ranges) n += x.end - x.begin;
      total += n, largest = std::max(largest, n), smallest = std::min(smallest, n);
    }
    EXPECT_EQ(total, S) << nm.name;
    EXPECT_LE(largest - smallest, 8) << nm.name;  // 8 chunks a rank, each within one token
    vt.destroy_plan(strat, plan, &kExec);
    vt.destroy(strat);
  }
}

TEST(CpStrategies, UlyssesRefusesIndivisibleHeads) {
  const int W = world().size();
  const int64_t S = 64;
  lca_problem p{sizeof(lca_problem), LCA_DTYPE_F32, LCA_DEVICE_CPU, 0, S, S, 3 * W + 1, 1, 16, 0.25f};
  std::vector<lca_slice> full{{0, S, 0, S, LCA_SLICE_FULL, 0}};
  lca_mask mask{sizeof(lca_mask), S, S, 1, full.data(), nullptr, 0, nullptr};
  const auto& vt = plugin("ulysses").cp_strategy();
  lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, "{}", nullptr, nullptr};
  lca_cp_strategy* strat = nullptr;
  ASSERT_EQ(vt.create(&host, &strat), LCA_OK);
  lca_cp_config cfg{sizeof(lca_cp_config), lca::core::comm::as_comm_ref(world()), kernel("{}"), &p, &mask, "{}"};
  lca_cp_plan* plan = nullptr;
  EXPECT_EQ(vt.plan(strat, &cfg, &kExec, &plan), LCA_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(vt.last_error()).find("not divisible"), std::string::npos) << vt.last_error();
  vt.destroy(strat);
}
