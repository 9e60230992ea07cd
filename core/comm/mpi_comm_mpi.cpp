// MpiCommunicator: Communicator over an MPI communicator on host buffers. bf16/f16 reductions
// run in fp32 (MPI has no half types); counts beyond INT_MAX are refused, not truncated.
#include "core/comm/mpi_comm.hpp"

#include <lca/error.hpp>
#include <lca/types.hpp>

// The C API only: the C++ bindings would need libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

namespace lca::core::comm {
namespace {

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(LCA_ERR_COMM, std::string("MPI ") + what + ": " + std::string(text, len));
}

int to_int(int64_t v, const char* what) {
  require(v >= 0 && v <= INT_MAX, LCA_ERR_UNSUPPORTED,
          std::string("MPI ") + what + ": " + std::to_string(v) +
              " elements do not fit MPI's int counts (limit " + std::to_string(INT_MAX) +
              "); split the transfer or use the NCCL communicator");
  return static_cast<int>(v);
}

// Data movement type: halves travel as raw 16-bit words.
MPI_Datatype move_type(lca_dtype dtype) {
  switch (dtype) {
    case LCA_DTYPE_F32: return MPI_FLOAT;
    case LCA_DTYPE_F64: return MPI_DOUBLE;
    default: return MPI_UINT16_T;
  }
}

bool is_half(lca_dtype dtype) { return dtype == LCA_DTYPE_F16 || dtype == LCA_DTYPE_BF16; }

MPI_Op mpi_op(lca_reduce_op op) { return op == LCA_REDUCE_MAX ? MPI_MAX : MPI_SUM; }

std::vector<float> widen(const void* data, lca_dtype dtype, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(load_as_double(data, dtype, i));
  return out;
}

void narrow(const std::vector<float>& in, void* data, lca_dtype dtype) {
  for (size_t i = 0; i < in.size(); ++i) store_from_double(data, dtype, static_cast<int64_t>(i), in[i]);
}

// Node id of the caller: the world rank of the first rank on its node, or rank / override.
int node_id(MPI_Comm world, int override_size) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  if (override_size > 0) return rank / override_size;
  MPI_Comm node;
  mpi_check(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
            "Comm_split_type");
  int first = rank;
  mpi_check(MPI_Bcast(&first, 1, MPI_INT, 0, node), "Bcast");
  MPI_Comm_free(&node);
  return first;
}

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm`; `node` is the caller's node id (equal ids share a node).
  MpiCommunicator(MPI_Comm comm, int node) : comm_(comm), node_(node) {
    mpi_check(MPI_Comm_rank(comm_, &rank_), "Comm_rank");
    mpi_check(MPI_Comm_size(comm_, &size_), "Comm_size");
    std::vector<int> nodes(static_cast<size_t>(size_));
    mpi_check(MPI_Allgather(&node_, 1, MPI_INT, nodes.data(), 1, MPI_INT, comm_), "Allgather");
    for (int n : nodes) local_size_ += (n == node_) ? 1 : 0;
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  const char* backend() const override { return "mpi"; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    require(color >= 0, LCA_ERR_INVALID_ARGUMENT, "split: color must be >= 0");
    MPI_Comm out;
    mpi_check(MPI_Comm_split(comm_, color, key, &out), "Comm_split");
    return std::make_unique<MpiCommunicator>(out, node_);
  }

  void all_to_all(const void* send, const int64_t* sc, const int64_t* sd, void* recv,
                  const int64_t* rc, const int64_t* rd, lca_dtype dtype, void*) override {
    std::vector<int> isc(size_), isd(size_), irc(size_), ird(size_);
    for (int i = 0; i < size_; ++i) {
      isc[i] = to_int(sc[i], "all_to_all send count");
      isd[i] = to_int(sd[i], "all_to_all send displacement");
      irc[i] = to_int(rc[i], "all_to_all recv count");
      ird[i] = to_int(rd[i], "all_to_all recv displacement");
    }
    const MPI_Datatype t = move_type(dtype);
    mpi_check(MPI_Alltoallv(send, isc.data(), isd.data(), t, recv, irc.data(), ird.data(), t, comm_),
              "Alltoallv");
  }

  void all_gather(const void* send, void* recv, int64_t count, lca_dtype dtype, void*) override {
    const int n = to_int(count, "all_gather count");
    to_int(count * size_, "all_gather total");
    const MPI_Datatype t = move_type(dtype);
    mpi_check(MPI_Allgather(send, n, t, recv, n, t, comm_), "Allgather");
  }

  void reduce_scatter(const void* send, void* recv, int64_t count, lca_dtype dtype,
                      lca_reduce_op op, void*) override {
    const int n = to_int(count, "reduce_scatter count");
    if (!is_half(dtype)) {
      mpi_check(MPI_Reduce_scatter_block(send, recv, n, move_type(dtype), mpi_op(op), comm_),
                "Reduce_scatter_block");
      return;
    }
    std::vector<float> wide = widen(send, dtype, count * size_);
    std::vector<float> out(static_cast<size_t>(count));
    mpi_check(MPI_Reduce_scatter_block(wide.data(), out.data(), n, MPI_FLOAT, mpi_op(op), comm_),
              "Reduce_scatter_block");
    narrow(out, recv, dtype);
  }

  void all_reduce(const void* send, void* recv, int64_t count, lca_dtype dtype,
                  lca_reduce_op op, void*) override {
    const int n = to_int(count, "all_reduce count");
    if (!is_half(dtype)) {
      const void* src = (send == recv) ? MPI_IN_PLACE : send;
      mpi_check(MPI_Allreduce(src, recv, n, move_type(dtype), mpi_op(op), comm_), "Allreduce");
      return;
    }
    std::vector<float> wide = widen(send, dtype, count);
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, wide.data(), n, MPI_FLOAT, mpi_op(op), comm_),
              "Allreduce");
    narrow(wide, recv, dtype);
  }

  void group_start() override { ++group_depth_; }

  void group_end() override {
    require(group_depth_ > 0, LCA_ERR_INVALID_ARGUMENT, "group_end without group_start");
    if (--group_depth_ > 0) return;
    std::vector<MPI_Request> pending;
    pending.swap(pending_);
    if (pending.empty()) return;
    mpi_check(MPI_Waitall(static_cast<int>(pending.size()), pending.data(), MPI_STATUSES_IGNORE),
              "Waitall");
  }

  void send(const void* buf, int64_t count, lca_dtype dtype, int peer, void*) override {
    check_peer(peer);
    const int n = to_int(count, "send count");
    if (group_depth_ == 0) {
      mpi_check(MPI_Send(buf, n, move_type(dtype), peer, kTag, comm_), "Send");
      return;
    }
    MPI_Request r;
    mpi_check(MPI_Isend(buf, n, move_type(dtype), peer, kTag, comm_, &r), "Isend");
    pending_.push_back(r);
  }

  void recv(void* buf, int64_t count, lca_dtype dtype, int peer, void*) override {
    check_peer(peer);
    const int n = to_int(count, "recv count");
    if (group_depth_ == 0) {
      mpi_check(MPI_Recv(buf, n, move_type(dtype), peer, kTag, comm_, MPI_STATUS_IGNORE), "Recv");
      return;
    }
    MPI_Request r;
    mpi_check(MPI_Irecv(buf, n, move_type(dtype), peer, kTag, comm_, &r), "Irecv");
    pending_.push_back(r);
  }

  void barrier(void*) override { mpi_check(MPI_Barrier(comm_), "Barrier"); }

 private:
  static constexpr int kTag = 0x1ca;
  void check_peer(int peer) const {
    require(peer >= 0 && peer < size_, LCA_ERR_INVALID_ARGUMENT,
            "peer " + std::to_string(peer) + " outside communicator of size " + std::to_string(size_));
  }

  MPI_Comm comm_;
  int node_ = 0;
  int rank_ = 0, size_ = 1, local_size_ = 0;
  int group_depth_ = 0;
  std::vector<MPI_Request> pending_;
};

bool g_we_initialized = false;

}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

void init_mpi(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "Init_thread");
  g_we_initialized = true;
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialized && !finalized) MPI_Finalize();
}

int node_local_rank(int local_size_override) {
  int rank = 0;
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "Comm_rank");
  if (local_size_override > 0) return rank % local_size_override;
  MPI_Comm node;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
            "Comm_split_type");
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  return local;
}

std::unique_ptr<Communicator> make_mpi_world(int local_size_override) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  require(initialized != 0, LCA_ERR_COMM, "make_mpi_world: MPI is not initialized (call init_mpi)");
  MPI_Comm world;
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "Comm_dup");
  // Errors come back as codes, turned into lca::Error, instead of aborting the job.
  MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
  return std::make_unique<MpiCommunicator>(world, node_id(world, local_size_override));
}

}  // namespace lca::core::comm
