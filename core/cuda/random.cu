// Random inputs on the device (counter-based hash, so any element is reproducible on its own)
// and L2 flushing (lca::core::gpu, CUDA builds).
#include "core/cuda/check.hpp"
#include "core/cuda/gpu.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <map>
#include <mutex>

namespace lca::core::gpu {

namespace {

// The same function as lca::core::random_uniform (core/run/backend.hpp), so that every backend
// draws the same inputs for a (seed, index): splitmix64 of a counter, 24 bits -> (-1, 1).
__device__ inline float uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = (static_cast<float>(z >> 40) + 0.5f) / 16777216.0f;
  return 2.0f * u - 1.0f;
}

template <class T>
__device__ inline T from_float(float v);
template <>
__device__ inline float from_float<float>(float v) { return v; }
// A value that rounds to zero in the dtype (only f16 can, for |v| under 2^-25) becomes the
// smallest subnormal of its sign instead: inputs are never zero.
template <>
__device__ inline __half from_float<__half>(float v) {
  const __half h = __float2half_rn(v);
  return __half2float(h) != 0.0f ? h : __ushort_as_half(v < 0.0f ? 0x8001u : 0x0001u);
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <class T>
__global__ void fill_random_kernel(T* out, int64_t count, uint64_t seed, float scale, uint64_t first) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    out[i] = from_float<T>(scale * uniform(seed, first + static_cast<uint64_t>(i)));
}

template <class T>
void launch_fill(void* ptr, int64_t count, uint64_t seed, float scale, uint64_t first, cudaStream_t stream) {
  const int threads = 256;
  const int64_t wanted = (count + threads - 1) / threads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);
  fill_random_kernel<T><<<blocks, threads, 0, stream>>>(static_cast<T*>(ptr), count, seed, scale, first);
  LCA_CUDA_CHECK_LAUNCH("fill_random_kernel");
}

}  // namespace

void fill_random(void* dev_ptr, int64_t count, int32_t dtype, uint64_t seed, float scale,
                 void* stream, uint64_t first) {
  if (count <= 0) return;
  if (dev_ptr == nullptr) throw std::runtime_error("fill_random: null pointer");
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case LCA_DTYPE_F32: launch_fill<float>(dev_ptr, count, seed, scale, first, s); break;
    case LCA_DTYPE_F16: launch_fill<__half>(dev_ptr, count, seed, scale, first, s); break;
    case LCA_DTYPE_BF16: launch_fill<__nv_bfloat16>(dev_ptr, count, seed, scale, first, s); break;
    default: throw std::runtime_error("fill_random: dtype must be f32, f16 or bf16");
  }
}

void flush_l2(void* stream) {
  // One buffer per device, made on first use and kept for the process: it is the host's own
  // scratch, outside every cell's measured peak.
  static std::mutex mutex;
  static std::map<int, std::pair<void*, size_t>> buffers;
  int device = 0;
  LCA_CUDA_CHECK(cudaGetDevice(&device));
  std::pair<void*, size_t> buf;
  {
    std::lock_guard lock(mutex);
    auto it = buffers.find(device);
    if (it == buffers.end()) {
      int l2 = 0;
      LCA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
      const size_t bytes = 2 * static_cast<size_t>(l2 > 0 ? l2 : (64 << 20));
      void* ptr = nullptr;
      LCA_CUDA_CHECK(cudaMalloc(&ptr, bytes));
      it = buffers.emplace(device, std::make_pair(ptr, bytes)).first;
    }
    buf = it->second;
  }
  LCA_CUDA_CHECK(cudaMemsetAsync(buf.first, 0x5a, buf.second, static_cast<cudaStream_t>(stream)));
}

}  // namespace lca::core::gpu
