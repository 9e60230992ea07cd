// Hand-built slice masks for the cudnn_sdpa tests: full, causal, packed documents, and the
// sliding windows (as bands of slices, or one FULL slice a row for the document window).
// Used by test_mask_form.cpp, test_cudnn_sdpa.cpp and bench_cudnn_sdpa.cpp.
// Rule: these follow the builtin provider's definitions (window w: |q - k| <= w; causal window:
// 0 <= q - k <= w; document forms restrict each query to its own document).
#pragma once

#include <lca/abi.h>
#include <lca/types.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace lca::test {

struct TestMask {
  std::string name;
  int64_t seqlen = 0;
  std::vector<lca_slice> slices;
  std::vector<int64_t> docs;  // empty for single-sequence masks
  lca_mask view() const {
    return lca_mask{sizeof(lca_mask), seqlen, seqlen, static_cast<int64_t>(slices.size()), slices.data(),
                    nullptr, docs.empty() ? 0 : static_cast<int64_t>(docs.size()) - 1,
                    docs.empty() ? nullptr : docs.data()};
  }
  // Ground truth: does query q see key k?
  bool sees(int64_t q, int64_t k) const {
    for (const auto& s : slices)
      if (lca::slice_contains(s, q, k)) return true;  // slices never overlap, but rectangles may
    return false;
  }
};

inline lca_slice slice(int64_t qb, int64_t qe, int64_t kb, int64_t ke, lca_slice_type t) {
  return lca_slice{qb, qe, kb, ke, static_cast<int32_t>(t), 0};
}

inline std::vector<int64_t> offsets_of(const std::vector<int64_t>& lens) {
  std::vector<int64_t> off{0};
  for (int64_t l : lens) off.push_back(off.back() + l);
  return off;
}

inline TestMask full_mask(int64_t s) { return {"full", s, {slice(0, s, 0, s, LCA_SLICE_FULL)}, {}}; }
inline TestMask causal_mask(int64_t s) { return {"causal", s, {slice(0, s, 0, s, LCA_SLICE_CAUSAL)}, {}}; }

inline TestMask document_mask(const std::vector<int64_t>& lens, bool causal) {
  TestMask m{causal ? "causal_document" : "full_document", 0, {}, offsets_of(lens)};
  m.seqlen = m.docs.back();
  for (size_t d = 0; d < lens.size(); ++d)
    m.slices.push_back(slice(m.docs[d], m.docs[d + 1], m.docs[d], m.docs[d + 1],
                             causal ? LCA_SLICE_CAUSAL : LCA_SLICE_FULL));
  return m;
}

// Keys [a + max(0, i - w), a + i] of rows [a, b): a causal triangle for the first w rows, then one
// BI_CAUSAL parallelogram (needs b - a > w).
inline void add_causal_band(std::vector<lca_slice>& out, int64_t a, int64_t b, int64_t w) {
  out.push_back(slice(a, a + w, a, a + w, LCA_SLICE_CAUSAL));
  out.push_back(slice(a + w, b, a, b, LCA_SLICE_BI_CAUSAL));
}

inline TestMask sliding_window_causal_mask(int64_t s, int64_t w) {
  TestMask m{"sliding_window_causal", s, {}, {}};
  add_causal_band(m.slices, 0, s, w);
  return m;
}

// |q - k| <= w: the causal band below the diagonal plus the keys (q, q + w] above it.
inline TestMask sliding_window_mask(int64_t s, int64_t w) {
  TestMask m{"sliding_window", s, {}, {}};
  add_causal_band(m.slices, 0, s, w);
  m.slices.push_back(slice(0, s - w, 1, s, LCA_SLICE_BI_CAUSAL));      // k in [q+1, q+w]
  m.slices.push_back(slice(s - w, s, s - w + 1, s, LCA_SLICE_INV_CAUSAL));  // k in [q+1, s)
  return m;
}

// The window inside each document, one FULL slice a row (also exercises many-slice masks).
inline TestMask sliding_window_document_mask(const std::vector<int64_t>& lens, int64_t w, bool causal = false) {
  TestMask m{causal ? "sliding_window_causal_document" : "sliding_window_document", 0, {}, offsets_of(lens)};
  m.seqlen = m.docs.back();
  for (size_t d = 0; d + 1 < m.docs.size(); ++d)
    for (int64_t q = m.docs[d]; q < m.docs[d + 1]; ++q)
      m.slices.push_back(slice(q, q + 1, std::max(m.docs[d], q - w),
                               causal ? q + 1 : std::min(m.docs[d + 1], q + w + 1), LCA_SLICE_FULL));
  return m;
}

// Not a band: a prefix seen fully by all, causal after it (prefix-LM).
inline TestMask prefix_lm_mask(int64_t s, int64_t prefix) {
  return {"prefix_lm_causal", s,
          {slice(0, s, 0, prefix, LCA_SLICE_FULL), slice(prefix, s, prefix, s, LCA_SLICE_CAUSAL)}, {}};
}

// Not one interval a row: each query sees the first `g` keys and itself.
inline TestMask holes_mask(int64_t s, int64_t g) {
  TestMask m{"holes", s, {slice(0, s, 0, g, LCA_SLICE_FULL)}, {}};
  m.slices.push_back(slice(g, s, g, s, LCA_SLICE_BI_CAUSAL));  // Lk == Lq: the diagonal
  return m;
}

// The masks the GPU test checks, at an odd total length with odd document lengths.
inline std::vector<int64_t> test_doc_lengths() { return {101, 37, 1, 150, 108}; }  // 397 tokens
inline TestMask mask_by_name(const std::string& name, int64_t window,
                             const std::vector<int64_t>& lens = test_doc_lengths()) {
  const int64_t s = std::accumulate(lens.begin(), lens.end(), int64_t{0});
  if (name == "full") return full_mask(s);
  if (name == "causal") return causal_mask(s);
  if (name == "full_document") return document_mask(lens, false);
  if (name == "causal_document") return document_mask(lens, true);
  if (name == "sliding_window") return sliding_window_mask(s, window);
  if (name == "sliding_window_causal") return sliding_window_causal_mask(s, window);
  if (name == "sliding_window_document") return sliding_window_document_mask(lens, window);
  return TestMask{};
}

}  // namespace lca::test
