// NcclCommunicator: Communicator over one ncclComm, with the NCCL functions looked up by dlsym
// in libnccl.so.2 (types from <nccl.h>). All-to-all is grouped send/recv; every call is
// enqueued on the caller's cudaStream_t. Splits are cached: a CP plan splits the world the same
// way for every cell, and a fresh ncclComm each time would cost more than the cell.
#include "core/comm/nccl_comm.hpp"

#include <lca/error.hpp>

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace lca::core::comm {
namespace {

struct NcclApi {
  void* lib = nullptr;
  std::string error;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) init_rank = nullptr;
  decltype(&::ncclCommDestroy) destroy = nullptr;
  decltype(&::ncclCommSplit) split = nullptr;  // NCCL >= 2.18; NULL before
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclSend) send = nullptr;
  decltype(&::ncclRecv) recv = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;

  NcclApi() {
    lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      error = std::string("cannot load libnccl.so.2: ") + (e ? e : "unknown");
      return;
    }
    bool ok = true;
    auto need = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr) { ok = false; error += std::string(error.empty() ? "" : ", ") + name; }
    };
    need(get_unique_id, "ncclGetUniqueId");
    need(init_rank, "ncclCommInitRank");
    need(destroy, "ncclCommDestroy");
    need(error_string, "ncclGetErrorString");
    need(group_start, "ncclGroupStart");
    need(group_end, "ncclGroupEnd");
    need(send, "ncclSend");
    need(recv, "ncclRecv");
    need(all_gather, "ncclAllGather");
    need(reduce_scatter, "ncclReduceScatter");
    need(all_reduce, "ncclAllReduce");
    split = reinterpret_cast<decltype(split)>(dlsym(lib, "ncclCommSplit"));
    if (!ok) error = "libnccl.so.2 lacks " + error;
  }
  bool ready() const { return error.empty(); }
};

const NcclApi& api() {
  static const NcclApi instance;
  return instance;
}

void nccl_check(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return;
  std::string hint;
  if (rc == ncclInvalidUsage || rc == ncclSystemError || rc == ncclUnhandledCudaError)
    hint = " (NCCL_DEBUG=WARN says more; ranks sharing one GPU need --cp-comm mpi)";
  throw Error(LCA_ERR_COMM, std::string("NCCL ") + what + ": " + api().error_string(rc) + hint);
}

void cuda_check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  throw Error(LCA_ERR_DEVICE, std::string("CUDA ") + what + ": " + cudaGetErrorString(rc));
}

ncclDataType_t nccl_type(lca_dtype dtype) {
  switch (dtype) {
    case LCA_DTYPE_F32: return ncclFloat32;
    case LCA_DTYPE_F16: return ncclFloat16;
    case LCA_DTYPE_BF16: return ncclBfloat16;
    default: return ncclFloat64;
  }
}

size_t type_bytes(lca_dtype dtype) { return dtype == LCA_DTYPE_F32 ? 4 : dtype == LCA_DTYPE_F64 ? 8 : 2; }

ncclRedOp_t nccl_op(lca_reduce_op op) { return op == LCA_REDUCE_MAX ? ncclMax : ncclSum; }

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// rank 0 makes the id; the bootstrap spreads it (all_gather of 128 bytes as 32 fp32 words).
ncclUniqueId share_unique_id(Communicator& bootstrap) {
  static_assert(sizeof(ncclUniqueId) % 4 == 0, "unique id travels as 4-byte words");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (bootstrap.rank() == 0) nccl_check(api().get_unique_id(&id), "GetUniqueId");
  const int64_t words = sizeof(id) / 4;
  std::string all(sizeof(id) * static_cast<size_t>(bootstrap.size()), '\0');
  bootstrap.all_gather(&id, all.data(), words, LCA_DTYPE_F32, nullptr);
  std::memcpy(&id, all.data(), sizeof(id));
  return id;
}

// One ncclComm with the bootstrap communicator of the same members; shared by every
// NcclCommunicator that views it (the world, or a cached split handed out several times).
struct NcclState {
  std::unique_ptr<Communicator> owned_bootstrap;  // a split's; empty for the world
  Communicator* bootstrap = nullptr;
  ncclComm_t comm = nullptr;
  void* barrier_word = nullptr;
  std::map<std::vector<int32_t>, std::shared_ptr<NcclState>> splits;  // by every member's (color, key)

