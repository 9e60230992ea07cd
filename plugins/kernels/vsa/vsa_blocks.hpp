// What vsa_triton hands to Video Sparse Attention's Triton kernels for one lca mask, built on the
// host in plan() from the mask's block-sparse (CSR) form: VSA's q2k lists over 64-token tiles
// and its per-tile key counts. Host code only, no torch: tested on the CPU against the slices.
// Rule: a mask VSA cannot run exactly is refused (LCA_ERR_UNSUPPORTED, with the reason), never
// approximated; tile t of the queries sees tile u of the keys iff the mask's blocks say so.
#pragma once

#include <lca/abi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lca_vsa {

// VSA's Triton kernels tile queries and keys by 64 tokens (BLOCK_M = BLOCK_N = 64 in
// block_sparse_attn_triton.py); 128- and 256-token blocks run as 2x2 and 4x4 groups of tiles,
// as VSA's own block_sparse_attn_128/_256 do on their Triton route.
inline constexpr int32_t kTile = 64;

struct VsaBlocks {
  int64_t seqlen_q = 0, seqlen_k = 0;
  int32_t block = 0;              // the mask's block (queries and keys): 64, 128 or 256
  int64_t q_tiles = 0, kv_tiles = 0;
  int32_t max_kv = 0;             // the most key tiles one query tile sees (q2k_idx's row length)
  // Query tile t sees the key tiles q2k_idx[t * max_kv + 0 .. q2k_num[t]) ascending, then -1s
  // (VSA's map_to_index pads the same way; its kernels read only the first q2k_num[t]).
  std::vector<int32_t> q2k_idx, q2k_num;
  std::vector<int32_t> kv_sizes;  // VSA's variable_block_sizes: the valid keys of each tile (64)
  int64_t kept_tiles = 0;         // sum of q2k_num

  bool sees(int64_t q, int64_t k) const;
  std::string describe() const;   // e.g. "block 128 as 2x2 tiles of 64: 1024 x 1024 tiles, 25.0% kept"
};

// Throws lca::Error: LCA_ERR_UNSUPPORTED for what VSA cannot run (no block-sparse form, blocks
// other than 64/128/256 or different for queries and keys, lengths that are not whole tiles),
// LCA_ERR_INVALID_ARGUMENT for a block-sparse form that contradicts itself or the mask.
VsaBlocks build_vsa_blocks(const lca_mask& mask);

}  // namespace lca_vsa
