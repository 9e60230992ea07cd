// Slices -> documents and one of full / causal / window per document; see fa4_mask.hpp.
#include "fa4_mask.hpp"

#include "plugins/kernels/torch_common/row_intervals.hpp"

#include <lca/error.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>

namespace lca_fa4 {
namespace {

using lca::Error;

constexpr const char* kTakes = "FA4 takes one range of keys a row: full, causal or a sliding window, per document";

[[noreturn]] void refuse(const std::string& why) {
  throw Error(LCA_ERR_UNSUPPORTED, why + "; " + kTakes);
}

// One side of the window: rows cut by the window (not by their document's edge) fix its
// value; rows cut by the edge only say it is at least their distance to it.
struct Side {
  std::optional<int64_t> exact;
  int64_t exact_row = -1;
  int64_t at_least = 0, at_least_row = -1;
  const char* name;

  void fix(int64_t value, int64_t row) {
    if (exact && *exact != value)
      refuse("query rows " + std::to_string(exact_row) + " and " + std::to_string(row) + " need " + name +
             " windows of " + std::to_string(*exact) + " and " + std::to_string(value) + " keys");
    if (!exact) exact = value, exact_row = row;
  }
  void bound(int64_t value, int64_t row) {
    if (value > at_least) at_least = value, at_least_row = row;
  }
  // -1 where no row is cut by the window on this side.
  int64_t resolve() const {
    if (!exact) return -1;
    if (at_least > *exact)
      refuse("query row " + std::to_string(at_least_row) + " sees " + std::to_string(at_least) + " keys to its " +
             name + ", past the window of " + std::to_string(*exact) + " that row " + std::to_string(exact_row) +
             " has");
    return *exact;
  }
};

}  // namespace

const char* form_name(Fa4Mask::Form form) {
  switch (form) {
    case Fa4Mask::Form::full: return "full";
    case Fa4Mask::Form::causal: return "causal";
    default: return "window";
  }
}

bool Fa4Mask::sees(int64_t q, int64_t k) const {
  if (q < 0 || k < 0 || q >= seqlen || k >= seqlen) return false;
  const auto doc = std::upper_bound(cu_seqlens.begin(), cu_seqlens.end(), static_cast<int32_t>(q)) - 1;
  if (k < *doc || k >= *(doc + 1)) return false;
  switch (form) {
    case Form::full: return true;
    case Form::causal: return k <= q;
    default:
      return (window_left < 0 || k >= q - window_left) && (window_right < 0 || k <= q + window_right);
  }
}

std::string Fa4Mask::describe() const {
  std::string what = form_name(form);
  if (form == Form::window)
    what += " [" + (window_left < 0 ? std::string("-inf") : "-" + std::to_string(window_left)) + ", " +
            (window_right < 0 ? std::string("+inf") : "+" + std::to_string(window_right)) + "]";
  if (!varlen()) return what;
  return what + " in " + std::to_string(documents()) + " documents (longest " + std::to_string(max_doc) + ")";
}

Fa4Mask build_fa4_mask(const lca_mask& mask) {
  lca::require(mask.struct_size >= offsetof(lca_mask, block_sparse) + sizeof(void*), LCA_ERR_INVALID_ARGUMENT,
               "lca_mask.struct_size too small");
  if (mask.block_sparse != nullptr) refuse("a block-sparse (dynamic) mask");
  if (mask.seqlen_q != mask.seqlen_k)
    refuse("seqlen_q " + std::to_string(mask.seqlen_q) + " differs from seqlen_k " + std::to_string(mask.seqlen_k));
  lca::require(mask.seqlen_q > 0, LCA_ERR_INVALID_ARGUMENT, "empty mask");
  const int64_t s = mask.seqlen_q;

  lca_torch::RowIntervals rows;
  try {
    rows = lca_torch::row_intervals(mask, 2);
  } catch (const Error& e) {
    if (e.status() != LCA_ERR_UNSUPPORTED) throw;
    const std::string text = e.what();
    refuse(text.substr(0, text.find(" (at most")));  // "query row q sees n separate key ranges"
  }
  if (rows.width > 1)
    refuse("query row " + std::to_string(rows.widest_row) + " sees " + std::to_string(rows.width) +
           " separate key ranges");
  const auto lo = [&](int64_t q) { return static_cast<int64_t>(rows.lo[static_cast<size_t>(q)]); };
  const auto hi = [&](int64_t q) { return static_cast<int64_t>(rows.hi[static_cast<size_t>(q)]); };
  for (int64_t q = 0; q < s; ++q) {
    if (lo(q) >= hi(q)) refuse("query row " + std::to_string(q) + " sees no key");
    if (lo(q) > q || hi(q) <= q)
      refuse("query row " + std::to_string(q) + " sees keys [" + std::to_string(lo(q)) + ", " + std::to_string(hi(q)) +
             "), which leave out its own position");
  }

  // Documents: a cut between b - 1 and b wherever no row's keys (with the row itself) cross b.
  std::vector<int32_t> crossing(static_cast<size_t>(s + 1), 0);
  for (int64_t q = 0; q < s; ++q) {
    const int64_t a = std::min(q, lo(q)), b = std::max(q + 1, hi(q));
    if (b - a > 1) {
      ++crossing[static_cast<size_t>(a + 1)];
      --crossing[static_cast<size_t>(b)];
    }
  }
  Fa4Mask f;
  f.seqlen = s;
  f.cu_seqlens.push_back(0);
  int32_t open = 0;
  for (int64_t b = 1; b < s; ++b) {
    open += crossing[static_cast<size_t>(b)];
    if (open == 0) f.cu_seqlens.push_back(static_cast<int32_t>(b));
  }
  f.cu_seqlens.push_back(static_cast<int32_t>(s));

  // Inside each document, row i of length L sees [max(0, i - left), min(L, i + right + 1)).
  Side left{}, right{};
  left.name = "left";
  right.name = "right";
  for (int64_t d = 0; d + 1 < static_cast<int64_t>(f.cu_seqlens.size()); ++d) {
    const int64_t d0 = f.cu_seqlens[static_cast<size_t>(d)], d1 = f.cu_seqlens[static_cast<size_t>(d + 1)];
    f.max_doc = std::max(f.max_doc, d1 - d0);
    for (int64_t q = d0; q < d1; ++q) {
      if (lo(q) > d0) left.fix(q - lo(q), q);
      else left.bound(q - d0, q);
      if (hi(q) < d1) right.fix(hi(q) - 1 - q, q);
      else right.bound(d1 - 1 - q, q);
    }
  }
  f.window_left = left.resolve();
  f.window_right = right.resolve();
  if (f.window_left < 0 && f.window_right < 0) f.form = Fa4Mask::Form::full;
  else if (f.window_left < 0 && f.window_right == 0) f.form = Fa4Mask::Form::causal;
  else f.form = Fa4Mask::Form::window;
  if (f.form != Fa4Mask::Form::window) f.window_left = f.window_right = -1;
  return f;
}

}  // namespace lca_fa4
