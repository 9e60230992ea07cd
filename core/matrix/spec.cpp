// Matrix spec loading; see spec.hpp.
#include "core/matrix/spec.hpp"

#include "core/plugin/text.hpp"
#include "core/report/json_brief.hpp"

#include <lca/checked.hpp>
#include <lca/types.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <type_traits>

namespace lca::core {
namespace {

[[noreturn]] void bad(const std::filesystem::path& source, const std::string& field,
                      const std::string& why) {
  throw std::runtime_error("matrix spec " + source.string() + ": field '" + field + "': " + why);
}

// nlohmann::json converts 64.7 to the int 64, -1 to a huge unsigned and 2^32 + 64 to the int 64;
// counts must be exact and in range.
template <class T>
void require_exact(const nlohmann::json& v, const std::filesystem::path& source, const std::string& field) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!v.is_number_integer()) bad(source, field, "must be an integer, found " + json_brief(v));
    using limits = std::numeric_limits<T>;
    const bool in_range = v.is_number_unsigned()
                              ? v.get<uint64_t>() <= static_cast<uint64_t>(limits::max())
                              : v.get<int64_t>() >= static_cast<int64_t>(limits::min()) &&
                                    (std::is_unsigned_v<T> || v.get<int64_t>() <= static_cast<int64_t>(limits::max()));
    if (!in_range) {
      if (std::is_unsigned_v<T> && !v.is_number_unsigned())
        bad(source, field, "must not be negative, found " + json_brief(v));
      bad(source, field, "is out of range, found " + json_brief(v) + "; allowed: " + std::to_string(limits::min()) +
                             " to " + std::to_string(limits::max()));
    }
  }
}

// A scalar field, or fallback where it is absent.
template <class T>
T scalar_of(const nlohmann::json& doc, const char* field, const std::filesystem::path& source, T fallback) {
  if (!doc.contains(field)) return fallback;
  const auto& v = doc[field];
  require_exact<T>(v, source, field);
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception& e) {
    bad(source, field, std::string("has the wrong type: ") + e.what());
  }
}

template <class T>
std::vector<T> list_of(const nlohmann::json& doc, const char* field,
                       const std::filesystem::path& source, std::vector<T> fallback) {
  if (!doc.contains(field)) {
    if (fallback.empty()) bad(source, field, "is required");
    return fallback;
  }
  const auto& v = doc[field];
  if (v.is_array()) {
    for (const auto& item : v) require_exact<T>(item, source, field);
  } else {
    require_exact<T>(v, source, field);
  }
  try {
    if (!v.is_array()) return {v.get<T>()};
    auto out = v.get<std::vector<T>>();
    if (out.empty()) bad(source, field, "must not be empty");
    return out;
  } catch (const nlohmann::json::exception& e) {
    bad(source, field, std::string("has the wrong type: ") + e.what());
  }
}

// The "kernels" field: names and {"kernel", "options", "label"} objects, labels unique.
std::vector<KernelEntry> kernels_of(const nlohmann::json& doc, const std::filesystem::path& source) {
  if (!doc.contains("kernels")) return {KernelEntry("*")};
  const auto& v = doc["kernels"];
  const nlohmann::json items = v.is_array() ? v : nlohmann::json::array({v});
  if (items.empty()) bad(source, "kernels", "must not be empty");
  const std::string form = "each entry is a kernel name or {\"kernel\": NAME, \"options\": {...}, \"label\": TEXT}";
  std::vector<KernelEntry> out;
  for (const auto& item : items) {
    if (item.is_string()) {
      if (item.get<std::string>().empty()) bad(source, "kernels", "a kernel name is empty");
      out.emplace_back(item.get<std::string>());
      continue;
    }
    if (!item.is_object()) bad(source, "kernels", form + ", found " + item.dump());
    for (const auto& [key, value] : item.items())
      if (key != "kernel" && key != "options" && key != "label")
        bad(source, "kernels", "'" + key + "' in " + item.dump() + ": " + form);
    if (!item.contains("kernel") || !item["kernel"].is_string() || item["kernel"].get<std::string>().empty())
      bad(source, "kernels", "\"kernel\" must name a kernel in " + item.dump());
    const std::string name = item["kernel"].get<std::string>();
    const nlohmann::json options = item.value("options", nlohmann::json::object());
    if (!options.is_object()) bad(source, "kernels", "\"options\" must be a JSON object in " + item.dump());
    if (name == "*" && !options.empty()) bad(source, "kernels", "\"*\" takes no options (name the kernel)");
    if (item.contains("label") && (!item["label"].is_string() || item["label"].get<std::string>().empty()))
      bad(source, "kernels", "\"label\" must be a non-empty string in " + item.dump());
    out.emplace_back(name, options, item.value("label", ""));
  }
  std::set<std::string> labels;
  for (const auto& e : out)
    if (!labels.insert(e.label).second)
      bad(source, "kernels", "two entries are labelled '" + e.label + "': give each its own \"label\"");
  return out;
}

}  // namespace

