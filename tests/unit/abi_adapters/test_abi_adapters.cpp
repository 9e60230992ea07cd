// The plugin-side adapters of the C ABI: every exception type becomes a status and a message
// (lca::Error keeps its status, std::bad_alloc is LCA_ERR_OUT_OF_MEMORY, anything else
// LCA_ERR_INTERNAL), vtables and descriptors carry struct_size and LCA_ABI_VERSION, and the
// export macros produce what the host expects (checked on real fixture libraries).
#include <lca/lca.hpp>

#include "fixture_folder.hpp"

#include <boost/dll/shared_library.hpp>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>

namespace lca::test {
namespace {

// What the test classes below throw next.
enum class Throw { nothing, lca_error, bad_alloc, runtime_error, not_an_exception };
Throw next_throw = Throw::nothing;

void maybe_throw() {
  switch (next_throw) {
    case Throw::nothing: return;
    case Throw::lca_error: throw Error(LCA_ERR_UNSUPPORTED, "head_dim 96 is not supported");
    case Throw::bad_alloc: throw std::bad_alloc();
    case Throw::runtime_error: throw std::runtime_error("something broke inside");
    case Throw::not_an_exception: throw 42;
  }
}

struct Expected {
  Throw what;
  lca_status status;
  const char* message;  // a fragment of last_error()
};
const Expected kCases[] = {
    {Throw::lca_error, LCA_ERR_UNSUPPORTED, "head_dim 96 is not supported"},
    {Throw::bad_alloc, LCA_ERR_OUT_OF_MEMORY, "bad_alloc"},
    {Throw::runtime_error, LCA_ERR_INTERNAL, "something broke inside"},
    {Throw::not_an_exception, LCA_ERR_INTERNAL, "unknown exception"},
};

// ---- kernels --------------------------------------------------------------------------------
int plans_released = 0, plans_destroyed = 0;

struct CountingPlan : IPlan {
  ~CountingPlan() override { ++plans_destroyed; }
  void release(const lca_exec&) override { ++plans_released; }
};

struct TestKernel : IKernel {
  explicit TestKernel(const lca_host_info&) { maybe_throw(); }
  std::unique_ptr<IPlan> plan(const lca_problem&, const lca_mask&, const lca_exec&) override {
    maybe_throw();
    return std::make_unique<CountingPlan>();
  }
  void forward(IPlan&, const lca_fwd_args&, const lca_exec&) override { maybe_throw(); }
  void backward(IPlan&, const lca_bwd_args&, const lca_exec&) override { maybe_throw(); }
};

struct ForwardOnlyKernel : IKernel {
  explicit ForwardOnlyKernel(const lca_host_info&) {}
  std::unique_ptr<IPlan> plan(const lca_problem&, const lca_mask&, const lca_exec&) override {
    return std::make_unique<CountingPlan>();
  }
  void forward(IPlan&, const lca_fwd_args&, const lca_exec&) override {}
};

using KernelVt = detail::KernelAdapter<TestKernel>;

class KernelAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    next_throw = Throw::nothing;
    plans_released = plans_destroyed = 0;
    vt_ = KernelVt::vtable(true);
    ASSERT_EQ(vt_->create(&host_, &kernel_), LCA_OK);
    ASSERT_NE(kernel_, nullptr);
  }
  void TearDown() override {
    next_throw = Throw::nothing;
    if (kernel_) vt_->destroy(kernel_);
  }
  const lca_kernel_vtable* vt_ = nullptr;
  lca_kernel* kernel_ = nullptr;
  lca_host_info host_{sizeof(lca_host_info), LCA_ABI_VERSION, "", nullptr, "{}", nullptr, nullptr};
  lca_problem problem_{};
  lca_slice slice_{0, 1, 0, 1, LCA_SLICE_FULL, 0};
  lca_mask mask_{sizeof(lca_mask), 1, 1, 1, &slice_, nullptr, 0, nullptr};
  lca_allocator allocator_{sizeof(lca_allocator), nullptr, nullptr, nullptr};
  lca_exec exec_{sizeof(lca_exec), nullptr, &allocator_, 0};
  lca_fwd_args fwd_{};
  lca_bwd_args bwd_{};
};

