// GoogleTest main under mpirun for the GPU CP tests: MPI init/finalize, one GPU a rank (node-local
// rank % GPUs, so several ranks may share one), and the lent communicator named by
// `--comm nccl|mpi` (default mpi). Rank 0 prints the usual report, other ranks only their
// failures.
#include "core/comm/mpi_comm.hpp"
#include "core/comm/nccl_comm.hpp"
#include "core/comm/staged_comm.hpp"
#include "core/cuda/gpu.hpp"
#include "gpu_world.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

namespace {
std::unique_ptr<lca::core::comm::Communicator> g_control, g_bootstrap, g_lent;
int g_device = 0;
std::string g_not_ready, g_setup_error;

class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }

 private:
  int rank_;
};
}  // namespace

lca::core::comm::Communicator& lca::test::control() { return *g_control; }
lca::core::comm::Communicator& lca::test::lent() { return *g_lent; }
int lca::test::device() { return g_device; }
const std::string& lca::test::not_ready() { return g_not_ready; }
const std::string& lca::test::setup_error() { return g_setup_error; }

int main(int argc, char** argv) {
  lca::core::comm::init_mpi(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  std::string comm = "mpi";
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--comm") == 0 && i + 1 < argc) comm = argv[++i];
  g_control = lca::core::comm::make_mpi_world();
  const int rank = g_control->rank();
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  const int gpus = lca::core::gpu::device_count();
  if (gpus == 0) {
    g_not_ready = "no CUDA device visible (driver or GPU absent)";
  } else {
    g_device = lca::core::comm::node_local_rank() % gpus;
    if (const cudaError_t e = cudaSetDevice(g_device); e != cudaSuccess) {
      g_setup_error = std::string("cudaSetDevice(") + std::to_string(g_device) + "): " + cudaGetErrorString(e);
    } else if (comm == "nccl") {
      std::string why;
      if (g_control->local_size() > gpus)
        g_not_ready = "NCCL needs one GPU per rank: " + std::to_string(g_control->local_size()) + " ranks on this node, " +
                      std::to_string(gpus) + " GPU(s); run this ctest where there are enough GPUs";
      else if (!lca::core::comm::nccl_available(&why))
        g_not_ready = "NCCL is not loadable: " + why;
      if (g_not_ready.empty()) {
        g_bootstrap = lca::core::comm::make_mpi_world();
        try {
          g_lent = lca::core::comm::make_nccl_world(*g_bootstrap);
        } catch (const std::exception& e) {
          g_setup_error = e.what();
        }
      }
    } else {
      g_lent = lca::core::comm::make_staged_communicator(lca::core::comm::make_mpi_world());
    }
  }
  if (rank == 0) {
    const std::string state = !g_setup_error.empty() ? "setup failed: " + g_setup_error
                              : !g_not_ready.empty() ? "skipping: " + g_not_ready
                                                     : "rank 0 on cuda:" + std::to_string(g_device);
    std::printf("[cp_gpu] world %d, communicator %s, %s\n", g_control->size(), g_lent ? g_lent->backend() : comm.c_str(),
                state.c_str());
  }
  const int rc = RUN_ALL_TESTS();
  // A failure on any rank fails the job on every rank.
  const float mine = static_cast<float>(rc);
  float worst = mine;
  g_control->all_reduce(&mine, &worst, 1, LCA_DTYPE_F32, LCA_REDUCE_MAX, nullptr);
  g_lent.reset();
  g_bootstrap.reset();
  g_control.reset();
  lca::core::comm::finalize_mpi();
  return worst != 0.0f ? 1 : 0;
}