KernelEntry::KernelEntry(std::string kernel, nlohmann::json opts, std::string row_label)
    : name(std::move(kernel)), options(std::move(opts)), label(std::move(row_label)) {
  if (label.empty()) label = default_kernel_label(name, options);
}

std::string default_kernel_label(const std::string& name, const nlohmann::json& options) {
  if (!options.is_object() || options.empty()) return name;
  std::string text;
  for (const auto& [key, value] : options.items())
    text += (text.empty() ? "" : ",") + key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
  return name + "[" + text + "]";
}

void select_kernels(MatrixSpec& spec, const std::vector<std::string>& names, const std::vector<std::string>& options) {
  if (!names.empty()) {
    std::vector<KernelEntry> chosen;
    std::set<std::string> taken;
    for (const auto& n : names) {
      bool found = false;
      for (const auto& e : spec.kernels)
        if (e.label == n || e.name == n) {
          found = true;
          if (taken.insert(e.label).second) chosen.push_back(e);
        }
      if (!found && taken.insert(n).second) chosen.emplace_back(n);
    }
    spec.kernels = std::move(chosen);
  }
  for (const auto& text : options) {
    const auto eq = text.find('=');
    const std::string usage = "--kernel-options '" + text +
                              "': expected KERNEL=JSON-OBJECT, e.g. flex_flash='{\"forward\": \"sm90_k128\"}'";
    if (eq == std::string::npos || eq == 0) throw std::runtime_error(usage);
    nlohmann::json obj;
    try {
      obj = nlohmann::json::parse(text.substr(eq + 1));
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(usage + " (not valid JSON: " + e.what() + ")");
    }
    if (!obj.is_object()) throw std::runtime_error(usage + " (not a JSON object)");
    nlohmann::json& slot = spec.kernel_options[text.substr(0, eq)];
    if (!slot.is_object()) slot = nlohmann::json::object();
    slot.update(obj);
  }
}

const std::vector<int64_t>& MatrixSpec::seqlens_for(const std::string& device) const {
  static const std::vector<int64_t> none;
  if (auto it = seqlens.find(device); it != seqlens.end()) return it->second;
  if (auto it = seqlens.find("*"); it != seqlens.end()) return it->second;
  return none;
}

std::vector<std::filesystem::path> preset_dirs(const std::filesystem::path& plugin_dir) {
  return {plugin_dir / "matrices", std::filesystem::path(LCA_SOURCE_DIR) / "manifests" / "matrices",
          std::filesystem::path(LCA_INSTALL_PLUGIN_DIR) / "matrices"};
}

std::vector<std::string> preset_names(const std::filesystem::path& plugin_dir) {
  std::set<std::string> names;
  for (const auto& dir : preset_dirs(plugin_dir)) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) continue;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().extension() == ".json") names.insert(e.path().stem().string());
  }
  names.insert("all");
  return {names.begin(), names.end()};
}