TEST_F(KernelAdapterTest, VtableHeader) {
  for (bool with_backward : {true, false}) {
    const lca_kernel_vtable* vt = KernelVt::vtable(with_backward);
    EXPECT_EQ(vt->struct_size, sizeof(lca_kernel_vtable));
    EXPECT_EQ(vt->abi_version, LCA_ABI_VERSION);
    EXPECT_NE(vt->create, nullptr);
    EXPECT_NE(vt->destroy, nullptr);
    EXPECT_NE(vt->plan, nullptr);
    EXPECT_NE(vt->destroy_plan, nullptr);
    EXPECT_NE(vt->forward, nullptr);
    EXPECT_NE(vt->last_error, nullptr);
    EXPECT_EQ(vt->backward != nullptr, with_backward);
  }
}

TEST_F(KernelAdapterTest, PlanExceptionsBecomeStatuses) {
  for (const auto& c : kCases) {
    next_throw = c.what;
    lca_plan* plan = reinterpret_cast<lca_plan*>(0x1);
    EXPECT_EQ(vt_->plan(kernel_, &problem_, &mask_, &exec_, &plan), c.status);
    EXPECT_EQ(plan, nullptr) << "a failed plan leaves *out NULL";
    EXPECT_NE(std::string(vt_->last_error()).find(c.message), std::string::npos) << vt_->last_error();
  }
}

TEST_F(KernelAdapterTest, ForwardAndBackwardExceptionsBecomeStatuses) {
  lca_plan* plan = nullptr;
  ASSERT_EQ(vt_->plan(kernel_, &problem_, &mask_, &exec_, &plan), LCA_OK);
  EXPECT_EQ(vt_->forward(kernel_, plan, &fwd_, &exec_), LCA_OK);
  EXPECT_EQ(vt_->backward(kernel_, plan, &bwd_, &exec_), LCA_OK);
  for (const auto& c : kCases) {
    next_throw = c.what;
    EXPECT_EQ(vt_->forward(kernel_, plan, &fwd_, &exec_), c.status);
    EXPECT_NE(std::string(vt_->last_error()).find(c.message), std::string::npos) << vt_->last_error();
    EXPECT_EQ(vt_->backward(kernel_, plan, &bwd_, &exec_), c.status);
    EXPECT_NE(std::string(vt_->last_error()).find(c.message), std::string::npos) << vt_->last_error();
  }
  next_throw = Throw::nothing;
  vt_->destroy_plan(kernel_, plan, &exec_);
  EXPECT_EQ(plans_released, 1);
  EXPECT_EQ(plans_destroyed, 1);
}

TEST_F(KernelAdapterTest, CreateExceptionsBecomeStatuses) {
  for (const auto& c : kCases) {
    next_throw = c.what;
    lca_kernel* k = nullptr;
    EXPECT_EQ(vt_->create(&host_, &k), c.status);
    EXPECT_EQ(k, nullptr);
    EXPECT_NE(std::string(vt_->last_error()).find(c.message), std::string::npos) << vt_->last_error();
  }
}

TEST_F(KernelAdapterTest, NullArgumentsAreInvalid) {
  lca_plan* plan = nullptr;
  EXPECT_EQ(vt_->plan(kernel_, nullptr, &mask_, &exec_, &plan), LCA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vt_->last_error()).find("plan: null argument"), std::string::npos);
  EXPECT_EQ(vt_->plan(kernel_, &problem_, &mask_, nullptr, &plan), LCA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vt_->forward(kernel_, nullptr, &fwd_, &exec_), LCA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vt_->last_error()).find("forward: null argument"), std::string::npos);
  EXPECT_EQ(vt_->backward(kernel_, nullptr, &bwd_, &exec_), LCA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(vt_->create(nullptr, &kernel_), LCA_ERR_INVALID_ARGUMENT);
  vt_->destroy_plan(kernel_, nullptr, &exec_);  // a no-op, not a crash
  EXPECT_EQ(plans_destroyed, 0);
}

TEST_F(KernelAdapterTest, DestroyPlanWithoutExecSkipsRelease) {
  lca_plan* plan = nullptr;
  ASSERT_EQ(vt_->plan(kernel_, &problem_, &mask_, &exec_, &plan), LCA_OK);
  vt_->destroy_plan(kernel_, plan, nullptr);
  EXPECT_EQ(plans_released, 0);
  EXPECT_EQ(plans_destroyed, 1);
}

struct InfoPlan : IPlan {
  std::string info() const override { return R"({"compile_ms": 12.5})"; }
};
struct InfoKernel : ForwardOnlyKernel {
  using ForwardOnlyKernel::ForwardOnlyKernel;
  std::unique_ptr<IPlan> plan(const lca_problem&, const lca_mask&, const lca_exec&) override {
    return std::make_unique<InfoPlan>();
  }
};

