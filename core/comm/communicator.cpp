// The C vtable over Communicator: each lca_comm* is a Communicator*; errors become a status and
// a thread-local message through lca::detail::guard.
#include "core/comm/communicator.hpp"

#include <lca/error.hpp>

#include <string>

namespace lca::core::comm {
namespace {

Communicator& of(lca_comm* c) {
  require(c != nullptr, LCA_ERR_INVALID_ARGUMENT, "communicator: null handle");
  return *reinterpret_cast<Communicator*>(c);
}

lca_dtype checked_dtype(int32_t dtype) {
  require(dtype >= LCA_DTYPE_F32 && dtype <= LCA_DTYPE_F64, LCA_ERR_INVALID_ARGUMENT,
          "communicator: unknown dtype " + std::to_string(dtype));
  return static_cast<lca_dtype>(dtype);
}

lca_reduce_op checked_op(int32_t op) {
  require(op == LCA_REDUCE_SUM || op == LCA_REDUCE_MAX, LCA_ERR_INVALID_ARGUMENT,
          "communicator: unknown reduce op " + std::to_string(op));
  return static_cast<lca_reduce_op>(op);
}

int32_t v_rank(lca_comm* c) { return c ? of(c).rank() : -1; }
int32_t v_size(lca_comm* c) { return c ? of(c).size() : 0; }
int32_t v_local_size(lca_comm* c) { return c ? of(c).local_size() : 0; }

lca_status v_split(lca_comm* c, int32_t color, int32_t key, lca_comm** out) {
  return detail::guard([&] {
    require(out != nullptr, LCA_ERR_INVALID_ARGUMENT, "split: null out");
    *out = nullptr;
    *out = reinterpret_cast<lca_comm*>(of(c).split(color, key).release());
  });
}

void v_free(lca_comm* c) { delete reinterpret_cast<Communicator*>(c); }

lca_status v_all_to_all(lca_comm* c, const void* send, const int64_t* sc, const int64_t* sd,
                        void* recv, const int64_t* rc, const int64_t* rd, int32_t dtype,
                        void* stream) {
  return detail::guard([&] {
    require(sc && sd && rc && rd, LCA_ERR_INVALID_ARGUMENT, "all_to_all: null counts");
    of(c).all_to_all(send, sc, sd, recv, rc, rd, checked_dtype(dtype), stream);
  });
}

lca_status v_all_gather(lca_comm* c, const void* send, void* recv, int64_t count, int32_t dtype,
                        void* stream) {
  return detail::guard([&] { of(c).all_gather(send, recv, count, checked_dtype(dtype), stream); });
}

lca_status v_reduce_scatter(lca_comm* c, const void* send, void* recv, int64_t count,
                            int32_t dtype, int32_t op, void* stream) {
  return detail::guard([&] {
    of(c).reduce_scatter(send, recv, count, checked_dtype(dtype), checked_op(op), stream);
  });
}

lca_status v_all_reduce(lca_comm* c, const void* send, void* recv, int64_t count, int32_t dtype,
                        int32_t op, void* stream) {
  return detail::guard([&] {
    of(c).all_reduce(send, recv, count, checked_dtype(dtype), checked_op(op), stream);
  });
}

lca_status v_group_start(lca_comm* c) { return detail::guard([&] { of(c).group_start(); }); }
lca_status v_group_end(lca_comm* c) { return detail::guard([&] { of(c).group_end(); }); }

lca_status v_send(lca_comm* c, const void* buf, int64_t count, int32_t dtype, int32_t peer,
                  void* stream) {
  return detail::guard([&] { of(c).send(buf, count, checked_dtype(dtype), peer, stream); });
}

lca_status v_recv(lca_comm* c, void* buf, int64_t count, int32_t dtype, int32_t peer,
                  void* stream) {
  return detail::guard([&] { of(c).recv(buf, count, checked_dtype(dtype), peer, stream); });
}

lca_status v_barrier(lca_comm* c, void* stream) {
  return detail::guard([&] { of(c).barrier(stream); });
}

}  // namespace

const lca_comm_vtable* comm_vtable() {
  static const lca_comm_vtable table{sizeof(lca_comm_vtable), LCA_ABI_VERSION, &v_rank, &v_size,
                                     &v_split, &v_free, &v_all_to_all, &v_all_gather,
                                     &v_reduce_scatter, &v_all_reduce, &v_group_start,
                                     &v_group_end, &v_send, &v_recv, &v_barrier, &v_local_size,
                                     &detail::last_error};
  return &table;
}

lca_comm_ref as_comm_ref(Communicator& comm) {
  return lca_comm_ref{sizeof(lca_comm_ref), comm_vtable(), reinterpret_cast<lca_comm*>(&comm)};
}

}  // namespace lca::core::comm
