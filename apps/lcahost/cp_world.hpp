// The worlds of a context-parallel command under mpirun: the MPI control world (host buffers),
// this rank's backend (CPU, or its own GPU) and the communicator lent to strategies or measured
// by the probe (MPI on the CPU; NCCL or MPI staged on GPUs). Used by `lcahost --cp` and
// `lcahost cp-probe`.
// Rule: collective; call init_mpi first, and destroy CpWorlds before finalize_mpi.
#pragma once

#include "commands.hpp"

#include "core/comm/communicator.hpp"
#include "core/run/backend.hpp"

#include <memory>
#include <string>
#include <vector>

namespace lca::app {

struct CpWorlds {
  // Declared in this order so that the NCCL world goes before its bootstrap, both before the
  // backend's device memory, and everything before the control world.
  std::unique_ptr<core::comm::Communicator> control;
  std::unique_ptr<core::Backend> backend;
  std::unique_ptr<core::comm::Communicator> bootstrap, world;
  std::vector<std::string> lines;      // per rank: "rank r/W: <device> on <host>, communicator <name>"
  std::vector<std::string> devices;    // per rank: the GPU's name, or "cpu"
  std::vector<std::string> hosts;      // per rank
};

// control: the MPI world on host buffers (kept in the result). device: "cuda" or "cpu"; comm: "nccl" or "mpi" (checked by the caller). Failures while setting
// up are agreed on by every rank and thrown on every rank as one message.
CpWorlds make_cp_worlds(std::unique_ptr<core::comm::Communicator> control, const Options& opt,
                        const std::string& device, const std::string& comm);

// Every rank's string (up to 508 bytes), in rank order. Collective.
std::vector<std::string> all_gather_strings(core::comm::Communicator& comm, const std::string& mine);

}  // namespace lca::app
