// CUDA kernels and stream plumbing of the CP engine; see device_kernels.hpp.
#include "device_kernels.hpp"

#include <lca/abi.h>
#include <lca/error.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <type_traits>

namespace lca::cp::cuda {
namespace {

void check(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return;
  (void)cudaGetLastError();
  throw Error(LCA_ERR_DEVICE, std::string("cp engine: ") + call + " failed: " + cudaGetErrorName(rc) + " (" +
                                  cudaGetErrorString(rc) + "); check the device and the buffers the host passed");
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

size_t element_bytes(int32_t dtype) {
  switch (dtype) {
    case LCA_DTYPE_F32: return 4;
    case LCA_DTYPE_F16:
    case LCA_DTYPE_BF16: return 2;
    case LCA_DTYPE_F64: return 8;
    default: throw Error(LCA_ERR_INVALID_ARGUMENT, "cp engine: unknown dtype " + std::to_string(dtype));
  }
}

template <class T>
__device__ __forceinline__ float load(const T* p);
template <>
__device__ __forceinline__ float load<float>(const float* p) { return *p; }
template <>
__device__ __forceinline__ float load<__half>(const __half* p) { return __half2float(*p); }
template <>
__device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }

template <class T>
__device__ __forceinline__ void store(T* p, float v);
template <>
__device__ __forceinline__ void store<float>(float* p, float v) { *p = v; }
template <>
__device__ __forceinline__ void store<__half>(__half* p, float v) { *p = __float2half_rn(v); }
template <>
__device__ __forceinline__ void store<__nv_bfloat16>(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

struct Shape {
  int64_t n1, n2;
  int64_t ss0, ss1, ss2, ds0, ds1, ds2;
};

// One thread an element; Index is 32-bit when the element count allows (cheaper division).
template <class S, class D, bool Add, class Index>
__global__ void copy3_kernel(const S* __restrict__ src, D* __restrict__ dst, Index total, Shape sh) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  const Index n1 = static_cast<Index>(sh.n1), n2 = static_cast<Index>(sh.n2);
  for (Index e = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const Index l = e % n2, r = e / n2;
    const Index j = r % n1, i = r / n1;
    const int64_t si = int64_t(i) * sh.ss0 + int64_t(j) * sh.ss1 + int64_t(l) * sh.ss2;
    const int64_t di = int64_t(i) * sh.ds0 + int64_t(j) * sh.ds1 + int64_t(l) * sh.ds2;
    if constexpr (Add) {
      dst[di] = dst[di] + load<S>(src + si);
    } else if constexpr (std::is_same_v<S, D>) {
      dst[di] = src[si];
    } else {
      store<D>(dst + di, load<S>(src + si));
    }
  }
}

int blocks_for(int64_t total, int threads) {
  const int64_t wanted = (total + threads - 1) / threads;
  return static_cast<int>(wanted < 65536 ? wanted : 65536);
}

template <class S, class D, bool Add>
void launch_copy3(const View& src, const View& dst, int64_t n0, int64_t n1, int64_t n2, cudaStream_t s) {
  const int64_t total = n0 * n1 * n2;
  const Shape sh{n1, n2, src.s0, src.s1, src.s2, dst.s0, dst.s1, dst.s2};
  const int threads = 256, blocks = blocks_for(total, threads);
  const S* sp = static_cast<const S*>(src.data);
  D* dp = static_cast<D*>(dst.data);
  if (total < (int64_t{1} << 31))
    copy3_kernel<S, D, Add, uint32_t><<<blocks, threads, 0, s>>>(sp, dp, static_cast<uint32_t>(total), sh);
  else
    copy3_kernel<S, D, Add, uint64_t><<<blocks, threads, 0, s>>>(sp, dp, static_cast<uint64_t>(total), sh);
  check_launch("copy3_kernel");
}

template <class S>
void dispatch_dst(const View& src, const View& dst, int64_t n0, int64_t n1, int64_t n2, bool add, cudaStream_t s) {
  if (add) {
    if (dst.dtype != LCA_DTYPE_F32)
      throw Error(LCA_ERR_INVALID_ARGUMENT, "cp engine: accumulation needs an fp32 destination");
    return launch_copy3<S, float, true>(src, dst, n0, n1, n2, s);
  }
  switch (dst.dtype) {
    case LCA_DTYPE_F32: return launch_copy3<S, float, false>(src, dst, n0, n1, n2, s);
    case LCA_DTYPE_F16: return launch_copy3<S, __half, false>(src, dst, n0, n1, n2, s);
    case LCA_DTYPE_BF16: return launch_copy3<S, __nv_bfloat16, false>(src, dst, n0, n1, n2, s);
    default: break;
  }
  throw Error(LCA_ERR_UNSUPPORTED, "cp engine: CUDA copies take f32, f16 and bf16 only (got dtype " +
                                       std::to_string(dst.dtype) + ")");
}

// Rows of n1 x n2 contiguous elements (n2 == 1 or s2 == 1, and n1 == 1 or s1 == n2).
bool rows_contiguous(const View& v, int64_t n1, int64_t n2) {
  return (n2 == 1 || v.s2 == 1) && (n1 == 1 || v.s1 == n2);
}

__global__ void fill_kernel(float* p, int64_t count, float value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) p[i] = value;
}

// One warp a (row, head): the same arithmetic as LseMerge::add on the CPU, in fp32.
template <class O, class P>
__global__ void lse_merge_kernel(O* __restrict__ o, float* __restrict__ lse, const P* __restrict__ part,
                                 const float* __restrict__ part_lse, int64_t rows, int64_t heads, int64_t dim,
                                 int64_t ld) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; w < rows * heads; w += warps) {
    const int64_t r = w / heads, h = w - r * heads;
    const float ln = part_lse[h * ld + r];
    if (ln == -INFINITY) continue;  // uniform across the warp
    const float lo = lse[h * ld + r];
    __syncwarp();  // every lane has read lse before lane 0 writes it
    const float m = fmaxf(lo, ln);
    const float a = expf(lo - m), b = expf(ln - m);
    const float l = m + logf(a + b);
    const float wa = expf(lo - l), wb = expf(ln - l);
    O* out = o + w * dim;
    const P* in = part + w * dim;
    // Where lo is -inf the old O is garbage (wa = 0): never read into a product that could be NaN.
    if (lo == -INFINITY) {
      for (int64_t d = lane; d < dim; d += 32) store<O>(out + d, load<P>(in + d));
    } else {
      for (int64_t d = lane; d < dim; d += 32) store<O>(out + d, wa * load<O>(out + d) + wb * load<P>(in + d));
    }
    if (lane == 0) lse[h * ld + r] = l;
  }
}

