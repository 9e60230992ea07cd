// Per-query-row key ranges and per-key-row query ranges of a slice mask, as CSR on the host.
// Used by the cuda_reference plan (uploaded once) and by its tests.
// Rule: ranges come from lca::slice_row_range / slice_col_range only, which must agree with
// lca::slice_contains (THE definition of the slice types).
#pragma once

#include <lca/abi.h>
#include <lca/error.hpp>
#include <lca/types.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace lca_cuda_reference {

// Queries [first, last) that see key k inside slice s; first >= last when none.
inline void slice_col_range(const lca_slice& s, int64_t k, int64_t* first, int64_t* last) {
  *first = *last = s.q_begin;
  if (k < s.k_begin || k >= s.k_end) return;
  const int64_t j = k - s.k_begin;
  const int64_t lq = s.q_end - s.q_begin;
  const int64_t shift = (s.k_end - s.k_begin) - lq;
  int64_t lo = 0, hi = lq;
  if (s.type == LCA_SLICE_CAUSAL || s.type == LCA_SLICE_BI_CAUSAL) lo = std::max<int64_t>(lo, j - shift);
  if (s.type == LCA_SLICE_INV_CAUSAL || s.type == LCA_SLICE_BI_CAUSAL) hi = std::min(hi, j + 1);
  if (hi < lo) hi = lo;
  *first = s.q_begin + lo;
  *last = s.q_begin + hi;
}

// CSR: row r owns ranges[2*offsets[r] .. 2*offsets[r+1]) as (begin, end) pairs.
struct RangeLists {
  std::vector<int64_t> offsets;
  std::vector<int64_t> ranges;
};

inline void validate_mask(const lca_mask& mask, int64_t seqlen_q, int64_t seqlen_k) {
  lca::require(mask.seqlen_q == seqlen_q && mask.seqlen_k == seqlen_k, LCA_ERR_INVALID_ARGUMENT,
               "mask is " + std::to_string(mask.seqlen_q) + "x" + std::to_string(mask.seqlen_k) +
                   ", problem is " + std::to_string(seqlen_q) + "x" + std::to_string(seqlen_k));
  lca::require(mask.num_slices == 0 || mask.slices != nullptr, LCA_ERR_INVALID_ARGUMENT,
               "mask has slices but a null slice array");
  for (int64_t i = 0; i < mask.num_slices; ++i) {
    const lca_slice& s = mask.slices[i];
    lca::require(s.q_begin >= 0 && s.q_begin <= s.q_end && s.q_end <= seqlen_q && s.k_begin >= 0 &&
                     s.k_begin <= s.k_end && s.k_end <= seqlen_k && s.type >= LCA_SLICE_FULL &&
                     s.type <= LCA_SLICE_BI_CAUSAL,
                 LCA_ERR_INVALID_ARGUMENT, "slice " + std::to_string(i) + " is out of bounds or of unknown type");
  }
}

// by_query: key ranges for each query row; otherwise query ranges for each key row.
inline RangeLists build_range_lists(const lca_mask& mask, bool by_query) {
  const int64_t rows = by_query ? mask.seqlen_q : mask.seqlen_k;
  RangeLists out;
  out.offsets.assign(rows + 1, 0);
  auto range_of = [&](const lca_slice& s, int64_t r, int64_t* a, int64_t* b) {
    if (by_query) lca::slice_row_range(s, r, a, b);
    else slice_col_range(s, r, a, b);
  };
  auto row_span = [&](const lca_slice& s) {
    return by_query ? std::pair{s.q_begin, s.q_end} : std::pair{s.k_begin, s.k_end};
  };
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int64_t> cursor;
    if (pass == 1) {
      for (int64_t r = 0; r < rows; ++r) out.offsets[r + 1] += out.offsets[r];
      out.ranges.resize(2 * out.offsets[rows]);
      cursor.assign(out.offsets.begin(), out.offsets.end() - 1);
    }
    for (int64_t i = 0; i < mask.num_slices; ++i) {
      const lca_slice& s = mask.slices[i];
      const auto [r0, r1] = row_span(s);
      for (int64_t r = r0; r < r1; ++r) {
        int64_t a, b;
        range_of(s, r, &a, &b);
        if (b <= a) continue;
        if (pass == 0) {
          ++out.offsets[r + 1];
        } else {
          out.ranges[2 * cursor[r]] = a;
          out.ranges[2 * cursor[r] + 1] = b;
          ++cursor[r];
        }
      }
    }
  }
  return out;
}

}  // namespace lca_cuda_reference
