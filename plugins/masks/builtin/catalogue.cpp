// The pattern catalogue: names, categories, summaries and parameters of the 14 patterns.
#include "patterns.hpp"

namespace lca::masks {

namespace {

ParamSpec window_param() {
  return {"window", "int", 1024,
          "tokens each side a query sees (|q - k| <= window; causal forms: 0 <= q - k <= window); "
          "0 <= window <= seqlen; when not given, min(1024, seqlen / 8)"};
}

ParamSpec dist_param() {
  return {"dist", "string", "auto",
          "document-length distribution: pile, prolong64k, prolong512k, chatqa, uniform:LO-HI, or "
          "auto (pile up to 12K tokens, prolong64k up to 64K, prolong512k beyond); long:<dist> puts "
          "40% of the tokens in documents of <dist> and 60% in documents of 8K-30K tokens, shuffled"};
}

ParamSpec prefix_param(const char* doc) { return {"prefix", "int", -1, doc}; }

}  // namespace

const std::vector<PatternSpec>& pattern_catalogue() {
  static const std::vector<PatternSpec> catalogue{
      {"full", "static_regular", "every query sees every key", {}, &gen_full},
      {"causal", "static_regular", "query q sees keys k <= q", {}, &gen_causal},
      {"full_document", "static_regular",
       "packed documents (varlen), full attention inside each document", {dist_param()},
       &gen_full_document},
      {"causal_document", "static_regular",
       "packed documents (varlen), causal attention inside each document", {dist_param()},
       &gen_causal_document},
      {"sliding_window", "static_regular", "query q sees keys with |q - k| <= window",
       {window_param()}, &gen_sliding_window},
      {"sliding_window_causal", "static_regular", "query q sees keys with 0 <= q - k <= window",
       {window_param()}, &gen_sliding_window_causal},
      {"sliding_window_document", "static_regular",
       "packed documents, |q - k| <= window inside each document", {window_param(), dist_param()},
       &gen_sliding_window_document},
      {"shared_question", "static_heterogeneous",
       "document 0 is a question shared by the answers after it; each answer sees the question "
       "and itself causally (reward-model packing)",
       {dist_param()}, &gen_shared_question},
      {"causal_blockwise", "static_heterogeneous",
       "packed documents, causal inside each; the last document also sees all earlier ones "
       "(in-context learning)",
       {dist_param()}, &gen_causal_blockwise},
      {"prefix_lm_causal", "static_heterogeneous",
       "full attention among the first `prefix` tokens, causal after them",
       {prefix_param("prefix length, 0 <= prefix <= seqlen; -1 draws it uniformly in [1, seqlen] "
                     "from the seed")},
       &gen_prefix_lm_causal},
      {"prefix_lm_document", "static_heterogeneous",
       "packed documents, prefix-LM inside each (the same prefix length, cut to the document)",
       {prefix_param("prefix length in each document, 1 <= prefix <= seqlen; -1 draws it "
                     "uniformly in [1, length of the first document] from the seed"),
        dist_param()},
       &gen_prefix_lm_document},
      {"global_sliding", "static_heterogeneous",
       "the first `global_tokens` tokens see and are seen by all; |q - k| <= window elsewhere",
       {window_param(),
        {"global_tokens", "int", -1,
         "number of global tokens at the start, 0 <= global_tokens <= seqlen; -1 means "
         "min(2 x window, seqlen)"}},
       &gen_global_sliding},
      {"block_causal_document", "static_heterogeneous",
       "documents of 1..max_blocks blocks; inside a document a query block sees its own and all "
       "earlier blocks fully",
       {{"block", "int", 1024, "block size in tokens, 1 <= block <= seqlen; when not given, "
                               "min(1024, seqlen / 8)"},
        {"max_blocks", "int", 8, "largest document, in blocks (sizes drawn uniformly in "
                                 "[1, max_blocks])"}},
       &gen_block_causal_document},
      {"block_sparse", "dynamic",
       "each query block sees a seeded random choice of round(sparsity x blocks) key blocks",
       {{"block", "int", 64, "block size for queries and keys: 64 or 128"},
        {"sparsity", "float", 0.5, "fraction of key blocks kept per query block, 0 < sparsity <= 1"}},
       &gen_block_sparse},
  };
  return catalogue;
}

std::string describe_patterns() {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : pattern_catalogue()) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& s : p.params) {
      params.push_back({{"name", s.name}, {"type", s.type}, {"default", s.default_value}, {"doc", s.doc}});
    }
    out.push_back({{"name", p.name}, {"category", p.category}, {"summary", p.summary}, {"params", params}});
  }
  return out.dump();
}

}  // namespace lca::masks
