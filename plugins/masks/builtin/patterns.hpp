// The catalogue of the builtin mask provider: each pattern's name, category, summary, declared
// parameters and generator. It is the one source of truth for describe() and for the manifest
// (a test checks that manifests/plugins/builtin.json agrees with it).
// Rule: a generator emits non-overlapping slices that cover exactly its definition, O(slices).
#pragma once

#include "doclen.hpp"
#include "params.hpp"
#include "rng.hpp"

#include <lca/mask_provider.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace lca::masks {

struct PatternContext {
  int64_t seqlen;
  const Params& params;
  Rng& rng;
  DistributionLibrary& dists;
};

using Generator = void (*)(PatternContext& ctx, OwnedMask& mask);

struct PatternSpec {
  std::string name;
  std::string category;  // static_regular, static_heterogeneous, dynamic
  std::string summary;
  std::vector<ParamSpec> params;
  Generator generate;
};

const std::vector<PatternSpec>& pattern_catalogue();

// JSON array of {name, category, summary, params:[{name, type, default, doc}]}.
std::string describe_patterns();

// ---- generators (patterns_regular.cpp, patterns_heterogeneous.cpp, patterns_dynamic.cpp) ----
void gen_full(PatternContext&, OwnedMask&);
void gen_causal(PatternContext&, OwnedMask&);
void gen_full_document(PatternContext&, OwnedMask&);
void gen_causal_document(PatternContext&, OwnedMask&);
void gen_sliding_window(PatternContext&, OwnedMask&);
void gen_sliding_window_causal(PatternContext&, OwnedMask&);
void gen_sliding_window_document(PatternContext&, OwnedMask&);
void gen_shared_question(PatternContext&, OwnedMask&);
void gen_causal_blockwise(PatternContext&, OwnedMask&);
void gen_prefix_lm_causal(PatternContext&, OwnedMask&);
void gen_prefix_lm_document(PatternContext&, OwnedMask&);
void gen_global_sliding(PatternContext&, OwnedMask&);
void gen_block_causal_document(PatternContext&, OwnedMask&);
void gen_block_sparse(PatternContext&, OwnedMask&);

// ---- shared helpers (slicing.cpp) ------------------------------------------------------------
// Appends a slice unless it is empty.
void add_slice(OwnedMask& mask, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int32_t type);
// Band |q - k| <= w inside the square [a, b) x [a, b): at most 3 slices.
void add_sliding_window(OwnedMask& mask, int64_t a, int64_t b, int64_t w);
// Band 0 <= q - k <= w inside the square [a, b) x [a, b): at most 2 slices.
void add_sliding_window_causal(OwnedMask& mask, int64_t a, int64_t b, int64_t w);
// Length-like parameter with a default that shrinks for short sequences: the given value,
// checked against [lo, seqlen]; when not given, min(default, max(lo, seqlen / 8)).
int64_t length_param(PatternContext& ctx, const std::string& name, int64_t lo);
// Documents drawn from the pattern's `dist` parameter (documents stored in mask.doc_offsets).
const std::vector<int64_t>& sample_documents(PatternContext& ctx, OwnedMask& mask);

}  // namespace lca::masks
