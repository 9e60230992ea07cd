// core/cuda: device description, the measuring allocator against cudaMemGetInfo, out-of-memory
// as a status, its cache of released blocks, random inputs, timers, L2 flush and the two ceilings.
#include "core/cuda/gpu.hpp"
#include "core/run/backend.hpp"  // random_uniform: the CPU backend draws the same values

#include <lca/types.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

namespace gpu = lca::core::gpu;

namespace {

#define LCA_SKIP_WITHOUT_GPU() \
  if (gpu::device_count() == 0) GTEST_SKIP() << "no CUDA device visible (driver or GPU absent)"

constexpr size_t kMiB = size_t{1} << 20;

size_t free_bytes() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return free;
}

}  // namespace

TEST(GpuRuntime, DeviceCountNeverThrows) { EXPECT_GE(gpu::device_count(), 0); }

TEST(GpuRuntime, QueryDescribesTheDevice) {
  LCA_SKIP_WITHOUT_GPU();
  const gpu::GpuInfo info = gpu::query(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.total_mem, 0u);
  EXPECT_GT(info.l2_bytes, 0u);
  EXPECT_GT(info.driver_version, 0);
  EXPECT_GT(info.runtime_version, 0);
  EXPECT_FALSE(info.cublas_version.empty());
  std::printf("[gpu] %s cc %d.%d, %d SMs, SM %d MHz, mem %d MHz, %.1f GiB, L2 %.1f MiB, driver %d, "
              "runtime %d, cuDNN %s, NCCL %s, cuBLAS %s\n",
              info.name.c_str(), info.cc_major, info.cc_minor, info.sm_count, info.sm_clock_mhz,
              info.mem_clock_mhz, info.total_mem / double(1 << 30), info.l2_bytes / double(kMiB),
              info.driver_version, info.runtime_version, info.cudnn_version.c_str(),
              info.nccl_version.c_str(), info.cublas_version.c_str());
}

TEST(GpuRuntime, AllocatorPeakMatchesMemGetInfo) {
  LCA_SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  gpu::DeviceAllocator alloc(0);
  const size_t before = free_bytes();
  void* p[3] = {};
  for (auto& ptr : p) ASSERT_EQ(alloc.allocate(256 * kMiB, &ptr), LCA_OK);
  const size_t after = free_bytes();
  EXPECT_EQ(alloc.current_bytes(), 768 * kMiB);
  EXPECT_EQ(alloc.peak_bytes(), 768 * kMiB);
  const size_t used = before - after;
  EXPECT_GE(used, 768 * kMiB);
  EXPECT_LE(used, 768 * kMiB + 64 * kMiB) << "cudaMemGetInfo saw far more than the allocator";
  alloc.release(p[1]);
  EXPECT_EQ(alloc.current_bytes(), 512 * kMiB);
  EXPECT_EQ(alloc.peak_bytes(), 768 * kMiB);
  EXPECT_GE(free_bytes(), after + 256 * kMiB - 2 * kMiB);
  alloc.reset_peak();
  EXPECT_EQ(alloc.peak_bytes(), 512 * kMiB);
  // Through the C ABI that plugins see.
  const lca_allocator* abi = alloc.abi();
  void* q = nullptr;
  ASSERT_EQ(abi->alloc(abi->ctx, 100 * kMiB, &q), LCA_OK);
  EXPECT_EQ(alloc.peak_bytes(), 612 * kMiB);
  abi->free(abi->ctx, q);
  alloc.release(p[0]);
  alloc.release(p[2]);
  EXPECT_EQ(alloc.current_bytes(), 0u);
}

