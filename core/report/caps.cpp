// Capability tables; see caps.hpp.
#include "core/report/caps.hpp"

#include "core/plugin/text.hpp"

#include <algorithm>
#include <iomanip>
#include <stdexcept>

namespace lca::core {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string yes(bool b) { return b ? "yes" : "no"; }

bool passes(const KernelCaps& k, const CapsFilter& f) {
  if (f.mask && !k.supports_mask(*f.mask)) return false;
  if (f.backward && !k.backward) return false;
  if (f.dtype && !k.supports_dtype(*f.dtype)) return false;
  if (f.device && k.device != *f.device) return false;
  if (f.head_dim && !k.supports_head_dim(*f.head_dim)) return false;
  return true;
}

}  // namespace

void print_rows(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
                bool markdown, std::ostream& out) {
  if (markdown) {
    out << "| " << join(head, " | ") << " |\n|";
    for (size_t i = 0; i < head.size(); ++i) out << "---|";
    out << "\n";
    for (const auto& r : rows) out << "| " << join(r, " | ") << " |\n";
    return;
  }
  std::vector<size_t> width(head.size());
  for (size_t i = 0; i < head.size(); ++i) width[i] = head[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size(); ++i) {
      out << std::left << std::setw(static_cast<int>(width[i])) << r[i];
      if (i + 1 < r.size()) out << "  ";
    }
    out << "\n";
  };
  line(head);
  std::vector<std::string> rule;
  for (auto w : width) rule.push_back(std::string(w, '-'));
  line(rule);
  for (const auto& r : rows) line(r);
  out << std::right;
}

void print_plugin_list(const Registry& registry, const std::string& format, std::ostream& out) {
  if (format == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& p : registry.plugins())
      j.push_back({{"name", p.name()}, {"kind", p.kind()}, {"version", p.manifest.version},
                   {"library", p.manifest.library}, {"manifest", p.manifest.file.string()},
                   {"status", p.loaded ? "loaded" : "refused"}, {"reason", p.refusal}});
    for (const auto& r : registry.refusals())
      j.push_back({{"manifest", r.file.string()}, {"status", "refused"}, {"reason", r.message}});
    out << dump_json(j, 2) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : registry.plugins())
    rows.push_back({p.name(), p.kind(), p.manifest.version, p.manifest.library,
                    p.loaded ? "loaded" : "refused: " + p.refusal});
  for (const auto& r : registry.refusals())
    rows.push_back({"?", "?", "?", r.file.filename().string(), r.message});
  out << "plugins in " << registry.dir().string() << "\n";
  print_rows({"name", "kind", "version", "library", "status"}, rows, format == "md", out);
}

void print_caps(const Registry& registry, const std::vector<std::string>& all_masks,
                const CapsFilter& filter, const std::string& format, std::ostream& out) {
  if (format != "table" && format != "md" && format != "json")
    throw std::invalid_argument("unknown format '" + format + "'; use table, md or json");
  std::vector<const PluginRecord*> kernels;
  for (const auto* k : registry.loaded("kernel"))
    if (passes(k->manifest.kernel, filter)) kernels.push_back(k);

  if (format == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const auto* k : kernels) {
      const auto& c = k->manifest.kernel;
      std::vector<std::string> masks = c.any_mask ? all_masks : c.masks;
      j.push_back({{"kernel", k->name()}, {"version", k->manifest.version}, {"device", c.device},
                   {"min_cc", c.min_cc}, {"dtypes", c.dtypes},
                   {"head_dims", c.any_head_dim ? nlohmann::json("any") : nlohmann::json(c.head_dims)},
                   {"gqa", c.gqa}, {"backward", c.backward}, {"varlen", c.varlen},
                   {"masks", masks}, {"any_mask", c.any_mask}, {"reference", c.reference}});
    }
    out << dump_json(j, 2) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto* k : kernels) {
    const auto& c = k->manifest.kernel;
    std::vector<std::string> dims;
    for (int d : c.head_dims) dims.push_back(std::to_string(d));
    std::string device = c.device;
    if (c.min_cc) device += ">=sm_" + std::to_string(c.min_cc);
    rows.push_back({k->name(), device, join(c.dtypes), c.any_head_dim ? "any" : join(dims), yes(c.gqa),
                    yes(c.backward), yes(c.varlen),
                    c.any_mask ? "any (" + std::to_string(all_masks.size()) + ")" : join(c.masks)});
  }
  print_rows({"kernel", "device", "dtypes", "head_dims", "gqa", "bwd", "varlen", "masks"}, rows,
             format == "md", out);

  // The kernel x mask grid: what `--matrix all` can run.
  if (!all_masks.empty() && !kernels.empty()) {
    out << "\n";
    std::vector<std::string> head = {"mask"};
    for (const auto* k : kernels) head.push_back(k->name());
    std::vector<std::vector<std::string>> grid;
    for (const auto& m : all_masks) {
      if (filter.mask && m != *filter.mask) continue;
      std::vector<std::string> r = {m};
      for (const auto* k : kernels) r.push_back(k->manifest.kernel.supports_mask(m) ? "+" : "X");
      grid.push_back(r);
    }
    print_rows(head, grid, format == "md", out);
  }
}

}  // namespace lca::core
