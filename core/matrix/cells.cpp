// Matrix expansion; see cells.hpp.
#include "core/matrix/cells.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace lca::core {
namespace {

std::string skip_reason(const Cell& c, const KernelCaps& caps, const HostDevices& dev) {
  if (caps.device == "cuda" && dev.gpu_count == 0) return "no-gpu";
  if (caps.device == "cuda" && caps.min_cc > 0 && dev.gpu_cc < caps.min_cc)
    return "needs sm_" + std::to_string(caps.min_cc) + " (GPU is sm_" + std::to_string(dev.gpu_cc) + ")";
  if (!caps.supports_mask(c.mask.pattern)) return "mask " + c.mask.pattern + " unsupported";
  if (!caps.supports_dtype(c.dtype)) return "dtype " + c.dtype + " unsupported";
  if (!caps.supports_head_dim(c.head_dim)) return "head_dim " + std::to_string(c.head_dim) + " unsupported";
  if (!caps.gqa && c.heads.heads_q != c.heads.heads_kv) return "no-gqa";
  if (c.pass == "bwd" && !caps.backward) return "no-backward";
  if (caps.max_seqlen > 0 && c.seqlen > caps.max_seqlen)
    return "seqlen > max " + std::to_string(caps.max_seqlen);
  return "";
}

// A parameter the mask's manifest does not list is refused here, before any cell runs: the name
// is a typo or belongs to another mask at every length (values are checked where the mask is made,
// since whether one fits can depend on the length; `--dry-run` makes every cell's mask).
void refuse_unknown_parameters(const std::string& matrix, const std::string& text, const MaskSpec& m,
                               const MaskPatternInfo& info) {
  if (!info.params_declared) return;
  auto takes = [&](const std::string& key) {
    return std::any_of(info.params.begin(), info.params.end(), [&](const auto& p) { return p.value("name", "") == key; });
  };
  for (auto it = m.params.begin(); it != m.params.end(); ++it) {
    if (takes(it.key())) continue;
    std::string names;
    for (const auto& p : info.params) {
      names += (names.empty() ? "" : ", ") + p.value("name", std::string());
      if (p.contains("default")) names += " (default " + p["default"].dump() + ")";
    }
    throw std::runtime_error("matrix " + matrix + ": mask '" + text + "': " + info.name + " has no parameter '" +
                             it.key() + "'; it takes " + (names.empty() ? "none" : names) + " (see `lcahost masks`)");
  }
}

}  // namespace

std::string Cell::key() const {
  const std::string options_key = options.empty() ? "" : options.dump() + "|";
  return row() + "|" + options_key + mask.label() + "|" + std::to_string(seqlen) + "|" + heads.label() + "|" +
         std::to_string(head_dim) + "|" + dtype + "|" + pass;
}

nlohmann::json Cell::to_json() const {
  nlohmann::json j = {{"kernel", kernel},     {"label", row()},         {"device", device},
                      {"mask", mask.pattern}, {"mask_params", mask.params}, {"mask_label", mask.label()},
                      {"seqlen", seqlen},     {"heads_q", heads.heads_q}, {"heads_kv", heads.heads_kv},
                      {"head_dim", head_dim}, {"dtype", dtype},         {"pass", pass}};
  if (!options.empty()) j["options"] = options;
  return j;
}

namespace {
// A whole number of a record in [lo, hi], never wrapped (nlohmann's get<int> would wrap 2^32 + 64
// to 64): a record that a crash or a hand edit broke is refused, naming the field.
int64_t whole_number(const nlohmann::json& j, const char* field, int64_t lo, int64_t hi) {
  const auto& v = j.at(field);
  const bool in_range = v.is_number_integer() &&
                        (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                                                : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi);
  if (!in_range || v.get<int64_t>() < lo)
    throw std::runtime_error(std::string("cell record: '") + field + "' must be a whole number from " +
                             std::to_string(lo) + " to " + std::to_string(hi) + ", found " + v.dump());
  return v.get<int64_t>();
}
}  // namespace

Cell Cell::from_json(const nlohmann::json& j) {
  Cell c;
  c.kernel = j.at("kernel").get<std::string>();
  c.label = j.value("label", c.kernel);
  c.options = j.value("options", nlohmann::json::object());
  c.device = j.value("device", "cpu");
  c.mask.pattern = j.at("mask").get<std::string>();
  c.mask.params = j.value("mask_params", nlohmann::json::object());
  constexpr int64_t kInt = std::numeric_limits<int>::max();
  c.seqlen = whole_number(j, "seqlen", 1, std::numeric_limits<int64_t>::max());
  c.heads.heads_q = static_cast<int>(whole_number(j, "heads_q", 1, kInt));
  c.heads.heads_kv = static_cast<int>(whole_number(j, "heads_kv", 1, kInt));
  c.head_dim = static_cast<int>(whole_number(j, "head_dim", 1, kInt));
  c.dtype = j.at("dtype").get<std::string>();
  c.pass = j.at("pass").get<std::string>();
  return c;
}

