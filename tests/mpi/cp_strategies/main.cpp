// GoogleTest main under mpirun: MPI init/finalize around the tests; rank 0 prints the usual
// report, other ranks print only their failures (prefixed with the rank).
#include "core/comm/mpi_comm.hpp"
#include "mpi_world.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

namespace {
std::unique_ptr<lca::core::comm::Communicator> g_world;

class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

lca::core::comm::Communicator& lca::test::world() { return *g_world; }

int main(int argc, char** argv) {
  lca::core::comm::init_mpi(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  g_world = lca::core::comm::make_mpi_world();
  if (g_world->rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(g_world->rank()));
  }
  const int rc = RUN_ALL_TESTS();
  // A failure on any rank fails the job on every rank.
  const float mine = static_cast<float>(rc);
  float worst = mine;
  g_world->all_reduce(&mine, &worst, 1, LCA_DTYPE_F32, LCA_REDUCE_MAX, nullptr);
  g_world.reset();
  lca::core::comm::finalize_mpi();
  return worst != 0.0f ? 1 : 0;
}
