// Every builtin pattern against a brute-force predicate written from its definition
// (docs/masks.md), at several lengths (odd ones included) and seeds.
#include "builtin_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <cstdlib>
#include <string>

namespace lca::test {
namespace {

const int64_t kLengths[] = {1, 2, 37, 64, 129, 1000};
const uint64_t kSeeds[] = {1, 7, 20251022};

struct Case {
  std::string pattern;
  std::string params;
  // Builds the predicate for one generated mask (documents come from the mask and are checked
  // separately for packing).
  std::function<Predicate(const lca_mask& m, const std::vector<uint8_t>& cover)> make;
  bool documents = false;
};

int64_t default_len(int64_t s) { return std::min<int64_t>(1024, std::max<int64_t>(0, s / 8)); }

std::string js(const std::string& k, int64_t v) { return "\"" + k + "\":" + std::to_string(v); }

std::vector<Case> cases_for(int64_t s) {
  const int64_t w = std::min<int64_t>(s, 5);
  const std::string dist_small = "\"dist\":\"uniform:3-11\"";
  std::vector<Case> c;
  c.push_back({"full", "{}", [](auto&, auto&) { return [](int64_t, int64_t) { return true; }; }});
  c.push_back({"causal", "{}", [](auto&, auto&) { return [](int64_t q, int64_t k) { return k <= q; }; }});
  for (const std::string dist : {dist_small, std::string("\"dist\":\"pile\""), std::string("\"dist\":\"chatqa\""),
                                 std::string("\"dist\":\"long:uniform:3-11\""), std::string("\"dist\":\"long:auto\"")}) {
    c.push_back({"full_document", "{" + dist + "}", [](const lca_mask& m, auto&) {
                   auto id = doc_ids(m);
                   return Predicate([id](int64_t q, int64_t k) { return id[q] == id[k]; });
                 }, true});
    c.push_back({"causal_document", "{" + dist + "}", [](const lca_mask& m, auto&) {
                   auto id = doc_ids(m);
                   return Predicate([id](int64_t q, int64_t k) { return id[q] == id[k] && k <= q; });
                 }, true});
  }
  for (int64_t win : {int64_t{0}, int64_t{1}, w, s / 2, s - 1, s}) {
    if (win < 0) continue;
    c.push_back({"sliding_window", "{" + js("window", win) + "}", [win](auto&, auto&) {
                   return Predicate([win](int64_t q, int64_t k) { return std::llabs(q - k) <= win; });
                 }});
    c.push_back({"sliding_window_causal", "{" + js("window", win) + "}", [win](auto&, auto&) {
                   return Predicate([win](int64_t q, int64_t k) { return q - k >= 0 && q - k <= win; });
                 }});
    c.push_back({"sliding_window_document", "{" + js("window", win) + "," + dist_small + "}", [win](const lca_mask& m, auto&) {
                   auto id = doc_ids(m);
                   return Predicate([id, win](int64_t q, int64_t k) { return id[q] == id[k] && std::llabs(q - k) <= win; });
                 }, true});
  }
  const int64_t dw = default_len(s);
  c.push_back({"sliding_window", "{}", [dw](auto&, auto&) {
                 return Predicate([dw](int64_t q, int64_t k) { return std::llabs(q - k) <= dw; });
               }});
  for (const std::string dist : {dist_small, std::string("\"dist\":\"pile\"")}) {
    c.push_back({"shared_question", "{" + dist + "}", [](const lca_mask& m, auto&) {
                   auto id = doc_ids(m);
                   return Predicate([id](int64_t q, int64_t k) { return k <= q && (id[k] == 0 || id[k] == id[q]); });
                 }, true});
    c.push_back({"causal_blockwise", "{" + dist + "}", [](const lca_mask& m, auto&) {
                   auto id = doc_ids(m);
                   const int64_t last = m.num_docs - 1;
                   return Predicate([id, last](int64_t q, int64_t k) { return k <= q && (id[q] == id[k] || id[q] == last); });
                 }, true});
  }
  for (int64_t p : {int64_t{0}, int64_t{1}, s / 3, s}) {
    c.push_back({"prefix_lm_causal", "{" + js("prefix", p) + "}", [p](auto&, auto&) {
                   return Predicate([p](int64_t q, int64_t k) { return k <= q || k < p; });
                 }});
  }
  for (int64_t p : {int64_t{1}, int64_t{4}, s}) {
    if (p > s) continue;
    c.push_back({"prefix_lm_document", "{" + js("prefix", p) + "," + dist_small + "}", [p](const lca_mask& m, auto&) {
                   auto id = doc_ids(m);
                   std::vector<int64_t> start(m.doc_offsets, m.doc_offsets + m.num_docs);
                   return Predicate([id, start, p](int64_t q, int64_t k) {
                     return id[q] == id[k] && (k <= q || k - start[id[k]] < p);
                   });
                 }, true});
  }
  // Drawn prefixes: row 0 shows the prefix (it sees exactly max(prefix, 1) keys).
  c.push_back({"prefix_lm_causal", "{}", [s](const lca_mask& m, const std::vector<uint8_t>& cover) {
                 int64_t p = 0;
                 for (int64_t k = 0; k < m.seqlen_k; ++k) p += cover[k] > 0;
                 EXPECT_TRUE(p >= 1 && p <= s) << "drawn prefix " << p;
                 return Predicate([p](int64_t q, int64_t k) { return k <= q || k < p; });
               }});
  c.push_back({"prefix_lm_document", "{" + dist_small + "}", [](const lca_mask& m, const std::vector<uint8_t>& cover) {
                 auto id = doc_ids(m);
                 std::vector<int64_t> start(m.doc_offsets, m.doc_offsets + m.num_docs);
                 int64_t p = 0;
                 for (int64_t k = 0; k < m.seqlen_k; ++k) p += cover[k] > 0;
                 EXPECT_TRUE(p >= 1 && p <= m.doc_offsets[1]) << "drawn prefix " << p;
                 return Predicate([id, start, p](int64_t q, int64_t k) {
                   return id[q] == id[k] && (k <= q || k - start[id[k]] < p);
                 });
               }, true});
  for (auto [win, g] : {std::pair<int64_t, int64_t>{w, 0}, {w, 3}, {1, s}, {0, 2}, {s / 4, -1}}) {
    if (g > s) continue;
    const int64_t gg = g == -1 ? std::min(2 * win, s) : g;
    c.push_back({"global_sliding", "{" + js("window", win) + "," + js("global_tokens", g) + "}", [win, gg](auto&, auto&) {
                   return Predicate([win, gg](int64_t q, int64_t k) { return q < gg || k < gg || std::llabs(q - k) <= win; });
                 }});
  }
  for (int64_t b : {int64_t{1}, std::min<int64_t>(s, 4), std::min<int64_t>(s, 7)}) {
    c.push_back({"block_causal_document", "{" + js("block", b) + "," + js("max_blocks", 3) + "}", [b](const lca_mask& m, auto&) {
                   auto id = doc_ids(m);
                   std::vector<int64_t> start(m.doc_offsets, m.doc_offsets + m.num_docs);
                   for (int64_t d = 0; d < m.num_docs; ++d) {
                     const int64_t len = m.doc_offsets[d + 1] - m.doc_offsets[d];
                     EXPECT_LE(len, 3 * b);
                     if (d + 1 < m.num_docs) EXPECT_EQ(len % b, 0) << "document " << d << " is not whole blocks";
                   }
                   return Predicate([id, start, b](int64_t q, int64_t k) {
                     if (id[q] != id[k]) return false;
                     const int64_t s0 = start[id[q]];
                     return k - s0 < ((q - s0) / b + 1) * b;
                   });
                 }, true});
  }
  for (auto [b, sp] : {std::pair<int, double>{64, 0.5}, {64, 1.0}, {128, 0.1}, {64, 0.3}}) {
    c.push_back({"block_sparse", "{" + js("block", b) + ",\"sparsity\":" + std::to_string(sp) + "}", [b, sp](const lca_mask& m, auto&) {
                   EXPECT_NE(m.block_sparse, nullptr);
                   const lca_block_sparse& bs = *m.block_sparse;
                   const int64_t n = (m.seqlen_q + b - 1) / b;
                   EXPECT_EQ(bs.block_q, b);
                   EXPECT_EQ(bs.block_k, b);
                   EXPECT_EQ(bs.num_q_blocks, n);
                   EXPECT_EQ(bs.num_k_blocks, n);
                   const int64_t kept = std::clamp<int64_t>(static_cast<int64_t>(sp * n + 0.5), 1, n);
                   std::vector<uint8_t> keep(static_cast<size_t>(n * n), 0);
                   EXPECT_EQ(bs.row_offsets[0], 0);
                   for (int64_t r = 0; r < n; ++r) {
                     EXPECT_EQ(bs.row_offsets[r + 1] - bs.row_offsets[r], kept) << "query block " << r;
                     for (int64_t i = bs.row_offsets[r]; i < bs.row_offsets[r + 1]; ++i) {
                       EXPECT_TRUE(bs.col_indices[i] >= 0 && bs.col_indices[i] < n);
                       if (i > bs.row_offsets[r]) EXPECT_LT(bs.col_indices[i - 1], bs.col_indices[i]);
                       keep[r * n + bs.col_indices[i]] = 1;
                     }
                   }
                   return Predicate([keep, n, b](int64_t q, int64_t k) { return keep[(q / b) * n + k / b] != 0; });
                 }});
  }
  return c;
}

TEST(masks_builtin, EveryPatternMatchesItsPredicate) {
  auto& p = BuiltinProvider::instance();
  std::set<std::string> seen;
  for (int64_t s : kLengths) {
    for (const auto& c : cases_for(s)) {
      for (uint64_t seed : kSeeds) {
        const std::string label = c.pattern + " " + c.params + " seqlen=" + std::to_string(s) + " seed=" + std::to_string(seed);
        auto g = p.generate(c.pattern, c.params, s, seed);
        ASSERT_EQ(g.status, LCA_OK) << label << ": " << g.error;
        const lca_mask& m = *g.mask;
        ASSERT_EQ(m.seqlen_q, s);
        ASSERT_EQ(m.seqlen_k, s);
        if (c.documents) {
          expect_packing(m);
        }
        if (HasFatalFailure()) return;
        const auto cover = coverage(m);
        expect_matches(m, cover, c.make(m, cover), label);
        if (HasFailure()) return;  // one readable failure, not thousands
        seen.insert(c.pattern);
      }
    }
  }
  EXPECT_EQ(seen.size(), 14u);
}

// Documents come from the named distribution: whole documents inside [LO, HI], the last one
// cut, never longer.
TEST(masks_builtin, UniformDocumentsStayInRange) {
  auto& p = BuiltinProvider::instance();
  auto g = p.generate("causal_document", R"({"dist":"uniform:50-90"})", 100000, 3);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  const lca_mask& m = *g.mask;
  expect_packing(m);
  for (int64_t d = 0; d < m.num_docs; ++d) {
    const int64_t len = m.doc_offsets[d + 1] - m.doc_offsets[d];
    EXPECT_LE(len, 90);
    if (d + 1 < m.num_docs) EXPECT_GE(len, 50);
  }
}

// The long form: documents of <dist> hold floor(2/5 x seqlen) tokens, documents of 8192..30719
// tokens the rest; one document of each share may be cut, and the two are interleaved.
struct LongSplit {
  int64_t short_tokens = 0, long_tokens = 0, short_docs = 0, long_docs = 0, between = 0;
  int64_t first_long = -1, last_long = -1, first_short = -1, last_short = -1;
};

LongSplit split_by_length(const lca_mask& m, int64_t short_max) {
  LongSplit r;
  for (int64_t d = 0; d < m.num_docs; ++d) {
    const int64_t len = m.doc_offsets[d + 1] - m.doc_offsets[d];
    EXPECT_LT(len, 30 * 1024) << "document " << d;
    if (len <= short_max) {
      r.short_tokens += len;
      ++r.short_docs;
      if (r.first_short < 0) r.first_short = d;
      r.last_short = d;
    } else {
      r.long_tokens += len;
      ++r.long_docs;
      if (len < 8 * 1024) ++r.between;
      if (r.first_long < 0) r.first_long = d;
      r.last_long = d;
    }
  }
  return r;
}

TEST(masks_builtin, LongDocumentsHoldSixtyPercentShuffled) {
  auto& p = BuiltinProvider::instance();
  const int64_t s = 1 << 22;
  const int64_t short_share = s * 2 / 5;
  for (const char* pattern : {"full_document", "causal_document"}) {
    auto g = p.generate(pattern, R"({"dist":"long:uniform:50-90"})", s, 5);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    const lca_mask& m = *g.mask;
    expect_packing(m);
    EXPECT_EQ(m.num_slices, m.num_docs);
    const LongSplit r = split_by_length(m, 90);
    // The cut short document stays short; the cut long one may fall to 90 tokens or fewer.
    EXPECT_LE(r.between, 1);
    EXPECT_GE(r.short_tokens, short_share);
    EXPECT_LE(r.short_tokens, short_share + 90);
    EXPECT_NEAR(static_cast<double>(r.long_tokens) / s, 0.6, 0.001);
    EXPECT_GT(r.long_docs, 100);
    EXPECT_GT(r.short_docs, 10000);
    // Shuffled: neither share is one contiguous run at either end.
    EXPECT_LT(r.first_long, r.last_short);
    EXPECT_LT(r.first_short, r.last_long);
  }
  // The real short distributions too, chosen by length as auto does.
  auto g = p.generate("causal_document", R"({"dist":"long:auto"})", 131072, 3);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  expect_packing(*g.mask);
}

TEST(masks_builtin, LongDocumentsAreTheSeeds) {
  auto& p = BuiltinProvider::instance();
  const auto docs = [&](uint64_t seed) {
    auto g = p.generate("causal_document", R"({"dist":"long:pile"})", 262144, seed);
    EXPECT_EQ(g.status, LCA_OK) << g.error;
    return std::vector<int64_t>(g.mask->doc_offsets, g.mask->doc_offsets + g.mask->num_docs + 1);
  };
  EXPECT_EQ(docs(9), docs(9));
  EXPECT_NE(docs(9), docs(10));
}

// Sequences shorter than the long minimum: the long share is one document of its whole size.
TEST(masks_builtin, LongShareShorterThanALongDocumentIsOneDocument) {
  auto& p = BuiltinProvider::instance();
  for (int64_t s : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{1000}, int64_t{13651}, int64_t{13653}}) {
    auto g = p.generate("full_document", R"({"dist":"long:uniform:1-1"})", s, 4);
    ASSERT_EQ(g.status, LCA_OK) << s << ": " << g.error;
    const lca_mask& m = *g.mask;
    expect_packing(m);
    const int64_t long_share = s - s * 2 / 5;
    EXPECT_EQ(m.num_docs, s * 2 / 5 + (long_share > 1 ? 1 : long_share)) << s;
    if (long_share > 1) {
      int64_t found = 0;
      for (int64_t d = 0; d < m.num_docs; ++d) found += m.doc_offsets[d + 1] - m.doc_offsets[d] == long_share;
      EXPECT_EQ(found, 1) << s;
    }
  }
}

// block_sparse is the paper's uniform block mask: every key block is kept by about the same share
// of query blocks (5 standard deviations of a fair draw), wherever it lies, for both block sizes.
TEST(masks_builtin, BlockSparseKeepsKeyBlocksUniformly) {
  auto& p = BuiltinProvider::instance();
  for (int b : {64, 128}) {
    const int64_t n = 1000;
    auto g = p.generate("block_sparse", "{" + js("block", b) + ",\"sparsity\":0.25}", n * b, 17);
    ASSERT_EQ(g.status, LCA_OK) << g.error;
    const lca_block_sparse& bs = *g.mask->block_sparse;
    ASSERT_EQ(bs.num_q_blocks, n);
    std::vector<int64_t> count(n, 0);
    for (int64_t i = 0; i < bs.row_offsets[n]; ++i) ++count[bs.col_indices[i]];
    const double expected = n * 0.25, sd = std::sqrt(n * 0.25 * 0.75);
    for (int64_t k = 0; k < n; ++k) EXPECT_NEAR(count[k], expected, 5 * sd) << "key block " << k << ", block " << b;
  }
}

TEST(masks_builtin, HistogramDocumentsStayInsideTheirBins) {
  auto& p = BuiltinProvider::instance();
  for (const char* dist : {"pile", "prolong64k", "prolong512k", "chatqa"}) {
    auto g = p.generate("full_document", std::string(R"({"dist":")") + dist + "\"}", 1 << 20, 11);
    ASSERT_EQ(g.status, LCA_OK) << dist << ": " << g.error;
    expect_packing(*g.mask);
    EXPECT_GT(g.mask->num_docs, 1) << dist;
    EXPECT_EQ(g.mask->num_slices, g.mask->num_docs) << dist;
  }
}

}  // namespace
}  // namespace lca::test
