// The NCCL communicator (CUDA streams), loaded at run time from libnccl.so.2 so that the core
// needs no NCCL at link time. Used by lcahost for `--cp` runs on GPUs.
// Rule: the bootstrap communicator (MPI) must outlive every NCCL communicator made from it, and
// the caller selects the CUDA device before make_nccl_world.
#pragma once

#include "core/comm/communicator.hpp"

#include <memory>
#include <string>

namespace lca::core::comm {

// True when libnccl.so.2 can be loaded; `why` gets the reason when it cannot.
bool nccl_available(std::string* why = nullptr);

// One ncclComm over the members of `bootstrap` (the unique id travels through it). Sets
// NCCL_NVLS_ENABLE=0 when unset: NVLink multicast stays off on the lent machines.
std::unique_ptr<Communicator> make_nccl_world(Communicator& bootstrap);

}  // namespace lca::core::comm
