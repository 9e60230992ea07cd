// Dynamic patterns: block_sparse, the per-query-block random key-block selection that
// LongCA-bench sweeps by sparsity ratio, in CSR form and as slices.
#include "patterns.hpp"

#include <lca/checked.hpp>

#include <cmath>
#include <sstream>

namespace lca::masks {

void gen_block_sparse(PatternContext& ctx, OwnedMask& mask) {
  const int64_t s = ctx.seqlen;
  const int64_t b = ctx.params.get_int("block");
  if (b != 64 && b != 128) {
    invalid_argument(ctx.params.pattern() + ": parameter 'block' = " + std::to_string(b) +
                     " is not supported; allowed: 64 or 128");
  }
  const double sparsity = ctx.params.get_float("sparsity");
  if (!(sparsity > 0.0 && sparsity <= 1.0)) {
    std::ostringstream msg;
    msg << ctx.params.pattern() << ": parameter 'sparsity' = " << sparsity
        << " is out of range; allowed: 0 < sparsity <= 1 (fraction of key blocks kept)";
    invalid_argument(msg.str());
  }
  const int64_t blocks = (s + b - 1) / b;
  const int64_t kept = std::clamp<int64_t>(std::llround(sparsity * static_cast<double>(blocks)), 1, blocks);

  mask.has_block_sparse = true;
  mask.block_q = mask.block_k = static_cast<int32_t>(b);
  mask.num_q_blocks = mask.num_k_blocks = blocks;
  mask.row_offsets.assign(1, 0);
  mask.row_offsets.reserve(blocks + 1);
  mask.col_indices.reserve(
      static_cast<size_t>(checked_product("block_sparse: key blocks kept (blocks x kept)", blocks, kept)));
  for (int64_t qb = 0; qb < blocks; ++qb) {
    // Selection sampling (Knuth's algorithm S): `kept` distinct key blocks, already ascending.
    int64_t need = kept;
    for (int64_t kb = 0; kb < blocks && need > 0; ++kb) {
      if (static_cast<int64_t>(ctx.rng.below(static_cast<uint64_t>(blocks - kb))) < need) {
        mask.col_indices.push_back(kb);
        --need;
      }
    }
    mask.row_offsets.push_back(static_cast<int64_t>(mask.col_indices.size()));
    // One FULL slice per run of adjacent kept blocks.
    const int64_t q0 = qb * b, q1 = std::min(s, q0 + b);
    for (int64_t i = mask.row_offsets[qb]; i < mask.row_offsets[qb + 1];) {
      int64_t j = i + 1;
      while (j < mask.row_offsets[qb + 1] && mask.col_indices[j] == mask.col_indices[j - 1] + 1) ++j;
      add_slice(mask, q0, q1, mask.col_indices[i] * b, std::min(s, (mask.col_indices[j - 1] + 1) * b), LCA_SLICE_FULL);
      i = j;
    }
  }
}

}  // namespace lca::masks
