#include "mask_form.hpp"

#include <lca/error.hpp>
#include <lca/types.hpp>

#include <algorithm>
#include <optional>

namespace lca_cudnn_sdpa {
namespace {

[[noreturn]] void unsupported(const std::string& why) {
  throw lca::Error(LCA_ERR_UNSUPPORTED, "cudnn_sdpa: mask not expressible in cuDNN SDPA: " + why);
}

[[noreturn]] void invalid(const std::string& why) {
  throw lca::Error(LCA_ERR_INVALID_ARGUMENT, "cudnn_sdpa: malformed mask: " + why);
}

// Per query row: the union of its keys over all slices, as [lo, hi) plus the count of cells.
// Slices never overlap (ABI), so the union is one interval exactly when count == hi - lo.
struct Rows {
  std::vector<int64_t> lo, hi, count;
};

Rows collect_rows(const lca_mask& mask) {
  const int64_t s = mask.seqlen_q;
  Rows rows{std::vector<int64_t>(s, INT64_MAX), std::vector<int64_t>(s, INT64_MIN),
            std::vector<int64_t>(s, 0)};
  for (int64_t n = 0; n < mask.num_slices; ++n) {
    const lca_slice& sl = mask.slices[n];
    if (sl.q_begin < 0 || sl.q_end > mask.seqlen_q || sl.q_begin > sl.q_end || sl.k_begin < 0 ||
        sl.k_end > mask.seqlen_k || sl.k_begin > sl.k_end)
      invalid("slice " + std::to_string(n) + " lies outside the " + std::to_string(mask.seqlen_q) +
              " x " + std::to_string(mask.seqlen_k) + " mask");
    if (sl.type < LCA_SLICE_FULL || sl.type > LCA_SLICE_BI_CAUSAL)
      invalid("slice " + std::to_string(n) + " has unknown type " + std::to_string(sl.type));
    for (int64_t q = sl.q_begin; q < sl.q_end; ++q) {
      int64_t first, last;
      lca::slice_row_range(sl, q, &first, &last);
      if (last <= first) continue;
      rows.lo[q] = std::min(rows.lo[q], first);
      rows.hi[q] = std::max(rows.hi[q], last);
      rows.count[q] += last - first;
    }
  }
  for (int64_t q = 0; q < s; ++q) {
    if (rows.count[q] == 0) unsupported("query row " + std::to_string(q) + " sees no key");
    if (rows.count[q] != rows.hi[q] - rows.lo[q])
      unsupported("query row " + std::to_string(q) + " sees keys that are not one interval");
  }
  return rows;
}

// Fits a band to the rows under the given documents; nullopt (with why) when it does not fit.
std::optional<MaskForm> fit(const Rows& rows, const std::vector<int64_t>& docs, std::string* why) {
  MaskForm form;
  form.doc_offsets = docs;
  int64_t wl = 0, wr = 0;
  for (size_t d = 0; d + 1 < docs.size(); ++d) {
    const int64_t a = docs[d], b = docs[d + 1];
    form.max_doc_len = std::max(form.max_doc_len, b - a);
    for (int64_t q = a; q < b; ++q) {
      if (rows.lo[q] < a || rows.hi[q] > b) {
        *why = "query row " + std::to_string(q) + " sees keys outside its document [" +
               std::to_string(a) + ", " + std::to_string(b) + ")";
        return std::nullopt;
      }
      wl = std::max(wl, q - rows.lo[q]);
      wr = std::max(wr, rows.hi[q] - 1 - q);
    }
  }
  for (size_t d = 0; d + 1 < docs.size(); ++d) {
    const int64_t a = docs[d], b = docs[d + 1];
    for (int64_t q = a; q < b; ++q) {
      const int64_t lo = std::max(a, q - wl), hi = std::min(b, q + wr + 1);
      if (rows.lo[q] != lo || rows.hi[q] != hi) {
        *why = "query row " + std::to_string(q) + " sees [" + std::to_string(rows.lo[q]) + ", " +
               std::to_string(rows.hi[q]) + "), not the band [" + std::to_string(lo) + ", " +
               std::to_string(hi) + ") of a diagonal band " + std::to_string(wl) + " left, " +
               std::to_string(wr) + " right";
        return std::nullopt;
      }
    }
  }
  // A side as wide as the longest document is no bound at all.
  form.left = wl >= form.max_doc_len - 1 ? -1 : wl;
  form.right = wr >= form.max_doc_len - 1 ? -1 : wr;
  if (form.max_doc_len == 1) form.right = 0;  // single-token documents: causal and full agree
  return form;
}

std::vector<int64_t> documents_of(const lca_mask& mask) {
  const bool has_docs = mask.struct_size >= offsetof(lca_mask, doc_offsets) + sizeof(mask.doc_offsets) &&
                        mask.num_docs > 0 && mask.doc_offsets != nullptr;
  if (!has_docs) return {};
  std::vector<int64_t> docs(mask.doc_offsets, mask.doc_offsets + mask.num_docs + 1);
  if (docs.front() != 0 || docs.back() != mask.seqlen_q)
    invalid("doc_offsets run from " + std::to_string(docs.front()) + " to " +
            std::to_string(docs.back()) + ", not 0 to " + std::to_string(mask.seqlen_q));
  for (size_t i = 0; i + 1 < docs.size(); ++i)
    if (docs[i + 1] <= docs[i]) invalid("doc_offsets are not strictly increasing at " + std::to_string(i));
  return docs;
}

}  // namespace

std::string MaskForm::describe() const {
  std::string name;
  if (left < 0 && right < 0) name = "full";
  else if (left < 0 && right == 0) name = "causal";
  else if (right == 0) name = "sliding_window_causal(window=" + std::to_string(left) + ")";
  else if (left == right) name = "sliding_window(window=" + std::to_string(left) + ")";
  else name = "band(left=" + std::to_string(left) + ", right=" + std::to_string(right) + ")";
  if (ragged()) name += " over " + std::to_string(num_docs()) + " documents";
  return name;
}

MaskForm recognise(const lca_mask& mask) {
  if (mask.seqlen_q != mask.seqlen_k)
    unsupported("seqlen_q (" + std::to_string(mask.seqlen_q) + ") != seqlen_k (" +
                std::to_string(mask.seqlen_k) + ")");
  if (mask.seqlen_q <= 0) invalid("empty mask");
  if (mask.num_slices < 0 || (mask.num_slices > 0 && mask.slices == nullptr)) invalid("bad slice array");
  const Rows rows = collect_rows(mask);
  const std::vector<int64_t> whole{0, mask.seqlen_q};
  std::string why_docs, why_whole;
  // The documents first: a document mask is also a (wider) single-band candidate that fails.
  const std::vector<int64_t> docs = documents_of(mask);
  if (docs.size() > 2)
    if (auto form = fit(rows, docs, &why_docs)) return *form;
  if (auto form = fit(rows, whole, &why_whole)) return *form;
  unsupported(docs.size() > 2 ? why_docs + "; as one sequence: " + why_whole : why_whole);
}

}  // namespace lca_cudnn_sdpa