TEST_F(KernelAdapterTest, PlanInfoIsNullUnlessThePlanHasSome) {
  ASSERT_NE(vt_->plan_info, nullptr);
  lca_plan* plan = nullptr;
  ASSERT_EQ(vt_->plan(kernel_, &problem_, &mask_, &exec_, &plan), LCA_OK);
  EXPECT_EQ(vt_->plan_info(kernel_, plan), nullptr);
  EXPECT_EQ(vt_->plan_info(kernel_, nullptr), nullptr);
  vt_->destroy_plan(kernel_, plan, &exec_);

  const lca_kernel_vtable* vt = detail::KernelAdapter<InfoKernel>::vtable(false);
  lca_kernel* kernel = nullptr;
  ASSERT_EQ(vt->create(&host_, &kernel), LCA_OK);
  ASSERT_EQ(vt->plan(kernel, &problem_, &mask_, &exec_, &plan), LCA_OK);
  EXPECT_STREQ(vt->plan_info(kernel, plan), R"({"compile_ms": 12.5})");
  vt->destroy_plan(kernel, plan, &exec_);
  vt->destroy(kernel);
}

TEST_F(KernelAdapterTest, LastErrorIsPerThread) {
  next_throw = Throw::runtime_error;
  lca_plan* plan = nullptr;
  ASSERT_EQ(vt_->plan(kernel_, &problem_, &mask_, &exec_, &plan), LCA_ERR_INTERNAL);
  std::string other;
  std::thread([&] { other = vt_->last_error(); }).join();
  EXPECT_EQ(other, "no error");
  EXPECT_NE(std::string(vt_->last_error()).find("something broke inside"), std::string::npos);
}

TEST(KernelAdapterDefaults, BackwardNotOverriddenIsUnsupported) {
  // Exported "with backward" but the class has none: the call says so instead of crashing.
  const lca_kernel_vtable* vt = detail::KernelAdapter<ForwardOnlyKernel>::vtable(true);
  const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, "", nullptr, "{}", nullptr, nullptr};
  lca_kernel* k = nullptr;
  ASSERT_EQ(vt->create(&host, &k), LCA_OK);
  lca_problem problem{};
  lca_slice slice{0, 1, 0, 1, LCA_SLICE_FULL, 0};
  lca_mask mask{sizeof(lca_mask), 1, 1, 1, &slice, nullptr, 0, nullptr};
  lca_allocator allocator{sizeof(lca_allocator), nullptr, nullptr, nullptr};
  lca_exec exec{sizeof(lca_exec), nullptr, &allocator, 0};
  lca_plan* plan = nullptr;
  ASSERT_EQ(vt->plan(k, &problem, &mask, &exec, &plan), LCA_OK);
  lca_bwd_args bwd{};
  EXPECT_EQ(vt->backward(k, plan, &bwd, &exec), LCA_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(vt->last_error()).find("no backward"), std::string::npos);
  vt->destroy_plan(k, plan, &exec);
  vt->destroy(k);
}

// ---- mask providers -------------------------------------------------------------------------
struct TestProvider : IMaskProvider {
  explicit TestProvider(const lca_host_info&) {}
  std::string describe() override {
    maybe_throw();
    return R"([{"name": "diag"}])";
  }
  std::unique_ptr<OwnedMask> generate(const lca_mask_request& request) override {
    maybe_throw();
    auto m = std::make_unique<OwnedMask>();
    m->seqlen_q = m->seqlen_k = request.seqlen;
    m->slices = {{0, request.seqlen / 2, 0, request.seqlen / 2, LCA_SLICE_CAUSAL, 0},
                 {request.seqlen / 2, request.seqlen, request.seqlen / 2, request.seqlen, LCA_SLICE_CAUSAL, 0}};
    m->doc_offsets = {0, request.seqlen / 2, request.seqlen};
    return m;
  }
};
using ProviderVt = detail::MaskProviderAdapter<TestProvider>;

