// Communicator: the host's one interface over MPI (CPU buffers) and NCCL (CUDA streams), and
// as_comm_ref(), which lends any Communicator to a plugin as the C vtable lca_comm_ref.
// Rule: collectives (split included) are called by every member in the same order; a failing
// call throws lca::Error (LCA_ERR_COMM or LCA_ERR_INVALID_ARGUMENT), never another exception.
#pragma once

#include <lca/abi.h>

#include <cstdint>
#include <memory>

namespace lca::core::comm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Members of this communicator on the caller's node (the launcher's topology, overridable).
  virtual int local_size() const = 0;
  virtual const char* backend() const = 0;  // "mpi", "nccl"

  // Collective: members with the same color form a new communicator ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Counts and displacements in elements of dtype, one per member (uneven splits allowed).
  virtual void all_to_all(const void* send, const int64_t* send_counts, const int64_t* send_displs,
                          void* recv, const int64_t* recv_counts, const int64_t* recv_displs,
                          lca_dtype dtype, void* stream) = 0;
  // recv holds size() * count elements, member i's block at i * count.
  virtual void all_gather(const void* send, void* recv, int64_t count, lca_dtype dtype,
                          void* stream) = 0;
  // send holds size() * count elements; member i receives the reduction of block i.
  virtual void reduce_scatter(const void* send, void* recv, int64_t count, lca_dtype dtype,
                              lca_reduce_op op, void* stream) = 0;
  virtual void all_reduce(const void* send, void* recv, int64_t count, lca_dtype dtype,
                          lca_reduce_op op, void* stream) = 0;

  // send/recv between group_start and group_end are issued together and complete at
  // group_end; outside a group each completes before returning (on CPU).
  virtual void group_start() = 0;
  virtual void group_end() = 0;
  virtual void send(const void* buf, int64_t count, lca_dtype dtype, int peer, void* stream) = 0;
  virtual void recv(void* buf, int64_t count, lca_dtype dtype, int peer, void* stream) = 0;
  virtual void barrier(void* stream) = 0;
};

// Lends `comm` through the C ABI. The returned ref does not own `comm`, which must outlive it;
// communicators a plugin makes with split() through the ref are freed by its free_comm.
lca_comm_ref as_comm_ref(Communicator& comm);

// The vtable behind as_comm_ref (one per process).
const lca_comm_vtable* comm_vtable();

}  // namespace lca::core::comm
