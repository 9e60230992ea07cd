// What FlashAttention-4 can be told about an lca mask: documents as cu_seqlens, and inside every
// document one of full, causal or a sliding window (window_size_left / right, FA4's local mask),
// or why the mask is none of these. Built on the host in the fa4 plugin's plan(); host code only,
// no torch: tested on the CPU against the slices.
// Rule: a mask is taken only when sees(q, k) equals the slices' answer on every cell; anything
// else is LCA_ERR_UNSUPPORTED with the first row that differs named.
#pragma once

#include <lca/abi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lca_fa4 {

struct Fa4Mask {
  enum class Form { full, causal, window };

  int64_t seqlen = 0;
  // Document d is tokens [cu_seqlens[d], cu_seqlens[d + 1]); one document means no varlen call.
  std::vector<int32_t> cu_seqlens;
  int64_t max_doc = 0;  // the longest document (max_seqlen_q / max_seqlen_k)
  Form form = Form::full;
  // window: query i of a document sees its keys [i - window_left, i + window_right]; -1 is
  // unbounded on that side (FA4's None). Unused by full and causal.
  int64_t window_left = -1, window_right = -1;

  int64_t documents() const { return static_cast<int64_t>(cu_seqlens.size()) - 1; }
  bool varlen() const { return documents() > 1; }
  bool sees(int64_t q, int64_t k) const;
  std::string describe() const;  // e.g. "causal in 37 documents (longest 8192)"
};

const char* form_name(Fa4Mask::Form form);

// The FA4 form of a self-attention mask (seqlen_q == seqlen_k). The documents are the finest
// split of the sequence that no row's keys cross, so a mask without doc_offsets is read the same.
// Throws lca::Error: LCA_ERR_UNSUPPORTED naming the reason and a row for a mask FA4 cannot
// express, LCA_ERR_INVALID_ARGUMENT for a malformed one.
Fa4Mask build_fa4_mask(const lca_mask& mask);

}  // namespace lca_fa4
