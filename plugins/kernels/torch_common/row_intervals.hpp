// A slice mask as each query row's visible keys: sorted, disjoint intervals, touching ones
// merged. torch_sdpa_* read the dense form (full or causal) from it; torch_flex uploads the
// intervals for its mask_mod. Host code only, no torch: tested on the CPU.
// Rule: the slices are the truth (lca::slice_row_range); nothing here may widen or narrow a row.
#pragma once

#include <lca/abi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lca_torch {

struct RowIntervals {
  int64_t rows = 0;               // seqlen_q
  int64_t cols = 0;               // seqlen_k
  int32_t width = 1;              // intervals per row: the most any row needs (at least 1)
  std::vector<int32_t> lo, hi;    // rows x width, row-major; unused entries are empty [0, 0)
  int64_t widest_row = 0;         // a row that needs `width` intervals

  // Does query row q see key k?
  bool sees(int64_t q, int64_t k) const;
};

// Throws lca::Error(LCA_ERR_UNSUPPORTED) naming the row when some row needs more than
// max_width intervals, and LCA_ERR_INVALID_ARGUMENT for a malformed mask (slices out of range,
// lengths past int32).
RowIntervals row_intervals(const lca_mask& mask, int32_t max_width);

// The masks a dense attention library takes as a flag: every row sees all keys (full) or keys
// [0, q] (causal, seqlen_q == seqlen_k). Anything else is `other`, with the first row that
// differs in `why`.
enum class DenseForm { full, causal, other };
DenseForm dense_form(const lca_mask& mask, std::string* why);

const char* dense_form_name(DenseForm form);

}  // namespace lca_torch
