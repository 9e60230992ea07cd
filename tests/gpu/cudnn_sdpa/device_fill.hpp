// Random device data for the cudnn_sdpa tests and benchmark: a counter-based hash, so the same
// seed gives the same values on any GPU, filled in place without a host copy.
// Used by test_cudnn_sdpa.cpp and bench_cudnn_sdpa.cpp.
// Rule: values are uniform in [-amplitude, amplitude] and never all zero.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace lca::test {

// dtype: lca_dtype of the buffer (bf16, f16 or f32).
cudaError_t device_fill_uniform(void* data, int32_t dtype, int64_t count, uint64_t seed, float amplitude,
                                cudaStream_t stream);

}  // namespace lca::test
