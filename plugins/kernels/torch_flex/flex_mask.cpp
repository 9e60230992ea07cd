// Slices (or the block-sparse table) -> FlexAttention's mask data and BlockMask; see flex_mask.hpp.
#include "flex_mask.hpp"

#include "plugins/kernels/torch_common/row_intervals.hpp"

#include <lca/error.hpp>

#include <algorithm>
#include <cstddef>
#include <utility>

namespace lca_torch_flex {
namespace {

using Interval = std::pair<int64_t, int64_t>;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The table from the CSR of a block-sparse form, checked against the mask's lengths.
void fill_table(FlexMask& f, const lca_block_sparse& bs) {
  lca::require(bs.struct_size >= sizeof(lca_block_sparse) && bs.block_q > 0 && bs.block_k > 0 &&
                   bs.row_offsets != nullptr && bs.num_q_blocks == ceil_div(f.seqlen_q, bs.block_q) &&
                   bs.num_k_blocks == ceil_div(f.seqlen_k, bs.block_k),
               LCA_ERR_INVALID_ARGUMENT, "torch_flex: the block-sparse form does not match the mask's lengths");
  f.kind = FlexMask::Kind::table;
  f.table_block_q = bs.block_q;
  f.table_block_k = bs.block_k;
  f.table_rows = ceil_div(f.padded_rows, bs.block_q);
  f.table_cols = ceil_div(f.kv_blocks * f.block, bs.block_k);
  f.table.assign(static_cast<size_t>(f.table_rows * f.table_cols), 0);
  for (int64_t qb = 0; qb < bs.num_q_blocks; ++qb)
    for (int64_t i = bs.row_offsets[qb]; i < bs.row_offsets[qb + 1]; ++i) {
      const int64_t kb = bs.col_indices[i];
      lca::require(kb >= 0 && kb < bs.num_k_blocks, LCA_ERR_INVALID_ARGUMENT,
                   "torch_flex: block-sparse column index out of range");
      f.table[static_cast<size_t>(qb * f.table_cols + kb)] = 1;
    }
}

// Row q's visible keys as sorted disjoint intervals.
void row_of(const FlexMask& f, int64_t q, std::vector<Interval>& out) {
  out.clear();
  if (q >= f.seqlen_q) return;
  if (f.kind == FlexMask::Kind::intervals) {
    for (int32_t i = 0; i < f.width; ++i) {
      const size_t at = static_cast<size_t>(q) * f.width + i;
      if (f.lo[at] < f.hi[at]) out.emplace_back(f.lo[at], f.hi[at]);
    }
    return;
  }
  const uint8_t* row = f.table.data() + (q / f.table_block_q) * f.table_cols;
  for (int64_t c = 0; c < f.table_cols; ++c) {
    if (!row[c]) continue;
    const int64_t a = c * f.table_block_k;
    if (a >= f.seqlen_k) break;
    const int64_t b = std::min(f.seqlen_k, (c + 1) * f.table_block_k);
    if (!out.empty() && out.back().second == a) out.back().second = b;
    else out.emplace_back(a, b);
  }
}

// Full and partial key blocks of every query block, with difference arrays over key blocks:
// O(rows x intervals + query blocks x key blocks).
void classify_blocks(FlexMask& f) {
  const int64_t nq = f.q_blocks, nk = f.kv_blocks, b = f.block;
  f.kv_num.assign(static_cast<size_t>(nq), 0);
  f.full_num.assign(static_cast<size_t>(nq), 0);
  f.kv_idx.assign(static_cast<size_t>(nq * nk), 0);
  f.full_idx.assign(static_cast<size_t>(nq * nk), 0);
  std::vector<int32_t> touched(static_cast<size_t>(nk + 1)), covered(static_cast<size_t>(nk + 1));
  std::vector<Interval> row;
  for (int64_t qb = 0; qb < nq; ++qb) {
    std::fill(touched.begin(), touched.end(), 0);
    std::fill(covered.begin(), covered.end(), 0);
    const int64_t q0 = qb * b, q1 = std::min(f.seqlen_q, q0 + b);
    for (int64_t q = q0; q < q1; ++q) {
      row_of(f, q, row);
      for (const auto& [lo, hi] : row) {
        ++touched[static_cast<size_t>(lo / b)];
        --touched[static_cast<size_t>((hi - 1) / b + 1)];
        const int64_t first = ceil_div(lo, b), last = hi / b;  // blocks [first, last) lie inside
        if (first < last) {
          ++covered[static_cast<size_t>(first)];
          --covered[static_cast<size_t>(last)];
        }
      }
    }
    const bool whole_rows = q1 - q0 == b;
    int32_t t = 0, c = 0;
    int32_t& partial = f.kv_num[static_cast<size_t>(qb)];
    int32_t& full = f.full_num[static_cast<size_t>(qb)];
    for (int64_t kb = 0; kb < nk; ++kb) {
      t += touched[static_cast<size_t>(kb)];
      c += covered[static_cast<size_t>(kb)];
      if (t <= 0) continue;
      const bool is_full = whole_rows && (kb + 1) * b <= f.seqlen_k && c == b;
      if (is_full) f.full_idx[static_cast<size_t>(qb * nk + full++)] = static_cast<int32_t>(kb);
      else f.kv_idx[static_cast<size_t>(qb * nk + partial++)] = static_cast<int32_t>(kb);
    }
    f.partial_count += partial;
    f.full_count += full;
  }
}

}  // namespace

bool FlexMask::sees(int64_t q, int64_t k) const {
  if (q < 0 || k < 0 || q >= seqlen_q || k >= seqlen_k) return false;
  if (kind == Kind::table)
    return table[static_cast<size_t>((q / table_block_q) * table_cols + k / table_block_k)] != 0;
  for (int32_t i = 0; i < width; ++i) {
    const size_t at = static_cast<size_t>(q) * width + i;
    if (lo[at] <= k && k < hi[at]) return true;
  }
  return false;
}

std::string FlexMask::describe() const {
  std::string form = kind == Kind::table ? "block table " + std::to_string(table_block_q) + "x" +
                                               std::to_string(table_block_k)
                                         : "key intervals (width " + std::to_string(width) + ")";
  return form + ", " + std::to_string(full_count) + " full + " + std::to_string(partial_count) +
         " partial blocks of " + std::to_string(block);
}

FlexMask build_flex_mask(const lca_mask& mask, int32_t max_width, int32_t block) {
  lca::require(mask.struct_size >= offsetof(lca_mask, block_sparse) + sizeof(void*), LCA_ERR_INVALID_ARGUMENT,
               "torch_flex: lca_mask.struct_size too small");
  lca::require(mask.seqlen_q > 0 && mask.seqlen_k > 0 && block > 0, LCA_ERR_INVALID_ARGUMENT,
               "torch_flex: empty mask");
  FlexMask f;
  f.seqlen_q = mask.seqlen_q;
  f.seqlen_k = mask.seqlen_k;
  f.block = block;
  f.q_blocks = ceil_div(mask.seqlen_q, block);
  f.kv_blocks = ceil_div(mask.seqlen_k, block);
  f.padded_rows = f.q_blocks * block;
  if (mask.block_sparse != nullptr) {
    fill_table(f, *mask.block_sparse);
  } else {
    lca_torch::RowIntervals r = lca_torch::row_intervals(mask, max_width);
    f.kind = FlexMask::Kind::intervals;
    f.width = r.width;
    f.lo = std::move(r.lo);
    f.hi = std::move(r.hi);
    f.lo.resize(static_cast<size_t>(f.padded_rows) * f.width, 0);
    f.hi.resize(static_cast<size_t>(f.padded_rows) * f.width, 0);
  }
  classify_blocks(f);
  return f;
}

}  // namespace lca_torch_flex
