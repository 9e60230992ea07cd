// cpu_reference forward against the dense fp64 brute force: masks x GQA x head dims x dtypes x
// odd lengths, plus accumulation modes, cross attention, strides and thread counts.
#include "dense.hpp"
#include "harness.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace lca::test {
namespace {

struct Inputs {
  Tensor q, k, v;
};

Inputs random_inputs(const Problem& p, uint64_t seed, double range = 1.0) {
  std::mt19937_64 rng(seed);
  Inputs in{p.make_q(), p.make_kv(), p.make_kv()};
  in.q.fill_random(rng, -range, range);
  in.k.fill_random(rng, -range, range);
  in.v.fill_random(rng, -1.0, 1.0);
  return in;
}

struct Result {
  Tensor o, lse;
};

Result run_forward(const Problem& p, Inputs& in, const std::string& config = "{}", int threads = 2) {
  Kernel kernel(config, threads);
  EXPECT_EQ(kernel.created.status, LCA_OK) << kernel.created.message;
  const Outcome planned = kernel.plan(p);
  EXPECT_EQ(planned.status, LCA_OK) << planned.message;
  Result r{p.make_q(), p.make_lse()};
  const Outcome done = kernel.forward(in.q, in.k, in.v, r.o, r.lse);
  EXPECT_EQ(done.status, LCA_OK) << done.message;
  EXPECT_EQ(kernel.allocator.live, 0) << "workspace not returned to the allocator";
  return r;
}

// |got - want| <= abs_tol + rel_tol * |want| everywhere; -inf LSE must match exactly.
void expect_forward_close(const Problem& p, const Result& got, const DenseForward& want,
                          double rel_tol, double abs_tol) {
  int failures = 0;
  for (int64_t i = 0; i < got.o.numel() && failures < 5; ++i) {
    const double w = want.o[i], g = got.o.at(i);
    if (!(std::abs(g - w) <= abs_tol + rel_tol * std::abs(w))) {
      ADD_FAILURE() << "O[" << i << "] = " << g << ", dense " << w;
      ++failures;
    }
  }
  for (int64_t h = 0; h < p.heads_q; ++h) {
    for (int64_t r = 0; r < p.seqlen_q && failures < 10; ++r) {
      const double w = want.lse[h * p.seqlen_q + r], g = got.lse.get(h, r, 0);
      const bool ok = std::isinf(w) ? (std::isinf(g) && g < 0) : std::abs(g - w) <= 2e-5 * (1 + std::abs(w));
      if (!ok) {
        ADD_FAILURE() << "LSE[" << h << "][" << r << "] = " << g << ", dense " << w;
        ++failures;
      }
    }
  }
}

class CpuReferenceForwardVsDense : public ::testing::TestWithParam<NamedMask> {};

TEST_P(CpuReferenceForwardVsDense, MatchesBruteForce) {
  const NamedMask& mask = GetParam();
  uint64_t seed = 1;
  for (int64_t S : {37, 61}) {
    for (int32_t ratio : {1, 2, 4}) {
      for (int32_t D : {16, 32, 64}) {
        for (int32_t dtype : {LCA_DTYPE_F32, LCA_DTYPE_BF16}) {
          SCOPED_TRACE(mask.name + " S=" + std::to_string(S) + " ratio=" + std::to_string(ratio) +
                       " D=" + std::to_string(D) + " " + dtype_name(dtype));
          Problem p{S, S, 4, 4 / ratio, D, dtype, static_cast<float>(1.0 / std::sqrt(D)), mask.build(S)};
          Inputs in = random_inputs(p, seed++);
          const Result got = run_forward(p, in);
          const DenseForward want = dense_forward(p, in.q, in.k, in.v);
          // bf16 output is rounded once (half an ulp of 2^-8); f32 accumulates in fp32.
          if (dtype == LCA_DTYPE_BF16) expect_forward_close(p, got, want, 1.0 / 256, 1e-5);
          else expect_forward_close(p, got, want, 1e-5, 1e-5);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, CpuReferenceForwardVsDense, ::testing::ValuesIn(hand_masks()),
                         [](const auto& info) { return info.param.name; });

// Rows longer than one chunk of keys (64), scores spread wide so that the online softmax
// rescales often; f16 as well as f32.
TEST(CpuReferenceForward, LongRowsAndLargeScores) {
  for (const NamedMask& mask : hand_masks()) {
    for (int32_t dtype : {LCA_DTYPE_F32, LCA_DTYPE_F16}) {
      SCOPED_TRACE(mask.name + " " + dtype_name(dtype));
      Problem p{203, 203, 2, 1, 20, dtype, 1.0f, mask.build(203)};  // D not a multiple of 8
      Inputs in = random_inputs(p, 77, 2.5);
      const Result got = run_forward(p, in, "{}", 3);
      const DenseForward want = dense_forward(p, in.q, in.k, in.v);
      expect_forward_close(p, got, want, dtype == LCA_DTYPE_F16 ? 1.0 / 1024 : 2e-5, 2e-5);
    }
  }
}

// Sq != Sk: CAUSAL and BI_CAUSAL are bottom-right aligned in their rectangles.
TEST(CpuReferenceForward, CrossAttentionShapes) {
  const std::vector<std::vector<lca_slice>> masks = {
      {slice(0, 37, 0, 61, LCA_SLICE_FULL)},
      {slice(0, 37, 0, 61, LCA_SLICE_CAUSAL)},
      {slice(0, 37, 0, 61, LCA_SLICE_INV_CAUSAL)},
      {slice(0, 37, 0, 61, LCA_SLICE_BI_CAUSAL)},
      {slice(0, 20, 0, 30, LCA_SLICE_CAUSAL), slice(20, 37, 30, 61, LCA_SLICE_CAUSAL)},
  };
  for (size_t m = 0; m < masks.size(); ++m) {
    for (auto [sq, sk] : {std::pair<int64_t, int64_t>{37, 61}, {61, 37}}) {
      if (sq == 61 && m > 0) continue;  // the hand masks above are written for 37 x 61
      SCOPED_TRACE("mask " + std::to_string(m) + " " + std::to_string(sq) + "x" + std::to_string(sk));
      Problem p{sq, sk, 4, 2, 13, LCA_DTYPE_F32, 0.2f, masks[m]};
      if (sq == 61) p.slices = {slice(0, 61, 0, 37, LCA_SLICE_CAUSAL)};
      Inputs in = random_inputs(p, 5 + m);
      expect_forward_close(p, run_forward(p, in), dense_forward(p, in.q, in.k, in.v), 1e-5, 1e-5);
    }
  }
}

// fp32 accumulation stays within ~1e-5 relative of fp64 accumulation.
TEST(CpuReferenceForward, Fp32AccumulateCloseToFp64) {
  for (const NamedMask& mask : hand_masks()) {
    SCOPED_TRACE(mask.name);
    Problem p{131, 131, 4, 2, 64, LCA_DTYPE_F32, 0.125f, mask.build(131)};
    Inputs in = random_inputs(p, 9);
    const Result f32 = run_forward(p, in, R"({"accumulate":"f32"})");
    const Result f64 = run_forward(p, in, R"({"accumulate":"f64"})");
    double err2 = 0, ref2 = 0;
    for (int64_t i = 0; i < f32.o.numel(); ++i) {
      err2 += std::pow(f32.o.at(i) - f64.o.at(i), 2);
      ref2 += std::pow(f64.o.at(i), 2);
      EXPECT_LE(std::abs(f32.o.at(i) - f64.o.at(i)), 1e-5 * (1 + std::abs(f64.o.at(i))));
    }
    if (ref2 > 0) EXPECT_LE(std::sqrt(err2 / ref2), 1e-5);
    for (int64_t i = 0; i < f32.lse.numel(); ++i)
      if (std::isfinite(f64.lse.at(i))) EXPECT_NEAR(f32.lse.at(i), f64.lse.at(i), 1e-5 * (1 + std::abs(f64.lse.at(i))));
  }
}

// Rows that see no key: O = 0 and LSE = -inf.
TEST(CpuReferenceForward, EmptyRowsGiveZeroAndMinusInfinity) {
  Problem p{37, 37, 2, 2, 16, LCA_DTYPE_F32, 0.25f,
            {slice(0, 5, 0, 11, LCA_SLICE_CAUSAL), slice(12, 30, 3, 9, LCA_SLICE_FULL)}};
  Inputs in = random_inputs(p, 3);
  const Result r = run_forward(p, in);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t row : {5, 8, 11, 30, 36}) {
      EXPECT_TRUE(std::isinf(r.lse.get(h, row, 0)) && r.lse.get(h, row, 0) < 0) << "row " << row;
      for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(r.o.get(row, h, d), 0.0) << "row " << row;
    }
    EXPECT_TRUE(std::isfinite(r.lse.get(h, 0, 0)));
  }
}

// Strides are honoured: Q/K/V as views into one packed QKV buffer, O head-major.
TEST(CpuReferenceForward, HonoursStrides) {
  const int64_t S = 29, H = 4, D = 16;
  Problem p{S, S, H, 2, D, LCA_DTYPE_F32, 0.25f, hand_masks()[3].build(S)};
  Inputs packed = random_inputs(p, 21);
  // Strided copies: q in a [S, 2H, D] buffer (every other head slot), k/v with padded rows,
  // o stored head-major [H, S, D] and the LSE with a padded token stride.
  Tensor q(p.dtype, {S, H, D}, {2 * H * D, 2 * D, 1});
  Tensor k(p.dtype, {S, 2, D}, {2 * D + 5, D, 1});
  Tensor v(p.dtype, {S, 2, D}, {1, S, 2 * S});  // last dim strided too
  for (int64_t t = 0; t < S; ++t)
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t h = 0; h < H; ++h) q.set(t, h, d, packed.q.get(t, h, d));
      for (int64_t h = 0; h < 2; ++h) {
        k.set(t, h, d, packed.k.get(t, h, d));
        v.set(t, h, d, packed.v.get(t, h, d));
      }
    }
  Kernel kernel;
  ASSERT_EQ(kernel.plan(p).status, LCA_OK);
  Tensor o(p.dtype, {S, H, D}, {D, S * D, 1});
  Tensor lse(LCA_DTYPE_F32, {H, S, 1}, {3 * S, 3, 1});
  ASSERT_EQ(kernel.forward(q, k, v, o, lse).status, LCA_OK);
  const Result dense_layout = run_forward(p, packed);
  for (int64_t i = 0; i < o.numel(); ++i) EXPECT_EQ(o.at(i), dense_layout.o.at(i));
  for (int64_t i = 0; i < lse.numel(); ++i) EXPECT_EQ(lse.at(i), dense_layout.lse.at(i));
}

// Each output row is computed by one thread in a fixed order: any thread count, same bits.
TEST(CpuReferenceForward, ThreadCountDoesNotChangeBits) {
  Problem p{97, 97, 4, 1, 32, LCA_DTYPE_F32, 0.2f, hand_masks()[5].build(97)};
  Inputs in = random_inputs(p, 4);
  const Result one = run_forward(p, in, "{}", 1);
  for (int threads : {2, 5, 0}) {
    const Result many = run_forward(p, in, "{}", threads);
    for (int64_t i = 0; i < one.o.numel(); ++i) ASSERT_EQ(one.o.at(i), many.o.at(i)) << threads;
    for (int64_t i = 0; i < one.lse.numel(); ++i) ASSERT_EQ(one.lse.at(i), many.lse.at(i)) << threads;
  }
}

}  // namespace
}  // namespace lca::test
