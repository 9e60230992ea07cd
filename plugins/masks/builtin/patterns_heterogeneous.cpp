// Static heterogeneous patterns, following the LongCA-bench reference generator
// (longca_bench/dist_attn/benchmark/mask.py and the FlexAttention predicates beside it).
#include "patterns.hpp"

#include <algorithm>

namespace lca::masks {

// Document 0 is the question, the others are answers: q sees k iff k <= q and k lies in the
// question or in q's own document. The question and the first answer share one CAUSAL slice.
void gen_shared_question(PatternContext& ctx, OwnedMask& mask) {
  const auto& cu = sample_documents(ctx, mask);
  const size_t docs = cu.size() - 1;
  if (docs <= 2) {
    add_slice(mask, 0, ctx.seqlen, 0, ctx.seqlen, LCA_SLICE_CAUSAL);
    return;
  }
  add_slice(mask, 0, cu[2], 0, cu[2], LCA_SLICE_CAUSAL);
  add_slice(mask, cu[2], ctx.seqlen, 0, cu[1], LCA_SLICE_FULL);
  for (size_t d = 2; d < docs; ++d) add_slice(mask, cu[d], cu[d + 1], cu[d], cu[d + 1], LCA_SLICE_CAUSAL);
}

// In-context learning: every document is causal on itself; the last one (the query) is causal
// over the whole sequence, i.e. it also sees every earlier document fully.
void gen_causal_blockwise(PatternContext& ctx, OwnedMask& mask) {
  const auto& cu = sample_documents(ctx, mask);
  const size_t docs = cu.size() - 1;
  for (size_t d = 0; d + 1 < docs; ++d) add_slice(mask, cu[d], cu[d + 1], cu[d], cu[d + 1], LCA_SLICE_CAUSAL);
  add_slice(mask, cu[docs - 1], ctx.seqlen, 0, ctx.seqlen, LCA_SLICE_CAUSAL);
}

namespace {

// Prefix-LM over [s, e): the first p tokens see each other fully, the rest are causal.
void add_prefix_lm(OwnedMask& mask, int64_t s, int64_t e, int64_t p) {
  p = std::min(p, e - s);
  add_slice(mask, s, s + p, s, s + p, LCA_SLICE_FULL);
  add_slice(mask, s + p, e, s, e, LCA_SLICE_CAUSAL);
}

}  // namespace

void gen_prefix_lm_causal(PatternContext& ctx, OwnedMask& mask) {
  int64_t p = ctx.params.get_int("prefix");
  if (ctx.params.given("prefix") && p != -1) {
    ctx.params.require_range("prefix", p, 0, ctx.seqlen, "seqlen (" + std::to_string(ctx.seqlen) + "), or -1 to draw it");
  } else {
    p = ctx.rng.between(1, ctx.seqlen);
  }
  add_prefix_lm(mask, 0, ctx.seqlen, p);
}

void gen_prefix_lm_document(PatternContext& ctx, OwnedMask& mask) {
  int64_t p = ctx.params.get_int("prefix");
  const bool drawn = !(ctx.params.given("prefix") && p != -1);
  if (!drawn) {
    ctx.params.require_range("prefix", p, 1, ctx.seqlen, "seqlen (" + std::to_string(ctx.seqlen) + "), or -1 to draw it");
  }
  const auto& cu = sample_documents(ctx, mask);
  if (drawn) p = ctx.rng.between(1, cu[1]);  // as LongCA-bench: up to the first document's length
  for (size_t d = 0; d + 1 < cu.size(); ++d) add_prefix_lm(mask, cu[d], cu[d + 1], p);
}

// q sees k iff q < G or k < G or |q - k| <= w (the FlexAttention predicate of LongCA-bench,
// whose default G is 2w).
void gen_global_sliding(PatternContext& ctx, OwnedMask& mask) {
  const int64_t s = ctx.seqlen;
  const int64_t w = length_param(ctx, "window", 0);
  int64_t g = ctx.params.get_int("global_tokens");
  if (ctx.params.given("global_tokens") && g != -1) {
    ctx.params.require_range("global_tokens", g, 0, s, "seqlen (" + std::to_string(s) + "), or -1 for 2 x window");
  } else {
    g = std::min(2 * w, s);
  }
  add_slice(mask, 0, g, 0, s, LCA_SLICE_FULL);
  add_slice(mask, g, s, 0, g, LCA_SLICE_FULL);
  add_sliding_window(mask, g, s, w);
}

// Documents of 1..max_blocks blocks of `block` tokens (the last one cut at seqlen); inside a
// document, query block b sees every key of blocks 0..b of that document.
void gen_block_causal_document(PatternContext& ctx, OwnedMask& mask) {
  const int64_t s = ctx.seqlen;
  const int64_t b = length_param(ctx, "block", 1);
  const int64_t max_blocks = ctx.params.get_int("max_blocks");
  ctx.params.require_range("max_blocks", max_blocks, 1, 1 << 20);
  mask.doc_offsets = {0};
  int64_t doc_start = 0;
  while (doc_start < s) {
    const int64_t blocks = ctx.rng.between(1, max_blocks);
    const int64_t doc_end = std::min(s, doc_start + blocks * b);
    for (int64_t q0 = doc_start; q0 < doc_end; q0 += b) {
      const int64_t q1 = std::min(doc_end, q0 + b);
      add_slice(mask, q0, q1, doc_start, q1, LCA_SLICE_FULL);
    }
    mask.doc_offsets.push_back(doc_end);
    doc_start = doc_end;
  }
}

}  // namespace lca::masks
