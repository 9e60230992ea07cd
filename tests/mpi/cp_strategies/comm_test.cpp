// The MPI communicator through its C++ interface and through the C vtable a plugin sees.
#include "mpi_world.hpp"

#include <lca/cp_strategy.hpp>
#include <lca/types.hpp>

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

using lca::test::world;

TEST(MpiComm, AllToAllUneven) {
  auto& w = world();
  const int W = w.size(), r = w.rank();
  // Rank r sends p + r + 1 elements to rank p, valued 1000 r + 10 p + i.
  std::vector<int64_t> sc(W), sd(W), rc(W), rd(W);
  for (int p = 0; p < W; ++p) sc[p] = p + r + 1, rc[p] = r + p + 1;
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), int64_t(0));
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), int64_t(0));
  std::vector<float> send(sd[W - 1] + sc[W - 1]), recv(rd[W - 1] + rc[W - 1], -1.0f);
  for (int p = 0; p < W; ++p)
    for (int64_t i = 0; i < sc[p]; ++i) send[sd[p] + i] = 1000.0f * r + 10.0f * p + i;
  w.all_to_all(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), LCA_DTYPE_F32, nullptr);
  for (int p = 0; p < W; ++p)
    for (int64_t i = 0; i < rc[p]; ++i) EXPECT_EQ(recv[rd[p] + i], 1000.0f * p + 10.0f * r + i);
}

TEST(MpiComm, AllGatherAndReduceScatter) {
  auto& w = world();
  const int W = w.size(), r = w.rank();
  std::vector<double> mine{double(r), double(r) + 0.5}, all(2 * W);
  w.all_gather(mine.data(), all.data(), 2, LCA_DTYPE_F64, nullptr);
  for (int p = 0; p < W; ++p) {
    EXPECT_EQ(all[2 * p], p);
    EXPECT_EQ(all[2 * p + 1], p + 0.5);
  }
  // Block p of rank r holds r + p; the sum of block r over ranks is sum_q (q + r).
  std::vector<float> send(3 * W), out(3);
  for (int p = 0; p < W; ++p)
    for (int i = 0; i < 3; ++i) send[3 * p + i] = float(r + p);
  w.reduce_scatter(send.data(), out.data(), 3, LCA_DTYPE_F32, LCA_REDUCE_SUM, nullptr);
  const float expect = float(W * (W - 1) / 2 + W * r);
  for (float v : out) EXPECT_EQ(v, expect);
  // bf16 sums run in fp32 inside and land rounded.
  std::vector<uint16_t> hs(W), ho(1);
  for (int p = 0; p < W; ++p) hs[p] = lca::f32_to_bf16(0.25f * (r + 1));
  w.reduce_scatter(hs.data(), ho.data(), 1, LCA_DTYPE_BF16, LCA_REDUCE_SUM, nullptr);
  EXPECT_EQ(lca::bf16_to_f32(ho[0]), 0.25f * W * (W + 1) / 2);
  float mx = float(r), got = -1;
  w.all_reduce(&mx, &got, 1, LCA_DTYPE_F32, LCA_REDUCE_MAX, nullptr);
  EXPECT_EQ(got, float(W - 1));
}

TEST(MpiComm, SplitAndRingThroughTheVtable) {
  auto& w = world();
  lca::Comm comm(lca::core::comm::as_comm_ref(w));
  EXPECT_EQ(comm.size(), w.size());
  EXPECT_GE(comm.local_size(), 1);
  // Even and odd ranks, ordered by descending rank.
  lca::Comm half = comm.split(comm.rank() % 2, -comm.rank());
  const int expect_size = (comm.size() + 1 - comm.rank() % 2) / 2;
  EXPECT_EQ(half.size(), expect_size);
  // A ring inside the half: send right, receive from the left, grouped.
  const int n = half.size(), me = half.rank();
  float out = float(comm.rank()), in = -1;
  half.group_start();
  half.send(&out, 1, LCA_DTYPE_F32, (me + 1) % n, nullptr);
  half.recv(&in, 1, LCA_DTYPE_F32, (me + n - 1) % n, nullptr);
  half.group_end();
  float left_world = -1;  // the world rank of my left neighbour in the half
  std::vector<float> ranks(n);
  half.all_gather(&out, ranks.data(), 1, LCA_DTYPE_F32, nullptr);
  left_world = ranks[(me + n - 1) % n];
  EXPECT_EQ(in, left_world);
  // Errors cross as a status with a message.
  const auto& ref = comm.ref();
  EXPECT_EQ(ref.vtable->send(ref.comm, &out, 1, LCA_DTYPE_F32, comm.size() + 3, nullptr), LCA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ref.vtable->last_error()).find("outside communicator"), std::string::npos);
  comm.barrier(nullptr);
}
