// Test support for the builtin mask provider: loads liblca_builtin.so through the C ABI, makes
// masks, and checks a mask cell by cell against a predicate written in the tests.
// Rule: predicates here are written from docs/masks.md, never shared with the plugin's code.
#pragma once

#include "plugin_handle.hpp"

#include <lca/abi.h>
#include <lca/types.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lca::test {

struct Generated {
  lca_status status = LCA_OK;
  std::string error;
  const lca_mask* mask = nullptr;
  std::shared_ptr<lca_mask_handle> handle;
};

class BuiltinProvider {
 public:
  static BuiltinProvider& instance() {
    static BuiltinProvider p;
    return p;
  }
  const lca_mask_provider_vtable& vt() const { return lib_.mask_provider(); }
  lca_mask_provider* provider() const { return provider_; }

  Generated generate(const std::string& pattern, const std::string& params, int64_t seqlen,
                     uint64_t seed) {
    lca_mask_request req{sizeof(lca_mask_request), pattern.c_str(), params.c_str(), seqlen, seed};
    lca_mask_handle* h = nullptr;
    Generated g;
    g.status = vt().generate(provider_, &req, &h);
    if (g.status != LCA_OK) {
      g.error = vt().last_error();
      return g;
    }
    auto release = vt().release;
    auto* prov = provider_;
    g.handle.reset(h, [release, prov](lca_mask_handle* x) { release(prov, x); });
    g.mask = vt().get(h);
    return g;
  }

 private:
  BuiltinProvider() : lib_("builtin") {
    data_dir_ = (plugin_dir() / "data").string();
    plugin_dir_ = plugin_dir().string();
    lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, plugin_dir_.c_str(), data_dir_.c_str(),
                       "{}", nullptr, nullptr};
    if (vt().create(&host, &provider_) != LCA_OK) throw std::runtime_error(vt().last_error());
  }
  PluginHandle lib_;
  std::string data_dir_, plugin_dir_;
  lca_mask_provider* provider_ = nullptr;  // lives for the whole test process
};

// Document index of each token, from cu_seqlens.
inline std::vector<int64_t> doc_ids(const lca_mask& m) {
  std::vector<int64_t> id(static_cast<size_t>(m.seqlen_q), -1);
  for (int64_t d = 0; d < m.num_docs; ++d)
    for (int64_t t = m.doc_offsets[d]; t < m.doc_offsets[d + 1]; ++t) id[t] = d;
  return id;
}

// cu_seqlens: starts at 0, strictly increasing, ends at the total.
inline void expect_packing(const lca_mask& m) {
  ASSERT_GE(m.num_docs, 1);
  ASSERT_NE(m.doc_offsets, nullptr);
  EXPECT_EQ(m.doc_offsets[0], 0);
  EXPECT_EQ(m.doc_offsets[m.num_docs], m.seqlen_q);
  for (int64_t d = 0; d < m.num_docs; ++d) ASSERT_LT(m.doc_offsets[d], m.doc_offsets[d + 1]);
}

// How many slices cover each cell (row-major), via lca::slice_contains over each slice's box.
inline std::vector<uint8_t> coverage(const lca_mask& m) {
  const int64_t s = m.seqlen_q;
  std::vector<uint8_t> cover(static_cast<size_t>(s * m.seqlen_k), 0);
  for (int64_t i = 0; i < m.num_slices; ++i) {
    const lca_slice& sl = m.slices[i];
    EXPECT_TRUE(sl.q_begin >= 0 && sl.q_end <= m.seqlen_q && sl.k_begin >= 0 && sl.k_end <= m.seqlen_k)
        << "slice " << i << " leaves the mask";
    for (int64_t q = std::max<int64_t>(sl.q_begin, 0); q < std::min(sl.q_end, s); ++q)
      for (int64_t k = std::max<int64_t>(sl.k_begin, 0); k < std::min(sl.k_end, m.seqlen_k); ++k)
        if (lca::slice_contains(sl, q, k) && cover[q * m.seqlen_k + k] < 255) ++cover[q * m.seqlen_k + k];
  }
  return cover;
}

using Predicate = std::function<bool(int64_t q, int64_t k)>;

// Cell by cell: covered at most once, covered exactly where the predicate holds, and the
// closed-form slice areas add up to the predicate's count.
inline void expect_matches(const lca_mask& m, const std::vector<uint8_t>& cover, const Predicate& visible,
                           const std::string& label) {
  int64_t count = 0, mismatches = 0, overlaps = 0;
  for (int64_t q = 0; q < m.seqlen_q; ++q) {
    for (int64_t k = 0; k < m.seqlen_k; ++k) {
      const uint8_t c = cover[q * m.seqlen_k + k];
      const bool want = visible(q, k);
      count += want;
      if (c > 1) ++overlaps;
      if ((c > 0) != want) {
        if (mismatches++ < 5) ADD_FAILURE() << label << ": cell (" << q << ", " << k << ") covered=" << int(c) << " predicate=" << want;
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << label;
  EXPECT_EQ(overlaps, 0) << label << ": slices overlap";
  int64_t area = 0;
  for (int64_t i = 0; i < m.num_slices; ++i) area += lca::slice_area(m.slices[i]);
  EXPECT_EQ(area, count) << label;
}

// The 14 builtin patterns with parameters that give several documents, windows and blocks at
// lengths near 1000 (mask translation tests: tile schedules, block masks).
inline const std::vector<std::pair<std::string, std::string>>& patterns_near_1k() {
  static const std::vector<std::pair<std::string, std::string>> p = {
      {"full", "{}"},
      {"causal", "{}"},
      {"full_document", R"({"dist":"uniform:1-300"})"},
      {"causal_document", R"({"dist":"uniform:1-300"})"},
      {"sliding_window", R"({"window":100})"},
      {"sliding_window_causal", R"({"window":70})"},
      {"sliding_window_document", R"({"window":50,"dist":"uniform:20-400"})"},
      {"shared_question", "{}"},
      {"causal_blockwise", "{}"},
      {"prefix_lm_causal", "{}"},
      {"prefix_lm_document", R"({"dist":"uniform:30-400"})"},
      {"global_sliding", "{}"},
      {"block_causal_document", "{}"},
      {"block_sparse", R"({"sparsity":0.3})"}};
  return p;
}

}  // namespace lca::test
