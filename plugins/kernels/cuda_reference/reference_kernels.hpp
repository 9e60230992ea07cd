// Launchers of the cuda_reference device code: one warp per (query row, head) for the forward
// and dQ, one warp per (key row, kv head) for dK/dV, fp32 arithmetic throughout.
// Used by cuda_reference.cpp; plain C++ so that the plugin class needs no CUDA compiler.
// Rule: views carry element strides exactly as lca_tensor does; nothing here assumes packing.
#pragma once

#include <cstdint>

namespace lca_cuda_reference {

// Element (t, h, d) lives at data[t * s0 + h * s1 + d * s2].
struct View {
  void* data = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0;
};

// Element (h, t) of an LSE tensor lives at data[h * s0 + t * s1].
struct LseView {
  float* data = nullptr;
  int64_t s0 = 0, s1 = 0;
};

struct Shape {
  int32_t dtype = 0;
  int64_t seqlen_q = 0, seqlen_k = 0;
  int32_t heads_q = 0, heads_kv = 0, head_dim = 0;
  float scale = 1.0f;
};

struct FwdParams {
  Shape shape;
  View q, k, v, o;
  LseView lse;
  const int64_t* row_offsets = nullptr;  // seqlen_q + 1
  const int64_t* row_ranges = nullptr;   // (k_begin, k_end) pairs
};

struct BwdParams {
  Shape shape;
  View q, k, v, o, d_o, dq, dk, dv;
  LseView lse;
  const int64_t* row_offsets = nullptr;
  const int64_t* row_ranges = nullptr;
  const int64_t* col_offsets = nullptr;  // seqlen_k + 1
  const int64_t* col_ranges = nullptr;   // (q_begin, q_end) pairs
  float* delta = nullptr;                // workspace: heads_q * seqlen_q
};

constexpr int kMaxHeadDim = 256;

// Enqueue on stream (a cudaStream_t); throw lca::Error on a launch failure.
void launch_forward(const FwdParams& p, void* stream);
void launch_backward(const BwdParams& p, void* stream);

}  // namespace lca_cuda_reference
