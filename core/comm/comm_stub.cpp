// The device communicators in a build without CUDA: NCCL is absent and staging has no device to
// stage from; both refuse with the reason.
#if !defined(LCA_HAVE_CUDA)
#include "core/comm/nccl_comm.hpp"
#include "core/comm/staged_comm.hpp"

#include <lca/error.hpp>

namespace lca::core::comm {

bool nccl_available(std::string* why) {
  if (why != nullptr) *why = "this lcahost was built without CUDA (NCCL needs it); rebuild where nvcc is found";
  return false;
}

std::unique_ptr<Communicator> make_nccl_world(Communicator&) {
  throw Error(LCA_ERR_UNSUPPORTED, "NCCL: this lcahost was built without CUDA; rebuild where nvcc is found");
}

std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator>) {
  throw Error(LCA_ERR_UNSUPPORTED,
              "mpi-staged communicator: this lcahost was built without CUDA; rebuild where nvcc is found");
}

}  // namespace lca::core::comm
#endif
