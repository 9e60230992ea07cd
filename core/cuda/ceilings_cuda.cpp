// The two ceilings every cell is reported against: a large bf16 GEMM through cuBLAS and a large
// device-to-device copy, each the median of event-timed runs after warm-up.
#include "core/cuda/check.hpp"
#include "core/cuda/gpu.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <vector>

namespace lca::core::gpu {

namespace {

// cudaMalloc'd buffer freed on scope exit (the ceilings are the host's own, not a cell's).
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { LCA_CUDA_CHECK(cudaMalloc(&ptr, bytes)); }
  ~DeviceBuffer() { (void)cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() { LCA_CUBLAS_CHECK(cublasCreate(&h)); }
  ~CublasHandle() { (void)cublasDestroy(h); }
};

template <class F>
double median_ms(F&& body, void* stream, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<float> times;
  EventTimer timer;
  for (int i = 0; i < repeats; ++i) {
    timer.start(stream);
    body();
    timer.stop(stream);
    times.push_back(timer.elapsed_ms());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

Ceilings measure_ceilings(int device) {
  int previous = 0;
  LCA_CUDA_CHECK(cudaGetDevice(&previous));
  LCA_CUDA_CHECK(cudaSetDevice(device));
  Ceilings out;
  try {
    Stream stream;
    auto s = static_cast<cudaStream_t>(stream.handle());
    {
      const int n = 8192;
      const size_t elems = static_cast<size_t>(n) * n;
      DeviceBuffer a(elems * 2), b(elems * 2), c(elems * 2);
      fill_random(a.ptr, static_cast<int64_t>(elems), LCA_DTYPE_BF16, 11, 1.0f, s);
      fill_random(b.ptr, static_cast<int64_t>(elems), LCA_DTYPE_BF16, 12, 1.0f, s);
      CublasHandle handle;
      LCA_CUBLAS_CHECK(cublasSetStream(handle.h, s));
      const float alpha = 1.0f, beta = 0.0f;
      auto gemm = [&] {
        LCA_CUBLAS_CHECK(cublasGemmEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.ptr,
                                      CUDA_R_16BF, n, b.ptr, CUDA_R_16BF, n, &beta, c.ptr,
                                      CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      const double ms = median_ms(gemm, s, 3, 7);
      out.gemm_tflops = 2.0 * n * static_cast<double>(n) * n / (ms * 1e-3) / 1e12;
    }
    {
      const size_t bytes = size_t{1} << 31;  // 2 GiB each way: far past any L2
      DeviceBuffer src(bytes), dst(bytes);
      fill_random(src.ptr, static_cast<int64_t>(bytes / 4), LCA_DTYPE_F32, 13, 1.0f, s);
      auto copy = [&] {
        LCA_CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, s));
      };
      const double ms = median_ms(copy, s, 2, 7);
      out.copy_gbps = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
    }
    stream.synchronize();
  } catch (...) {
    (void)cudaSetDevice(previous);
    throw;
  }
  LCA_CUDA_CHECK(cudaSetDevice(previous));
  return out;
}

}  // namespace lca::core::gpu
