// Exact merge of partial attention outputs through their log-sum-exp, in fp32:
// lse = log(sum_i exp(lse_i)), O = sum_i exp(lse_i - lse) O_i. Used by context_stage.
// Rule: rows whose partial lse is -inf contribute nothing (their O_i is ignored).
#pragma once

#include <lca/types.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace lca::cp {

class LseMerge {
 public:
  // o [rows, heads, dim] and lse [heads, rows], both fp32, owned by the caller.
  LseMerge(float* o, float* lse, int64_t rows, int64_t heads, int64_t dim)
      : o_(o), lse_(lse), rows_(rows), heads_(heads), dim_(dim) {
    std::fill(o_, o_ + rows * heads * dim, 0.0f);
    std::fill(lse_, lse_ + heads * rows, -std::numeric_limits<float>::infinity());
  }

  // part: [rows, heads, dim] of `dtype`; part_lse: [heads, rows] fp32.
  void add(const void* part, int32_t dtype, const float* part_lse) {
    for (int64_t h = 0; h < heads_; ++h)
      for (int64_t r = 0; r < rows_; ++r) {
        const float ln = part_lse[h * rows_ + r];
        if (ln == -std::numeric_limits<float>::infinity()) continue;
        float& lo = lse_[h * rows_ + r];
        const float m = std::max(lo, ln);
        const float a = std::exp(lo - m), b = std::exp(ln - m);  // exp(-inf) = 0
        const float l = m + std::log(a + b);
        const float wa = std::exp(lo - l), wb = std::exp(ln - l);
        float* out = o_ + (r * heads_ + h) * dim_;
        const int64_t base = (r * heads_ + h) * dim_;
        for (int64_t d = 0; d < dim_; ++d)
          out[d] = wa * out[d] + wb * static_cast<float>(load_as_double(part, dtype, base + d));
        lo = l;
      }
  }

 private:
  float* o_;
  float* lse_;
  int64_t rows_, heads_, dim_;
};

}  // namespace lca::cp
