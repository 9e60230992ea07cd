// cudnn-frontend graphs for SDPA forward and backward over packed THD tensors: one sequence as
// batch 1 (BSHD strides), or packed documents as a ragged batch with padding-mask lengths.
// Used by the cudnn_sdpa kernel (plan() builds, forward()/backward() execute).
// Rule: a graph is built for one GraphKey; the device pointers bound at execution must match it
// (tensor uids below; ragged offsets and lengths in the dtypes the key names).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>

namespace cudnn_frontend::graph {
class Graph;
}

namespace lca_cudnn_sdpa {

// Tensor uids shared by the graphs and the variant packs.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV,
  kSeqLenQ, kSeqLenKv, kOffsetQ, kOffsetKv, kOffsetStats
};

// Everything a built graph depends on; equal keys may share graphs.
struct GraphKey {
  int32_t dtype = 0;     // lca_dtype (bf16 or f16)
  int64_t batch = 1;     // documents
  int64_t max_len = 0;   // longest document (the S of the BHSD view)
  int64_t total = 0;     // packed tokens
  int32_t heads_q = 0, heads_kv = 0, head_dim = 0;
  float scale = 1.f;
  int64_t left = -1, right = -1;  // band, as in MaskForm
  bool ragged = false;
  bool offsets64 = false;  // ragged offsets in int64 (element offsets past 2^31)

  std::string str() const;  // the cache key
};

// A built graph and its workspace size.
struct BuiltGraph {
  std::shared_ptr<cudnn_frontend::graph::Graph> graph;
  int64_t workspace = 0;
};

// Both throw lca::Error: LCA_ERR_UNSUPPORTED when cuDNN has no engine for the key. plan_index
// -1 takes cuDNN's heuristic choice; n >= 0 the n-th candidate (for engine studies).
BuiltGraph build_forward(cudnnHandle_t handle, const GraphKey& key, int plan_index = -1);
BuiltGraph build_backward(cudnnHandle_t handle, const GraphKey& key, int plan_index = -1);

// "engine <name> (first of <n> candidates), workspace <MiB>": what cuDNN chose, for the log.
std::string describe(const BuiltGraph& g);

// Runs a built graph with pointers by uid; throws LCA_ERR_DEVICE on failure.
void execute(cudnnHandle_t handle, const BuiltGraph& g, const int64_t* uids, void* const* ptrs, int n,
             void* workspace);

}  // namespace lca_cudnn_sdpa
