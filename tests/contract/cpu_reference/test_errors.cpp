// cpu_reference refusals: each bad input gives the expected status and a message that says
// what is wrong; plus the descriptor the library exports.
#include "dense.hpp"
#include "harness.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace lca::test {
namespace {

Problem small_problem() {
  return Problem{16, 16, 4, 2, 8, LCA_DTYPE_F32, 0.35f, {slice(0, 16, 0, 16, LCA_SLICE_CAUSAL)}};
}

#define EXPECT_REFUSED(outcome, expected_status, fragment)                       \
  do {                                                                           \
    const Outcome o_ = (outcome);                                                \
    EXPECT_EQ(o_.status, expected_status) << o_.message;                         \
    EXPECT_NE(o_.message.find(fragment), std::string::npos) << o_.message;       \
  } while (0)

TEST(CpuReferenceDescriptor, IsAKernelWithBackward) {
  const lca_plugin_descriptor& d = reference_plugin().descriptor();
  EXPECT_EQ(d.kind, LCA_KIND_KERNEL);
  EXPECT_STREQ(d.name, "cpu_reference");
  EXPECT_EQ(LCA_ABI_MAJOR_OF(d.abi_version), LCA_ABI_VERSION_MAJOR);
  ASSERT_NE(d.kernel, nullptr);
  EXPECT_NE(d.kernel->backward, nullptr);
}

TEST(CpuReferenceErrors, BadConfig) {
  EXPECT_REFUSED(Kernel(R"({"accumulate":"f16"})").created, LCA_ERR_INVALID_ARGUMENT, "accumulate");
  EXPECT_REFUSED(Kernel("{not json").created, LCA_ERR_INVALID_ARGUMENT, "JSON");
  EXPECT_REFUSED(Kernel(R"({"acumulate":"f64"})").created, LCA_ERR_INVALID_ARGUMENT, "unknown option 'acumulate'");
  EXPECT_EQ(Kernel(R"({"accumulate":"f64"})").created.status, LCA_OK);
}

TEST(CpuReferenceErrors, HeadsNotAMultiple) {
  Kernel kernel;
  Problem p = small_problem();
  p.heads_q = 3;
  EXPECT_REFUSED(kernel.plan(p), LCA_ERR_INVALID_ARGUMENT, "multiple of heads_kv");
}

TEST(CpuReferenceErrors, DeviceNotCpu) {
  Kernel kernel;
  const Problem p = small_problem();
  const lca_mask mask = p.mask();
  EXPECT_REFUSED(kernel.plan(p.abi(LCA_DEVICE_CUDA), mask), LCA_ERR_UNSUPPORTED, "CPU");
}

TEST(CpuReferenceErrors, BadShapesAndDtype) {
  Kernel kernel;
  Problem p = small_problem();
  p.head_dim = 0;
  EXPECT_REFUSED(kernel.plan(p), LCA_ERR_INVALID_ARGUMENT, "head_dim");
  p = small_problem();
  p.seqlen_k = -1;
  EXPECT_REFUSED(kernel.plan(p), LCA_ERR_INVALID_ARGUMENT, "sequence length");
  p = small_problem();
  p.dtype = 42;
  EXPECT_REFUSED(kernel.plan(p), LCA_ERR_UNSUPPORTED, "dtype");
}

TEST(CpuReferenceErrors, BadMasks) {
  Kernel kernel;
  Problem p = small_problem();
  lca_problem problem = p.abi();
  lca_mask mask = p.mask();
  mask.seqlen_k = 17;
  EXPECT_REFUSED(kernel.plan(problem, mask), LCA_ERR_INVALID_ARGUMENT, "mask is 16 x 17");
  p.slices = {slice(0, 16, 4, 20, LCA_SLICE_FULL)};
  EXPECT_REFUSED(kernel.plan(p), LCA_ERR_INVALID_ARGUMENT, "outside the mask");
  p.slices = {slice(0, 16, 0, 16, 7)};
  EXPECT_REFUSED(kernel.plan(p), LCA_ERR_INVALID_ARGUMENT, "unknown type");
  p.slices = {slice(9, 3, 0, 16, LCA_SLICE_FULL)};
  EXPECT_REFUSED(kernel.plan(p), LCA_ERR_INVALID_ARGUMENT, "outside the mask");
  mask = p.mask();
  mask.slices = nullptr;
  EXPECT_REFUSED(kernel.plan(problem, mask), LCA_ERR_INVALID_ARGUMENT, "null slices");
}

TEST(CpuReferenceErrors, TensorsThatDoNotMatchThePlan) {
  Kernel kernel;
  const Problem p = small_problem();
  ASSERT_EQ(kernel.plan(p).status, LCA_OK);
  Tensor q = p.make_q(), k = p.make_kv(), v = p.make_kv(), o = p.make_q(), lse = p.make_lse();
  std::mt19937_64 rng(1);
  for (Tensor* t : {&q, &k, &v}) t->fill_random(rng, -1, 1);
  EXPECT_EQ(kernel.forward(q, k, v, o, lse).status, LCA_OK);

  Tensor short_k(p.dtype, {15, 2, 8});
  EXPECT_REFUSED(kernel.forward(q, short_k, v, o, lse), LCA_ERR_INVALID_ARGUMENT,
                 "k has shape {15, 2, 8}, expected {16, 2, 8}");
  Tensor bf16_v(LCA_DTYPE_BF16, {16, 2, 8});
  EXPECT_REFUSED(kernel.forward(q, k, bf16_v, o, lse), LCA_ERR_INVALID_ARGUMENT, "v has dtype bf16");
  Tensor lse_f16(LCA_DTYPE_F16, {4, 16, 1});
  EXPECT_REFUSED(kernel.forward(q, k, v, o, lse_f16), LCA_ERR_INVALID_ARGUMENT, "lse has dtype f16");
  Tensor d_o = p.make_q(), dq = p.make_q(), dk = p.make_kv();
  Tensor wide_dv(p.dtype, {16, 4, 8});
  EXPECT_REFUSED(kernel.backward(q, k, v, o, d_o, lse, dq, dk, wide_dv), LCA_ERR_INVALID_ARGUMENT, "dv has shape");
}

TEST(CpuReferenceErrors, AllocatorRefusalIsOutOfMemory) {
  Kernel kernel;
  const Problem p = small_problem();
  ASSERT_EQ(kernel.plan(p).status, LCA_OK);
  Tensor q = p.make_q(), k = p.make_kv(), v = p.make_kv(), o = p.make_q(), lse = p.make_lse();
  kernel.allocator.refuse = true;
  EXPECT_REFUSED(kernel.forward(q, k, v, o, lse), LCA_ERR_OUT_OF_MEMORY, "allocator refused");
  EXPECT_GT(kernel.allocator.calls, 0);
}

}  // namespace
}  // namespace lca::test
