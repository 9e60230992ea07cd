#include "patterns.hpp"

#include <algorithm>

namespace lca::masks {

void add_slice(OwnedMask& mask, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int32_t type) {
  if (q1 <= q0 || k1 <= k0) return;
  mask.slices.push_back(lca_slice{q0, q1, k0, k1, type, 0});
}

// Rows split at t1 = min(b - w, a + w) and t2 = max(b - w, a + w):
//   [a, t1)  lower edge clamped to a, upper q + w        -> CAUSAL (bottom-right shift w)
//   [t1, t2) both unclamped (n >= 2w): BI_CAUSAL band;  both clamped (n < 2w): FULL
//   [t2, b)  lower q - w, upper edge clamped to b         -> INV_CAUSAL
void add_sliding_window(OwnedMask& mask, int64_t a, int64_t b, int64_t w) {
  const int64_t n = b - a;
  if (n <= 0) return;
  if (w >= n - 1) {
    add_slice(mask, a, b, a, b, LCA_SLICE_FULL);
    return;
  }
  const int64_t t1 = std::min(b - w, a + w);
  const int64_t t2 = std::max(b - w, a + w);
  add_slice(mask, a, t1, a, t1 + w, LCA_SLICE_CAUSAL);
  if (n >= 2 * w) {
    add_slice(mask, t1, t2, t1 - w, t2 + w, LCA_SLICE_BI_CAUSAL);
  } else {
    add_slice(mask, t1, t2, a, b, LCA_SLICE_FULL);
  }
  add_slice(mask, t2, b, t2 - w, b, LCA_SLICE_INV_CAUSAL);
}

// Rows [a, a + w) see [a, q] (a causal square); rows [a + w, b) see [q - w, q] (BI_CAUSAL).
void add_sliding_window_causal(OwnedMask& mask, int64_t a, int64_t b, int64_t w) {
  const int64_t n = b - a;
  if (n <= 0) return;
  const int64_t t = std::min(b, a + w);
  if (t >= b) {
    add_slice(mask, a, b, a, b, LCA_SLICE_CAUSAL);
    return;
  }
  add_slice(mask, a, t, a, t, LCA_SLICE_CAUSAL);
  add_slice(mask, t, b, t - w, b, LCA_SLICE_BI_CAUSAL);
}

int64_t length_param(PatternContext& ctx, const std::string& name, int64_t lo) {
  const int64_t s = ctx.seqlen;
  if (ctx.params.given(name)) {
    const int64_t v = ctx.params.get_int(name);
    ctx.params.require_range(name, v, lo, s, "seqlen (" + std::to_string(s) + ")");
    return v;
  }
  const int64_t d = ctx.params.get_int(name);
  return std::min(d, std::max(lo, s / 8));
}

const std::vector<int64_t>& sample_documents(PatternContext& ctx, OwnedMask& mask) {
  std::string name = ctx.params.get_string("dist");
  const std::string prefix = long_prefix;
  const bool long_form = name.rfind(prefix, 0) == 0;
  if (long_form) {
    name = name.substr(prefix.size());
    if (name.empty() || name.rfind(prefix, 0) == 0) {
      invalid_argument(ctx.params.pattern() + ": parameter 'dist' = \"" + shown(ctx.params.get_string("dist")) +
                       "\" is malformed; allowed: long:<dist> with one short distribution, e.g. long:auto or long:pile");
    }
  }
  // "auto" chooses by the whole sequence in the long form too, as LongCA-bench passes one
  // distribution for both.
  name = resolve_distribution_name(name, ctx.seqlen);
  const auto& dist = ctx.dists.get(name, ctx.params.pattern());
  mask.doc_offsets = long_form ? pack_long_documents(dist, ctx.seqlen, ctx.rng) : pack_documents(dist, ctx.seqlen, ctx.rng);
  return mask.doc_offsets;
}

}  // namespace lca::masks
