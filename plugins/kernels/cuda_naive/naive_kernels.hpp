// The simple kernels around cuda_naive's cuBLAS GEMMs: slice mask + softmax + LSE over a full
// fp32 score matrix, probabilities from LSE, dS, delta and fp32 -> dtype conversion.
// Used by cuda_naive.cpp; plain C++ so that the plugin class needs no CUDA compiler.
// Rule: score and probability matrices are dense row-major seqlen_q x seqlen_k (ld = seqlen_k).
#pragma once

#include <cstdint>

namespace lca_cuda_naive {

struct RowRanges {
  const int64_t* offsets = nullptr;  // seqlen_q + 1
  const int64_t* ranges = nullptr;   // (k_begin, k_end) pairs
};

// probs := softmax over each row's visible scores (0 elsewhere); lse[i * lse_stride] := LSE
// (-inf and an all-zero row when nothing is visible). scores already carry softmax_scale.
void launch_masked_softmax(const float* scores, void* probs, int32_t dtype, float* lse, int64_t lse_stride,
                           RowRanges rows, int64_t seqlen_q, int64_t seqlen_k, void* stream);

// probs := exp(scores - lse) on visible cells, 0 elsewhere (backward's recomputation).
void launch_probs_from_lse(const float* scores, void* probs, int32_t dtype, const float* lse,
                           int64_t lse_stride, RowRanges rows, int64_t seqlen_q, int64_t seqlen_k, void* stream);

// delta[i] := sum_d dO[i, d] * O[i, d]; rows at row_stride, elements contiguous.
void launch_delta(const void* d_o, const void* o, int64_t do_row_stride, int64_t o_row_stride, int32_t dtype,
                  float* delta, int64_t seqlen_q, int32_t head_dim, void* stream);

// probs := probs * (dp - delta[row]) * scale, in place (it becomes dS).
void launch_dscores(void* probs, const float* dp, const float* delta, int32_t dtype, float scale,
                    int64_t seqlen_q, int64_t seqlen_k, void* stream);

// out[t * row_stride + d] := src[t * head_dim + d] in dtype.
void launch_convert(const float* src, void* out, int64_t row_stride, int32_t dtype, int64_t tokens,
                    int32_t head_dim, void* stream);

}  // namespace lca_cuda_naive