std::vector<Cell> expand_cells(const MatrixSpec& spec, const Registry& registry,
                               const MaskSource& masks, const HostDevices& devices) {
  // The kernels' rows: "*" is every loaded kernel (less exclude_kernels) as plain entries.
  struct Row {
    const PluginRecord* plugin;
    KernelEntry entry;
  };
  std::vector<Row> kernels;
  auto loaded_names = [&] {
    std::string known;
    for (const auto* k : registry.loaded("kernel")) known += (known.empty() ? "" : ", ") + k->name();
    return known.empty() ? std::string("(none)") : known;
  };
  for (const auto& entry : spec.kernels) {
    if (entry.name == "*") {
      for (const auto* k : registry.loaded("kernel"))
        if (std::find(spec.exclude_kernels.begin(), spec.exclude_kernels.end(), k->name()) ==
            spec.exclude_kernels.end())
          kernels.push_back({k, KernelEntry(k->name())});
      continue;
    }
    const auto* rec = registry.find(entry.name, "kernel");
    if (rec == nullptr)
      throw std::runtime_error("matrix " + spec.name + ": unknown kernel '" + entry.name +
                               "'; loaded kernels: " + loaded_names() + " (see `lcahost list`)");
    kernels.push_back({rec, entry});
  }
  for (const auto& [name, options] : spec.kernel_options) {
    bool found = false;
    for (auto& row : kernels) {
      KernelEntry& e = row.entry;
      if (e.label != name && e.name != name) continue;
      found = true;
      const bool default_label = e.label == default_kernel_label(e.name, e.options);
      e.options.update(options);
      if (default_label) e.label = default_kernel_label(e.name, e.options);
    }
    if (!found) {
      std::string rows;
      for (const auto& row : kernels) rows += (rows.empty() ? "" : ", ") + row.entry.label;
      throw std::runtime_error("--kernel-options names '" + name + "', which is no kernel of matrix " + spec.name +
                               " (its kernels: " + (rows.empty() ? "(none)" : rows) + ")");
    }
  }
  // Two rows of one label would be one row in every table: refused (the spec's labels are unique,
  // but "*" and --kernel-options can meet one).
  for (size_t i = 0; i < kernels.size(); ++i)
    for (size_t j = i + 1; j < kernels.size(); ++j)
      if (kernels[i].entry.label == kernels[j].entry.label)
        throw std::runtime_error("matrix " + spec.name + ": two kernels are labelled '" + kernels[i].entry.label +
                                 "'; give each its own \"label\" (or drop one from \"kernels\")");

  std::vector<MaskSpec> mask_specs;
  if (std::find(spec.masks.begin(), spec.masks.end(), "*") != spec.masks.end()) {
    for (const auto& e : masks.patterns()) mask_specs.push_back(MaskSpec{e.info.name, nlohmann::json::object()});
  } else {
    for (const auto& text : spec.masks) {
      MaskSpec m;
      try {
        m = MaskSpec::parse(text);
      } catch (const std::exception& e) {
        throw std::runtime_error("matrix " + spec.name + ": " + e.what());
      }
      const MaskSource::Entry* entry = masks.find(m.pattern);
      if (entry == nullptr) {
        std::string known;
        for (const auto& e : masks.patterns()) known += (known.empty() ? "" : ", ") + e.info.name;
        throw std::runtime_error("matrix " + spec.name + ": unknown mask '" + m.pattern +
                                 "'; known masks: " + (known.empty() ? "(no mask provider loaded)" : known) +
                                 " (see `lcahost masks`)");
      }
      refuse_unknown_parameters(spec.name, text, m, entry->info);
      mask_specs.push_back(std::move(m));
    }
  }

  // The union of lengths over the devices of the chosen kernels, in ascending order.
  std::vector<int64_t> all_lengths;
  for (const auto& row : kernels)
    for (auto n : spec.seqlens_for(row.plugin->manifest.kernel.device)) all_lengths.push_back(n);
  std::sort(all_lengths.begin(), all_lengths.end());
  all_lengths.erase(std::unique(all_lengths.begin(), all_lengths.end()), all_lengths.end());

  std::vector<Cell> cells;
  for (const auto& mask : mask_specs)
    for (auto seqlen : all_lengths)
      for (const auto& heads : spec.heads)
        for (int d : spec.head_dims)
          for (const auto& dtype : spec.dtypes)
            for (const auto& row : kernels) {
              const auto& caps = row.plugin->manifest.kernel;
              const auto& lens = spec.seqlens_for(caps.device);
              if (std::find(lens.begin(), lens.end(), seqlen) == lens.end()) continue;
              for (const auto& pass : spec.passes) {
                Cell c{row.plugin->name(), caps.device, mask,   seqlen, heads,           d,
                       dtype,                pass,        "",     row.entry.label, row.entry.options};
                c.skip = skip_reason(c, caps, devices);
                cells.push_back(std::move(c));
              }
            }
  return cells;
}

}  // namespace lca::core
