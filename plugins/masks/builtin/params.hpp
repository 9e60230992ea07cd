// Pattern parameters of the builtin mask provider: the declared list (name, type, default, doc)
// and the values of one request, parsed from lca_mask_request::params_json and checked.
// Used by the catalogue (describe) and by every pattern generator.
// Rule: a generator reads only parameters its PatternSpec declares; anything else is refused.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace lca::masks {

struct ParamSpec {
  std::string name;
  std::string type;  // "int", "float" or "string"
  nlohmann::json default_value;
  std::string doc;
};

// Throws lca::Error(LCA_ERR_INVALID_ARGUMENT, message).
[[noreturn]] void invalid_argument(const std::string& message);

// Text from a request (a name, a key, a value) for a one-line message: control characters as
// '?', cut near 80 bytes at a character boundary.
std::string shown(const std::string& text);

class Params {
 public:
  // Parses `json_text` (NULL or empty means "{}") and refuses unknown names and ill-typed values.
  Params(std::string pattern, const std::vector<ParamSpec>& specs, const char* json_text);

  const std::string& pattern() const { return pattern_; }
  bool given(const std::string& name) const { return values_.contains(name); }
  // The given value, or the declared default.
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  std::string get_string(const std::string& name) const;

  // Refuses value outside [lo, hi] with a message naming pattern, parameter, value and range.
  void require_range(const std::string& name, int64_t value, int64_t lo, int64_t hi,
                     const std::string& what_hi = "") const;

 private:
  const ParamSpec& spec(const std::string& name) const;
  std::string pattern_;
  const std::vector<ParamSpec>* specs_;
  nlohmann::json values_;  // an object holding only declared names, already type-checked
};

}  // namespace lca::masks
