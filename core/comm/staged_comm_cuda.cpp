// StagedCommunicator: device buffers through pinned host memory around a host communicator;
// see staged_comm.hpp. Built only with CUDA.
#include "core/comm/staged_comm.hpp"

#include <lca/error.hpp>
#include <lca/types.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

namespace lca::core::comm {
namespace {

void cuda_check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  (void)cudaGetLastError();
  throw Error(LCA_ERR_DEVICE, std::string("mpi-staged communicator: ") + what + " failed: " + cudaGetErrorString(rc) +
                                  " (is the CUDA device of this rank healthy and selected?)");
}

bool on_device(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

// Pinned host memory that grows on demand and is kept for the next call.
class Pinned {
 public:
  Pinned() = default;
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  ~Pinned() {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
  }
  char* get(size_t bytes) {
    if (bytes <= bytes_) return static_cast<char*>(data_);
    if (data_ != nullptr) cuda_check(cudaFreeHost(data_), "cudaFreeHost");
    data_ = nullptr;
    bytes_ = 0;
    const cudaError_t rc = cudaMallocHost(&data_, bytes);
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(LCA_ERR_OUT_OF_MEMORY, "mpi-staged communicator: cudaMallocHost of " + std::to_string(bytes) +
                                             " bytes of pinned staging memory failed: " + cudaGetErrorString(rc) +
                                             "; use NCCL (--cp-comm nccl) or smaller cells");
    }
    bytes_ = bytes;
    return static_cast<char*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

class StagedCommunicator final : public Communicator {
 public:
  explicit StagedCommunicator(std::unique_ptr<Communicator> host) : host_(std::move(host)) {}
  ~StagedCommunicator() override = default;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int local_size() const override { return host_->local_size(); }
  const char* backend() const override { return "mpi-staged"; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    return std::make_unique<StagedCommunicator>(host_->split(color, key));
  }

  void all_to_all(const void* send, const int64_t* sc, const int64_t* sd, void* recv, const int64_t* rc,
                  const int64_t* rd, lca_dtype dtype, void* stream) override {
    const size_t es = dtype_size(dtype);
    int64_t send_end = 0, recv_end = 0;
    for (int p = 0; p < size(); ++p) {
      send_end = std::max(send_end, sd[p] + sc[p]);
      recv_end = std::max(recv_end, rd[p] + rc[p]);
    }
    sync(stream);
    const void* hs = down(send, static_cast<size_t>(send_end) * es, a_, stream);
    const bool dr = on_device(recv);
    char* hr = dr ? b_.get(static_cast<size_t>(recv_end) * es) : static_cast<char*>(recv);
    host_->all_to_all(hs, sc, sd, hr, rc, rd, dtype, nullptr);
    if (!dr) return;
    // Only the received ranges: what lies between them stays as it was.
    for (int p = 0; p < size(); ++p)
      if (rc[p] > 0)
        cuda_check(cudaMemcpyAsync(static_cast<char*>(recv) + rd[p] * es, hr + rd[p] * es, static_cast<size_t>(rc[p]) * es,
                                   cudaMemcpyHostToDevice, as_stream(stream)),
                   "cudaMemcpyAsync (host to device)");
    sync(stream);
  }

  void all_gather(const void* send, void* recv, int64_t count, lca_dtype dtype, void* stream) override {
    const size_t es = dtype_size(dtype), bytes = static_cast<size_t>(count) * es;
    sync(stream);
    const void* hs = down(send, bytes, a_, stream);
    void* hr = host_out(recv, bytes * static_cast<size_t>(size()), b_);
    host_->all_gather(hs, hr, count, dtype, nullptr);
    up(recv, hr, bytes * static_cast<size_t>(size()), stream);
  }

  void reduce_scatter(const void* send, void* recv, int64_t count, lca_dtype dtype, lca_reduce_op op,
                      void* stream) override {
    const size_t es = dtype_size(dtype), bytes = static_cast<size_t>(count) * es;
    sync(stream);
    const void* hs = down(send, bytes * static_cast<size_t>(size()), a_, stream);
    void* hr = host_out(recv, bytes, b_);
    host_->reduce_scatter(hs, hr, count, dtype, op, nullptr);
    up(recv, hr, bytes, stream);
  }

  void all_reduce(const void* send, void* recv, int64_t count, lca_dtype dtype, lca_reduce_op op,
                  void* stream) override {
    const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
    sync(stream);
    const void* hs = down(send, bytes, a_, stream);
    void* hr = send == recv ? const_cast<void*>(hs) : host_out(recv, bytes, b_);
    host_->all_reduce(hs, hr, count, dtype, op, nullptr);
    up(recv, hr, bytes, stream);
  }

  void group_start() override {
    ++depth_;
    host_->group_start();
  }

  void group_end() override {
    require(depth_ > 0, LCA_ERR_INVALID_ARGUMENT, "group_end without group_start");
    host_->group_end();
    if (--depth_ > 0) return;
    // The host group completed: the staged receives go to their device buffers.
    std::vector<PendingRecv> pending;
    pending.swap(pending_);
    used_ = 0;
    for (const PendingRecv& r : pending)
      cuda_check(cudaMemcpyAsync(r.device, r.host, r.bytes, cudaMemcpyHostToDevice, as_stream(r.stream)),
                 "cudaMemcpyAsync (host to device)");
    for (const PendingRecv& r : pending) sync(r.stream);
  }

  void send(const void* buf, int64_t count, lca_dtype dtype, int peer, void* stream) override {
    const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
    sync(stream);
    const void* hs = down(buf, bytes, depth_ > 0 ? slot() : a_, stream);
    host_->send(hs, count, dtype, peer, nullptr);
  }

  void recv(void* buf, int64_t count, lca_dtype dtype, int peer, void* stream) override {
    const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
    if (!on_device(buf)) return host_->recv(buf, count, dtype, peer, nullptr);
    if (depth_ > 0) {
      char* h = slot().get(bytes);
      host_->recv(h, count, dtype, peer, nullptr);
      pending_.push_back({buf, h, bytes, stream});
      return;
    }
    sync(stream);
    char* h = a_.get(bytes);
    host_->recv(h, count, dtype, peer, nullptr);
    up(buf, h, bytes, stream);
  }

  void barrier(void* stream) override {
    sync(stream);
    host_->barrier(nullptr);
  }

 private:
  struct PendingRecv {
    void* device;
    const void* host;
    size_t bytes;
    void* stream;
  };

  static void sync(void* stream) { cuda_check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize"); }

  // Host copy of `src` (itself when it is not device memory), in `into`.
  static const void* down(const void* src, size_t bytes, Pinned& into, void* stream) {
    if (!on_device(src)) return src;
    char* h = into.get(bytes);
    if (bytes == 0) return h;
    cuda_check(cudaMemcpyAsync(h, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)), "cudaMemcpyAsync (device to host)");
    sync(stream);
    return h;
  }
  static void* host_out(void* dst, size_t bytes, Pinned& into) { return on_device(dst) ? into.get(bytes) : dst; }
  static void up(void* dst, const void* host, size_t bytes, void* stream) {
    if (dst == host || bytes == 0 || !on_device(dst)) return;
    cuda_check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, as_stream(stream)), "cudaMemcpyAsync (host to device)");
    sync(stream);
  }
  // A staging buffer of its own for each send/recv of the open group.
  Pinned& slot() {
    if (used_ == slots_.size()) slots_.push_back(std::make_unique<Pinned>());
    return *slots_[used_++];
  }

  std::unique_ptr<Communicator> host_;
  Pinned a_, b_;
  std::vector<std::unique_ptr<Pinned>> slots_;
  size_t used_ = 0;
  int depth_ = 0;
  std::vector<PendingRecv> pending_;
};

}  // namespace

std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator> host) {
  require(host != nullptr, LCA_ERR_INVALID_ARGUMENT, "make_staged_communicator: null host communicator");
  return std::make_unique<StagedCommunicator>(std::move(host));
}

}  // namespace lca::core::comm