TEST(GpuRuntime, OutOfMemoryIsAStatusAndTheNextAllocationWorks) {
  LCA_SKIP_WITHOUT_GPU();
  gpu::DeviceAllocator alloc(0);
  void* huge = reinterpret_cast<void*>(1);
  EXPECT_EQ(alloc.allocate(size_t{1} << 50, &huge), LCA_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(huge, nullptr);
  EXPECT_NE(alloc.last_error().find("bytes"), std::string::npos) << alloc.last_error();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* small = nullptr;
  ASSERT_EQ(alloc.allocate(kMiB, &small), LCA_OK);
  EXPECT_NE(small, nullptr);
  EXPECT_EQ(cudaMemset(small, 0, kMiB), cudaSuccess);
  alloc.release(small);
  alloc.set_limit(10 * kMiB);
  EXPECT_EQ(alloc.allocate(20 * kMiB, &small), LCA_ERR_OUT_OF_MEMORY);
  ASSERT_EQ(alloc.allocate(5 * kMiB, &small), LCA_OK);
  alloc.release(small);
  EXPECT_EQ(alloc.peak_bytes(), 5 * kMiB);
}

// A caching allocator on GPU 0 whose cache holds one released 64 MiB block, `a`. The tests assert
// pointers and counts only: free memory as cudaMemGetInfo sees it moves with the GPU tests that
// ctest runs beside them.
class Caching : public ::testing::Test {
 protected:
  void SetUp() override {
    LCA_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    alloc_ = std::make_unique<gpu::DeviceAllocator>(0);
    alloc_->set_caching(true);
    ASSERT_EQ(alloc_->allocate(64 * kMiB, &a), LCA_OK);
    alloc_->release(a);
    ASSERT_EQ(alloc_->current_bytes(), 0u);
    ASSERT_EQ(alloc_->cached_bytes(), 64 * kMiB);
  }
  std::unique_ptr<gpu::DeviceAllocator> alloc_;
  void* a = nullptr;
};

TEST_F(Caching, KeepsReleasedBlocksForTheirSizeAndCountsOnlyLiveBytes) {
  gpu::DeviceAllocator& alloc = *alloc_;
  void* b = nullptr;
  ASSERT_EQ(alloc.allocate(64 * kMiB, &b), LCA_OK);
  EXPECT_EQ(b, a) << "a request of the same size takes the cached block";
  EXPECT_EQ(alloc.cached_bytes(), 0u);
  EXPECT_EQ(alloc.current_bytes(), 64 * kMiB);
  void* c = nullptr;
  ASSERT_EQ(alloc.allocate(32 * kMiB, &c), LCA_OK);  // another size: a block of its own
  EXPECT_NE(c, a);
  EXPECT_EQ(alloc.peak_bytes(), 96 * kMiB);
  EXPECT_EQ(cudaMemset(b, 1, 64 * kMiB), cudaSuccess);
  EXPECT_EQ(cudaMemset(c, 1, 32 * kMiB), cudaSuccess);
  alloc.release(b);
  alloc.release(c);
  EXPECT_EQ(alloc.cached_bytes(), 96 * kMiB);
  alloc.reset_peak();  // a new cell: the cache goes back to the driver
  EXPECT_EQ(alloc.cached_bytes(), 0u);
  EXPECT_EQ(alloc.peak_bytes(), 0u);
  alloc.set_caching(false);
  ASSERT_EQ(alloc.allocate(16 * kMiB, &a), LCA_OK);
  alloc.release(a);
  EXPECT_EQ(alloc.cached_bytes(), 0u) << "without caching a release goes back to the driver";
}

TEST_F(Caching, GivesItsBlocksBackWhenTheDriverRefuses) {
  // A request the driver refuses first gives the cache back and asks again; refused again, it is
  // a status. (A request that fits only once the cache is gone would need most of the GPU's
  // memory, which the GPU tests that ctest runs beside this one may be holding.)
  gpu::DeviceAllocator& alloc = *alloc_;
  void* huge = reinterpret_cast<void*>(1);
  EXPECT_EQ(alloc.allocate(size_t{1} << 50, &huge), LCA_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(huge, nullptr);
  EXPECT_EQ(alloc.cached_bytes(), 0u) << "the refused request gave the cache back first";
  EXPECT_EQ(alloc.current_bytes(), 0u);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(alloc.allocate(64 * kMiB, &a), LCA_OK);
  EXPECT_EQ(cudaMemset(a, 0, 64 * kMiB), cudaSuccess);
  alloc.release(a);
}

class FillRandom : public ::testing::TestWithParam<int32_t> {};

TEST_P(FillRandom, NoZerosMeanNearZeroWithinScale) {
  LCA_SKIP_WITHOUT_GPU();
  const int32_t dtype = GetParam();
  const int64_t n = 1 << 20;
  const float scale = 0.5f;
  const size_t bytes = n * lca::dtype_size(dtype);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, bytes), cudaSuccess);
  gpu::Stream stream;
  gpu::fill_random(dev, n, dtype, 1234, scale, stream.handle());
  stream.synchronize();
  std::vector<unsigned char> host(bytes);
  ASSERT_EQ(cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  double sum = 0, sum2 = 0;
  int64_t zeros = 0, outside = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = lca::load_as_double(host.data(), dtype, i);
    zeros += v == 0.0;
    outside += std::fabs(v) > scale * 1.001;
    sum += v;
    sum2 += v * v;
  }
  EXPECT_EQ(zeros, 0);
  int64_t differs = 0;  // the same values as the CPU backend, rounded to the dtype
  for (int64_t i = 0; i < 4096; ++i) {
    const float want = scale * lca::core::random_uniform(1234, static_cast<uint64_t>(i));
    double want_rounded = want;
    if (dtype == LCA_DTYPE_BF16) want_rounded = lca::bf16_to_f32(lca::f32_to_bf16(want));
    if (dtype == LCA_DTYPE_F16) want_rounded = lca::f16_to_f32(lca::f32_to_f16(want));
    differs += lca::load_as_double(host.data(), dtype, i) != want_rounded;
  }
  EXPECT_EQ(differs, 0);
  EXPECT_EQ(outside, 0);
  EXPECT_LT(std::fabs(sum / n), 0.01 * scale);
  EXPECT_NEAR(sum2 / n, scale * scale / 3.0, 0.02 * scale * scale);  // uniform variance
  // Same seed, same numbers; another seed, other numbers.
  std::vector<unsigned char> again(bytes);
  gpu::fill_random(dev, n, dtype, 1234, scale, stream.handle());
  stream.synchronize();
  ASSERT_EQ(cudaMemcpy(again.data(), dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host, again);
  gpu::fill_random(dev, n, dtype, 99, scale, stream.handle());
  stream.synchronize();
  ASSERT_EQ(cudaMemcpy(again.data(), dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_NE(host, again);
  cudaFree(dev);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FillRandom,
                         ::testing::Values(LCA_DTYPE_BF16, LCA_DTYPE_F16, LCA_DTYPE_F32));

TEST(GpuRuntime, TimerAndFlush) {
  LCA_SKIP_WITHOUT_GPU();
  gpu::Stream stream;
  gpu::EventTimer timer;
  timer.start(stream.handle());
  gpu::flush_l2(stream.handle());
  gpu::flush_l2(stream.handle());
  timer.stop(stream.handle());
  const float ms = timer.elapsed_ms();
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 1000.0f);
}

TEST(GpuRuntime, CeilingsArePositive) {
  LCA_SKIP_WITHOUT_GPU();
  const gpu::Ceilings c = gpu::measure_ceilings(0);
  std::printf("[gpu] ceilings: bf16 GEMM 8192^3 %.1f TFLOP/s, D2D copy %.1f GB/s (read+write)\n",
              c.gemm_tflops, c.copy_gbps);
  EXPECT_GT(c.gemm_tflops, 0.0);
  EXPECT_GT(c.copy_gbps, 0.0);
}
