// A whole slice mask as ranges: its validation against the problem, and each query row's key
// ranges (or each key row's query ranges) as CSR on the host, ready to upload to a device.
// Used by kernel plugins that walk ranges (cuda_reference, cuda_naive, flex_flash, cpu_reference).
// Rule: call validate_mask() before build_range_lists(); the ranges come from
// lca::slice_row_range / slice_col_range only, which agree with lca::slice_contains.
#pragma once

#include <lca/abi.h>
#include <lca/error.hpp>
#include <lca/types.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lca {

// Throws lca::Error(LCA_ERR_INVALID_ARGUMENT) naming the fault: a mask of another size than the
// problem, a negative slice count or null slices, a slice outside the mask or of unknown type.
inline void validate_mask(const lca_mask& mask, int64_t seqlen_q, int64_t seqlen_k) {
  require(mask.seqlen_q == seqlen_q && mask.seqlen_k == seqlen_k, LCA_ERR_INVALID_ARGUMENT,
          "mask is " + std::to_string(mask.seqlen_q) + " x " + std::to_string(mask.seqlen_k) +
              " but the problem is " + std::to_string(seqlen_q) + " x " + std::to_string(seqlen_k));
  require(mask.num_slices >= 0 && (mask.num_slices == 0 || mask.slices != nullptr), LCA_ERR_INVALID_ARGUMENT,
          "mask has a negative slice count or null slices");
  for (int64_t i = 0; i < mask.num_slices; ++i) {
    const lca_slice& s = mask.slices[i];
    const auto which = [&] {
      return "slice " + std::to_string(i) + " [" + std::to_string(s.q_begin) + "," + std::to_string(s.q_end) +
             ") x [" + std::to_string(s.k_begin) + "," + std::to_string(s.k_end) + ")";
    };
    require(s.q_begin >= 0 && s.q_begin <= s.q_end && s.q_end <= seqlen_q && s.k_begin >= 0 &&
                s.k_begin <= s.k_end && s.k_end <= seqlen_k,
            LCA_ERR_INVALID_ARGUMENT, which() + " lies outside the mask");
    require(s.type >= LCA_SLICE_FULL && s.type <= LCA_SLICE_BI_CAUSAL, LCA_ERR_INVALID_ARGUMENT,
            which() + " has unknown type " + std::to_string(s.type));
  }
}

// CSR: row r owns ranges[2*offsets[r] .. 2*offsets[r+1]) as (begin, end) pairs, one per slice
// that the row sees something of, in slice order (not merged: slices never overlap).
struct RangeLists {
  std::vector<int64_t> offsets;
  std::vector<int64_t> ranges;
};

// by_query: key ranges for each query row; otherwise query ranges for each key row.
inline RangeLists build_range_lists(const lca_mask& mask, bool by_query) {
  const int64_t rows = by_query ? mask.seqlen_q : mask.seqlen_k;
  RangeLists out;
  out.offsets.assign(rows + 1, 0);
  auto range_of = [&](const lca_slice& s, int64_t r, int64_t* a, int64_t* b) {
    if (by_query) slice_row_range(s, r, a, b);
    else slice_col_range(s, r, a, b);
  };
  auto row_span = [&](const lca_slice& s) {
    return by_query ? std::pair{s.q_begin, s.q_end} : std::pair{s.k_begin, s.k_end};
  };
  // Two passes: count each row's ranges, then fill them in at the prefix-summed offsets.
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

}  // namespace lca