template <class O>
void launch_merge(O* o, float* lse, const void* part, int32_t dtype, const float* part_lse, int64_t rows, int64_t heads,
                  int64_t dim, int64_t ld, int blocks, int threads, cudaStream_t s) {
  switch (dtype) {
    case LCA_DTYPE_F32:
      lse_merge_kernel<O, float><<<blocks, threads, 0, s>>>(o, lse, static_cast<const float*>(part), part_lse, rows, heads, dim, ld);
      break;
    case LCA_DTYPE_F16:
      lse_merge_kernel<O, __half><<<blocks, threads, 0, s>>>(o, lse, static_cast<const __half*>(part), part_lse, rows, heads, dim, ld);
      break;
    case LCA_DTYPE_BF16:
      lse_merge_kernel<O, __nv_bfloat16><<<blocks, threads, 0, s>>>(o, lse, static_cast<const __nv_bfloat16*>(part),
                                                                     part_lse, rows, heads, dim, ld);
      break;
    default:
      throw Error(LCA_ERR_UNSUPPORTED, "cp engine: the CUDA LSE merge takes f32, f16 and bf16 partial outputs");
  }
}

}  // namespace

void copy3(const View& src, const View& dst, int64_t n0, int64_t n1, int64_t n2, bool add, void* stream) {
  if (n0 <= 0 || n1 <= 0 || n2 <= 0) return;
  const cudaStream_t s = as_stream(stream);
  if (!add && src.dtype == dst.dtype && rows_contiguous(src, n1, n2) && rows_contiguous(dst, n1, n2)) {
    const size_t es = element_bytes(src.dtype), width = static_cast<size_t>(n1 * n2) * es;
    if (n0 == 1 || (src.s0 == n1 * n2 && dst.s0 == n1 * n2)) {
      check(cudaMemcpyAsync(dst.data, src.data, width * static_cast<size_t>(n0), cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync");
    } else {
      check(cudaMemcpy2DAsync(dst.data, static_cast<size_t>(dst.s0) * es, src.data, static_cast<size_t>(src.s0) * es,
                              width, static_cast<size_t>(n0), cudaMemcpyDeviceToDevice, s),
            "cudaMemcpy2DAsync");
    }
    return;
  }
  switch (src.dtype) {
    case LCA_DTYPE_F32: return dispatch_dst<float>(src, dst, n0, n1, n2, add, s);
    case LCA_DTYPE_F16: return dispatch_dst<__half>(src, dst, n0, n1, n2, add, s);
    case LCA_DTYPE_BF16: return dispatch_dst<__nv_bfloat16>(src, dst, n0, n1, n2, add, s);
    default: break;
  }
  throw Error(LCA_ERR_UNSUPPORTED, "cp engine: CUDA copies take f32, f16 and bf16 only (got dtype " +
                                       std::to_string(src.dtype) + ")");
}

void fill_f32(float* data, int64_t count, float value, void* stream) {
  if (count <= 0) return;
  fill_kernel<<<blocks_for(count, 256), 256, 0, as_stream(stream)>>>(data, count, value);
  check_launch("fill_kernel");
}

void zero(void* data, size_t bytes, void* stream) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(data, 0, bytes, as_stream(stream)), "cudaMemsetAsync");
}

