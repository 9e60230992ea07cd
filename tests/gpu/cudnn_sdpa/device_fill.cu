#include "device_fill.hpp"

#include <lca/abi.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace lca::test {
namespace {

__device__ inline uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
__device__ inline T cast(float v);
template <> __device__ inline float cast<float>(float v) { return v; }
template <> __device__ inline __nv_bfloat16 cast<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ inline __half cast<__half>(float v) { return __float2half(v); }

template <class T>
__global__ void fill_uniform(T* data, int64_t count, uint64_t seed, float amplitude) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(mix(seed * 0x100000001b3ull + static_cast<uint64_t>(i)) >> 40) *
                    (1.0f / 16777216.0f);  // [0, 1)
    data[i] = cast<T>((2.f * u - 1.f) * amplitude);
  }
}

}  // namespace

cudaError_t device_fill_uniform(void* data, int32_t dtype, int64_t count, uint64_t seed, float amplitude,
                                cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((count + threads - 1) / threads, 4096));
  switch (dtype) {
    case LCA_DTYPE_F32:
      fill_uniform<<<blocks, threads, 0, stream>>>(static_cast<float*>(data), count, seed, amplitude);
      break;
    case LCA_DTYPE_BF16:
      fill_uniform<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), count, seed, amplitude);
      break;
    case LCA_DTYPE_F16:
      fill_uniform<<<blocks, threads, 0, stream>>>(static_cast<__half*>(data), count, seed, amplitude);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace lca::test
