// Pictures and numbers of a mask: ASCII art for the terminal, a grayscale PNG, and exact stats
// (slice count, unmasked area, density). Used by `lcahost masks --show` and by tests.
// Rule: work from the slices only (O(rows x slices)); never build an S x S matrix of a mask.
#pragma once

#include <lca/abi.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace lca::core {

struct MaskStats {
  int64_t num_slices = 0;
  int64_t area = 0;      // unmasked (q, k) cells, exact
  double density = 0.0;  // area / (seqlen_q * seqlen_k)
};

MaskStats mask_stats(const lca_mask& mask);

// Fraction of unmasked cells in each of rows x cols blocks (row-major, values in [0, 1]).
// Row block r covers queries [r * Sq / rows, (r + 1) * Sq / rows), likewise for columns. Exact
// when a row block holds at most `rows_sampled` queries; otherwise that many evenly spaced
// queries of the block stand for it.
std::vector<double> density_grid(const lca_mask& mask, int rows, int cols, int rows_sampled = 16);

// One character per cell ('#' visible, '.' masked) when both lengths are <= max_cells, else a
// max_cells-wide block average: ' ' empty, '.' < 1/3, ':' < 2/3, '+' < 1, '#' full.
// Every row ends with '\n'.
std::string render_ascii(const lca_mask& mask, int max_cells = 64);

// Grayscale 8-bit PNG, at most max_px per side, black = visible, white = masked (block-averaged
// like render_ascii). Throws std::runtime_error when the file cannot be written.
void write_png(const lca_mask& mask, const std::filesystem::path& file, int max_px = 512);

}  // namespace lca::core
