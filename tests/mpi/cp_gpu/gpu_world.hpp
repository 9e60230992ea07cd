// The worlds of the GPU CP test binary, made in main() after MPI_Init: the host's MPI world
// (control: host buffers) and the communicator lent to strategies on device buffers (NCCL, or
// MPI staged through pinned memory), chosen by `--comm nccl|mpi`. Used by every test file of
// test_cp_gpu.
// Rule: a test skips (on every rank alike) unless ready() is empty; tests call collectives in
// the same order on every rank (no rank-local ASSERT before a collective).
#pragma once

#include "core/comm/communicator.hpp"

#include <string>

namespace lca::test {
lca::core::comm::Communicator& control();
lca::core::comm::Communicator& lent();  // only when ready() is empty
int device();                           // this rank's GPU
// Empty when the tests can run; else why not (no GPU, NCCL with ranks sharing a GPU).
const std::string& not_ready();
// Non-empty when making the lent communicator failed where it should have worked.
const std::string& setup_error();
}  // namespace lca::test

#define LCA_SKIP_UNLESS_READY()                                                                  \
  if (!::lca::test::setup_error().empty()) FAIL() << "setup: " << ::lca::test::setup_error(); \
  if (!::lca::test::not_ready().empty()) GTEST_SKIP() << ::lca::test::not_ready()
