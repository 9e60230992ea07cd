// What torch_flex hands to FlexAttention for one lca mask, built on the host in plan(): the data
// of the mask_mod (each row's key intervals, or the block-sparse table of a dynamic mask) and
// the BlockMask's block lists in flex's own layout (B = H = 1), so that no S x S mask is ever
// materialised. Host code only, no torch: tested on the CPU against the slices.
// Rule: sees(q, k) is exactly the slices' answer, and a block is listed full only when every
// one of its cells inside the sequence is visible.
#pragma once

#include <lca/abi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lca_torch_flex {

struct FlexMask {
  enum class Kind { intervals, table };

  int64_t seqlen_q = 0, seqlen_k = 0;
  int32_t block = 128;           // flex's BLOCK_SIZE (queries and keys)
  int64_t q_blocks = 0, kv_blocks = 0;
  int64_t padded_rows = 0;       // q_blocks * block: the mask_mod may be asked about rows past seqlen_q

  Kind kind = Kind::intervals;
  // intervals: row q sees keys [lo[q*width+i], hi[q*width+i]) for i < width; padded_rows rows,
  // the rows past seqlen empty.
  int32_t width = 1;
  std::vector<int32_t> lo, hi;
  // table: query block qb sees key block kb iff table[qb * table_cols + kb]; sized to cover
  // padded_rows x (kv_blocks * block) tokens (the mask_mod also checks q < seqlen_q, k < seqlen_k).
  int32_t table_block_q = 0, table_block_k = 0;
  int64_t table_rows = 0, table_cols = 0;
  std::vector<uint8_t> table;

  // BlockMask, partial and full blocks apart (a block that reaches past the sequence is never
  // full, as in create_block_mask): for query block qb, kv_num[qb] partial key blocks
  // kv_idx[qb * kv_blocks + 0 ..) ascending (then padding), and likewise full_num / full_idx.
  std::vector<int32_t> kv_num, kv_idx, full_num, full_idx;
  int64_t partial_count = 0, full_count = 0;

  bool sees(int64_t q, int64_t k) const;
  std::string describe() const;  // e.g. "intervals (width 2), 124 full + 31 partial blocks of 128"
};

// max_width: the most key intervals a row may need without a block-sparse form (more is
// LCA_ERR_UNSUPPORTED, naming the row). A mask with a block-sparse form uses its table.
FlexMask build_flex_mask(const lca_mask& mask, int32_t max_width, int32_t block = 128);

}  // namespace lca_torch_flex
