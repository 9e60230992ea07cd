// A communicator for device buffers over a host-buffer communicator (MPI): every operation copies
// device data to pinned host memory, runs the host operation and copies the result back. Slower
// than NCCL, but it lets several ranks share one GPU (NCCL refuses that) and runs where NCCL is
// absent. Used by `lcahost --cp ... --cp-comm mpi` on CUDA problems and by the GPU CP tests.
// Rule: each call synchronizes the stream it is given before reading device memory and before
// returning; pointers that are not device memory pass straight to the host communicator.
#pragma once

#include "core/comm/communicator.hpp"

#include <memory>

namespace lca::core::comm {

// Takes ownership of `host`; the result reports backend() "mpi-staged". Throws without CUDA.
std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator> host);

}  // namespace lca::core::comm
