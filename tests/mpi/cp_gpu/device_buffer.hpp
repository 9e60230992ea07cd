// Device memory for the GPU CP tests: a cudaMalloc'd buffer with checked copies to and from host
// vectors. Used by comm_test.cpp and strategies_test.cpp.
// Rule: every CUDA call is checked; a failure throws std::runtime_error naming the call.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace lca::test {

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) cuda_ok(cudaMalloc(&data_, bytes), "cudaMalloc");
  }
  // Complete on return: a pageable upload may still be in flight when cudaMemcpy returns, and
  // the work that reads it runs on other (non-blocking) streams.
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (bytes_) cuda_ok(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  ~DeviceBuffer() {
    if (data_) (void)cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  template <class T>
  std::vector<T> to_host() const {
    std::vector<T> out(bytes_ / sizeof(T));
    if (bytes_) cuda_ok(cudaMemcpy(out.data(), data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lca::test
