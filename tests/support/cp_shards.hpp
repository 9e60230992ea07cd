// Test support for CP strategies: a rank's share of whole-problem tensors, in the order of the
// token ranges its strategy dispatched. Used by the CPU and GPU CP strategy tests.
// Rule: ranges are [begin, end) token indices of the whole sequence.
#pragma once

#include <lca/abi.h>

#include <cstdint>
#include <vector>

namespace lca::test {

// Rows of a [tokens, heads, dim] tensor.
inline std::vector<float> shard_rows(const std::vector<float>& x, const std::vector<lca_token_range>& ranges,
                                     int64_t heads, int64_t dim) {
  std::vector<float> out;
  for (auto r : ranges) out.insert(out.end(), x.begin() + r.begin * heads * dim, x.begin() + r.end * heads * dim);
  return out;
}

// Columns of an LSE [heads, seqlen].
inline std::vector<float> shard_lse(const std::vector<float>& x, const std::vector<lca_token_range>& ranges,
                                    int64_t heads, int64_t seqlen) {
  std::vector<float> out;
  for (int64_t h = 0; h < heads; ++h)
    for (auto r : ranges) out.insert(out.end(), x.begin() + h * seqlen + r.begin, x.begin() + h * seqlen + r.end);
  return out;
}

}  // namespace lca::test
