// Recognises, from a mask's slices, the masks cuDNN's fused attention expresses natively: per
// document (one batch element of a ragged THD layout each), a diagonal band j - i in
// [-left, right] clipped to the document. full, causal, the document forms and the sliding
// windows are all of this shape.
// Used by the cudnn_sdpa plugin's plan() and by its tests (pure C++, no CUDA).
// Rule: recognise() accepts a mask only when every row's key set equals the band exactly; anything
// else is refused with LCA_ERR_UNSUPPORTED, never approximated.
#pragma once

#include <lca/abi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lca_cudnn_sdpa {

struct MaskForm {
  // Token offsets of the documents (num_docs + 1 entries, first 0, last seqlen). One document
  // for the non-document masks.
  std::vector<int64_t> doc_offsets;
  int64_t max_doc_len = 0;
  // Row i of a document sees keys j of the same document with i - left <= j <= i + right;
  // -1 means unbounded on that side (bounded only by the document).
  int64_t left = -1;
  int64_t right = -1;

  int64_t num_docs() const { return static_cast<int64_t>(doc_offsets.size()) - 1; }
  bool ragged() const { return num_docs() > 1; }
  bool causal() const { return right == 0; }
  // "full", "causal", "sliding_window(w=..)", ... with "_document" for several documents.
  std::string describe() const;
};

// Throws lca::Error(LCA_ERR_UNSUPPORTED) with a message when the mask is not such a band, and
// LCA_ERR_INVALID_ARGUMENT when it is malformed (slices outside the mask, bad doc_offsets).
MaskForm recognise(const lca_mask& mask);

}  // namespace lca_cudnn_sdpa
