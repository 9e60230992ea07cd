// Mask specs and generation through provider plugins; see mask_source.hpp.
#include "core/mask/mask_source.hpp"

#include <lca/types.hpp>

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace lca::core {

MaskSpec MaskSpec::parse(const std::string& text) {
  // Parameters travel to the provider as JSON, which holds only UTF-8: refuse here, by name,
  // rather than with the JSON library's message at the first cell. The text is not echoed.
  try {
    (void)nlohmann::json(text).dump();
  } catch (const nlohmann::json::type_error&) {
    throw std::invalid_argument("a mask spec is not valid UTF-8 text");
  }
  MaskSpec spec;
  const auto colon = text.find(':');
  spec.pattern = text.substr(0, colon);
  if (spec.pattern.empty()) throw std::invalid_argument("mask spec '" + text + "' has no pattern name");
  if (colon == std::string::npos) return spec;
  std::stringstream rest(text.substr(colon + 1));
  std::string item;
  while (std::getline(rest, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("mask spec '" + text + "': parameter '" + item +
                                  "' is not key=value");
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    try {
      size_t used = 0;
      const long long i = std::stoll(value, &used);
      if (used == value.size()) {
        spec.params[key] = i;
        continue;
      }
      const double d = std::stod(value, &used);
      // nan and inf would reach the provider as JSON null: leave them text, refused by name.
      if (used == value.size() && std::isfinite(d)) {
        spec.params[key] = d;
        continue;
      }
    } catch (const std::exception&) {
    }
    spec.params[key] = value;
  }
  return spec;
}

std::vector<std::string> split_mask_list(const std::string& list) {
  std::vector<std::string> specs;
  std::stringstream in(list);
  std::string piece;
  while (std::getline(in, piece, ',')) {
    if (piece.empty()) continue;
    const auto eq = piece.find('=');
    const bool is_parameter = eq != std::string::npos && piece.find(':') > eq;
    if (!is_parameter) {
      specs.push_back(piece);
      continue;
    }
    if (specs.empty() || specs.back().find(':') == std::string::npos)
      throw std::invalid_argument("mask list '" + list + "': parameter '" + piece + "' follows " +
                                  (specs.empty() ? std::string("no mask") : "'" + specs.back() + "', which has no ':'") +
                                  "; write mask:key=value,key2=value2 (e.g. sliding_window:window=64)");
    specs.back() += "," + piece;
  }
  return specs;
}

std::string MaskSpec::label() const {
  std::string out = pattern;
  char sep = ':';
  for (const auto& [k, v] : params.items()) {
    out += sep;
    out += k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
    sep = ',';
  }
  return out;
}

int64_t mask_area(const lca_mask& mask) {
  int64_t area = 0;
  for (int64_t i = 0; i < mask.num_slices; ++i)
    area = lca::checked_sum("mask area", area, lca::slice_area(mask.slices[i]));
  return area;
}

GeneratedMask::GeneratedMask(std::shared_ptr<MaskProviderInstance> provider, lca_mask_handle* handle)
    : provider_(std::move(provider)), handle_(handle), mask_(provider_->vtable().get(handle)),
      area_(mask_area(*mask_)) {}

GeneratedMask::~GeneratedMask() { provider_->vtable().release(provider_->get(), handle_); }

MaskSource::MaskSource(const Registry& registry) : registry_(registry) {
  for (const auto* rec : registry.loaded("mask_provider"))
    for (const auto& p : rec->manifest.patterns)
      if (find(p.name) == nullptr) patterns_.push_back({p, rec->name()});
}

const MaskSource::Entry* MaskSource::find(const std::string& pattern) const {
  for (const auto& e : patterns_)
    if (e.info.name == pattern) return &e;
  return nullptr;
}

std::shared_ptr<GeneratedMask> MaskSource::generate(const MaskSpec& spec, int64_t seqlen,
                                                    uint64_t seed) {
  // Before the provider is asked: its slices are O(1) at any length, but the area and every
  // buffer of the cell are not.
  if (seqlen < 1 || seqlen > lca::max_seqlen)
    throw std::runtime_error("mask '" + spec.label() + "': seqlen = " + std::to_string(seqlen) +
                             " is out of range; allowed: " + lca::seqlen_allowed());
  const auto key = std::make_tuple(spec.label(), seqlen, seed);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  const Entry* entry = find(spec.pattern);
  if (entry == nullptr) {
    std::string known;
    for (const auto& e : patterns_) known += (known.empty() ? "" : ", ") + e.info.name;
    throw std::runtime_error("unknown mask '" + spec.pattern + "'; known masks: " +
                             (known.empty() ? "(no mask provider loaded)" : known));
  }
  auto& provider = providers_[entry->provider];
  if (!provider) provider = registry_.make_mask_provider(*registry_.find(entry->provider, "mask_provider"));
  const std::string params = spec.params.dump();
  const lca_mask_request request{sizeof(lca_mask_request), spec.pattern.c_str(), params.c_str(),
                                 seqlen, seed};
  lca_mask_handle* handle = nullptr;
  if (provider->vtable().generate(provider->get(), &request, &handle) != LCA_OK || !handle)
    throw std::runtime_error("mask '" + spec.label() + "' at " + std::to_string(seqlen) +
                             " tokens: " + provider->vtable().last_error());
  auto made = std::make_shared<GeneratedMask>(provider, handle);
  // Keep only a handful of masks alive: at 4M tokens a document mask is still small, but a
  // block-sparse one is not.
  if (cache_.size() >= 16) cache_.clear();
  cache_[key] = made;
  return made;
}

}  // namespace lca::core