  NcclState(std::unique_ptr<Communicator> owned, Communicator* boot, ncclComm_t c)
      : owned_bootstrap(std::move(owned)), bootstrap(boot), comm(c) {
    cuda_check(cudaMalloc(&barrier_word, sizeof(float)), "cudaMalloc (the barrier word)");
    cuda_check(cudaMemset(barrier_word, 0, sizeof(float)), "cudaMemset");
  }
  ~NcclState() {
    splits.clear();
    if (comm != nullptr) api().destroy(comm);
    if (barrier_word != nullptr) (void)cudaFree(barrier_word);
  }
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<NcclState> state) : s_(std::move(state)), comm_(s_->comm) {}

  int rank() const override { return s_->bootstrap->rank(); }
  int size() const override { return s_->bootstrap->size(); }
  int local_size() const override { return s_->bootstrap->local_size(); }
  const char* backend() const override { return "nccl"; }

  // Collective. Every member learns every member's (color, key) first, so all agree on whether
  // the split is already cached; only a new partition makes new ncclComms.
  std::unique_ptr<Communicator> split(int color, int key) override {
    require(color >= 0, LCA_ERR_INVALID_ARGUMENT, "split: color must be >= 0");
    const int32_t mine[2] = {color, key};
    std::vector<int32_t> all(2 * static_cast<size_t>(size()));
    s_->bootstrap->all_gather(mine, all.data(), 2, LCA_DTYPE_F32, nullptr);  // raw 4-byte words
    auto& cached = s_->splits[all];
    if (!cached) {
      auto child_boot = s_->bootstrap->split(color, key);  // collective on the bootstrap, same order
      ncclComm_t child = nullptr;
      if (api().split != nullptr) {
        nccl_check(api().split(comm_, color, key, &child, nullptr), "CommSplit");
      } else {
        const ncclUniqueId id = share_unique_id(*child_boot);
        nccl_check(api().init_rank(&child, child_boot->size(), id, child_boot->rank()), "CommInitRank");
      }
      Communicator* raw = child_boot.get();
      cached = std::make_shared<NcclState>(std::move(child_boot), raw, child);
    }
    return std::make_unique<NcclCommunicator>(cached);
  }

  void all_to_all(const void* send, const int64_t* sc, const int64_t* sd, void* recv,
                  const int64_t* rc, const int64_t* rd, lca_dtype dtype, void* stream) override {
    const size_t b = type_bytes(dtype);
    nccl_check(api().group_start(), "GroupStart");
    for (int p = 0; p < size(); ++p) {
      if (sc[p] > 0)
        nccl_check(api().send(static_cast<const char*>(send) + sd[p] * b, static_cast<size_t>(sc[p]),
                              nccl_type(dtype), p, comm_, as_stream(stream)), "Send");
      if (rc[p] > 0)
        nccl_check(api().recv(static_cast<char*>(recv) + rd[p] * b, static_cast<size_t>(rc[p]),
                              nccl_type(dtype), p, comm_, as_stream(stream)), "Recv");
    }
    nccl_check(api().group_end(), "GroupEnd");
  }

  void all_gather(const void* send, void* recv, int64_t count, lca_dtype dtype, void* stream) override {
    nccl_check(api().all_gather(send, recv, static_cast<size_t>(count), nccl_type(dtype), comm_,
                                as_stream(stream)), "AllGather");
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, lca_dtype dtype,
                      lca_reduce_op op, void* stream) override {
    nccl_check(api().reduce_scatter(send, recv, static_cast<size_t>(count), nccl_type(dtype),
                                    nccl_op(op), comm_, as_stream(stream)), "ReduceScatter");
  }
  void all_reduce(const void* send, void* recv, int64_t count, lca_dtype dtype, lca_reduce_op op,
                  void* stream) override {
    nccl_check(api().all_reduce(send, recv, static_cast<size_t>(count), nccl_type(dtype),
                                nccl_op(op), comm_, as_stream(stream)), "AllReduce");
  }
  void group_start() override { nccl_check(api().group_start(), "GroupStart"); }
  void group_end() override { nccl_check(api().group_end(), "GroupEnd"); }
  void send(const void* buf, int64_t count, lca_dtype dtype, int peer, void* stream) override {
    nccl_check(api().send(buf, static_cast<size_t>(count), nccl_type(dtype), peer, comm_,
                          as_stream(stream)), "Send");
  }
  void recv(void* buf, int64_t count, lca_dtype dtype, int peer, void* stream) override {
    nccl_check(api().recv(buf, static_cast<size_t>(count), nccl_type(dtype), peer, comm_,
                          as_stream(stream)), "Recv");
  }
  // Ordered on the stream: a one-word all-reduce that every member must reach.
  void barrier(void* stream) override {
    all_reduce(s_->barrier_word, s_->barrier_word, 1, LCA_DTYPE_F32, LCA_REDUCE_SUM, stream);
  }

 private:
  std::shared_ptr<NcclState> s_;
  ncclComm_t comm_;
};

}  // namespace

bool nccl_available(std::string* why) {
  if (!api().ready() && why != nullptr) *why = api().error;
  return api().ready();
}

std::unique_ptr<Communicator> make_nccl_world(Communicator& bootstrap) {
  require(api().ready(), LCA_ERR_UNSUPPORTED, api().error);
  setenv("NCCL_NVLS_ENABLE", "0", 0);  // overwrite=0: an explicit setting wins
  const ncclUniqueId id = share_unique_id(bootstrap);
  ncclComm_t comm = nullptr;
  nccl_check(api().init_rank(&comm, bootstrap.size(), id, bootstrap.rank()), "CommInitRank");
  return std::make_unique<NcclCommunicator>(std::make_shared<NcclState>(nullptr, &bootstrap, comm));
}

}  // namespace lca::core::comm
