// The lent communicator (NCCL, or MPI staged through pinned memory) on device buffers, through
// its C++ interface and through the C vtable a plugin sees: uneven all-to-all that leaves gaps
// alone, all-gather, reduce-scatter (fp32, bf16), all-reduce (in place too), a grouped ring of
// send/recv on a stream inside a split (made twice: NCCL caches it), barrier.
#include "core/cuda/gpu.hpp"
#include "device_buffer.hpp"
#include "gpu_world.hpp"

#include <lca/cp_strategy.hpp>
#include <lca/types.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

using lca::test::DeviceBuffer;
using lca::test::lent;

TEST(GpuComm, AllToAllUnevenKeepsGaps) {
  LCA_SKIP_UNLESS_READY();
  auto& w = lent();
  lca::core::gpu::Stream stream;
  const int W = w.size(), r = w.rank();
  // Rank r sends p + r + 1 elements to rank p, valued 1000 r + 10 p + i; blocks land one
  // element apart, and the gaps must keep their -1.
  std::vector<int64_t> sc(W), sd(W), rc(W), rd(W);
  for (int p = 0; p < W; ++p) sc[p] = p + r + 1, rc[p] = r + p + 1;
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), int64_t(0));
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), int64_t(0));
  for (int p = 0; p < W; ++p) rd[p] += p;
  std::vector<float> send(sd[W - 1] + sc[W - 1]), recv(rd[W - 1] + rc[W - 1] + 1, -1.0f);
  for (int p = 0; p < W; ++p)
    for (int64_t i = 0; i < sc[p]; ++i) send[sd[p] + i] = 1000.0f * r + 10.0f * p + i;
  DeviceBuffer ds(send), dr(recv);
  w.all_to_all(ds.data(), sc.data(), sd.data(), dr.data(), rc.data(), rd.data(), LCA_DTYPE_F32, stream.handle());
  stream.synchronize();
  const auto got = dr.to_host<float>();
  std::vector<float> want(recv.size(), -1.0f);
  for (int p = 0; p < W; ++p)
    for (int64_t i = 0; i < rc[p]; ++i) want[rd[p] + i] = 1000.0f * p + 10.0f * r + i;
  EXPECT_EQ(got, want);
}

TEST(GpuComm, CollectivesOnDeviceBuffers) {
  LCA_SKIP_UNLESS_READY();
  auto& w = lent();
  lca::core::gpu::Stream stream;
  void* s = stream.handle();
  const int W = w.size(), r = w.rank();
  DeviceBuffer mine(std::vector<float>{float(r), float(r) + 0.5f}), all(2 * W * sizeof(float));
  w.all_gather(mine.data(), all.data(), 2, LCA_DTYPE_F32, s);
  stream.synchronize();
  const auto gathered = all.to_host<float>();
  for (int p = 0; p < W; ++p) {
    EXPECT_EQ(gathered[2 * p], p);
    EXPECT_EQ(gathered[2 * p + 1], p + 0.5f);
  }
  // Block p of rank r holds r + p; the sum of block r over ranks is sum_q (q + r).
  std::vector<float> send(3 * W);
  for (int p = 0; p < W; ++p)
    for (int i = 0; i < 3; ++i) send[3 * p + i] = float(r + p);
  DeviceBuffer ds(send), out(3 * sizeof(float));
  w.reduce_scatter(ds.data(), out.data(), 3, LCA_DTYPE_F32, LCA_REDUCE_SUM, s);
  stream.synchronize();
  for (float v : out.to_host<float>()) EXPECT_EQ(v, float(W * (W - 1) / 2 + W * r));
  std::vector<uint16_t> hs(W, lca::f32_to_bf16(0.25f * (r + 1)));
  DeviceBuffer dhs(hs), dho(sizeof(uint16_t));
  w.reduce_scatter(dhs.data(), dho.data(), 1, LCA_DTYPE_BF16, LCA_REDUCE_SUM, s);
  stream.synchronize();
  EXPECT_EQ(lca::bf16_to_f32(dho.to_host<uint16_t>()[0]), 0.25f * W * (W + 1) / 2);
  // In place, as the NCCL barrier does it.
  DeviceBuffer mx(std::vector<float>{float(r), -float(r)});
  w.all_reduce(mx.data(), mx.data(), 2, LCA_DTYPE_F32, LCA_REDUCE_MAX, s);
  stream.synchronize();
  EXPECT_EQ(mx.to_host<float>(), (std::vector<float>{float(W - 1), 0.0f}));
  w.barrier(s);
  stream.synchronize();
}

TEST(GpuComm, SplitRingThroughTheVtable) {
  LCA_SKIP_UNLESS_READY();
  lca::Comm comm(lca::core::comm::as_comm_ref(lent()));
  lca::core::gpu::Stream stream;
  void* s = stream.handle();
  // The same split twice (a CP plan per cell does this), then each half runs a ring.
  for (int round = 0; round < 2; ++round) {
    lca::Comm half = comm.split(comm.rank() % 2, -comm.rank());
    const int n = half.size(), me = half.rank();
    EXPECT_EQ(n, (comm.size() + 1 - comm.rank() % 2) / 2);
    DeviceBuffer out(std::vector<float>(5, float(comm.rank()))), in(std::vector<float>(5, -1.0f));
    half.group_start();
    half.send(out.data(), 5, LCA_DTYPE_F32, (me + 1) % n, s);
    half.recv(in.data(), 5, LCA_DTYPE_F32, (me + n - 1) % n, s);
    half.group_end();
    DeviceBuffer ranks(n * sizeof(float));
    half.all_gather(out.data(), ranks.data(), 1, LCA_DTYPE_F32, s);
    stream.synchronize();
    const float left = ranks.to_host<float>()[(me + n - 1) % n];
    EXPECT_EQ(in.to_host<float>(), std::vector<float>(5, left)) << "round " << round;
  }
  // The whole world as one group, split again with another partition.
  lca::Comm everyone = comm.split(0, comm.rank());
  EXPECT_EQ(everyone.size(), comm.size());
  EXPECT_EQ(everyone.rank(), comm.rank());
  everyone.barrier(s);
  stream.synchronize();
}

TEST(GpuComm, StagedPassesHostPointersThrough) {
  LCA_SKIP_UNLESS_READY();
  if (std::string(lent().backend()) != "mpi-staged") GTEST_SKIP() << "NCCL takes device buffers only";
  float mine = float(lent().rank()), sum = -1;
  lca::core::gpu::Stream stream;
  lent().all_reduce(&mine, &sum, 1, LCA_DTYPE_F32, LCA_REDUCE_SUM, stream.handle());
  const int W = lent().size();
  EXPECT_EQ(sum, float(W * (W - 1) / 2));
}