void lse_merge(void* o, int32_t o_dtype, float* lse, const void* part, int32_t dtype, const float* part_lse,
               int64_t rows, int64_t heads, int64_t dim, int64_t lse_ld, void* stream) {
  if (rows <= 0 || heads <= 0) return;
  const int64_t ld = lse_ld > 0 ? lse_ld : rows;
  const int threads = 256;
  const int blocks = blocks_for(rows * heads * 32, threads);
  const cudaStream_t s = as_stream(stream);
  switch (o_dtype) {
    case LCA_DTYPE_F32: launch_merge(static_cast<float*>(o), lse, part, dtype, part_lse, rows, heads, dim, ld, blocks, threads, s); break;
    case LCA_DTYPE_F16: launch_merge(static_cast<__half*>(o), lse, part, dtype, part_lse, rows, heads, dim, ld, blocks, threads, s); break;
    case LCA_DTYPE_BF16:
      launch_merge(static_cast<__nv_bfloat16*>(o), lse, part, dtype, part_lse, rows, heads, dim, ld, blocks, threads, s);
      break;
    default: throw Error(LCA_ERR_UNSUPPORTED, "cp engine: the CUDA LSE merge writes f32, f16 and bf16 outputs");
  }
  check_launch("lse_merge_kernel");
}

void* stream_create() {
  // The highest priority: a transfer's kernels are scheduled as soon as SMs free up, instead of
  // queueing behind the whole attention grid on the exec stream.
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority");
  return s;
}

void stream_destroy(void* stream) {
  if (stream == nullptr) return;
  (void)cudaStreamSynchronize(as_stream(stream));
  (void)cudaStreamDestroy(as_stream(stream));
}

void* event_create() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return e;
}

void event_destroy(void* event) {
  if (event != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void event_record(void* event, void* stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(event), as_stream(stream)), "cudaEventRecord");
}

void stream_wait(void* stream, void* event) {
  check(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(event), 0), "cudaStreamWaitEvent");
}

}  // namespace lca::cp::cuda
