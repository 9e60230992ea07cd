// fa4's reading of lca masks (plugins/kernels/fa4/fa4_mask.*), without torch or a GPU: every
// mask it takes is checked cell by cell against the slices (lca::slice_contains through
// dense_truth), on the 14 builtin patterns at odd lengths and on hand-built documents and
// windows; every mask it refuses says why, naming a row. Also fa4's manifest.
#include "random_slices.hpp"
#include "builtin_fixture.hpp"

#include "core/plugin/manifest.hpp"
#include "plugins/kernels/fa4/fa4_mask.hpp"

#include <lca/error.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>

namespace lca::test {
namespace {

using lca_fa4::Fa4Mask;
using Form = Fa4Mask::Form;

lca_mask mask_of(const std::vector<lca_slice>& slices, int64_t s) {
  return lca_mask{sizeof(lca_mask), s, s, static_cast<int64_t>(slices.size()), slices.data(), nullptr, 0, nullptr};
}

void expect_exact(const lca_mask& m, const Fa4Mask& f, const std::string& label) {
  SCOPED_TRACE(label);
  const std::vector<char> truth = dense_truth(m);
  int64_t wrong = 0;
  for (int64_t q = 0; q < m.seqlen_q; ++q)
    for (int64_t k = 0; k < m.seqlen_k; ++k)
      if (f.sees(q, k) != (truth[q * m.seqlen_k + k] != 0) && wrong++ < 5)
        ADD_FAILURE() << "cell (" << q << ", " << k << "): fa4 mask " << f.sees(q, k) << " (" << f.describe() << ")";
  EXPECT_EQ(wrong, 0);
  ASSERT_GE(f.cu_seqlens.size(), 2u);
  EXPECT_EQ(f.cu_seqlens.front(), 0);
  EXPECT_EQ(f.cu_seqlens.back(), m.seqlen_q);
  int64_t longest = 0;
  for (size_t d = 0; d + 1 < f.cu_seqlens.size(); ++d) {
    ASSERT_LT(f.cu_seqlens[d], f.cu_seqlens[d + 1]) << "empty document " << d;
    longest = std::max<int64_t>(longest, f.cu_seqlens[d + 1] - f.cu_seqlens[d]);
  }
  EXPECT_EQ(f.max_doc, longest);
}

// Refused with LCA_ERR_UNSUPPORTED and a message holding `needle`.
void expect_refused(const lca_mask& m, const std::string& needle) {
  try {
    const Fa4Mask f = lca_fa4::build_fa4_mask(m);
    ADD_FAILURE() << "taken as " << f.describe() << "; expected a refusal with '" << needle << "'";
  } catch (const lca::Error& e) {
    EXPECT_EQ(e.status(), LCA_ERR_UNSUPPORTED) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("FA4 takes one range of keys a row"), std::string::npos) << e.what();
  }
}

// The builtin patterns FA4 expresses, with the form each must come out as; the other seven
// are refused. The manifest lists exactly these.
const std::map<std::string, std::pair<Form, bool>>& taken() {  // form, varlen
  static const std::map<std::string, std::pair<Form, bool>> t = {
      {"full", {Form::full, false}},
      {"causal", {Form::causal, false}},
      {"full_document", {Form::full, true}},
      {"causal_document", {Form::causal, true}},
      {"sliding_window", {Form::window, false}},
      {"sliding_window_causal", {Form::window, false}},
      {"sliding_window_document", {Form::window, true}}};
  return t;
}

TEST(Fa4Mask, BuiltinPatternsTakenExactlyAndTheOthersRefusedWithAReason) {
  auto& p = BuiltinProvider::instance();
  // Several documents for every document pattern: with one, shared_question is plain causal
  // (and is rightly taken as such).
  auto params_of = [](const std::string& name, const std::string& params) {
    return name == "shared_question" || name == "causal_blockwise" ? R"({"dist":"uniform:30-300"})" : params;
  };
  for (int64_t seqlen : {1000, 1537}) {
    for (const auto& [name, params] : lca::test::patterns_near_1k()) {
      auto g = p.generate(name, params_of(name, params), seqlen, 7);
      ASSERT_EQ(g.status, LCA_OK) << name << ": " << g.error;
      const std::string label = name + " " + std::to_string(seqlen);
      const auto want = taken().find(name);
      try {
        const Fa4Mask f = lca_fa4::build_fa4_mask(*g.mask);
        std::printf("[ fa4 ] %-24s %5lld: %s\n", name.c_str(), static_cast<long long>(seqlen), f.describe().c_str());
        expect_exact(*g.mask, f, label);
        ASSERT_NE(want, taken().end()) << label << " taken as " << f.describe();
        EXPECT_EQ(f.form, want->second.first) << label;
        EXPECT_EQ(f.varlen(), want->second.second) << label;
      } catch (const lca::Error& e) {
        std::printf("[ fa4 ] %-24s %5lld: X %s\n", name.c_str(), static_cast<long long>(seqlen), e.what());
        EXPECT_EQ(want, taken().end()) << label << " refused: " << e.what();
        EXPECT_EQ(e.status(), LCA_ERR_UNSUPPORTED) << label;
        EXPECT_NE(std::string(e.what()).find("FA4 takes one range of keys a row"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(Fa4Mask, WindowsAndDocumentsFromTheBuiltinParameters) {
  auto& p = BuiltinProvider::instance();
  auto form_of = [&](const std::string& name, const std::string& params, int64_t s) {
    auto g = p.generate(name, params, s, 3);
    EXPECT_EQ(g.status, LCA_OK) << g.error;
    return lca_fa4::build_fa4_mask(*g.mask);
  };
  const Fa4Mask band = form_of("sliding_window", R"({"window":100})", 1000);
  EXPECT_EQ(band.window_left, 100);
  EXPECT_EQ(band.window_right, 100);
  const Fa4Mask causal_band = form_of("sliding_window_causal", R"({"window":70})", 999);
  EXPECT_EQ(causal_band.window_left, 70);
  EXPECT_EQ(causal_band.window_right, 0);
  // The documents are the provider's, whether or not FA4 reads doc_offsets.
  auto g = p.generate("causal_document", R"({"dist":"uniform:1-300"})", 1537, 5);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  const Fa4Mask docs = lca_fa4::build_fa4_mask(*g.mask);
  ASSERT_NE(g.mask->doc_offsets, nullptr);
  ASSERT_EQ(static_cast<int64_t>(docs.cu_seqlens.size()), g.mask->num_docs + 1);
  for (int64_t d = 0; d <= g.mask->num_docs; ++d) EXPECT_EQ(docs.cu_seqlens[d], g.mask->doc_offsets[d]) << d;
  // A window wider than every document is full attention in each.
  const Fa4Mask wide = form_of("sliding_window_document", R"({"window":500,"dist":"uniform:20-400"})", 1200);
  EXPECT_EQ(wide.form, Form::full);
  EXPECT_TRUE(wide.varlen());
}

// Hand-built: documents of odd lengths with an asymmetric window, as slices of every type.
TEST(Fa4Mask, HandBuiltDocumentWindowsAreExact) {
  const std::vector<int64_t> lengths = {1, 37, 300, 8, 129, 64};
  for (auto [left, right] : std::vector<std::pair<int64_t, int64_t>>{{5, 3}, {0, 9}, {40, 0}, {0, 0}, {1000, 2}}) {
    std::vector<lca_slice> slices;
    int64_t d0 = 0;
    for (int64_t len : lengths) {
      // One FULL slice per row: [max(d0, q - left), min(d1, q + right + 1)).
      for (int64_t q = d0; q < d0 + len; ++q)
        slices.push_back(lca_slice{q, q + 1, std::max(d0, q - left), std::min(d0 + len, q + right + 1), LCA_SLICE_FULL, 0});
      d0 += len;
    }
    const lca_mask m = mask_of(slices, d0);
    const std::string label = "window [" + std::to_string(left) + ", " + std::to_string(right) + "]";
    const Fa4Mask f = lca_fa4::build_fa4_mask(m);
    std::printf("[ fa4 ] %s: %s\n", label.c_str(), f.describe().c_str());
    expect_exact(m, f, label);
  }
}

TEST(Fa4Mask, CausalAsSeveralSlicesIsCausal) {
  const std::vector<lca_slice> slices = {{0, 100, 0, 100, LCA_SLICE_CAUSAL, 0},
                                         {100, 300, 0, 100, LCA_SLICE_FULL, 0},
                                         {100, 300, 100, 300, LCA_SLICE_CAUSAL, 0}};
  const Fa4Mask f = lca_fa4::build_fa4_mask(mask_of(slices, 300));
  EXPECT_EQ(f.form, Form::causal);
  EXPECT_FALSE(f.varlen());
  expect_exact(mask_of(slices, 300), f, "causal in three slices");
}

TEST(Fa4Mask, RefusalsNameTheRow) {
  // Row 100 sees [0, 10) and [100, 101): two ranges.
  std::vector<lca_slice> two = {{0, 10, 0, 10, LCA_SLICE_CAUSAL, 0}, {10, 300, 0, 10, LCA_SLICE_FULL, 0},
                                {10, 300, 100, 300, LCA_SLICE_CAUSAL, 0}};
  expect_refused(mask_of(two, 300), "query row 100 sees 2 separate key ranges");
  // Five ranges: row_intervals stops early; the row is still named.
  std::vector<lca_slice> five;
  for (int64_t k = 0; k < 100; k += 20) five.push_back(lca_slice{0, 1, k, k + 1, LCA_SLICE_FULL, 0});
  expect_refused(mask_of(five, 100), "query row 0 sees 5 separate key ranges");
  // Rows 0..9 see nothing.
  expect_refused(mask_of({{10, 100, 0, 100, LCA_SLICE_CAUSAL, 0}}, 100), "query row 0 sees no key");
  // Strictly below the diagonal from row 1 on: row 1 sees key 0 alone.
  expect_refused(mask_of({{0, 1, 0, 1, LCA_SLICE_FULL, 0}, {1, 100, 0, 99, LCA_SLICE_CAUSAL, 0}}, 100),
                 "query row 1 sees keys [0, 1), which leave out its own position");
  // On and above the diagonal (INV_CAUSAL) is a window unbounded to the right: taken.
  const std::vector<lca_slice> upper = {{0, 100, 0, 100, LCA_SLICE_INV_CAUSAL, 0}};
  const Fa4Mask f = lca_fa4::build_fa4_mask(mask_of(upper, 100));
  EXPECT_EQ(f.form, Form::window);
  EXPECT_EQ(f.window_left, 0);
  EXPECT_EQ(f.window_right, -1);
  expect_exact(mask_of(upper, 100), f, "inv_causal");
  // Windows of two widths.
  std::vector<lca_slice> mixed;
  for (int64_t q = 0; q < 200; ++q)
    mixed.push_back(lca_slice{q, q + 1, std::max<int64_t>(0, q - (q < 100 ? 5 : 7)), q + 1, LCA_SLICE_FULL, 0});
  expect_refused(mask_of(mixed, 200), "need left windows of 5 and 7 keys");
  // Cross attention.
  const std::vector<lca_slice> cross = {{0, 10, 0, 20, LCA_SLICE_FULL, 0}};
  expect_refused(lca_mask{sizeof(lca_mask), 10, 20, 1, cross.data(), nullptr, 0, nullptr}, "differs from seqlen_k");
}

TEST(Fa4Mask, BlockSparseFormIsRefused) {
  auto g = BuiltinProvider::instance().generate("block_sparse", R"({"sparsity":0.3})", 1000, 7);
  ASSERT_EQ(g.status, LCA_OK) << g.error;
  ASSERT_NE(g.mask->block_sparse, nullptr);
  expect_refused(*g.mask, "a block-sparse (dynamic) mask");
}

TEST(Fa4Manifest, ListsTheMasksItTakes) {
  const std::string root = LCA_TEST_SOURCE_DIR;
  std::ifstream schema_file(root + "/manifests/manifest.schema.json");
  const nlohmann::json schema = nlohmann::json::parse(schema_file);
  const auto m = core::parse_manifest(root + "/manifests/plugins/fa4.json", schema);
  EXPECT_EQ(m.name, "fa4");
  EXPECT_EQ(m.library, "liblca_fa4.so");
  EXPECT_EQ(m.kernel.device, "cuda");
  EXPECT_TRUE(m.kernel.backward);
  EXPECT_TRUE(m.kernel.gqa);
  EXPECT_TRUE(m.kernel.supports_dtype("bf16"));
  EXPECT_TRUE(m.kernel.supports_head_dim(128));
  EXPECT_FALSE(m.kernel.any_mask);
  std::set<std::string> names;
  for (const auto& [name, unused] : taken()) names.insert(name);
  EXPECT_EQ(std::set<std::string>(m.kernel.masks.begin(), m.kernel.masks.end()), names);
}

}  // namespace
}  // namespace lca::test
