// VSA's tile lists from lca's block-sparse form; see vsa_blocks.hpp.
#include "vsa_blocks.hpp"

#include <lca/error.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>

namespace lca_vsa {
namespace {

using lca::require;

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

bool VsaBlocks::sees(int64_t q, int64_t k) const {
  if (q < 0 || k < 0 || q >= seqlen_q || k >= seqlen_k) return false;
  const int64_t t = q / kTile, u = k / kTile;
  const int32_t* row = q2k_idx.data() + t * max_kv;
  if (k - u * kTile >= kv_sizes[static_cast<size_t>(u)]) return false;
  return std::binary_search(row, row + q2k_num[static_cast<size_t>(t)], static_cast<int32_t>(u));
}

std::string VsaBlocks::describe() const {
  char kept[32];
  const double all = static_cast<double>(q_tiles) * static_cast<double>(kv_tiles);
  std::snprintf(kept, sizeof kept, "%.1f%%", all > 0 ? 100.0 * static_cast<double>(kept_tiles) / all : 0.0);
  const int32_t r = block / kTile;
  const std::string tiles = r == 1 ? "block 64" : "block " + str(block) + " as " + str(r) + "x" + str(r) + " tiles of 64";
  return tiles + ": " + str(q_tiles) + " x " + str(kv_tiles) + " tiles, " + kept + " kept, up to " + str(max_kv) +
         " a row";
}

VsaBlocks build_vsa_blocks(const lca_mask& mask) {
  require(mask.struct_size >= sizeof(lca_mask), LCA_ERR_INVALID_ARGUMENT, "lca_mask too small");
  require(mask.block_sparse != nullptr, LCA_ERR_UNSUPPORTED,
          "VSA runs block-sparse masks only (a mask with the ABI's block-sparse form, such as block_sparse); "
          "this one is " + str(mask.num_slices) + " slices without one");
  const lca_block_sparse& bs = *mask.block_sparse;
  require(bs.struct_size >= sizeof(lca_block_sparse), LCA_ERR_INVALID_ARGUMENT, "lca_block_sparse too small");
  require(bs.block_q == bs.block_k, LCA_ERR_UNSUPPORTED,
          "query blocks of " + str(bs.block_q) + " and key blocks of " + str(bs.block_k) +
              " tokens: VSA's blocks are square");
  const int32_t block = bs.block_q;
  require(block == 64 || block == 128 || block == 256, LCA_ERR_UNSUPPORTED,
          "blocks of " + str(block) + " tokens: VSA takes 64-token blocks, and 128 or 256 as groups of them");
  for (const auto& [len, what] : {std::pair{mask.seqlen_q, "seqlen_q"}, std::pair{mask.seqlen_k, "seqlen_k"}})
    require(len > 0 && len % kTile == 0, LCA_ERR_UNSUPPORTED,
            std::string(what) + " " + str(len) + " is not a multiple of 64: VSA's kernels read whole 64-token tiles");
  require(bs.num_q_blocks == (mask.seqlen_q + block - 1) / block && bs.num_k_blocks == (mask.seqlen_k + block - 1) / block,
          LCA_ERR_INVALID_ARGUMENT,
          "block-sparse form of " + str(bs.num_q_blocks) + " x " + str(bs.num_k_blocks) + " blocks of " + str(block) +
              " does not cover " + str(mask.seqlen_q) + " x " + str(mask.seqlen_k) + " tokens");
  require(bs.row_offsets != nullptr && (bs.col_indices != nullptr || bs.row_offsets[bs.num_q_blocks] == 0),
          LCA_ERR_INVALID_ARGUMENT, "block-sparse form without its arrays");

  VsaBlocks v;
  v.seqlen_q = mask.seqlen_q;
  v.seqlen_k = mask.seqlen_k;
  v.block = block;
  v.q_tiles = mask.seqlen_q / kTile;
  v.kv_tiles = mask.seqlen_k / kTile;
  require(v.q_tiles <= std::numeric_limits<int32_t>::max() && v.kv_tiles <= std::numeric_limits<int32_t>::max(),
          LCA_ERR_UNSUPPORTED, "more tiles than VSA's int32 indices hold");
  const int64_t r = block / kTile;  // tiles a block

  // Each block row's kept blocks, checked once; a tile row inherits its block row's, each block
  // split into its r key tiles (the last block's tiles past seqlen_k do not exist).
  for (int64_t b = 0; b < bs.num_q_blocks; ++b) {
    const int64_t begin = bs.row_offsets[b], end = bs.row_offsets[b + 1];
    require(begin <= end && begin >= 0, LCA_ERR_INVALID_ARGUMENT,
            "block-sparse row_offsets decrease at query block " + str(b));
    int64_t tiles = 0;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t c = bs.col_indices[i];
      require(c >= 0 && c < bs.num_k_blocks && (i == begin || c > bs.col_indices[i - 1]), LCA_ERR_INVALID_ARGUMENT,
              "block-sparse col_indices of query block " + str(b) + " not ascending inside [0, " +
                  str(bs.num_k_blocks) + ")");
      tiles += std::min(r, v.kv_tiles - c * r);
    }
    v.max_kv = static_cast<int32_t>(std::max<int64_t>(v.max_kv, tiles));
  }
  v.max_kv = std::max(v.max_kv, 1);  // a zero-width index tensor would have no rows to address
  v.q2k_idx.assign(static_cast<size_t>(v.q_tiles * v.max_kv), -1);
  v.q2k_num.assign(static_cast<size_t>(v.q_tiles), 0);
  for (int64_t t = 0; t < v.q_tiles; ++t) {
    const int64_t b = t / r;
    int32_t* out = v.q2k_idx.data() + t * v.max_kv;
    int32_t n = 0;
    for (int64_t i = bs.row_offsets[b]; i < bs.row_offsets[b + 1]; ++i)
      for (int64_t u = bs.col_indices[i] * r; u < std::min((bs.col_indices[i] + 1) * r, v.kv_tiles); ++u)
        out[n++] = static_cast<int32_t>(u);
    v.q2k_num[static_cast<size_t>(t)] = n;
    v.kept_tiles += n;
  }
  v.kv_sizes.assign(static_cast<size_t>(v.kv_tiles), kTile);
  return v;
}

}  // namespace lca_vsa
