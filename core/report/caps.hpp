// Capability tables from manifests: `lcahost list` (every plugin and its status) and
// `lcahost caps` (kernel x device, dtypes, head dims, GQA, backward, varlen, masks).
// Rule: these read manifests only; nothing here creates a plugin object.
#pragma once

#include "core/plugin/registry.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace lca::core {

struct CapsFilter {
  std::optional<std::string> mask;   // kernels that can run this mask
  bool backward = false;             // kernels with a backward pass
  std::optional<std::string> dtype;
  std::optional<std::string> device;
  std::optional<int> head_dim;
};

// format: "table", "md" or "json". all_masks: the pattern names of the loaded providers, used
// to spell out "any".
void print_plugin_list(const Registry& registry, const std::string& format, std::ostream& out);
void print_caps(const Registry& registry, const std::vector<std::string>& all_masks,
                const CapsFilter& filter, const std::string& format, std::ostream& out);

// Rows of strings printed as an aligned table or Markdown.
void print_rows(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
                bool markdown, std::ostream& out);

}  // namespace lca::core