TEST(MaskProviderAdapter, GenerateGetRelease) {
  next_throw = Throw::nothing;
  const lca_mask_provider_vtable* vt = ProviderVt::vtable();
  EXPECT_EQ(vt->struct_size, sizeof(lca_mask_provider_vtable));
  EXPECT_EQ(vt->abi_version, LCA_ABI_VERSION);
  const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, "", nullptr, "{}", nullptr, nullptr};
  lca_mask_provider* p = nullptr;
  ASSERT_EQ(vt->create(&host, &p), LCA_OK);
  EXPECT_STREQ(vt->describe(p), R"([{"name": "diag"}])");

  const lca_mask_request request{sizeof(lca_mask_request), "diag", "{}", 10, 1};
  lca_mask_handle* h = nullptr;
  ASSERT_EQ(vt->generate(p, &request, &h), LCA_OK);
  const lca_mask* m = vt->get(h);
  EXPECT_EQ(m->struct_size, sizeof(lca_mask));
  EXPECT_EQ(m->seqlen_q, 10);
  ASSERT_EQ(m->num_slices, 2);
  EXPECT_EQ(m->slices[1].q_begin, 5);
  EXPECT_EQ(m->block_sparse, nullptr) << "no block-sparse view unless the provider made one";
  EXPECT_EQ(m->num_docs, 2);
  EXPECT_EQ(m->doc_offsets[2], 10);
  vt->release(p, h);
  vt->destroy(p);
}

TEST(MaskProviderAdapter, ExceptionsBecomeStatuses) {
  const lca_mask_provider_vtable* vt = ProviderVt::vtable();
  const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, "", nullptr, "{}", nullptr, nullptr};
  lca_mask_provider* p = nullptr;
  next_throw = Throw::nothing;
  ASSERT_EQ(vt->create(&host, &p), LCA_OK);
  const lca_mask_request request{sizeof(lca_mask_request), "diag", "{}", 10, 1};
  for (const auto& c : kCases) {
    next_throw = c.what;
    lca_mask_handle* h = reinterpret_cast<lca_mask_handle*>(0x1);
    EXPECT_EQ(vt->generate(p, &request, &h), c.status);
    EXPECT_EQ(h, nullptr);
    EXPECT_NE(std::string(vt->last_error()).find(c.message), std::string::npos) << vt->last_error();
    EXPECT_STREQ(vt->describe(p), "[]") << "a failing describe still returns a JSON array";
  }
  next_throw = Throw::nothing;
  EXPECT_EQ(vt->generate(p, nullptr, nullptr), LCA_ERR_INVALID_ARGUMENT);
  vt->destroy(p);
}

TEST(OwnedMask, BlockSparseView) {
  OwnedMask m;
  m.seqlen_q = m.seqlen_k = 128;
  m.slices = {{0, 128, 0, 128, LCA_SLICE_FULL, 0}};
  m.has_block_sparse = true;
  m.block_q = m.block_k = 64;
  m.num_q_blocks = m.num_k_blocks = 2;
  m.row_offsets = {0, 1, 3};
  m.col_indices = {0, 0, 1};
  const lca_mask* v = m.view();
  ASSERT_NE(v->block_sparse, nullptr);
  EXPECT_EQ(v->block_sparse->struct_size, sizeof(lca_block_sparse));
  EXPECT_EQ(v->block_sparse->row_offsets[2], 3);
  EXPECT_EQ(v->num_docs, 0);
  EXPECT_EQ(v->doc_offsets, nullptr);
}

// ---- context-parallel strategies ------------------------------------------------------------
struct TestPlan : ICPPlan {};
struct TestStrategy : ICPStrategy {
  explicit TestStrategy(const lca_host_info&) {}
  std::unique_ptr<ICPPlan> plan(const lca_cp_config&, const lca_exec&) override {
    maybe_throw();
    return std::make_unique<TestPlan>();
  }
  std::vector<lca_token_range> dispatch(ICPPlan&, int rank) override {
    maybe_throw();
    return {{rank * 10, rank * 10 + 5}, {100 - rank * 10 - 5, 100 - rank * 10}};
  }
  void forward(ICPPlan&, const lca_fwd_args&, const lca_exec&) override { maybe_throw(); }
  void backward(ICPPlan&, const lca_bwd_args&, const lca_exec&) override { maybe_throw(); }
};
using StrategyVt = detail::CPStrategyAdapter<TestStrategy>;

