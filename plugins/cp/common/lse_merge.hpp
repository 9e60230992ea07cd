// Exact merge of partial attention outputs through their log-sum-exp, in fp32, on host memory:
// lse = log(sum_i exp(lse_i)), O = sum_i exp(lse_i - lse) O_i. The CUDA twin is
// lse_merge_kernel in device_kernels.cu (the same arithmetic). Used by device.hpp.
// Rule: rows whose partial lse is -inf contribute nothing (their O_i is ignored); start from
// O = 0 and lse = -inf.
#pragma once

#include <lca/types.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace lca::cp {

// o [rows, heads, dim] of o_dtype (fp32, or the problem dtype merged in place) and lse [heads,
// rows] fp32; part [rows, heads, dim] of `dtype`, part_lse [heads, rows] fp32. lse_ld: elements
// from one head's LSE row to the next (0: rows), so that a run of rows inside a longer LSE merges.
inline void lse_merge_add(void* o, int32_t o_dtype, float* lse, const void* part, int32_t dtype, const float* part_lse,
                          int64_t rows, int64_t heads, int64_t dim, int64_t lse_ld = 0) {
  const int64_t ld = lse_ld > 0 ? lse_ld : rows;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t r = 0; r < rows; ++r) {
      const float ln = part_lse[h * ld + r];
      if (ln == -std::numeric_limits<float>::infinity()) continue;
      float& lo = lse[h * ld + r];
      const float m = std::max(lo, ln);
      const float a = std::exp(lo - m), b = std::exp(ln - m);  // exp(-inf) = 0
      const float l = m + std::log(a + b);
      const float wa = std::exp(lo - l), wb = std::exp(ln - l);
      const int64_t base = (r * heads + h) * dim;
      for (int64_t d = 0; d < dim; ++d) {
        const float in = static_cast<float>(load_as_double(part, dtype, base + d));
        // Where lo is -inf the old O was never written: take the part alone.
        const float v = lo == -std::numeric_limits<float>::infinity()
                            ? in
                            : wa * static_cast<float>(load_as_double(o, o_dtype, base + d)) + wb * in;
        if (o_dtype == LCA_DTYPE_F32) static_cast<float*>(o)[base + d] = v;
        else store_from_double(o, o_dtype, base + d, v);
      }
      lo = l;
    }
}

}  // namespace lca::cp
