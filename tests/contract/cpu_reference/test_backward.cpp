// cpu_reference backward: against the dense fp64 analytic backward, against central finite
// differences of L = sum(O * W) (fp64 data, fp64 accumulate), GQA summation, empty rows and
// thread-count determinism.
#include "dense.hpp"
#include "harness.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace lca::test {
namespace {

struct Case {
  Problem p;
  Tensor q, k, v, w;  // w doubles as dO
};

Case random_case(Problem p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Case c{p, p.make_q(), p.make_kv(), p.make_kv(), p.make_q()};
  c.q.fill_random(rng, -1, 1);
  c.k.fill_random(rng, -1, 1);
  c.v.fill_random(rng, -1, 1);
  c.w.fill_random(rng, -1, 1);
  return c;
}

struct Grads {
  Tensor o, lse, dq, dk, dv;
};

Grads run_both(Case& c, const std::string& config, int threads = 2) {
  Kernel kernel(config, threads);
  EXPECT_EQ(kernel.created.status, LCA_OK) << kernel.created.message;
  const Outcome planned = kernel.plan(c.p);
  EXPECT_EQ(planned.status, LCA_OK) << planned.message;
  Grads g{c.p.make_q(), c.p.make_lse(), c.p.make_q(), c.p.make_kv(), c.p.make_kv()};
  Outcome done = kernel.forward(c.q, c.k, c.v, g.o, g.lse);
  EXPECT_EQ(done.status, LCA_OK) << done.message;
  done = kernel.backward(c.q, c.k, c.v, g.o, c.w, g.lse, g.dq, g.dk, g.dv);
  EXPECT_EQ(done.status, LCA_OK) << done.message;
  EXPECT_EQ(kernel.allocator.live, 0);
  return g;
}

void expect_close(const char* name, const Tensor& got, const std::vector<double>& want,
                  double rel_tol, double abs_tol) {
  int failures = 0;
  for (int64_t i = 0; i < got.numel() && failures < 5; ++i) {
    if (!(std::abs(got.at(i) - want[i]) <= abs_tol + rel_tol * std::abs(want[i]))) {
      ADD_FAILURE() << name << "[" << i << "] = " << got.at(i) << ", dense " << want[i];
      ++failures;
    }
  }
}

class CpuReferenceBackwardVsDense : public ::testing::TestWithParam<NamedMask> {};

TEST_P(CpuReferenceBackwardVsDense, MatchesAnalyticDense) {
  const NamedMask& mask = GetParam();
  uint64_t seed = 100;
  for (int64_t S : {37, 61}) {
    for (int32_t ratio : {1, 2, 4}) {
      for (int32_t D : {16, 32}) {
        SCOPED_TRACE(mask.name + " S=" + std::to_string(S) + " ratio=" + std::to_string(ratio) +
                     " D=" + std::to_string(D));
        // fp32 data and accumulation, then fp64 data and accumulation.
        for (int32_t dtype : {LCA_DTYPE_F32, LCA_DTYPE_F64}) {
          Case c = random_case(Problem{S, S, 4, 4 / ratio, D, dtype, 0.3f, mask.build(S)}, seed++);
          const bool f64 = dtype == LCA_DTYPE_F64;
          const Grads g = run_both(c, f64 ? R"({"accumulate":"f64"})" : "{}");
          const DenseBackward want = dense_backward(c.p, c.q, c.k, c.v, c.w);
          const double tol = f64 ? 1e-11 : 2e-5;
          expect_close("dQ", g.dq, want.dq, tol, tol);
          expect_close("dK", g.dk, want.dk, tol, tol);
          expect_close("dV", g.dv, want.dv, tol, tol);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, CpuReferenceBackwardVsDense, ::testing::ValuesIn(hand_masks()),
                         [](const auto& info) { return info.param.name; });

// L(Q, K, V) = sum(O * W); dL/dO = W. Central differences on sampled elements of Q, K and V.
TEST(CpuReferenceBackward, MatchesFiniteDifferences) {
  for (const NamedMask& mask : hand_masks()) {
    SCOPED_TRACE(mask.name);
    Problem p{37, 37, 4, 2, 12, LCA_DTYPE_F64, 0.3f, mask.build(37)};
    Case c = random_case(p, 7);
    const std::string config = R"({"accumulate":"f64"})";
    const Grads g = run_both(c, config, 1);

    Kernel kernel(config, 1);
    ASSERT_EQ(kernel.plan(p).status, LCA_OK);
    Tensor o = p.make_q(), lse = p.make_lse();
    auto loss = [&] {
      EXPECT_EQ(kernel.forward(c.q, c.k, c.v, o, lse).status, LCA_OK);
      double sum = 0;
      for (int64_t i = 0; i < o.numel(); ++i) sum += o.at(i) * c.w.at(i);
      return sum;
    };
    std::mt19937_64 rng(11);
    const double h = 1e-5;
    for (auto [input, grad, name] : {std::tuple{&c.q, &g.dq, "dQ"}, {&c.k, &g.dk, "dK"}, {&c.v, &g.dv, "dV"}}) {
      std::uniform_int_distribution<int64_t> pick(0, input->numel() - 1);
      for (int n = 0; n < 20; ++n) {
        const int64_t i = pick(rng);
        const double x = input->at(i);
        input->set_at(i, x + h);
        const double up = loss();
        input->set_at(i, x - h);
        const double down = loss();
        input->set_at(i, x);
        const double fd = (up - down) / (2 * h);
        EXPECT_NEAR(grad->at(i), fd, 1e-7 * (1 + std::abs(fd))) << name << "[" << i << "]";
      }
    }
  }
}

// Rows that see nothing get dQ = 0; keys no row sees get dK = dV = 0.
TEST(CpuReferenceBackward, UnseenRowsAndKeysGetZeroGradients) {
  Problem p{37, 37, 4, 1, 16, LCA_DTYPE_F32, 0.25f,
            {slice(0, 5, 0, 11, LCA_SLICE_CAUSAL), slice(12, 30, 20, 26, LCA_SLICE_FULL)}};
  Case c = random_case(p, 5);
  const Grads g = run_both(c, "{}");
  for (int64_t d = 0; d < 16; ++d) {
    for (int64_t row : {5, 11, 30, 36})
      for (int64_t h = 0; h < 4; ++h) EXPECT_EQ(g.dq.get(row, h, d), 0.0) << "row " << row;
    for (int64_t key : {11, 19, 26, 36}) {
      EXPECT_EQ(g.dk.get(key, 0, d), 0.0) << "key " << key;
      EXPECT_EQ(g.dv.get(key, 0, d), 0.0) << "key " << key;
    }
  }
}

// Outputs are overwritten, not accumulated: garbage in dQ/dK/dV beforehand changes nothing.
TEST(CpuReferenceBackward, OverwritesOutputs) {
  Problem p{41, 41, 2, 2, 16, LCA_DTYPE_F32, 0.25f, hand_masks()[1].build(41)};
  Case c = random_case(p, 6);
  const Grads a = run_both(c, "{}");
  Kernel kernel;
  ASSERT_EQ(kernel.plan(p).status, LCA_OK);
  Grads b{p.make_q(), p.make_lse(), p.make_q(), p.make_kv(), p.make_kv()};
  std::mt19937_64 rng(1);
  b.dq.fill_random(rng, 5, 6);
  b.dk.fill_random(rng, 5, 6);
  b.dv.fill_random(rng, 5, 6);
  Tensor o = a.o, lse = a.lse;
  ASSERT_EQ(kernel.backward(c.q, c.k, c.v, o, c.w, lse, b.dq, b.dk, b.dv).status, LCA_OK);
  for (int64_t i = 0; i < a.dq.numel(); ++i) ASSERT_EQ(a.dq.at(i), b.dq.at(i));
  for (int64_t i = 0; i < a.dk.numel(); ++i) ASSERT_EQ(a.dk.at(i), b.dk.at(i));
  for (int64_t i = 0; i < a.dv.numel(); ++i) ASSERT_EQ(a.dv.at(i), b.dv.at(i));
}

// A call over part of the keys, given the whole row's O and LSE (a CP strategy's block): its dQ
// is its share of the whole dQ and its dK/dV are the whole's for its keys, in both accumulations
// (fp64's recomputed LSE must not replace the given one where the call holds part of a row).
TEST(CpuReferenceBackward, KeyBlocksGivenTheWholeLseAddUp) {
  const int64_t S = 40, half = 17;
  Problem whole{S, S, 4, 2, 12, LCA_DTYPE_F64, 0.3f, {slice(0, S, 0, S, LCA_SLICE_FULL)}};
  for (const char* config : {"{}", R"({"accumulate":"f64"})"}) {
    SCOPED_TRACE(config);
    Case c = random_case(whole, 21);
    const Grads g = run_both(c, config, 1);
    Tensor dq_sum = whole.make_q();
    for (int64_t i = 0; i < dq_sum.numel(); ++i) dq_sum.set_at(i, 0.0);
    for (auto [k0, k1] : {std::pair<int64_t, int64_t>{0, half}, {half, S}}) {
      Problem part = whole;
      part.seqlen_k = k1 - k0;
      part.slices = {slice(0, S, 0, k1 - k0, LCA_SLICE_FULL)};
      Tensor k = part.make_kv(), v = part.make_kv(), dq = part.make_q(), dk = part.make_kv(), dv = part.make_kv();
      for (int64_t r = 0; r < k1 - k0; ++r)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t d = 0; d < 12; ++d) {
            k.set(r, h, d, c.k.get(k0 + r, h, d));
            v.set(r, h, d, c.v.get(k0 + r, h, d));
          }
      Kernel kernel(config, 1);
      ASSERT_EQ(kernel.plan(part).status, LCA_OK);
      Tensor o = g.o, lse = g.lse;
      ASSERT_EQ(kernel.backward(c.q, k, v, o, c.w, lse, dq, dk, dv).status, LCA_OK);
      for (int64_t i = 0; i < dq.numel(); ++i) dq_sum.set_at(i, dq_sum.at(i) + dq.at(i));
      for (int64_t r = 0; r < k1 - k0; ++r)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t d = 0; d < 12; ++d) {
            ASSERT_NEAR(dk.get(r, h, d), g.dk.get(k0 + r, h, d), 1e-6) << "key " << k0 + r;
            ASSERT_NEAR(dv.get(r, h, d), g.dv.get(k0 + r, h, d), 1e-6) << "key " << k0 + r;
          }
    }
    for (int64_t i = 0; i < dq_sum.numel(); ++i) ASSERT_NEAR(dq_sum.at(i), g.dq.at(i), 1e-6) << "dq[" << i << "]";
  }
}

// dK/dV are race-free: any thread count gives the same bits.
TEST(CpuReferenceBackward, ThreadCountDoesNotChangeBits) {
  Problem p{150, 150, 8, 2, 32, LCA_DTYPE_BF16, 0.2f, hand_masks()[6].build(150)};
  Case c = random_case(p, 8);
  const Grads one = run_both(c, "{}", 1);
  for (int threads : {3, 8}) {
    const Grads many = run_both(c, "{}", threads);
    for (int64_t i = 0; i < one.dq.numel(); ++i) ASSERT_EQ(one.dq.at(i), many.dq.at(i));
    for (int64_t i = 0; i < one.dk.numel(); ++i) ASSERT_EQ(one.dk.at(i), many.dk.at(i));
    for (int64_t i = 0; i < one.dv.numel(); ++i) ASSERT_EQ(one.dv.at(i), many.dv.at(i));
  }
}

}  // namespace
}  // namespace lca::test