TEST(CPStrategyAdapter, DispatchCountsAndCapacity) {
  next_throw = Throw::nothing;
  const lca_cp_strategy_vtable* vt = StrategyVt::vtable();
  EXPECT_EQ(vt->struct_size, sizeof(lca_cp_strategy_vtable));
  EXPECT_EQ(vt->abi_version, LCA_ABI_VERSION);
  const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, "", nullptr, "{}", nullptr, nullptr};
  lca_cp_strategy* s = nullptr;
  ASSERT_EQ(vt->create(&host, &s), LCA_OK);
  lca_cp_config config{};
  lca_allocator allocator{sizeof(lca_allocator), nullptr, nullptr, nullptr};
  const lca_exec exec{sizeof(lca_exec), nullptr, &allocator, 0};
  lca_cp_plan* plan = nullptr;
  ASSERT_EQ(vt->plan(s, &config, &exec, &plan), LCA_OK);

  int64_t count = -1;
  ASSERT_EQ(vt->dispatch(s, plan, 1, nullptr, 0, &count), LCA_OK);
  EXPECT_EQ(count, 2);
  lca_token_range ranges[2] = {};
  ASSERT_EQ(vt->dispatch(s, plan, 1, ranges, 2, &count), LCA_OK);
  EXPECT_EQ(ranges[0].begin, 10);
  EXPECT_EQ(ranges[1].end, 90);
  EXPECT_EQ(vt->dispatch(s, plan, 1, ranges, 1, &count), LCA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vt->last_error()).find("capacity"), std::string::npos);
  vt->destroy_plan(s, plan, &exec);
  vt->destroy(s);
}

TEST(CPStrategyAdapter, ExceptionsBecomeStatuses) {
  const lca_cp_strategy_vtable* vt = StrategyVt::vtable();
  const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, "", nullptr, "{}", nullptr, nullptr};
  next_throw = Throw::nothing;
  lca_cp_strategy* s = nullptr;
  ASSERT_EQ(vt->create(&host, &s), LCA_OK);
  lca_cp_config config{};
  lca_allocator allocator{sizeof(lca_allocator), nullptr, nullptr, nullptr};
  const lca_exec exec{sizeof(lca_exec), nullptr, &allocator, 0};
  lca_cp_plan* plan = nullptr;
  ASSERT_EQ(vt->plan(s, &config, &exec, &plan), LCA_OK);
  const lca_fwd_args fwd{};
  const lca_bwd_args bwd{};
  for (const auto& c : kCases) {
    next_throw = c.what;
    lca_cp_plan* other = nullptr;
    EXPECT_EQ(vt->plan(s, &config, &exec, &other), c.status);
    EXPECT_NE(std::string(vt->last_error()).find(c.message), std::string::npos) << vt->last_error();
    int64_t count = 0;
    EXPECT_EQ(vt->dispatch(s, plan, 0, nullptr, 0, &count), c.status);
    EXPECT_EQ(vt->forward(s, plan, &fwd, &exec), c.status);
    EXPECT_EQ(vt->backward(s, plan, &bwd, &exec), c.status);
    EXPECT_NE(std::string(vt->last_error()).find(c.message), std::string::npos) << vt->last_error();
  }
  next_throw = Throw::nothing;
  vt->destroy_plan(s, plan, &exec);
  vt->destroy(s);
}

TEST(ErrorHelpers, RequireAndGuard) {
  EXPECT_NO_THROW(require(true, LCA_ERR_DEVICE, "fine"));
  try {
    require(false, LCA_ERR_DEVICE, "cudaMalloc failed");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LCA_ERR_DEVICE);
    EXPECT_STREQ(e.what(), "cudaMalloc failed");
  }
  EXPECT_EQ(detail::guard([] {}), LCA_OK);
  EXPECT_EQ(detail::guard([] { throw Error(LCA_ERR_COMM, "peer 3 gone"); }), LCA_ERR_COMM);
  EXPECT_STREQ(detail::last_error(), "peer 3 gone");
}

// ---- the export macros, through real libraries -------------------------------------------
struct Library {
  explicit Library(const std::filesystem::path& path)
      : lib(path.string()), desc(lib.get<const lca_plugin_descriptor*()>(LCA_PLUGIN_ENTRY_SYMBOL)()) {}
  boost::dll::shared_library lib;
  const lca_plugin_descriptor* desc;
};

