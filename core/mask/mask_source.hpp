// Masks for the host: parses mask specs ("sliding_window:window=4096"), finds the provider
// plugin that offers each pattern and generates masks through it, cached per (spec, length, seed).
// Rule: a GeneratedMask keeps its provider (and library) alive; hold it while the mask is in use.
#pragma once

#include "core/plugin/registry.hpp"

#include <lca/abi.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace lca::core {

struct MaskSpec {
  std::string pattern;
  nlohmann::json params = nlohmann::json::object();

  // "name" or "name:k=v,k2=v2"; numbers become numbers. Throws std::invalid_argument.
  static MaskSpec parse(const std::string& text);
  // Canonical text form, e.g. "sliding_window:window=4096" (parameters in key order).
  std::string label() const;
};

// A comma-separated list of mask specs, as --masks takes it: "causal,sliding_window:window=64".
// The comma also separates one mask's parameters, so a piece that is key=value (an '=' before
// any ':') continues the mask before it: "global_sliding:window=700,global_tokens=333,causal" is
// two masks. Throws std::invalid_argument for a parameter with no mask before it that takes one.
std::vector<std::string> split_mask_list(const std::string& list);

class GeneratedMask {
 public:
  GeneratedMask(std::shared_ptr<MaskProviderInstance> provider, lca_mask_handle* handle);
  ~GeneratedMask();
  GeneratedMask(const GeneratedMask&) = delete;
  GeneratedMask& operator=(const GeneratedMask&) = delete;

  const lca_mask& mask() const { return *mask_; }
  int64_t area() const { return area_; }  // unmasked cells, exact

 private:
  std::shared_ptr<MaskProviderInstance> provider_;
  lca_mask_handle* handle_;
  const lca_mask* mask_;
  int64_t area_;
};

// Exact count of unmasked cells of a mask (sum of slice areas; slices never overlap).
int64_t mask_area(const lca_mask& mask);

class MaskSource {
 public:
  explicit MaskSource(const Registry& registry);

  // Every pattern offered by a loaded provider, with the provider's name.
  struct Entry {
    MaskPatternInfo info;
    std::string provider;
  };
  const std::vector<Entry>& patterns() const { return patterns_; }
  const Entry* find(const std::string& pattern) const;

  // Throws std::runtime_error with the provider's message (unknown pattern, bad parameter).
  std::shared_ptr<GeneratedMask> generate(const MaskSpec& spec, int64_t seqlen, uint64_t seed);
  void clear_cache() { cache_.clear(); }

 private:
  const Registry& registry_;
  std::vector<Entry> patterns_;
  std::map<std::string, std::shared_ptr<MaskProviderInstance>> providers_;
  std::map<std::tuple<std::string, int64_t, uint64_t>, std::shared_ptr<GeneratedMask>> cache_;
};

}  // namespace lca::core
