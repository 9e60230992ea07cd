// The MPI communicator (host buffers, CPU) and the process-wide MPI helpers the host calls
// around a run: init_mpi / finalize_mpi / launched_by_mpi. Used by lcahost and the MPI tests.
// Rule: init_mpi before make_mpi_world, and every communicator destroyed before finalize_mpi.
#pragma once

#include "core/comm/communicator.hpp"

#include <memory>

namespace lca::core::comm {

// True when a launcher (mpirun / srun / hydra) started this process (OMPI_COMM_WORLD_SIZE or
// PMI_SIZE in the environment).
bool launched_by_mpi();

// Initializes MPI once (MPI_THREAD_FUNNELED); a no-op when it already is.
void init_mpi(int* argc, char*** argv);
// Finalizes MPI when this process initialized it and it is not finalized yet.
void finalize_mpi();

// The caller's rank among the ranks of its node in MPI_COMM_WORLD (MPI_COMM_TYPE_SHARED), or
// rank % local_size_override when that is > 0. Collective over MPI_COMM_WORLD.
int node_local_rank(int local_size_override = 0);

// MPI_COMM_WORLD (duplicated). local_size_override > 0 replaces the launcher's topology:
// ranks [k * override, (k + 1) * override) then count as one node.
std::unique_ptr<Communicator> make_mpi_world(int local_size_override = 0);

}  // namespace lca::core::comm
