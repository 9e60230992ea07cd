// Manifest parsing and validation; see manifest.hpp.
#include "core/plugin/manifest.hpp"

#include "core/plugin/text.hpp"
#include "core/report/json_brief.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

namespace lca::core {
namespace {

std::string format_error(const std::filesystem::path& file, int line, const std::string& field,
                         const std::string& reason) {
  std::ostringstream os;
  os << file.string();
  if (line > 0) os << ":" << line;
  os << ": ";
  if (!field.empty()) os << "field '" << field << "': ";
  os << reason;
  return os.str();
}

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ManifestError(file, 0, "", "cannot open the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::pair<int, int> line_col_of_offset(const std::string& text, size_t offset) {
  int line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

std::string type_of(const nlohmann::json& v) {
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  return "null";
}

bool has_type(const nlohmann::json& v, const std::string& t) {
  const std::string actual = type_of(v);
  if (t == "number") return actual == "number" || actual == "integer";
  return actual == t;
}

std::string join_pointer(const std::string& base, const std::string& key) { return base + "/" + key; }

// How likely an alternative of the oneOf at `ptr` is the one the author meant. An alternative
// whose discriminator (an enum) failed, or whose shape (the type at the oneOf's own pointer) did
// not match, was not meant; among the others, the one that got deepest.
int rank_failure(const SchemaViolation& v, const std::string& ptr) {
  const bool enum_mismatch = v.reason.rfind("value ", 0) == 0;
  const bool shape_mismatch = v.pointer == ptr && v.reason.rfind("expected ", 0) == 0;
  return (enum_mismatch || shape_mismatch ? 0 : 1000) + static_cast<int>(v.pointer.size());
}

SchemaViolation validate_at(const nlohmann::json& doc, const nlohmann::json& schema,
                            const std::string& ptr) {
  if (!schema.is_object()) return {};
  if (auto it = schema.find("type"); it != schema.end()) {
    if (!has_type(doc, it->get<std::string>()))
      return {ptr, "expected " + it->get<std::string>() + ", found " + type_of(doc)};
  }
  if (auto it = schema.find("enum"); it != schema.end()) {
    if (std::find(it->begin(), it->end(), doc) == it->end())
      return {ptr, "value " + json_brief(doc) + " is not one of " + it->dump()};
  }
  if (auto it = schema.find("minLength"); it != schema.end() && doc.is_string()) {
    if (doc.get<std::string>().size() < it->get<size_t>()) return {ptr, "must not be empty"};
  }
  if (auto it = schema.find("minimum"); it != schema.end() && doc.is_number()) {
    if (doc.get<double>() < it->get<double>()) return {ptr, "must be >= " + it->dump()};
  }
  if (doc.is_object()) {
    // Properties before required: a discriminator (the "kind" enum of a oneOf alternative) must
    // fail first, so that an alternative the author did not mean is not blamed for its fields.
    const auto props = schema.find("properties");
    for (const auto& [key, value] : doc.items()) {
      if (props != schema.end() && props->contains(key)) {
        auto v = validate_at(value, (*props)[key], join_pointer(ptr, key));
        if (!v.ok()) return v;
      } else if (auto ap = schema.find("additionalProperties");
                 ap != schema.end() && ap->is_boolean() && !ap->get<bool>()) {
        return {join_pointer(ptr, key), "is not a known field"};
      }
    }
    if (auto it = schema.find("required"); it != schema.end()) {
      for (const auto& key : *it) {
        const auto k = key.get<std::string>();
        if (!doc.contains(k)) return {join_pointer(ptr, k), "is required but missing"};
      }
    }
  }
  if (doc.is_array()) {
    if (auto it = schema.find("minItems"); it != schema.end() && doc.size() < it->get<size_t>())
      return {ptr, "needs at least " + it->dump() + " item(s)"};
    if (auto it = schema.find("items"); it != schema.end()) {
      for (size_t i = 0; i < doc.size(); ++i) {
        auto v = validate_at(doc[i], *it, join_pointer(ptr, std::to_string(i)));
        if (!v.ok()) return v;
      }
    }
  }
  if (auto it = schema.find("oneOf"); it != schema.end()) {
    SchemaViolation first_failure;
    int matches = 0;
    for (const auto& alt : *it) {
      auto v = validate_at(doc, alt, ptr);
      if (v.ok()) {
        ++matches;
      } else if (first_failure.ok() || rank_failure(v, ptr) > rank_failure(first_failure, ptr)) {
        first_failure = v;
      }
    }
    if (matches == 0) return first_failure;
  }
  return {};
}

// A scanner over text that nlohmann::json has already accepted, so it need not re-check syntax.
size_t skip_ws(const std::string& text, size_t i) {
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  return i;
}

// i is at the opening quote; returns the offset after the closing one.
size_t skip_string(const std::string& text, size_t i) {
  for (++i; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
    } else if (text[i] == '"') {
      return i + 1;
    }
  }
  return text.size();
}

// i is at the first character of a value; returns the offset after it.
size_t skip_value(const std::string& text, size_t i) {
  if (i >= text.size()) return i;
  if (text[i] == '"') return skip_string(text, i);
  if (text[i] == '{' || text[i] == '[') {
    int depth = 0;
    while (i < text.size()) {
      const char c = text[i];
      if (c == '"') {
        i = skip_string(text, i);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') --depth;
      ++i;
      if (depth == 0) return i;
    }
    return i;
  }
  while (i < text.size() && std::string_view(",}] \t\r\n").find(text[i]) == std::string_view::npos) ++i;
  return i;
}

// The line of the thing a JSON pointer names in text: the line of its key, or of the element for
// an array index. Where the pointer leads to a missing member, the line of the deepest part that
// exists; 0 when not even the first part exists.
int line_of_pointer(const std::string& text, const std::string& pointer) {
  size_t value = skip_ws(text, 0);  // the offset of the current value
  size_t found = std::string::npos;  // the offset of the deepest key or element found
  size_t begin = 1;
  while (begin <= pointer.size() && !pointer.empty()) {
    const size_t end = std::min(pointer.find('/', begin), pointer.size());
    const std::string part = pointer.substr(begin, end - begin);
    begin = end + 1;
    if (value >= text.size()) break;
    bool matched = false;
    if (text[value] == '{') {
      size_t i = skip_ws(text, value + 1);
      while (i < text.size() && text[i] == '"') {
        const size_t key_at = i;
        const size_t key_end = skip_string(text, i);
        const std::string key = text.substr(key_at + 1, key_end - key_at - 2);
        i = skip_ws(text, key_end);
        if (i < text.size() && text[i] == ':') i = skip_ws(text, i + 1);
        if (key == part) {
          found = key_at;
          value = i;
          matched = true;
          break;
        }
        i = skip_ws(text, skip_value(text, i));
        if (i < text.size() && text[i] == ',') i = skip_ws(text, i + 1);
      }
    } else if (text[value] == '[' && !part.empty() &&
               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const size_t index = std::stoul(part);
      size_t i = skip_ws(text, value + 1);
      for (size_t n = 0; n < index && i < text.size() && text[i] != ']'; ++n) {
        i = skip_ws(text, skip_value(text, i));
        if (i < text.size() && text[i] == ',') i = skip_ws(text, i + 1);
      }
      if (i < text.size() && text[i] != ']') {
        found = i;
        value = i;
        matched = true;
      }
    }
    if (!matched) break;
  }
  return found == std::string::npos ? 0 : line_col_of_offset(text, found).first;
}

int parse_cc(const std::string& s) {
  const auto dot = s.find('.');
  if (dot == std::string::npos) return std::stoi(s) * 10;
  return std::stoi(s.substr(0, dot)) * 10 + std::stoi(s.substr(dot + 1));
}

}  // namespace

ManifestError::ManifestError(std::filesystem::path file, int line, std::string field,
                             std::string reason)
    : std::runtime_error(valid_utf8(format_error(file, line, field, reason))),
      file_(std::move(file)),
      line_(line),
      field_(std::move(field)),
      reason_(std::move(reason)) {}

int line_of_key(const std::string& text, const std::string& key) {
  const auto pos = text.find("\"" + key + "\"");
  if (pos == std::string::npos) return 0;
  return line_col_of_offset(text, pos).first;
}

SchemaViolation validate_schema(const nlohmann::json& doc, const nlohmann::json& schema) {
  return validate_at(doc, schema, "");
}

bool KernelCaps::supports_mask(const std::string& mask) const {
  return any_mask || std::find(masks.begin(), masks.end(), mask) != masks.end();
}
bool KernelCaps::supports_head_dim(int d) const {
  return any_head_dim || std::find(head_dims.begin(), head_dims.end(), d) != head_dims.end();
}
bool KernelCaps::supports_dtype(const std::string& dtype) const {
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

namespace {

// The deepest nesting of arrays and objects, counted without recursion: a manifest's values are
// printed (`masks`, `caps --format json`) by dump(), which recurses once a level.
size_t nesting_depth(const nlohmann::json& doc) {
  size_t deepest = 0;
  std::vector<std::pair<const nlohmann::json*, size_t>> todo{{&doc, 0}};
  while (!todo.empty()) {
    const auto [value, depth] = todo.back();
    todo.pop_back();
    if (!value->is_structured()) continue;
    deepest = std::max(deepest, depth + 1);
    for (const auto& child : *value) todo.emplace_back(&child, depth + 1);
  }
  return deepest;
}

constexpr size_t kMaxManifestDepth = 32;

}  // namespace

Manifest parse_manifest(const std::filesystem::path& file, const nlohmann::json& schema) {
  const std::string text = read_file(file);
  // Before the JSON parser: its message quotes the bad bytes, which no record could hold.
  if (const size_t bad = first_invalid_utf8(text); bad != std::string::npos) {
    const auto [line, col] = line_col_of_offset(text, bad);
    throw ManifestError(file, line, "",
                        "not valid UTF-8 (column " + std::to_string(col) + ", byte " + std::to_string(bad) +
                            "); save the manifest as UTF-8");
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const auto [line, col] = line_col_of_offset(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string what = e.what();
    if (auto p = what.find("parse error"); p != std::string::npos) what = what.substr(p);
    throw ManifestError(file, line, "",
                        "not valid JSON (column " + std::to_string(col) + "): " + what);
  } catch (const nlohmann::json::exception& e) {  // a number past double's range: out_of_range.406
    throw ManifestError(file, 0, "", std::string("not valid JSON: ") + e.what());
  }
  if (nesting_depth(doc) > kMaxManifestDepth)
    throw ManifestError(file, 0, "", "nests arrays and objects deeper than " + std::to_string(kMaxManifestDepth) +
                                         " levels");
  if (auto v = validate_schema(doc, schema); !v.ok()) {
    std::string field = v.pointer.empty() ? "" : v.pointer.substr(1);
    std::replace(field.begin(), field.end(), '/', '.');
    throw ManifestError(file, line_of_pointer(text, v.pointer), field,
                        v.reason + " (see manifests/manifest.schema.json)");
  }

  Manifest m;
  m.file = file;
  m.json = doc;
  m.name = doc["name"].get<std::string>();
  m.kind = doc["kind"].get<std::string>();
  m.version = doc["version"].get<std::string>();
  m.library = doc["library"].get<std::string>();
  m.description = doc.value("description", "");
  const auto abi = doc["abi"].get<std::string>();
  const auto dot = abi.find('.');
  try {
    m.abi_major = std::stoi(abi.substr(0, dot));
    m.abi_minor = dot == std::string::npos ? 0 : std::stoi(abi.substr(dot + 1));
  } catch (const std::exception&) {
    throw ManifestError(file, line_of_pointer(text, "/abi"), "abi",
                        "'" + abi + "' is not MAJOR.MINOR (e.g. \"1.0\")");
  }

  if (m.kind == "kernel") {
    KernelCaps& k = m.kernel;
    k.device = doc["device"]["type"].get<std::string>();
    if (doc["device"].contains("min_cc")) {
      try {
        k.min_cc = parse_cc(doc["device"]["min_cc"].get<std::string>());
      } catch (const std::exception&) {
        throw ManifestError(file, line_of_pointer(text, "/device/min_cc"), "device.min_cc",
                            "not a compute capability like \"9.0\"");
      }
    }
    k.dtypes = doc["dtypes"].get<std::vector<std::string>>();
    if (doc["head_dims"].is_string()) {
      k.any_head_dim = true;
    } else {
      k.head_dims = doc["head_dims"].get<std::vector<int>>();
    }
    k.gqa = doc["gqa"].get<bool>();
    k.backward = doc["backward"].get<bool>();
    k.varlen = doc["varlen"].get<bool>();
    if (doc["masks"].is_string()) {
      k.any_mask = true;
    } else {
      k.masks = doc["masks"].get<std::vector<std::string>>();
    }
    if (doc.contains("limits")) k.max_seqlen = doc["limits"].value("max_seqlen", int64_t{0});
    k.reference = doc.value("reference", "");
  } else if (m.kind == "mask_provider") {
    for (const auto& p : doc["patterns"]) {
      MaskPatternInfo info;
      info.name = p["name"].get<std::string>();
      info.category = p["category"].get<std::string>();
      info.summary = p.value("summary", "");
      if (p.contains("params")) {
        info.params = p["params"];
        info.params_declared = true;
      }
      m.patterns.push_back(std::move(info));
    }
  } else if (m.kind == "cp_strategy") {
    m.cp.devices = doc["devices"].get<std::vector<std::string>>();
    if (doc["masks"].is_string()) {
      m.cp.any_mask = true;
    } else {
      m.cp.any_mask = false;
      m.cp.masks = doc["masks"].get<std::vector<std::string>>();
    }
    m.cp.backward = doc["backward"].get<bool>();
    if (doc.contains("options")) m.cp.options = doc["options"];
  }
  return m;
}

}  // namespace lca::core
