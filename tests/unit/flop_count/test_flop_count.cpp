// FLOPs count only the unmasked area: slice areas in closed form and by the row ranges agree
// with brute force over every (q, k) cell, for every slice type and shape; mask specs parse
// and print back the same.
#include "core/mask/mask_source.hpp"
#include "core/run/runner.hpp"
#include "fixture_folder.hpp"

#include <lca/types.hpp>

#include <gtest/gtest.h>

#include <array>

namespace lca::test {
namespace {

lca_slice make(int64_t q0, int64_t q1, int64_t k0, int64_t k1, int32_t type) { return {q0, q1, k0, k1, type, 0}; }

// Cells of [0, extent)^2 covered by the slices, one by one.
int64_t brute_area(const std::vector<lca_slice>& slices, int64_t extent) {
  int64_t n = 0;
  for (int64_t q = 0; q < extent; ++q)
    for (int64_t k = 0; k < extent; ++k)
      for (const auto& s : slices) n += lca::slice_contains(s, q, k);
  return n;
}

lca_mask view(const std::vector<lca_slice>& slices, int64_t s) {
  return lca_mask{sizeof(lca_mask), s, s, static_cast<int64_t>(slices.size()), slices.data(), nullptr, 0, nullptr};
}

TEST(AttentionFlops, CountsTheAreaOnly) {
  EXPECT_DOUBLE_EQ(core::attention_flops(100, 64, 8, false), 4.0 * 100 * 64 * 8);
  EXPECT_DOUBLE_EQ(core::attention_flops(100, 64, 8, true), 2.5 * 4.0 * 100 * 64 * 8);
  EXPECT_DOUBLE_EQ(core::attention_flops(0, 64, 8, true), 0.0);
  // A causal 64K x 64K mask at 64 heads of 128: about half the dense count, no int overflow.
  const int64_t s = 65536;
  const int64_t causal = s * (s + 1) / 2;
  EXPECT_DOUBLE_EQ(core::attention_flops(causal, 128, 64, false), 4.0 * double(causal) * 128 * 64);
}

TEST(SliceArea, EveryTypeAndShapeMatchesBruteForce) {
  const int32_t types[] = {LCA_SLICE_FULL, LCA_SLICE_CAUSAL, LCA_SLICE_INV_CAUSAL, LCA_SLICE_BI_CAUSAL};
  // (q range, k range) boxes: square, wide (Lk > Lq), tall (Lk < Lq), offset, 1 x 1, empty.
  const std::vector<std::array<int64_t, 4>> boxes = {{0, 16, 0, 16}, {0, 5, 0, 13}, {0, 13, 0, 5},  {3, 11, 7, 20},
                                                     {20, 29, 2, 4}, {4, 5, 9, 10}, {6, 6, 0, 10}, {0, 10, 8, 8},
                                                     {9, 3, 0, 10}};
  for (int32_t type : types)
    for (const auto& b : boxes) {
      const lca_slice s = make(b[0], b[1], b[2], b[3], type);
      SCOPED_TRACE(std::string(lca::slice_type_name(type)) + " q[" + std::to_string(b[0]) + "," +
                   std::to_string(b[1]) + ") k[" + std::to_string(b[2]) + "," + std::to_string(b[3]) + ")");
      const int64_t brute = brute_area({s}, 32);
      EXPECT_EQ(lca::slice_area(s), brute);
      const lca_slice one[] = {s};
      EXPECT_EQ(core::mask_area(lca_mask{sizeof(lca_mask), 32, 32, 1, one, nullptr, 0, nullptr}), brute);
      // Row ranges say the same as the predicate, row by row.
      for (int64_t q = 0; q < 32; ++q) {
        int64_t first, last;
        lca::slice_row_range(s, q, &first, &last);
        int64_t row = 0;
        for (int64_t k = 0; k < 32; ++k) {
          const bool inside = lca::slice_contains(s, q, k);
          row += inside;
          if (inside) EXPECT_TRUE(k >= first && k < last) << "q " << q << " k " << k;
        }
        EXPECT_EQ(std::max<int64_t>(last - first, 0), row) << "q " << q;
      }
    }
}

TEST(SliceArea, ClosedForms) {
  EXPECT_EQ(lca::slice_area(make(0, 100, 0, 100, LCA_SLICE_FULL)), 10000);
  EXPECT_EQ(lca::slice_area(make(0, 100, 0, 100, LCA_SLICE_CAUSAL)), 5050);
  EXPECT_EQ(lca::slice_area(make(0, 100, 0, 100, LCA_SLICE_INV_CAUSAL)), 5050);
  EXPECT_EQ(lca::slice_area(make(0, 100, 0, 100, LCA_SLICE_BI_CAUSAL)), 100);  // the diagonal
  // Bottom-right aligned causal, 10 queries over 30 keys: row i sees 21 + i keys.
  EXPECT_EQ(lca::slice_area(make(20, 30, 0, 30, LCA_SLICE_CAUSAL)), 10 * 21 + 45);
  // A band: 10 queries, 14 keys, each row sees 5.
  EXPECT_EQ(lca::slice_area(make(0, 10, 0, 14, LCA_SLICE_BI_CAUSAL)), 50);
  // Causal with fewer keys than queries: the first Lq - Lk rows see nothing.
  EXPECT_EQ(lca::slice_area(make(0, 10, 0, 4, LCA_SLICE_CAUSAL)), 10);
  EXPECT_EQ(lca::slice_area(make(0, 0, 0, 10, LCA_SLICE_FULL)), 0);
}

TEST(MaskArea, SeveralSlicesMatchBruteForce) {
  // Packed documents of 5, 7 and 4 tokens: causal inside each, plus the last one sees all earlier
  // tokens fully (causal_blockwise-like), plus an inverted-causal box and a band elsewhere.
  const std::vector<lca_slice> docs = {make(0, 5, 0, 5, LCA_SLICE_CAUSAL), make(5, 12, 5, 12, LCA_SLICE_CAUSAL),
                                       make(12, 16, 12, 16, LCA_SLICE_CAUSAL), make(12, 16, 0, 12, LCA_SLICE_FULL),
                                       make(16, 24, 16, 24, LCA_SLICE_INV_CAUSAL),
                                       make(24, 30, 16, 30, LCA_SLICE_BI_CAUSAL)};
  EXPECT_EQ(core::mask_area(view(docs, 30)), brute_area(docs, 30));
  EXPECT_EQ(core::mask_area(view({}, 30)), 0);
}

TEST(MaskArea, BuiltinPatternsThroughTheProvider) {
  const auto reg = core::Registry::load(main_plugin_dir());
  core::MaskSource masks(reg);
  const int64_t s = 96;
  auto full = masks.generate(core::MaskSpec::parse("full"), s, 1);
  EXPECT_EQ(full->area(), s * s);
  auto causal = masks.generate(core::MaskSpec::parse("causal"), s, 1);
  EXPECT_EQ(causal->area(), s * (s + 1) / 2);
  // Every builtin pattern: the area the host counts (and FLOPs are computed from) is the
  // number of visible cells, cell by cell.
  for (const auto& e : masks.patterns()) {
    SCOPED_TRACE(e.info.name);
    auto gm = masks.generate(core::MaskSpec{e.info.name, nlohmann::json::object()}, s, 7);
    const lca_mask& m = gm->mask();
    std::vector<lca_slice> slices(m.slices, m.slices + m.num_slices);
    EXPECT_EQ(gm->area(), brute_area(slices, s));
    EXPECT_GT(gm->area(), 0);
    EXPECT_LE(gm->area(), s * s);
  }
  // Cached: the same spec, length and seed give the same object.
  EXPECT_EQ(masks.generate(core::MaskSpec::parse("causal"), s, 1), causal);
  EXPECT_NE(masks.generate(core::MaskSpec::parse("causal"), s, 2), causal);
}

TEST(MaskArea, ProviderErrorsAreMessages) {
  const auto reg = core::Registry::load(main_plugin_dir());
  core::MaskSource masks(reg);
  try {
    masks.generate(core::MaskSpec::parse("no_such_pattern"), 64, 1);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'no_such_pattern'"), std::string::npos) << e.what();
  }
  try {
    masks.generate(core::MaskSpec::parse("sliding_window:window=-3"), 64, 1);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding_window:window=-3"), std::string::npos) << e.what();
  }
}

TEST(MaskSpec, Parse) {
  auto m = core::MaskSpec::parse("causal");
  EXPECT_EQ(m.pattern, "causal");
  EXPECT_TRUE(m.params.empty());
  m = core::MaskSpec::parse("sliding_window:window=4096");
  EXPECT_EQ(m.pattern, "sliding_window");
  EXPECT_TRUE(m.params["window"].is_number_integer());
  EXPECT_EQ(m.params["window"], 4096);
  m = core::MaskSpec::parse("block_sparse:sparsity=0.25,block=64");
  EXPECT_TRUE(m.params["sparsity"].is_number_float());
  EXPECT_DOUBLE_EQ(m.params["sparsity"].get<double>(), 0.25);
  EXPECT_EQ(m.params["block"], 64);
  m = core::MaskSpec::parse("causal_document:dist=uniform:10-20");
  EXPECT_EQ(m.params["dist"], "uniform:10-20") << "only the first colon separates the name";
  m = core::MaskSpec::parse("prefix_lm_causal:prefix=-1");
  EXPECT_EQ(m.params["prefix"], -1);
  m = core::MaskSpec::parse("x:a=1,,b=2,");  // empty items are ignored
  EXPECT_EQ(m.params.size(), 2u);
  EXPECT_THROW(core::MaskSpec::parse(""), std::invalid_argument);
  EXPECT_THROW(core::MaskSpec::parse(":window=3"), std::invalid_argument);
  EXPECT_THROW(core::MaskSpec::parse("sliding_window:window"), std::invalid_argument);
  EXPECT_THROW(core::MaskSpec::parse("sliding_window:=3"), std::invalid_argument);
}

// Only finite numbers become numbers: nan and inf would travel as JSON null and be refused as
// "null"; as text they are refused by what the user wrote. Text that is not UTF-8 cannot travel
// as JSON at all and is refused here.
TEST(MaskSpec, NonFiniteNumbersStayTextAndBadUtf8IsRefused) {
  for (const char* v : {"nan", "inf", "-inf", "1e999"}) {
    const auto m = core::MaskSpec::parse(std::string("block_sparse:sparsity=") + v);
    EXPECT_TRUE(m.params["sparsity"].is_string()) << v << ": " << m.params.dump();
  }
  EXPECT_TRUE(core::MaskSpec::parse("sliding_window:window=99999999999999999999").params["window"].is_string());
  EXPECT_THROW(core::MaskSpec::parse("causal_document:dist=\xff\xfe"), std::invalid_argument);
  EXPECT_THROW(core::MaskSpec::parse("caus\xc3(al"), std::invalid_argument);
}

TEST(MaskSpec, LabelRoundTrip) {
  for (const char* text : {"causal", "sliding_window:window=4096", "block_sparse:block=64,sparsity=0.25",
                           "causal_document:dist=pile", "global_sliding:global_tokens=-1,window=8"}) {
    const auto m = core::MaskSpec::parse(text);
    EXPECT_EQ(m.label(), text);
    const auto again = core::MaskSpec::parse(m.label());
    EXPECT_EQ(again.pattern, m.pattern);
    EXPECT_EQ(again.params, m.params);
  }
  // Parameters print in key order, whatever order they were given in.
  EXPECT_EQ(core::MaskSpec::parse("x:b=2,a=1").label(), "x:a=1,b=2");
}

}  // namespace
}  // namespace lca::test
