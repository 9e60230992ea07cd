// Static regular patterns: full, causal, their document (varlen) forms and the sliding windows.
#include "patterns.hpp"

namespace lca::masks {

void gen_full(PatternContext& ctx, OwnedMask& mask) {
  add_slice(mask, 0, ctx.seqlen, 0, ctx.seqlen, LCA_SLICE_FULL);
}

void gen_causal(PatternContext& ctx, OwnedMask& mask) {
  add_slice(mask, 0, ctx.seqlen, 0, ctx.seqlen, LCA_SLICE_CAUSAL);
}

void gen_full_document(PatternContext& ctx, OwnedMask& mask) {
  const auto& cu = sample_documents(ctx, mask);
  for (size_t d = 0; d + 1 < cu.size(); ++d) add_slice(mask, cu[d], cu[d + 1], cu[d], cu[d + 1], LCA_SLICE_FULL);
}

void gen_causal_document(PatternContext& ctx, OwnedMask& mask) {
  const auto& cu = sample_documents(ctx, mask);
  for (size_t d = 0; d + 1 < cu.size(); ++d) add_slice(mask, cu[d], cu[d + 1], cu[d], cu[d + 1], LCA_SLICE_CAUSAL);
}

void gen_sliding_window(PatternContext& ctx, OwnedMask& mask) {
  add_sliding_window(mask, 0, ctx.seqlen, length_param(ctx, "window", 0));
}

void gen_sliding_window_causal(PatternContext& ctx, OwnedMask& mask) {
  add_sliding_window_causal(mask, 0, ctx.seqlen, length_param(ctx, "window", 0));
}

void gen_sliding_window_document(PatternContext& ctx, OwnedMask& mask) {
  const int64_t w = length_param(ctx, "window", 0);
  const auto& cu = sample_documents(ctx, mask);
  for (size_t d = 0; d + 1 < cu.size(); ++d) add_sliding_window(mask, cu[d], cu[d + 1], w);
}

}  // namespace lca::masks
