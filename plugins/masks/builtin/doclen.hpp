// Document-length distributions (histograms from manifests/data/doclen_<name>.json, or a
// synthetic "uniform:LO-HI") and the packer that samples documents to exactly seqlen tokens.
// Used by the document patterns of the builtin mask provider. "long:<dist>" mixes <dist> with
// long documents as LongCA-bench's full_document_long and causal_document_long do.
// Rule: sampling goes through Rng and integer weights only, so a seed packs the same everywhere.
#pragma once

#include "rng.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace lca::masks {

struct DocLengthDistribution {
  std::string name;
  std::vector<std::pair<int64_t, int64_t>> bins;  // [lo, hi) in tokens
  std::vector<uint64_t> ticks;                    // integer weights, same length as bins
  uint64_t total_ticks = 0;

  // One document length, >= 1: a bin chosen by weight, then uniform inside it.
  int64_t sample(Rng& rng) const;
};

// The names the data folder is expected to hold (doclen_<name>.json).
const std::vector<std::string>& known_distributions();

// "auto" picks by total length, as LongCA-bench does: pile up to 12K tokens, prolong64k up to
// 64K, prolong512k beyond. Any other name is returned unchanged.
std::string resolve_distribution_name(const std::string& name, int64_t seqlen);

class DistributionLibrary {
 public:
  explicit DistributionLibrary(std::filesystem::path data_dir) : dir_(std::move(data_dir)) {}
  // `pattern` only labels error messages. Throws LCA_ERR_INVALID_ARGUMENT for an unknown name.
  const DocLengthDistribution& get(const std::string& name, const std::string& pattern);
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::mutex mutex_;
  std::map<std::string, DocLengthDistribution> cache_;
};

// cu_seqlens of documents drawn from `dist` until exactly `seqlen` tokens (the last one cut):
// offsets[0] = 0, offsets.back() = seqlen, strictly increasing.
std::vector<int64_t> pack_documents(const DocLengthDistribution& dist, int64_t seqlen, Rng& rng);

// The "long:<dist>" form: documents of `short_dist` hold floor(seqlen x 2/5) tokens, documents
// of long_document_min..long_document_max the rest (the last of each share cut to fit, so a long
// share under long_document_min is one document); the documents are then shuffled.
// Same offsets contract as pack_documents.
inline constexpr const char* long_prefix = "long:";
inline constexpr int64_t long_document_min = 8 * 1024;   // inclusive
inline constexpr int64_t long_document_max = 30 * 1024;  // exclusive, as histogram bins are
int64_t long_share_short_tokens(int64_t seqlen);
std::vector<int64_t> pack_long_documents(const DocLengthDistribution& short_dist, int64_t seqlen, Rng& rng);

}  // namespace lca::masks
