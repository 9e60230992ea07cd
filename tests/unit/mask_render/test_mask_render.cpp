// core/mask/render: exact ASCII of tiny masks, block shading of long ones, stats, PNG bytes.
#include "core/mask/render.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace {

lca_mask mask_of(const std::vector<lca_slice>& slices, int64_t s) {
  return lca_mask{sizeof(lca_mask), s, s, static_cast<int64_t>(slices.size()), slices.data(), nullptr, 0, nullptr};
}

TEST(masks_render, TinyCausalIsExact) {
  const std::vector<lca_slice> slices{{0, 4, 0, 4, LCA_SLICE_CAUSAL, 0}};
  EXPECT_EQ(lca::core::render_ascii(mask_of(slices, 4)), "#...\n##..\n###.\n####\n");
}

TEST(masks_render, TinySlicesOfEveryType) {
  // Two documents of 3: FULL then INV_CAUSAL; plus a BI_CAUSAL band in a 2 x 3 box.
  const std::vector<lca_slice> slices{{0, 3, 0, 3, LCA_SLICE_FULL, 0}, {3, 6, 3, 6, LCA_SLICE_INV_CAUSAL, 0}};
  EXPECT_EQ(lca::core::render_ascii(mask_of(slices, 6)),
            "###...\n###...\n###...\n...###\n....##\n.....#\n");
  const std::vector<lca_slice> band{{1, 3, 0, 3, LCA_SLICE_BI_CAUSAL, 0}};
  EXPECT_EQ(lca::core::render_ascii(mask_of(band, 3)), "...\n##.\n.##\n");
}

TEST(masks_render, LongMasksAreBlockAveraged) {
  const int64_t s = int64_t{4} << 20;  // 4M tokens, one slice: must not touch S x S cells
  const std::vector<lca_slice> slices{{0, s, 0, s, LCA_SLICE_CAUSAL, 0}};
  const std::string art = lca::core::render_ascii(mask_of(slices, s), 8);
  ASSERT_EQ(art.size(), 8u * 9u);
  for (int r = 0; r < 8; ++r) {
    const std::string row = art.substr(r * 9, 9);
    for (int c = 0; c < 8; ++c) {
      const char want = c < r ? '#' : c == r ? ':' : ' ';
      EXPECT_EQ(row[c], want) << "row " << r << " col " << c << "\n" << art;
    }
    EXPECT_EQ(row[8], '\n');
  }
}

TEST(masks_render, StatsAreExact) {
  const int64_t s = 1000;
  const std::vector<lca_slice> slices{{0, s, 0, s, LCA_SLICE_CAUSAL, 0}};
  const auto st = lca::core::mask_stats(mask_of(slices, s));
  EXPECT_EQ(st.num_slices, 1);
  EXPECT_EQ(st.area, s * (s + 1) / 2);
  EXPECT_DOUBLE_EQ(st.density, static_cast<double>(s * (s + 1) / 2) / (s * s));
}

uint32_t be32(const std::vector<unsigned char>& b, size_t at) {
  return (uint32_t(b[at]) << 24) | (uint32_t(b[at + 1]) << 16) | (uint32_t(b[at + 2]) << 8) | b[at + 3];
}

TEST(masks_render, PngHasSignatureAndSize) {
  const auto dir = std::filesystem::temp_directory_path();
  for (auto [s, max_px, side] : {std::tuple<int64_t, int, uint32_t>{37, 512, 37}, {100000, 300, 300}}) {
    const std::vector<lca_slice> slices{{0, s, 0, s, LCA_SLICE_CAUSAL, 0}};
    const auto file = dir / ("lca_render_test_" + std::to_string(s) + ".png");
    lca::core::write_png(mask_of(slices, s), file, max_px);
    std::ifstream in(file, std::ios::binary);
    std::vector<unsigned char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::filesystem::remove(file);
    ASSERT_GT(b.size(), 33u);
    const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    EXPECT_TRUE(std::equal(sig, sig + 8, b.begin()));
    EXPECT_EQ(be32(b, 8), 13u);  // IHDR length
    EXPECT_EQ(std::string(b.begin() + 12, b.begin() + 16), "IHDR");
    EXPECT_EQ(be32(b, 16), side);  // width
    EXPECT_EQ(be32(b, 20), side);  // height
    EXPECT_EQ(b[24], 8);           // bit depth
    EXPECT_EQ(b[25], 0);           // grayscale
    EXPECT_EQ(std::string(b.end() - 8, b.end() - 4), "IEND");
    // Stored deflate: the image data is the raw scanlines plus framing.
    EXPECT_GT(b.size(), static_cast<size_t>(side) * (side + 1));
  }
}

}  // namespace
