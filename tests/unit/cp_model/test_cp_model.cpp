// The scaling model against the strategies' own planning code: every cell of the mask is
// computed exactly once over all ranks, the balanced layouts give each rank its share, more
// bandwidth never costs time, bad input is refused by name, and 96 GPUs x 6 strategies is fast.
#include "core/model/cp_model.hpp"

#include "balance.hpp"
#include "layout.hpp"
#include "slice_clip.hpp"

#include <lca/error.hpp>
#include <lca/types.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

namespace {

using lca::core::model::KernelRate;
using lca::core::model::Machine;
using lca::core::model::predict;
using lca::core::model::Problem;

lca_slice slice(int64_t q0, int64_t q1, int64_t k0, int64_t k1, lca_slice_type t) {
  lca_slice s{};
  s.q_begin = q0, s.q_end = q1, s.k_begin = k0, s.k_end = k1, s.type = t;
  return s;
}

// Causal documents of random lengths (seeded), one CAUSAL slice each.
std::vector<lca_slice> documents(int64_t S, int64_t mean, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> len(1, 2 * mean);
  std::vector<lca_slice> out;
  for (int64_t a = 0; a < S;) {
    const int64_t b = std::min(S, a + len(rng));
    out.push_back(slice(a, b, a, b, LCA_SLICE_CAUSAL));
    a = b;
  }
  return out;
}

Problem problem(std::vector<lca_slice> slices, int64_t S, int hq, int hkv, bool bwd = false) {
  Problem p;
  p.slices = std::move(slices);
  p.seqlen = S;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.head_dim = 128;
  p.backward = bwd;
  return p;
}

const KernelRate kRate{600.0, 0.0};

// Masks with every slice type: full, causal, documents, a band (BI_CAUSAL) with an INV_CAUSAL piece.
std::vector<std::pair<std::string, std::vector<lca_slice>>> masks(int64_t S) {
  return {{"full", {slice(0, S, 0, S, LCA_SLICE_FULL)}},
          {"causal", {slice(0, S, 0, S, LCA_SLICE_CAUSAL)}},
          {"documents", documents(S, S / 13, 5)},
          {"band+inv", {slice(0, S, 0, S / 2, LCA_SLICE_BI_CAUSAL), slice(S / 2, S, S / 2, S, LCA_SLICE_INV_CAUSAL)}}};
}

TEST(CpModel, RanksComputeEveryCellOnce) {
  const int64_t S = 4099;  // odd: uneven chunks everywhere
  for (const auto& [name, slices] : masks(S))
    for (int W : {2, 4, 6, 8, 16})
      for (bool bwd : {false, true})
        for (const std::string& st : lca::core::model::strategy_names()) {
          const Problem P = problem(slices, S, 16, 4, bwd);
          Machine m;
          m.gpus_per_node = 4;
          const auto pr = predict(P, st, nlohmann::json::object(), W, m, kRate);
          if (!pr.refused.empty()) continue;  // ulysses at W = 6: heads not divisible
          double sum = 0;
          for (const auto& r : pr.ranks) sum += r.flops;
          EXPECT_NEAR(sum, pr.total_flops, 1e-9 * pr.total_flops) << st << " " << name << " W=" << W;
          EXPECT_GT(pr.time_ms, 0) << st << " " << name;
        }
}

TEST(CpModel, BlockPairAreasMatchTheClippedMasks) {
  // The area table's sums against clip_mask (what the kernels are planned on), for zigzag pieces.
  const int64_t S = 3001;
  const auto slices = documents(S, 97, 11);
  lca_problem p{};
  p.seqlen_q = p.seqlen_k = S;
  p.heads_q = 8, p.heads_kv = 2;
  const auto L = lca::cp::make_layout(8, 0, 2, true, p);
  int64_t total = 0;
  for (int a = 0; a < L.cp; ++a)
    for (int b = 0; b < L.cp; ++b) {
      const auto m = lca::cp::clip_mask(slices, L.group_segs[a], L.group_segs[b]);
      for (const auto& x : m.slices) total += lca::slice_area(x);
    }
  int64_t area = 0;
  for (const auto& x : slices) area += lca::slice_area(x);
  ASSERT_EQ(total, area);
  const auto pr = predict(problem(slices, S, 8, 2), "usp", {{"ulysses_degree", 2}}, 8, Machine{}, kRate);
  ASSERT_TRUE(pr.refused.empty()) << pr.refused;
  EXPECT_EQ(pr.head_degree, 2);
  double sum = 0;
  for (const auto& r : pr.ranks) sum += r.flops;
  EXPECT_NEAR(sum, 4.0 * double(area) * 128 * 8, 1.0);
}

TEST(CpModel, FullMaskGivesEveryGpuItsShareAtEveryWorldSize) {
  // Fixed tokens a GPU on full: every rank computes total / W, so the compute share is constant.
  for (int W : {8, 16, 32}) {
    const int64_t S = 2048 * W;
    const Problem P = problem({slice(0, S, 0, S, LCA_SLICE_FULL)}, S, 64, 8);
    for (const std::string& st : lca::core::model::strategy_names()) {
      const auto pr = predict(P, st, nlohmann::json::object(), W, Machine{}, kRate);
      if (!pr.refused.empty()) continue;
      for (const auto& r : pr.ranks)
        EXPECT_NEAR(r.flops, pr.total_flops / W, 1e-6 * pr.total_flops / W) << st << " W=" << W << " rank " << r.rank;
      EXPECT_LE(pr.tflops_per_gpu, kRate.tflops * (1 + 1e-9)) << st;
    }
  }
}

TEST(CpModel, MoreBandwidthIsNeverSlower) {
  const int64_t S = 32768 * 16;
  for (const auto& [name, slices] : masks(S))
    for (bool bwd : {false, true})
      for (const std::string& st : lca::core::model::strategy_names()) {
        const Problem P = problem(slices, S, 64, 8, bwd);
        Machine slow;
        slow.intra = {50, 20};
        slow.inter = {5, 30};
        const auto base = predict(P, st, nlohmann::json::object(), 16, slow, kRate);
        if (!base.refused.empty()) continue;
        Machine fast_intra = slow, fast_inter = slow, low_latency = slow;
        fast_intra.intra.GBps *= 4;
        fast_inter.inter.GBps *= 4;
        low_latency.intra.latency_us = low_latency.inter.latency_us = 0;
        for (const Machine& m : {fast_intra, fast_inter, low_latency}) {
          const auto pr = predict(P, st, nlohmann::json::object(), 16, m, kRate);
          EXPECT_LE(pr.time_ms, base.time_ms * (1 + 1e-12)) << st << " " << name << (bwd ? " bwd" : " fwd");
        }
        // Inter-node links slow enough to matter: a cross-node strategy must feel them.
        Machine slower = slow;
        slower.inter.GBps /= 100;
        const auto pr = predict(P, st, nlohmann::json::object(), 16, slower, kRate);
        EXPECT_GT(pr.time_ms, base.time_ms) << st << " " << name;
      }
}

TEST(CpModel, BadInputIsRefusedByName) {
  const int64_t S = 8192;
  const Problem P = problem({slice(0, S, 0, S, LCA_SLICE_CAUSAL)}, S, 64, 8);
  auto message = [&](const std::string& st, int W, Machine m, KernelRate r, nlohmann::json o = nlohmann::json::object()) {
    try {
      predict(P, st, o, W, m, r);
    } catch (const lca::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message("ring", 8, Machine{}, kRate).find("unknown CP strategy 'ring'"), std::string::npos);
  Machine m;
  m.inter.GBps = -1;
  EXPECT_NE(message("usp", 8, m, kRate).find("inter-node bandwidth"), std::string::npos);
  m = Machine{};
  m.intra.GBps = std::nan("");
  EXPECT_NE(message("usp", 8, m, kRate).find("intra-node bandwidth"), std::string::npos);
  EXPECT_NE(message("usp", 8, Machine{}, KernelRate{0, 0}).find("rate (TFLOP/s)"), std::string::npos);
  EXPECT_NE(message("usp", 0, Machine{}, kRate).find("world size"), std::string::npos);
  EXPECT_NE(message("usp", 8, Machine{}, kRate, {{"zigzag", 3}}).find("\"zigzag\""), std::string::npos);
  EXPECT_NE(message("balanced", 8, Machine{}, kRate, {{"chunk", 3}}).find("unknown option \"chunk\""),
            std::string::npos);
  // A world the strategy cannot run is a refusal in the prediction, with the plugin's reason.
  const auto pr = predict(P, "ulysses", nlohmann::json::object(), 96, Machine{}, kRate);
  EXPECT_NE(pr.refused.find("not divisible"), std::string::npos) << pr.refused;
}

TEST(CpModel, NinetySixGpusOfSixStrategiesInSeconds) {
  // Documents of ~1K tokens at 32K a GPU: ~3000 slices, 768 balanced chunks.
  const int64_t S = 32768LL * 96;
  const Problem P = problem(documents(S, 1024, 3), S, 64, 8, true);
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& st : lca::core::model::strategy_names()) {
    const auto pr = predict(P, st, nlohmann::json::object(), 96, Machine{}, kRate);
    if (pr.refused.empty()) {
      EXPECT_GT(pr.tflops_per_gpu, 0) << st;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0) << "96 GPUs x 6 strategies took " << s << " s";
  std::printf("[cp_model] 96 GPUs x 6 strategies, %zu slices, backward: %.2f s\n", P.slices.size(), s);
}

}  // namespace
