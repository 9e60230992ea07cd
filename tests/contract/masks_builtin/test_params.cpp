// The builtin provider's contract beyond the predicates: describe() against the manifest,
// seeds, refusal of bad parameters, and multi-million-token generation.
#include "builtin_fixture.hpp"

#include <lca/checked.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>

namespace lca::test {
namespace {

TEST(masks_builtin, DescribeListsTheFourteenPatterns) {
  auto& p = BuiltinProvider::instance();
  const auto j = nlohmann::json::parse(p.vt().describe(p.provider()));
  std::vector<std::string> names;
  for (const auto& x : j) names.push_back(x.at("name").get<std::string>());
  const std::vector<std::string> want{"full", "causal", "full_document", "causal_document", "sliding_window",
                                      "sliding_window_causal", "sliding_window_document", "shared_question",
                                      "causal_blockwise", "prefix_lm_causal", "prefix_lm_document",
                                      "global_sliding", "block_causal_document", "block_sparse"};
  EXPECT_EQ(names, want);
  for (const auto& x : j) {
    const auto cat = x.at("category").get<std::string>();
    EXPECT_TRUE(cat == "static_regular" || cat == "static_heterogeneous" || cat == "dynamic") << cat;
  }
}

TEST(masks_builtin, ManifestAgreesWithDescribe) {
  std::ifstream in(std::string(LCA_TEST_SOURCE_DIR) + "/manifests/plugins/builtin.json");
  ASSERT_TRUE(in) << "manifests/plugins/builtin.json missing";
  const auto manifest = nlohmann::json::parse(in);
  EXPECT_EQ(manifest.at("name"), "builtin");
  EXPECT_EQ(manifest.at("kind"), "mask_provider");
  EXPECT_EQ(manifest.at("library"), "liblca_builtin.so");
  auto& p = BuiltinProvider::instance();
  EXPECT_EQ(manifest.at("version"), std::string(PluginHandle("builtin").descriptor().version));
  EXPECT_EQ(manifest.at("abi"), "1.0");
  const auto described = nlohmann::json::parse(p.vt().describe(p.provider()));
  EXPECT_EQ(manifest.at("patterns"), described) << "regenerate the manifest's patterns from describe()";
}

bool same_mask(const lca_mask& a, const lca_mask& b) {
  if (a.num_slices != b.num_slices || a.num_docs != b.num_docs) return false;
  for (int64_t i = 0; i < a.num_slices; ++i) {
    const auto &x = a.slices[i], &y = b.slices[i];
    if (x.q_begin != y.q_begin || x.q_end != y.q_end || x.k_begin != y.k_begin || x.k_end != y.k_end || x.type != y.type) return false;
  }
  for (int64_t d = 0; d <= a.num_docs && a.num_docs > 0; ++d)
    if (a.doc_offsets[d] != b.doc_offsets[d]) return false;
  if ((a.block_sparse == nullptr) != (b.block_sparse == nullptr)) return false;
  if (a.block_sparse) {
    const auto &x = *a.block_sparse, &y = *b.block_sparse;
    if (x.num_q_blocks != y.num_q_blocks) return false;
    for (int64_t i = 0; i <= x.num_q_blocks; ++i)
      if (x.row_offsets[i] != y.row_offsets[i]) return false;
    for (int64_t i = 0; i < x.row_offsets[x.num_q_blocks]; ++i)
      if (x.col_indices[i] != y.col_indices[i]) return false;
  }
  return true;
}

TEST(masks_builtin, SameSeedSameMaskOtherSeedOtherDocuments) {
  auto& p = BuiltinProvider::instance();
  const std::vector<std::pair<std::string, std::string>> randomised{
      {"full_document", "{}"}, {"causal_document", R"({"dist":"chatqa"})"},
      {"sliding_window_document", R"({"window":64})"}, {"shared_question", "{}"}, {"causal_blockwise", "{}"},
      {"prefix_lm_causal", "{}"}, {"prefix_lm_document", "{}"}, {"block_causal_document", R"({"block":64})"},
      {"block_sparse", R"({"sparsity":0.25})"}};
  for (const auto& [name, params] : randomised) {
    auto a = p.generate(name, params, 8192, 42);
    auto b = p.generate(name, params, 8192, 42);
    auto c = p.generate(name, params, 8192, 43);
    ASSERT_EQ(a.status, LCA_OK) << name << ": " << a.error;
    ASSERT_EQ(c.status, LCA_OK) << name << ": " << c.error;
    EXPECT_TRUE(same_mask(*a.mask, *b.mask)) << name << ": same seed, different mask";
    EXPECT_FALSE(same_mask(*a.mask, *c.mask)) << name << ": seeds 42 and 43 gave the same mask";
  }
}

// Pins the generator's output, so a change of PRNG or mapping (or a platform that maps
// differently) shows up here and not as silently different benchmark masks.
TEST(masks_builtin, SeedGivesPinnedDocuments) {
  auto& p = BuiltinProvider::instance();
  auto g = p.generate("causal_document", R"({"dist":"uniform:1-1000"})", 5000, 2024);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  std::vector<int64_t> cu(g.mask->doc_offsets, g.mask->doc_offsets + g.mask->num_docs + 1);
  EXPECT_EQ(cu, (std::vector<int64_t>{0, 783, 943, 1188, 1446, 1497, 2429, 2796, 2986, 3639, 4041, 4345, 4764, 4767, 5000})) << ::testing::PrintToString(cu);
}

struct Bad {
  std::string pattern, params;
  int64_t seqlen;
  std::vector<std::string> must_mention;
};

// Each request is refused as invalid, in one line that mentions each of its words.
void expect_refused(BuiltinProvider& p, const std::vector<Bad>& bad) {
  for (const auto& b : bad) {
    auto g = p.generate(b.pattern, b.params, b.seqlen, 1);
    EXPECT_EQ(g.status, LCA_ERR_INVALID_ARGUMENT) << b.pattern << " " << b.params;
    EXPECT_EQ(g.error.find('\n'), std::string::npos) << g.error;
    for (const auto& word : b.must_mention)
      EXPECT_NE(g.error.find(word), std::string::npos) << "'" << g.error << "' does not mention '" << word << "'";
  }
}

TEST(masks_builtin, BadParametersAreRefusedWithAClearMessage) {
  auto& p = BuiltinProvider::instance();
  const std::vector<Bad> bad{
      {"sliding_window", R"({"window":5000})", 4096, {"window", "5000", "4096"}},
      {"sliding_window_causal", R"({"window":-1})", 4096, {"window", "-1"}},
      {"sliding_window_document", R"({"window":100})", 64, {"window", "100"}},
      {"global_sliding", R"({"window":65})", 64, {"window", "65"}},
      {"global_sliding", R"({"window":4,"global_tokens":65})", 64, {"global_tokens", "65"}},
      {"block_sparse", R"({"sparsity":0})", 1024, {"sparsity", "0", "0 < sparsity <= 1"}},
      {"block_sparse", R"({"sparsity":1.5})", 1024, {"sparsity", "1.5"}},
      {"block_sparse", R"({"sparsity":-0.25})", 1024, {"sparsity", "-0.25"}},
      {"block_sparse", R"({"block":100})", 1024, {"block", "100", "64 or 128"}},
      {"causal_document", R"({"dist":"wikipedia"})", 1024, {"dist", "wikipedia", "pile"}},
      {"full_document", R"({"dist":"uniform:9-3"})", 1024, {"dist", "uniform:9-3"}},
      {"causal_document", R"({"dist":"long:wikipedia"})", 1024, {"dist", "wikipedia", "long:"}},
      {"full_document", R"({"dist":"long:uniform:9-3"})", 1024, {"dist", "uniform:9-3"}},
      {"full_document", R"({"dist":"long:"})", 1024, {"dist", "long:", "malformed"}},
      {"causal_document", R"({"dist":"long:long:pile"})", 1024, {"dist", "long:long:pile", "malformed"}},
      {"causal_document", R"({"dist":"long"})", 1024, {"dist", "long", "not a known"}},
      {"causal", R"({"window":8})", 1024, {"window", "unknown"}},
      {"full", "{}", 0, {"seqlen", "0"}},
      {"causal_document", "{}", -5, {"seqlen", "-5"}},
      {"prefix_lm_causal", R"({"prefix":2000})", 1024, {"prefix", "2000"}},
      {"prefix_lm_document", R"({"prefix":0})", 1024, {"prefix", "0"}},
      {"block_causal_document", R"({"block":0})", 1024, {"block", "0"}},
      {"block_causal_document", R"({"max_blocks":0})", 1024, {"max_blocks", "0"}},
      {"sliding_window", R"({"window":"wide"})", 1024, {"window", "wide"}},
      {"sliding_window", "[1,2]", 1024, {"params_json"}},
      {"no_such_pattern", "{}", 1024, {"no_such_pattern", "causal_document"}},
  };
  expect_refused(p, bad);
}

// Numbers past 64 bits, or past what a parameter can mean, are refused by name: never wrapped
// (2^64 - 1 as a JSON unsigned read as -1 is prefix_lm's "draw it"; HI + 1 past 2^63 - 1 wraps).
TEST(masks_builtin, NumbersOutOfRangeAreRefusedNotWrapped) {
  auto& p = BuiltinProvider::instance();
  const std::string max = std::to_string(lca::max_seqlen);
  const std::vector<Bad> bad{
      {"causal_document", R"({"dist":"uniform:1-9223372036854775807"})", 1024, {"dist", "9223372036854775807", max}},
      {"causal_document", R"({"dist":"uniform:1-99999999999999999999"})", 1024, {"dist", max}},
      {"full_document", R"({"dist":"uniform:0-5"})", 1024, {"dist", "uniform:0-5"}},
      {"full_document", R"({"dist":"uniform:+1-5"})", 1024, {"dist", "malformed"}},
      {"full_document", R"({"dist":"uniform: 1-5"})", 1024, {"dist", "malformed"}},
      {"prefix_lm_causal", R"({"prefix":18446744073709551615})", 1024, {"prefix", "18446744073709551615", "range"}},
      {"sliding_window", R"({"window":9223372036854775808})", 1024, {"window", "range"}},
      {"sliding_window", R"({"window":"99999999999999999999"})", 1024, {"window", "range"}},
      {"sliding_window", R"({"window":1e300})", 1024, {"window", "range"}},
      {"causal", "{}", int64_t{1} << 40, {"seqlen", "1099511627776", max}},
      {"full", "{}", int64_t{1} << 62, {"seqlen", max}},
      {"block_sparse", "{}", std::numeric_limits<int64_t>::max(), {"seqlen", max}},
  };
  expect_refused(p, bad);
  // The edges themselves are accepted.
  auto edge = p.generate("causal_document", "{\"dist\":\"uniform:1-" + max + "\"}", 4096, 1);
  ASSERT_EQ(edge.status, LCA_OK) << edge.error;
  EXPECT_EQ(edge.mask->num_docs, 1);  // one document, cut at the sequence's end
  auto longest = p.generate("causal", "{}", lca::max_seqlen, 1);
  ASSERT_EQ(longest.status, LCA_OK) << longest.error;
  EXPECT_EQ(longest.mask->num_slices, 1);
}

TEST(masks_builtin, FourMillionTokensQuickly) {
  auto& p = BuiltinProvider::instance();
  const int64_t s = int64_t{4} << 20;
  const auto t0 = std::chrono::steady_clock::now();
  auto sw = p.generate("sliding_window", R"({"window":4096})", s, 1);
  auto cd = p.generate("causal_document", R"({"dist":"prolong512k"})", s, 1);
  auto bc = p.generate("block_causal_document", "{}", s, 1);
  auto gs = p.generate("global_sliding", "{}", s, 1);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(sw.status, LCA_OK) << sw.error;
  ASSERT_EQ(cd.status, LCA_OK) << cd.error;
  ASSERT_EQ(bc.status, LCA_OK) << bc.error;
  ASSERT_EQ(gs.status, LCA_OK) << gs.error;
  EXPECT_LT(secs, 5.0);
  EXPECT_LE(sw.mask->num_slices, 3);
  expect_packing(*cd.mask);
  expect_packing(*bc.mask);
  EXPECT_EQ(bc.mask->num_slices, s / 1024);
  // Sliding-window area in closed form, row by row.
  int64_t want = 0, got = 0;
  for (int64_t q = 0; q < s; ++q) want += std::min(s - 1, q + 4096) - std::max<int64_t>(0, q - 4096) + 1;
  for (int64_t i = 0; i < sw.mask->num_slices; ++i) got += lca::slice_area(sw.mask->slices[i]);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace lca::test
