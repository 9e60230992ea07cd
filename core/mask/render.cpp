#include "core/mask/render.hpp"

#include <lca/types.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <stdexcept>

namespace lca::core {

MaskStats mask_stats(const lca_mask& mask) {
  MaskStats s;
  s.num_slices = mask.num_slices;
  for (int64_t i = 0; i < mask.num_slices; ++i)
    s.area = lca::checked_sum("mask area", s.area, lca::slice_area(mask.slices[i]));
  const double total = static_cast<double>(mask.seqlen_q) * static_cast<double>(mask.seqlen_k);
  s.density = total > 0 ? static_cast<double>(s.area) / total : 0.0;
  return s;
}

namespace {

// floor(len * i / parts) without forming len * i, which wraps for long masks.
int64_t edge(int64_t len, int64_t parts, int64_t i) { return (len / parts) * i + (len % parts) * i / parts; }

}  // namespace

std::vector<double> density_grid(const lca_mask& mask, int rows, int cols, int rows_sampled) {
  const int64_t sq = mask.seqlen_q, sk = mask.seqlen_k;
  rows = static_cast<int>(std::clamp<int64_t>(rows, 1, std::max<int64_t>(sq, 1)));
  cols = static_cast<int>(std::clamp<int64_t>(cols, 1, std::max<int64_t>(sk, 1)));
  rows_sampled = std::max(rows_sampled, 1);
  std::vector<double> grid(static_cast<size_t>(rows) * cols, 0.0);
  if (sq <= 0 || sk <= 0) return grid;

  // The queries that stand for each row block, ascending overall, with their block.
  std::vector<int64_t> sample_q;
  std::vector<int> sample_row;
  std::vector<int64_t> per_row(rows, 0);
  for (int r = 0; r < rows; ++r) {
    const int64_t q0 = edge(sq, rows, r), q1 = edge(sq, rows, r + 1);
    const int64_t n = std::min<int64_t>(q1 - q0, rows_sampled);
    for (int64_t t = 0; t < n; ++t) {
      sample_q.push_back(q0 + edge(q1 - q0, n, t));
      sample_row.push_back(r);
    }
    per_row[r] = n;
  }
  std::vector<int64_t> col_edges(cols + 1);
  for (int c = 0; c <= cols; ++c) col_edges[c] = edge(sk, cols, c);
  std::vector<double> counts(grid.size(), 0.0);

  for (int64_t i = 0; i < mask.num_slices; ++i) {
    const lca_slice& s = mask.slices[i];
    auto lo = std::lower_bound(sample_q.begin(), sample_q.end(), s.q_begin);
    auto hi = std::lower_bound(sample_q.begin(), sample_q.end(), s.q_end);
    for (auto it = lo; it != hi; ++it) {
      int64_t first, last;
      lca::slice_row_range(s, *it, &first, &last);
      if (last <= first) continue;
      const int r = sample_row[it - sample_q.begin()];
      // Columns touched by [first, last): spread the interval over them.
      int c = static_cast<int>(std::upper_bound(col_edges.begin(), col_edges.end(), first) - col_edges.begin()) - 1;
      for (; c < cols && col_edges[c] < last; ++c) {
        const int64_t a = std::max(first, col_edges[c]), b = std::min(last, col_edges[c + 1]);
        if (b > a) counts[static_cast<size_t>(r) * cols + c] += static_cast<double>(b - a);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const double cells = static_cast<double>(per_row[r]) * static_cast<double>(col_edges[c + 1] - col_edges[c]);
      const size_t idx = static_cast<size_t>(r) * cols + c;
      grid[idx] = cells > 0 ? std::min(1.0, counts[idx] / cells) : 0.0;
    }
  }
  return grid;
}

std::string render_ascii(const lca_mask& mask, int max_cells) {
  max_cells = std::max(max_cells, 1);
  const bool exact = mask.seqlen_q <= max_cells && mask.seqlen_k <= max_cells;
  const int rows = static_cast<int>(std::min<int64_t>(mask.seqlen_q, max_cells));
  const int cols = static_cast<int>(std::min<int64_t>(mask.seqlen_k, max_cells));
  if (rows <= 0 || cols <= 0) return {};
  const auto grid = density_grid(mask, rows, cols);
  std::string out;
  out.reserve(static_cast<size_t>(rows) * (cols + 1));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const double d = grid[static_cast<size_t>(r) * cols + c];
      if (exact) {
        out += d > 0 ? '#' : '.';
      } else {
        out += d <= 0 ? ' ' : d < 1.0 / 3 ? '.' : d < 2.0 / 3 ? ':' : d < 1.0 ? '+' : '#';
      }
    }
    out += '\n';
  }
  return out;
}

// ---- PNG without a library: stored (uncompressed) deflate blocks, our own CRC32 and Adler32 ---
namespace {

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ data[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t adler32(const std::vector<uint8_t>& data) {
  uint32_t a = 1, b = 0;
  for (uint8_t x : data) {
    a = (a + x) % 65521u;
    b = (b + a) % 65521u;
  }
  return (b << 16) | a;
}

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& body) {
  put_be32(out, static_cast<uint32_t>(body.size()));
  std::vector<uint8_t> typed(type, type + 4);
  typed.insert(typed.end(), body.begin(), body.end());
  out.insert(out.end(), typed.begin(), typed.end());
  put_be32(out, crc32(typed.data(), typed.size()));
}

}  // namespace

void write_png(const lca_mask& mask, const std::filesystem::path& file, int max_px) {
  max_px = std::max(max_px, 1);
  const int h = static_cast<int>(std::clamp<int64_t>(mask.seqlen_q, 1, max_px));
  const int w = static_cast<int>(std::clamp<int64_t>(mask.seqlen_k, 1, max_px));
  const auto grid = density_grid(mask, h, w);

  std::vector<uint8_t> raw;  // filter byte 0 (None) before each scanline
  raw.reserve(static_cast<size_t>(h) * (w + 1));
  for (int r = 0; r < h; ++r) {
    raw.push_back(0);
    for (int c = 0; c < w; ++c) {
      const double d = grid.empty() ? 0.0 : grid[static_cast<size_t>(r) * w + c];
      raw.push_back(static_cast<uint8_t>(255 - std::lround(255.0 * d)));
    }
  }
  std::vector<uint8_t> z{0x78, 0x01};  // zlib header: deflate, 32K window, no preset dictionary
  for (size_t pos = 0; pos < raw.size() || pos == 0;) {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool final_block = pos + n >= raw.size();
    z.push_back(final_block ? 1 : 0);  // BFINAL, BTYPE = 00 (stored)
    z.push_back(static_cast<uint8_t>(n & 0xFF));
    z.push_back(static_cast<uint8_t>(n >> 8));
    z.push_back(static_cast<uint8_t>(~n & 0xFF));
    z.push_back(static_cast<uint8_t>((~n >> 8) & 0xFF));
    z.insert(z.end(), raw.begin() + static_cast<std::ptrdiff_t>(pos), raw.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
    if (final_block) break;
  }
  put_be32(z, adler32(raw));

  std::vector<uint8_t> png{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, static_cast<uint32_t>(w));
  put_be32(ihdr, static_cast<uint32_t>(h));
  ihdr.insert(ihdr.end(), {8, 0, 0, 0, 0});  // 8-bit, grayscale, deflate, adaptive filters, no interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", {});

  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("write_png: cannot open " + file.string());
  out.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  if (!out) throw std::runtime_error("write_png: cannot write " + file.string());
}

}  // namespace lca::core
