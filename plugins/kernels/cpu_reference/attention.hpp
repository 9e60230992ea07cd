// The arithmetic of the CPU reference: exact masked attention forward (O, LSE) and backward
// (dQ, dK, dV), multi-threaded, in fp32 or fp64 accumulation, on THD tensors with any strides.
// Used by CpuReference (cpu_reference.cpp), which validates everything before calling in.
// Rule: call only with tensors already checked against the problem, and a workspace of at
// least *_workspace_bytes() for the same problem, thread count and accumulation.
#pragma once

#include "slice_index.hpp"

#include <lca/abi.h>

#include <cstddef>

namespace lca::cpu_reference {

enum class Accumulate { f32, f64 };

struct Shape {
  int64_t seqlen_q = 0, seqlen_k = 0;
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;
  double softmax_scale = 1.0;
  int32_t dtype = LCA_DTYPE_F32;
};

size_t forward_workspace_bytes(const Shape& shape, Accumulate acc, int threads);
size_t backward_workspace_bytes(const Shape& shape, Accumulate acc, int threads);

void attention_forward(const Shape& shape, const SliceIndex& index, const lca_fwd_args& args,
                       Accumulate acc, int threads, void* workspace);

// Overwrites dq, dk and dv. dK/dV of a kv head sum over the query heads of its group. With
// fp32 accumulation P = exp(s - lse) uses the given LSE; with fp64 each row's LSE is recomputed
// in fp64, since the fp32 LSE tensor would otherwise limit P to ~1e-7 relative, and used where it
// agrees with the given one to 1e-6 (relative): a call that holds part of a row's keys (a CP
// strategy's block, given the merged LSE) uses the given one.
void attention_backward(const Shape& shape, const SliceIndex& index, const lca_bwd_args& args,
                        Accumulate acc, int threads, void* workspace);

}  // namespace lca::cpu_reference
