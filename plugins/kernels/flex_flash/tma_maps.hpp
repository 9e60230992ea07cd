// Host side of flex_flash's Hopper kernels: TMA descriptors over THD tensors (through the
// runtime's driver entry point, no link against libcuda) and whether the current GPU can run the
// sm_90a code. Used by forward_sm90.cuh and backward_sm90.cuh.
// Rule: maps are made per launch from the call's pointers and strides (a few microseconds).
#pragma once

#include "cuda_check.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

namespace lca_flex_flash::dev {

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    LCA_FLEX_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || f == nullptr)
      throw lca::Error(LCA_ERR_DEVICE, "flex_flash: the CUDA driver has no cuTensorMapEncodeTiled (needs a CUDA 12+ driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A 3-D map over a THD tensor at (head dim, heads, tokens): boxes of 64 elements x 1 head x rows
// tokens, 128-byte swizzled; tokens past the end read as zeros.
template <class T>
CUtensorMap make_thd_map(const void* data, int head_dim, int64_t heads, int64_t tokens, int64_t head_stride,
                         int64_t tok_stride, uint32_t rows, const char* what) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(tokens)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_stride) * sizeof(T),
                                 static_cast<cuuint64_t>(tok_stride) * sizeof(T)};
  const cuuint32_t box[3] = {64, 1, rows};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUtensorMapDataType type =
      std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r = tensor_map_encoder()(&map, type, 3, const_cast<void*>(data), dims, strides, box, elem,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw lca::Error(LCA_ERR_DEVICE, std::string("flex_flash: cuTensorMapEncodeTiled failed for ") + what +
                                       " (CUresult " + std::to_string(static_cast<int>(r)) +
                                       "): strides must be multiples of 16 bytes and the data 16-byte aligned");
  return map;
}

// A 3-D map over flex_flash's fp32 dQ accumulator [tokens][heads][head dim] (dense): boxes of 32
// floats (128 bytes, swizzled) x 1 head x rows tokens, for the backward's TMA reduce-add.
inline CUtensorMap make_dq_accum_map(float* data, int head_dim, int64_t heads, int64_t tokens, uint32_t rows) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(tokens)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_dim) * sizeof(float),
                                 static_cast<cuuint64_t>(heads * head_dim) * sizeof(float)};
  const cuuint32_t box[3] = {32, 1, rows};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, data, dims, strides, box, elem,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw lca::Error(LCA_ERR_DEVICE, "flex_flash: cuTensorMapEncodeTiled failed for the dQ accumulator (CUresult " +
                                         std::to_string(static_cast<int>(r)) + ")");
  return map;
}

// The sm_90a code was built (LCA_FLEX_SM90A, set by CMake when the architectures include 90a)
// and the current GPU is compute capability 9.0.
inline bool sm90_device() {
#if defined(LCA_FLEX_SM90A)
  int device = 0, major = 0, minor = 0;
  LCA_FLEX_CUDA_CHECK(cudaGetDevice(&device));
  LCA_FLEX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  LCA_FLEX_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

}  // namespace lca_flex_flash::dev
