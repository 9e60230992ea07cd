#include "params.hpp"

#include <lca/error.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace lca::masks {

void invalid_argument(const std::string& message) {
  throw lca::Error(LCA_ERR_INVALID_ARGUMENT, message);
}

std::string shown(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (out.size() >= 77) {
      while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
      if (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0xC0) out.pop_back();
      return out + "...";
    }
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  return out;
}

namespace {

// A parameter's value for a message. Not dump() of a whole array or object: it recurses once a
// level (a 200000-deep value overflows the stack) and may print megabytes.
std::string brief(const nlohmann::json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " item(s)";
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " field(s)";
  return shown(v.dump());
}

enum class Parsed { ok, wrong_type, out_of_range };

// Integers arrive as JSON numbers or, from command lines, as strings of digits; either may lie
// beyond int64_t (a JSON unsigned above 2^63 - 1 would otherwise wrap to a negative, so 2^64 - 1
// would read as -1).
Parsed to_int(const nlohmann::json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Parsed::out_of_range;
    *out = static_cast<int64_t>(v.get<uint64_t>());
    return Parsed::ok;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return Parsed::ok;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return Parsed::wrong_type;
    if (std::fabs(d) >= 9.0e18) return Parsed::out_of_range;
    *out = static_cast<int64_t>(d);
    return Parsed::ok;
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.empty()) return Parsed::wrong_type;
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(s.c_str(), &end, 10);
    if (end != s.c_str() + s.size()) return Parsed::wrong_type;
    if (errno == ERANGE) return Parsed::out_of_range;
    if (errno != 0) return Parsed::wrong_type;
    *out = x;
    return Parsed::ok;
  }
  return Parsed::wrong_type;
}

bool to_float(const nlohmann::json& v, double* out) {
  if (v.is_number()) {
    *out = v.get<double>();
    return std::isfinite(*out);
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.empty()) return false;
    char* end = nullptr;
    errno = 0;
    *out = std::strtod(s.c_str(), &end);
    return errno == 0 && end == s.c_str() + s.size() && std::isfinite(*out);
  }
  return false;
}

}  // namespace

Params::Params(std::string pattern, const std::vector<ParamSpec>& specs, const char* json_text)
    : pattern_(std::move(pattern)), specs_(&specs), values_(nlohmann::json::object()) {
  const std::string text = (json_text == nullptr || *json_text == '\0') ? "{}" : json_text;
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    invalid_argument(pattern_ + ": params_json must be a JSON object, got '" + shown(text) + "'");
  }
  for (auto it = parsed.begin(); it != parsed.end(); ++it) {
    const ParamSpec* found = nullptr;
    for (const auto& s : specs)
      if (s.name == it.key()) found = &s;
    if (found == nullptr) {
      std::string allowed;
      for (const auto& s : specs) allowed += (allowed.empty() ? "" : ", ") + s.name;
      invalid_argument(pattern_ + ": unknown parameter '" + shown(it.key()) + "'; allowed: " +
                       (allowed.empty() ? "none" : allowed));
    }
    int64_t i = 0;
    double f = 0;
    bool ok = false;
    if (found->type == "int") {
      const Parsed parsed = to_int(it.value(), &i);
      if (parsed == Parsed::out_of_range) {
        invalid_argument(pattern_ + ": parameter '" + shown(it.key()) + "' = " + brief(it.value()) +
                         " is out of range; allowed: " + found->doc);
      }
      ok = parsed == Parsed::ok;
      if (ok) values_[it.key()] = i;
    } else if (found->type == "float") {
      ok = to_float(it.value(), &f);
      if (ok) values_[it.key()] = f;
    } else {
      ok = it.value().is_string();
      if (ok) values_[it.key()] = it.value();
    }
    if (!ok) {
      invalid_argument(pattern_ + ": parameter '" + shown(it.key()) + "' = " + brief(it.value()) +
                       " is not a valid " + found->type);
    }
  }
}

const ParamSpec& Params::spec(const std::string& name) const {
  for (const auto& s : *specs_)
    if (s.name == name) return s;
  throw lca::Error(LCA_ERR_INTERNAL, pattern_ + ": reads undeclared parameter '" + name + "'");
}

int64_t Params::get_int(const std::string& name) const {
  const auto& s = spec(name);
  return given(name) ? values_.at(name).get<int64_t>() : s.default_value.get<int64_t>();
}

double Params::get_float(const std::string& name) const {
  const auto& s = spec(name);
  return given(name) ? values_.at(name).get<double>() : s.default_value.get<double>();
}

std::string Params::get_string(const std::string& name) const {
  const auto& s = spec(name);
  return given(name) ? values_.at(name).get<std::string>() : s.default_value.get<std::string>();
}

void Params::require_range(const std::string& name, int64_t value, int64_t lo, int64_t hi,
                           const std::string& what_hi) const {
  if (value < lo || value > hi) {
    invalid_argument(pattern_ + ": parameter '" + name + "' = " + std::to_string(value) +
                     " is out of range; allowed: " + std::to_string(lo) + " <= " + name +
                     " <= " + (what_hi.empty() ? std::to_string(hi) : what_hi));
  }
}

}  // namespace lca::masks