TEST(ExportMacros, KernelWithBackward) {
  Library l(fixture_dir("good") / "liblca_fx_good.so");
  ASSERT_NE(l.desc, nullptr);
  EXPECT_EQ(l.desc->struct_size, sizeof(lca_plugin_descriptor));
  EXPECT_EQ(l.desc->abi_version, LCA_ABI_VERSION);
  EXPECT_EQ(l.desc->kind, LCA_KIND_KERNEL);
  EXPECT_STREQ(l.desc->name, "fx_good");
  EXPECT_STREQ(l.desc->version, "0.0.1");
  ASSERT_NE(l.desc->kernel, nullptr);
  EXPECT_EQ(l.desc->mask_provider, nullptr);
  EXPECT_EQ(l.desc->cp_strategy, nullptr);
  EXPECT_EQ(l.desc->kernel->struct_size, sizeof(lca_kernel_vtable));
  EXPECT_EQ(l.desc->kernel->abi_version, LCA_ABI_VERSION);
  EXPECT_NE(l.desc->kernel->backward, nullptr);
}

TEST(ExportMacros, KernelWithoutBackward) {
  Library l(fixture_dir("no_backward") / "liblca_fx_no_backward.so");
  ASSERT_NE(l.desc->kernel, nullptr);
  EXPECT_EQ(l.desc->kernel->backward, nullptr);
  EXPECT_NE(l.desc->kernel->forward, nullptr);
}

TEST(ExportMacros, StatusesCrossARealLibraryBoundary) {
  // fx_oom's plan throws lca::Error(OUT_OF_MEMORY); fx_good refuses f16 with UNSUPPORTED.
  for (const char* which : {"oom", "good"}) {
    Library l(fixture_dir(which) / (std::string("liblca_fx_") + which + ".so"));
    const lca_kernel_vtable* vt = l.desc->kernel;
    const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, "", nullptr, "{}", nullptr, nullptr};
    lca_kernel* k = nullptr;
    ASSERT_EQ(vt->create(&host, &k), LCA_OK);
    lca_problem problem{sizeof(lca_problem), std::string(which) == "oom" ? LCA_DTYPE_F32 : LCA_DTYPE_F16,
                        LCA_DEVICE_CPU, 0, 4, 4, 1, 1, 8, 0.35f};
    lca_slice slice{0, 4, 0, 4, LCA_SLICE_CAUSAL, 0};
    lca_mask mask{sizeof(lca_mask), 4, 4, 1, &slice, nullptr, 0, nullptr};
    lca_allocator allocator{sizeof(lca_allocator), nullptr, nullptr, nullptr};
    lca_exec exec{sizeof(lca_exec), nullptr, &allocator, 0};
    lca_plan* plan = nullptr;
    const lca_status s = vt->plan(k, &problem, &mask, &exec, &plan);
    if (std::string(which) == "oom") {
      EXPECT_EQ(s, LCA_ERR_OUT_OF_MEMORY);
      EXPECT_NE(std::string(vt->last_error()).find("deliberately out of memory"), std::string::npos);
    } else {
      EXPECT_EQ(s, LCA_ERR_UNSUPPORTED);
      EXPECT_NE(std::string(vt->last_error()).find("f32 only"), std::string::npos);
    }
    EXPECT_EQ(plan, nullptr);
    vt->destroy(k);
  }
}

TEST(ExportMacros, MaskProvider) {
  Library l(main_plugin_dir() / "liblca_builtin.so");
  EXPECT_EQ(l.desc->struct_size, sizeof(lca_plugin_descriptor));
  EXPECT_EQ(l.desc->kind, LCA_KIND_MASK_PROVIDER);
  EXPECT_STREQ(l.desc->name, "builtin");
  EXPECT_EQ(l.desc->kernel, nullptr);
  ASSERT_NE(l.desc->mask_provider, nullptr);
  EXPECT_EQ(l.desc->cp_strategy, nullptr);
  EXPECT_EQ(l.desc->mask_provider->struct_size, sizeof(lca_mask_provider_vtable));
  EXPECT_EQ(l.desc->mask_provider->abi_version, LCA_ABI_VERSION);
}

TEST(ExportMacros, CPStrategy) {
  const auto path = main_plugin_dir() / "liblca_ulysses.so";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no ulysses plugin in this build";
  Library l(path);
  EXPECT_EQ(l.desc->kind, LCA_KIND_CP_STRATEGY);
  EXPECT_STREQ(l.desc->name, "ulysses");
  EXPECT_EQ(l.desc->kernel, nullptr);
  EXPECT_EQ(l.desc->mask_provider, nullptr);
  ASSERT_NE(l.desc->cp_strategy, nullptr);
  EXPECT_EQ(l.desc->cp_strategy->struct_size, sizeof(lca_cp_strategy_vtable));
  EXPECT_EQ(l.desc->cp_strategy->abi_version, LCA_ABI_VERSION);
}

}  // namespace
}  // namespace lca::test
