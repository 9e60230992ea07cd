// Slices -> per-row intervals; see row_intervals.hpp.
#include "row_intervals.hpp"

#include <lca/error.hpp>
#include <lca/types.hpp>

#include <algorithm>
#include <limits>
#include <utility>

namespace lca_torch {

bool RowIntervals::sees(int64_t q, int64_t k) const {
  for (int32_t i = 0; i < width; ++i) {
    const size_t at = static_cast<size_t>(q) * width + i;
    if (lo[at] <= k && k < hi[at]) return true;
  }
  return false;
}

RowIntervals row_intervals(const lca_mask& m, int32_t max_width) {
  lca::require(m.seqlen_q >= 0 && m.seqlen_k >= 0 && m.num_slices >= 0 && (m.num_slices == 0 || m.slices),
               LCA_ERR_INVALID_ARGUMENT, "mask: negative lengths or missing slices");
  lca::require(m.seqlen_q < std::numeric_limits<int32_t>::max() && m.seqlen_k < std::numeric_limits<int32_t>::max(),
               LCA_ERR_INVALID_ARGUMENT, "mask: lengths past 2^31 tokens");
  // Slices sorted by first row; a sweep over rows keeps those that cover the current row.
  std::vector<const lca_slice*> order;
  order.reserve(static_cast<size_t>(m.num_slices));
  for (int64_t i = 0; i < m.num_slices; ++i) {
    const lca_slice& s = m.slices[i];
    lca::require(s.q_begin >= 0 && s.q_end <= m.seqlen_q && s.k_begin >= 0 && s.k_end <= m.seqlen_k,
                 LCA_ERR_INVALID_ARGUMENT, "mask: slice " + std::to_string(i) + " reaches outside the mask");
    if (s.q_end > s.q_begin && s.k_end > s.k_begin) order.push_back(&s);
  }
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->q_begin < b->q_begin; });

  RowIntervals out;
  out.rows = m.seqlen_q;
  out.cols = m.seqlen_k;
  // Rows are gathered first (widths unknown), then laid out at the widest row's width.
  std::vector<std::vector<std::pair<int32_t, int32_t>>> rows(static_cast<size_t>(m.seqlen_q));
  std::vector<const lca_slice*> active;
  std::vector<std::pair<int64_t, int64_t>> pieces;
  size_t next = 0;
  for (int64_t q = 0; q < m.seqlen_q; ++q) {
    while (next < order.size() && order[next]->q_begin <= q) active.push_back(order[next++]);
    std::erase_if(active, [q](const lca_slice* s) { return s->q_end <= q; });
    pieces.clear();
    for (const lca_slice* s : active) {
      int64_t first = 0, last = 0;
      lca::slice_row_range(*s, q, &first, &last);
      if (first < last) pieces.emplace_back(first, last);
    }
    std::sort(pieces.begin(), pieces.end());
    auto& row = rows[static_cast<size_t>(q)];
    for (const auto& [first, last] : pieces) {
      if (!row.empty() && first <= row.back().second)
        row.back().second = std::max<int32_t>(row.back().second, static_cast<int32_t>(last));
      else
        row.emplace_back(static_cast<int32_t>(first), static_cast<int32_t>(last));
    }
    if (static_cast<int32_t>(row.size()) > out.width) {
      out.width = static_cast<int32_t>(row.size());
      out.widest_row = q;
      if (out.width > max_width)
        throw lca::Error(LCA_ERR_UNSUPPORTED, "query row " + std::to_string(q) + " sees " + std::to_string(out.width) +
                                                  " separate key ranges (at most " + std::to_string(max_width) +
                                                  " are supported without a block-sparse form)");
    }
  }
  const size_t w = static_cast<size_t>(out.width);
  out.lo.assign(static_cast<size_t>(m.seqlen_q) * w, 0);
  out.hi.assign(static_cast<size_t>(m.seqlen_q) * w, 0);
  for (size_t q = 0; q < rows.size(); ++q)
    for (size_t i = 0; i < rows[q].size(); ++i) {
      out.lo[q * w + i] = rows[q][i].first;
      out.hi[q * w + i] = rows[q][i].second;
    }
  return out;
}

DenseForm dense_form(const lca_mask& m, std::string* why) {
  auto fail = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return DenseForm::other;
  };
  if (m.seqlen_q <= 0 || m.seqlen_q != m.seqlen_k) return fail("seqlen_q differs from seqlen_k");
  RowIntervals r;
  try {
    r = row_intervals(m, 1);
  } catch (const lca::Error& e) {
    return fail(e.what());
  }
  bool full = true, causal = true;
  int64_t full_row = -1, causal_row = -1;
  for (int64_t q = 0; q < r.rows && (full || causal); ++q) {
    const int32_t lo = r.lo[static_cast<size_t>(q)], hi = r.hi[static_cast<size_t>(q)];
    if (full && !(lo == 0 && hi == r.cols)) full = false, full_row = q;
    if (causal && !(lo == 0 && hi == q + 1)) causal = false, causal_row = q;
  }
  if (full) return DenseForm::full;
  if (causal) return DenseForm::causal;
  const int64_t q = std::max(full_row, causal_row);
  const size_t at = static_cast<size_t>(q);
  return fail("query row " + std::to_string(q) + " sees keys [" + std::to_string(r.lo[at]) + ", " +
              std::to_string(r.hi[at]) + "), neither all keys (full) nor [0, " + std::to_string(q + 1) + ") (causal)");
}

const char* dense_form_name(DenseForm form) {
  switch (form) {
    case DenseForm::full: return "full";
    case DenseForm::causal: return "causal";
    default: return "other";
  }
}

}  // namespace lca_torch