MatrixSpec parse_matrix_spec(const nlohmann::json& doc, const std::filesystem::path& source) {
  if (!doc.is_object()) bad(source, "(top level)", "must be a JSON object");
  static const std::set<std::string> known = {
      "name", "description", "kernels", "exclude_kernels", "masks", "seqlens", "heads", "head_dims", "dtypes",
      "passes", "warmup", "warmup_ms", "repeats", "repeat_ms", "seed", "check", "check_max_seqlen", "cell_timeout_s"};
  for (const auto& [key, value] : doc.items())
    if (!known.count(key)) bad(source, text_brief(key), "is not a known field (known: kernels, exclude_kernels, masks, seqlens, heads, head_dims, dtypes, passes, warmup, warmup_ms, repeats, repeat_ms, seed, check, check_max_seqlen, cell_timeout_s)");

  MatrixSpec s;
  s.source = source;
  s.name = scalar_of<std::string>(doc, "name", source, source.stem().string());
  s.kernels = kernels_of(doc, source);
  if (doc.contains("exclude_kernels"))
    s.exclude_kernels = list_of<std::string>(doc, "exclude_kernels", source, {});
  s.masks = list_of<std::string>(doc, "masks", source, {});
  if (!doc.contains("seqlens")) bad(source, "seqlens", "is required");
  if (doc["seqlens"].is_object()) {
    for (const auto& [device, list] : doc["seqlens"].items()) {
      if (device != "cpu" && device != "cuda" && device != "*")
        bad(source, "seqlens." + text_brief(device), "devices are cpu, cuda or *");
      s.seqlens[device] = list_of<int64_t>(doc["seqlens"], device.c_str(), source, {});
    }
  } else {
    s.seqlens["*"] = list_of<int64_t>(doc, "seqlens", source, {});
  }
  for (const auto& [device, list] : s.seqlens)
    for (auto n : list)
      if (n <= 0 || n > lca::max_seqlen)
        bad(source, "seqlens", std::to_string(n) + " is out of range; allowed: " + lca::seqlen_allowed());

  for (const auto& h : list_of<std::string>(doc, "heads", source, {})) {
    HeadConfig hc;
    const auto colon = h.find(':');
    // The whole text must be read: "4:2:1", "64:8x", " 64" and "+64" are not head counts.
    const auto exact_int = [&](const std::string& text) {
      int n = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (ec == std::errc::result_out_of_range)
        bad(source, "heads", "'" + text_brief(h) + "': " + text_brief(text) + " is out of range; allowed: 1 to " +
                                 std::to_string(std::numeric_limits<int>::max()));
      if (ec != std::errc() || end != text.data() + text.size()) throw std::invalid_argument(text);
      return n;
    };
    try {
      hc.heads_q = exact_int(h.substr(0, colon));
      hc.heads_kv = colon == std::string::npos ? hc.heads_q : exact_int(h.substr(colon + 1));
    } catch (const std::invalid_argument&) {
      bad(source, "heads", "'" + text_brief(h) + "' is not heads_q:heads_kv (e.g. \"64:8\")");
    }
    if (hc.heads_q <= 0 || hc.heads_kv <= 0 || hc.heads_q % hc.heads_kv != 0)
      bad(source, "heads", "'" + text_brief(h) + "': heads_q must be a positive multiple of heads_kv");
    s.heads.push_back(hc);
  }
  s.head_dims = list_of<int>(doc, "head_dims", source, {});
  for (int d : s.head_dims)
    if (d <= 0) bad(source, "head_dims", "must be positive");
  s.dtypes = list_of<std::string>(doc, "dtypes", source, {"bf16"});
  for (const auto& d : s.dtypes)
    if (lca::dtype_from_name(d) < 0 || d == "f64")
      bad(source, "dtypes", "'" + text_brief(d) + "' is not one of f32, f16, bf16");
  for (auto& d : s.dtypes) d = lca::dtype_name(lca::dtype_from_name(d));
  s.passes = list_of<std::string>(doc, "passes", source, {"fwd"});
  for (const auto& p : s.passes)
    if (p != "fwd" && p != "bwd") bad(source, "passes", "'" + text_brief(p) + "' is not fwd or bwd");
  s.warmup = scalar_of<int>(doc, "warmup", source, 1);
  s.repeats = scalar_of<int>(doc, "repeats", source, 3);
  if (s.warmup < 0) bad(source, "warmup", "must be >= 0");
  s.warmup_ms = scalar_of<double>(doc, "warmup_ms", source, 0.0);
  if (!(s.warmup_ms >= 0 && s.warmup_ms <= 600000)) bad(source, "warmup_ms", "must be between 0 and 600000 (ms)");
  if (s.repeats < 1) bad(source, "repeats", "must be >= 1");
  s.repeat_ms = scalar_of<double>(doc, "repeat_ms", source, 0.0);
  if (!(s.repeat_ms >= 0 && s.repeat_ms <= 600000)) bad(source, "repeat_ms", "must be between 0 and 600000 (ms)");
  s.seed = scalar_of<uint64_t>(doc, "seed", source, 42);
  s.check = scalar_of<bool>(doc, "check", source, true);
  s.check_max_seqlen = scalar_of<int64_t>(doc, "check_max_seqlen", source, 0);
  if (s.check_max_seqlen < 0) bad(source, "check_max_seqlen", "must be >= 0 (0: check every length)");
  s.cell_timeout_s = scalar_of<double>(doc, "cell_timeout_s", source, 0.0);
  return s;
}

