// flex_flash's options from config_json; see options.hpp.
#include "options.hpp"

#include <lca/abi.h>
#include <lca/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace lca_flex_flash {

namespace {

// Each option's values in one table: the name a user writes, the value it sets.
template <class E>
using Names = std::vector<std::pair<const char*, E>>;

const Names<ForwardChoice> kForward = {
    {"mma", ForwardChoice::mma},
    {"sm90", ForwardChoice::sm90},
    {"sm90_overlap", ForwardChoice::sm90_overlap},
    {"sm90_pingpong", ForwardChoice::sm90_pingpong},
    {"sm90_k128", ForwardChoice::sm90_k128},
    {"sm90_k128_pingpong", ForwardChoice::sm90_k128_pingpong},
    {"sm90_persistent", ForwardChoice::sm90_persistent},
    {"sm90_pair", ForwardChoice::sm90_pair},
    {"sm90_pair64", ForwardChoice::sm90_pair64},
    {"sm90_k128_wg3", ForwardChoice::sm90_k128_wg3},
    {"sm90_overlap_wg3", ForwardChoice::sm90_overlap_wg3}};

const Names<BackwardChoice> kBackward = {
    {"mma", BackwardChoice::mma},
    {"sm90", BackwardChoice::sm90},
    {"sm90_atomic", BackwardChoice::sm90_atomic},
    {"sm90_unpaired", BackwardChoice::sm90_unpaired},
    {"sm90_paired", BackwardChoice::sm90_paired},
    {"sm90_skip", BackwardChoice::sm90_skip},
    {"sm90_noskip", BackwardChoice::sm90_noskip},
    {"sm90_rotate", BackwardChoice::sm90_rotate}};

const Names<int32_t> kFwdOrder = {{"heads_outer", 1}, {"heads_2", 2},   {"heads_4", 4},
                                  {"heads_8", 8},     {"heads_16", 16}, {"heads_inner", -1}};
const Names<int32_t> kOrder = {{"kv_heads_outer", 1}, {"kv_heads_inner", -1}, {"kv_heads_2", 2}, {"kv_heads_4", 4}};
const Names<int32_t> kFwdSum = {{"fadd", 0}, {"mma", 1}, {"mma_beside", 2}};
const Names<int32_t> kFwdSplit = {{"off", 1},     {"auto", -1},    {"parts_2", 2},  {"parts_3", 3},
                                   {"parts_4", 4}, {"long_2", 12},  {"long_3", 13},  {"long_4", 14}};
const Names<Switch> kSplit = {{"off", Switch::kOff}, {"all", Switch::kOn}};
const Names<Switch> kOffOn = {{"off", Switch::kOff}, {"on", Switch::kOn}};

template <class E>
std::string allowed(const Names<E>& names) {
  std::string s;
  for (const auto& [name, value] : names) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

template <class E>
E value_of(const Names<E>& names, const std::string& option, const nlohmann::json& v) {
  if (v.is_string())
    for (const auto& [name, value] : names)
      if (v.get<std::string>() == name) return value;
  throw lca::Error(LCA_ERR_INVALID_ARGUMENT, "flex_flash: option '" + option + "' = " + v.dump() +
                                                 " is not one of: " + allowed(names) +
                                                 " (leave it out for plan()'s choice)");
}

template <class E>
const char* name_of(const Names<E>& names, E value, const char* fallback) {
  for (const auto& [name, v] : names)
    if (v == value) return name;
  return fallback;
}

// A count of places (bwd_ranges): an integer from 0 to 2^24, as a number or a string of digits (the
// tests' option=value pairs).
int32_t places_of(const std::string& option, const nlohmann::json& v) {
  constexpr int64_t kMost = int64_t{1} << 24;
  int64_t n = -1;
  if (v.is_number_integer()) n = v.get<int64_t>();
  else if (v.is_string() && !v.get<std::string>().empty() &&
           v.get<std::string>().find_first_not_of("0123456789") == std::string::npos && v.get<std::string>().size() < 9)
    n = std::stoll(v.get<std::string>());
  if (n < 0 || n > kMost)
    throw lca::Error(LCA_ERR_INVALID_ARGUMENT, "flex_flash: option '" + option + "' = " + v.dump() +
                                                   " is not a count of places from 0 (never) to 16777216 "
                                                   "(leave it out for plan()'s choice)");
  return static_cast<int32_t>(n);
}

}  // namespace

Options parse_options(const std::string& config_json) {
  Options o;
  if (config_json.empty()) return o;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::exception& e) {
    throw lca::Error(LCA_ERR_INVALID_ARGUMENT, std::string("flex_flash: options are not valid JSON: ") + e.what());
  }
  if (j.is_null()) return o;
  if (!j.is_object())
    throw lca::Error(LCA_ERR_INVALID_ARGUMENT, "flex_flash: options must be a JSON object, found " + j.dump());
  for (const auto& [key, v] : j.items()) {
    if (key == "forward") o.forward = value_of(kForward, key, v);
    else if (key == "backward") o.backward = value_of(kBackward, key, v);
    else if (key == "bwd_order") o.bwd_order = value_of(kOrder, key, v);
    else if (key == "bwd_split") o.bwd_split = value_of(kSplit, key, v);
    else if (key == "bwd_ranges") o.bwd_ranges = places_of(key, v);
    else if (key == "fwd_order") o.fwd_order = value_of(kFwdOrder, key, v);
    else if (key == "fwd_sum") o.fwd_sum = value_of(kFwdSum, key, v);
    else if (key == "fwd_split") o.fwd_split = value_of(kFwdSplit, key, v);
    else if (key == "bwd_match") o.bwd_match = value_of(kOffOn, key, v);
    else if (key == "bwd_local") o.bwd_local = value_of(kOffOn, key, v);
    else if (key == "dq_first") o.dq_first = value_of(kOffOn, key, v);
    else if (key == "bwd_dv_first") o.bwd_dv_first = value_of(kOffOn, key, v);
    else
      throw lca::Error(LCA_ERR_INVALID_ARGUMENT,
                       "flex_flash: unknown option '" + key +
                           "' (options: forward, backward, fwd_order, fwd_sum, fwd_split, bwd_order, bwd_split, bwd_ranges, bwd_match, bwd_local, dq_first, bwd_dv_first; "
                           "see plugins/kernels/flex_flash/README.md)");
  }
  return o;
}

int32_t forced_heads_together(int32_t fwd_order, int32_t heads) {
  if (heads <= 1) return 1;
  if (fwd_order < 0 || fwd_order >= heads) return heads;
  int32_t g = std::max(fwd_order, 1);
  while (heads % g != 0) --g;
  return g;
}

const char* forward_choice_name(ForwardChoice c) { return name_of(kForward, c, ""); }
const char* backward_choice_name(BackwardChoice c) { return name_of(kBackward, c, ""); }

BackwardChoice backward_choice(const std::string& name) {
  if (name.empty()) return BackwardChoice::sm90_auto;
  return value_of(kBackward, "backward", nlohmann::json(name));
}

}  // namespace lca_flex_flash
