// The MPI world of the CP test binary: one MPI communicator made in main() after MPI_Init.
// Used by every test file of test_cp_strategies.
// Rule: tests call collectives on it in the same order on every rank (no rank-local ASSERTs
// before a collective).
#pragma once

#include "core/comm/communicator.hpp"

namespace lca::test {
lca::core::comm::Communicator& world();
}