MatrixSpec load_matrix_spec(const std::string& what, const std::filesystem::path& plugin_dir) {
  std::filesystem::path file;
  std::error_code ec;
  if (std::filesystem::is_directory(what, ec))
    throw std::runtime_error("matrix '" + what + "' is a folder; pass a JSON spec file in it or a preset name");
  const bool looks_like_path = what.find('/') != std::string::npos ||
                               (what.size() > 5 && what.substr(what.size() - 5) == ".json");
  if (looks_like_path) {
    file = what;
    if (!std::filesystem::exists(file))
      throw std::runtime_error("matrix file '" + what + "' does not exist");
  } else {
    for (const auto& dir : preset_dirs(plugin_dir)) {
      if (std::filesystem::exists(dir / (what + ".json"))) {
        file = dir / (what + ".json");
        break;
      }
    }
    if (file.empty()) {
      std::string names;
      for (const auto& n : preset_names(plugin_dir)) names += (names.empty() ? "" : ", ") + n;
      throw std::runtime_error("unknown matrix preset '" + what + "'; presets: " + names +
                               "; or pass a path to a JSON spec");
    }
  }
  std::ifstream in(file);
  if (!in) throw std::runtime_error("matrix file '" + file.string() + "' cannot be read: " + std::strerror(errno));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range.406 for 1e309
    // The parser's message quotes the bytes where it stopped, which may not be UTF-8.
    throw std::runtime_error(valid_utf8("matrix spec " + file.string() + ": not valid JSON: " + e.what()));
  }
  MatrixSpec spec = parse_matrix_spec(doc, file);
  if (what == "all") {
    spec.kernels = {KernelEntry("*")};
    spec.masks = {"*"};
  }
  return spec;
}

bool checks_length(const MatrixSpec& spec, int64_t seqlen) {
  return spec.check && (spec.check_max_seqlen <= 0 || seqlen <= spec.check_max_seqlen);
}

std::string over_check_length(int64_t seqlen, int64_t check_max_seqlen) {
  return "unchecked: " + std::to_string(seqlen) + " tokens, over check_max_seqlen " + std::to_string(check_max_seqlen);
}

nlohmann::json matrix_record(const MatrixSpec& spec) {
  return {{"name", spec.name},       {"source", spec.source.string()},
          {"warmup", spec.warmup},   {"warmup_ms", spec.warmup_ms},
          {"repeats", spec.repeats}, {"repeat_ms", spec.repeat_ms}, {"seed", spec.seed},
          {"check", spec.check}, {"check_max_seqlen", spec.check_max_seqlen}};
}

}  // namespace lca::core
