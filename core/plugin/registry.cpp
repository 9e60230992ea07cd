// Plugin discovery and loading; see registry.hpp.
#include "core/plugin/registry.hpp"

#include "core/plugin/text.hpp"

#include <lca/abi.h>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <stdexcept>

namespace lca::core {
namespace {

const char* kind_name(int32_t kind) {
  switch (kind) {
    case LCA_KIND_KERNEL: return "kernel";
    case LCA_KIND_MASK_PROVIDER: return "mask_provider";
    case LCA_KIND_CP_STRATEGY: return "cp_strategy";
    default: return "unknown";
  }
}

std::string abi_string(uint32_t v) {
  return std::to_string(LCA_ABI_MAJOR_OF(v)) + "." + std::to_string(LCA_ABI_MINOR_OF(v));
}

nlohmann::json load_schema(const std::filesystem::path& plugin_dir) {
  const std::filesystem::path candidates[] = {
      plugin_dir / "schema" / "manifest.schema.json",
      std::filesystem::path(LCA_SOURCE_DIR) / "manifests" / "manifest.schema.json",
      std::filesystem::path(LCA_INSTALL_PLUGIN_DIR) / "schema" / "manifest.schema.json"};
  for (const auto& c : candidates) {
    std::ifstream in(c);
    if (in) return nlohmann::json::parse(in);
  }
  throw std::runtime_error("manifest schema not found (looked in " + candidates[0].string() +
                           "); rebuild so that it is copied beside the plugins");
}

void host_log(void*, int32_t level, const char* message) {
  spdlog::log(static_cast<spdlog::level::level_enum>(std::clamp(level, 0, 5)), "{}",
              message ? message : "");
}

// Checks the descriptor against the manifest; returns a refusal reason or "".
std::string check_descriptor(const Manifest& m, const lca_plugin_descriptor* d) {
  if (d == nullptr) return "lca_plugin_entry returned no descriptor";
  if (d->struct_size < offsetof(lca_plugin_descriptor, cp_strategy) + sizeof(void*))
    return "descriptor is too small (struct_size " + std::to_string(d->struct_size) + ")";
  if (LCA_ABI_MAJOR_OF(d->abi_version) != LCA_ABI_VERSION_MAJOR)
    return "ABI mismatch: the library was built for ABI " + abi_string(d->abi_version) +
           ", this host speaks ABI " + abi_string(LCA_ABI_VERSION) +
           "; rebuild the plugin against this SDK";
  if (static_cast<uint32_t>(m.abi_major) != LCA_ABI_VERSION_MAJOR)
    return "ABI mismatch: the manifest declares ABI " + std::to_string(m.abi_major) + "." +
           std::to_string(m.abi_minor) + ", this host speaks ABI " + abi_string(LCA_ABI_VERSION);
  if (m.name != (d->name ? d->name : ""))
    return std::string("name mismatch: the manifest says '") + m.name + "', the library says '" +
           (d->name ? d->name : "") + "'";
  if (m.kind != kind_name(d->kind))
    return "kind mismatch: the manifest says '" + m.kind + "', the library says '" +
           kind_name(d->kind) + "'";
  const void* vt = d->kind == LCA_KIND_KERNEL          ? static_cast<const void*>(d->kernel)
                   : d->kind == LCA_KIND_MASK_PROVIDER ? static_cast<const void*>(d->mask_provider)
                                                       : static_cast<const void*>(d->cp_strategy);
  if (vt == nullptr) return "the descriptor has no vtable for its kind";
  if (d->kind == LCA_KIND_KERNEL && m.kernel.backward && d->kernel->backward == nullptr)
    return "the manifest declares backward, but the library has no backward function";
  return "";
}

// A refusal when the manifest's library resolves (links followed) outside the plugin folder, else "".
std::string library_outside(const Manifest& m, const std::filesystem::path& real_dir) {
  std::error_code ec;
  const auto resolved = std::filesystem::weakly_canonical(m.library_path(), ec);
  if (ec) return "";  // the checks that follow name what is wrong with it
  const auto [d, l] = std::mismatch(real_dir.begin(), real_dir.end(), resolved.begin(), resolved.end());
  if (d == real_dir.end() && l != resolved.end()) return "";
  return "library '" + m.library + "' resolves to '" + resolved.string() + "', outside the plugin folder '" +
         real_dir.string() + "'; put the library in the folder and name it relative to it";
}

lca_host_info make_host_info(const std::string& plugin_dir, const std::string& data_dir,
                             const std::string& config) {
  return lca_host_info{sizeof(lca_host_info), LCA_ABI_VERSION, plugin_dir.c_str(),
                       data_dir.c_str(),      config.c_str(),  &host_log, nullptr};
}

}  // namespace

Registry Registry::load(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    throw std::runtime_error("plugin folder '" + dir.string() +
                             "' does not exist; build first (make build) or pass --plugins DIR");
  Registry reg;
  reg.dir_ = fs::absolute(dir);
  const nlohmann::json schema = load_schema(reg.dir_);
  std::error_code ec;
  const fs::path real_dir = fs::canonical(reg.dir_, ec);
  if (ec) throw std::runtime_error("plugin folder '" + dir.string() + "': " + ec.message());

  // Each entry on its own: a link loop, a file without read permission or a dangling link
  // refuses that entry, never the folder.
  std::vector<fs::path> files;
  fs::directory_iterator it(reg.dir_, ec);
  if (ec) throw std::runtime_error("plugin folder '" + dir.string() + "' cannot be read: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) {
      spdlog::warn("plugin folder '{}': listing stopped: {}", reg.dir_.string(), ec.message());
      break;
    }
    const fs::path path = it->path();
    if (path.extension() != ".json") continue;
    std::error_code entry_ec;
    const bool regular = it->is_regular_file(entry_ec);
    std::string why;
    std::error_code link_ec;
    if (entry_ec && entry_ec == std::errc::no_such_file_or_directory && it->is_symlink(link_ec)) {
      why = "is a symbolic link to nothing ('" + fs::read_symlink(path, link_ec).string() + "')";
    } else if (entry_ec) {
      why = "cannot be read: " + entry_ec.message();
    } else if (!regular) {
      continue;  // a folder or a device named *.json is not a manifest
    }
    if (!why.empty()) {
      reg.refusals_.push_back({path, valid_utf8("refused manifest " + path.string() + ": " + why)});
      spdlog::warn("{}", reg.refusals_.back().message);
      continue;
    }
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());

  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& file : files) {
    PluginRecord rec;
    try {
      rec.manifest = parse_manifest(file, schema);
    } catch (const ManifestError& e) {
      reg.refusals_.push_back({file, std::string("refused manifest ") + e.what()});
      spdlog::warn("refused manifest {}", e.what());
      continue;
    }
    const auto key = std::make_pair(rec.manifest.kind, rec.manifest.name);
    try {
      if (!seen.insert(key).second) {
        rec.refusal = "another " + rec.manifest.kind + " named '" + rec.manifest.name +
                      "' is already loaded; rename one of them";
      } else if (auto outside = library_outside(rec.manifest, real_dir); !outside.empty()) {
        rec.refusal = outside;
      } else if (!fs::exists(rec.manifest.library_path())) {
        rec.refusal = "library '" + rec.manifest.library_path().string() +
                      "' named by the manifest is missing; build it or fix the 'library' field";
      } else {
        rec.library = std::make_shared<boost::dll::shared_library>(
            rec.manifest.library_path().string(), boost::dll::load_mode::rtld_lazy |
                                                      boost::dll::load_mode::rtld_local);
        if (!rec.library->has(LCA_PLUGIN_ENTRY_SYMBOL)) {
          rec.refusal = "library does not export " LCA_PLUGIN_ENTRY_SYMBOL
                        "; export it with an LCA_EXPORT_* macro";
        } else {
          auto entry = rec.library->get<const lca_plugin_descriptor*()>(LCA_PLUGIN_ENTRY_SYMBOL);
          rec.descriptor = entry();
          rec.refusal = check_descriptor(rec.manifest, rec.descriptor);
        }
      }
    } catch (const fs::filesystem_error& e) {
      rec.refusal = "library '" + rec.manifest.library_path().string() + "' cannot be read: " + e.code().message();
    } catch (const std::exception& e) {
      rec.refusal = std::string("library does not load: ") + e.what();
    }
    // The library's own name and messages come from outside the host: records must hold them.
    rec.refusal = valid_utf8(rec.refusal);
    rec.loaded = rec.refusal.empty();
    if (!rec.loaded) {
      spdlog::warn("refused plugin {} ({}): {}", rec.manifest.name, file.filename().string(),
                   rec.refusal);
      rec.library.reset();
      rec.descriptor = nullptr;
    } else {
      spdlog::debug("loaded {} {} {} from {}", rec.manifest.kind, rec.manifest.name,
                    rec.manifest.version, rec.manifest.library);
    }
    reg.plugins_.push_back(std::move(rec));
  }
  reg.warn_unknown_masks();
  return reg;
}

// A warning, not a refusal: masks come from mask providers, which are plugins too; a provider
// refused or not yet installed in this folder would otherwise take down every kernel that names
// its patterns. Cells of an unknown mask are refused when a matrix asks for them.
void Registry::warn_unknown_masks() {
  std::set<std::string> known;
  for (const auto* p : loaded("mask_provider"))
    for (const auto& pattern : p->manifest.patterns) known.insert(pattern.name);
  if (known.empty()) return;  // no provider at all: every run says so; one warning a mask is noise
  for (const auto& p : plugins_) {
    if (!p.loaded) continue;
    const std::vector<std::string>* masks = p.kind() == "kernel" && !p.manifest.kernel.any_mask ? &p.manifest.kernel.masks
                                            : p.kind() == "cp_strategy" && !p.manifest.cp.any_mask ? &p.manifest.cp.masks
                                                                                                   : nullptr;
    if (masks == nullptr) continue;
    for (const auto& m : *masks) {
      if (known.count(m)) continue;
      warnings_.push_back(valid_utf8(p.manifest.file.string() + ": " + p.kind() + " " + p.name() +
                                     " lists mask '" + m + "', which no loaded mask provider makes (see `lcahost masks`)"));
      spdlog::warn("{}", warnings_.back());
    }
  }
}

std::vector<const PluginRecord*> Registry::loaded(const std::string& kind) const {
  std::vector<const PluginRecord*> out;
  for (const auto& p : plugins_)
    if (p.loaded && p.kind() == kind) out.push_back(&p);
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
  return out;
}

const PluginRecord* Registry::find(const std::string& name, const std::string& kind) const {
  for (const auto& p : plugins_)
    if (p.loaded && p.kind() == kind && p.name() == name) return &p;
  return nullptr;
}

const PluginRecord* Registry::reference_kernel(const std::string& device) const {
  for (const auto* p : loaded("kernel"))
    if (p->manifest.kernel.reference == device) return p;
  return nullptr;
}

std::shared_ptr<KernelInstance> Registry::make_kernel(const PluginRecord& rec,
                                                      const std::string& config_json) const {
  const auto* vt = rec.descriptor->kernel;
  const std::string plugin_dir = rec.manifest.file.parent_path().string();
  const std::string data_dir = this->data_dir().string();
  const lca_host_info info = make_host_info(plugin_dir, data_dir, config_json);
  lca_kernel* k = nullptr;
  if (vt->create(&info, &k) != LCA_OK || k == nullptr)
    throw std::runtime_error("kernel " + rec.name() + ": create failed: " + vt->last_error());
  return std::make_shared<KernelInstance>(rec.library, vt, k, rec.name());
}

std::shared_ptr<MaskProviderInstance> Registry::make_mask_provider(const PluginRecord& rec) const {
  const auto* vt = rec.descriptor->mask_provider;
  const std::string plugin_dir = rec.manifest.file.parent_path().string();
  const std::string data_dir = this->data_dir().string();
  const lca_host_info info = make_host_info(plugin_dir, data_dir, "{}");
  lca_mask_provider* p = nullptr;
  if (vt->create(&info, &p) != LCA_OK || p == nullptr)
    throw std::runtime_error("mask provider " + rec.name() + ": create failed: " + vt->last_error());
  return std::make_shared<MaskProviderInstance>(rec.library, vt, p, rec.name());
}

std::shared_ptr<CPStrategyInstance> Registry::make_cp_strategy(const PluginRecord& rec,
                                                               const std::string& config_json) const {
  const auto* vt = rec.descriptor->cp_strategy;
  const std::string plugin_dir = rec.manifest.file.parent_path().string();
  const std::string data_dir = this->data_dir().string();
  const lca_host_info info = make_host_info(plugin_dir, data_dir, config_json);
  lca_cp_strategy* s = nullptr;
  if (vt->create(&info, &s) != LCA_OK || s == nullptr)
    throw std::runtime_error("cp strategy " + rec.name() + ": create failed: " + vt->last_error());
  return std::make_shared<CPStrategyInstance>(rec.library, vt, s, rec.name());
}

KernelInstance::~KernelInstance() {
  if (kernel_) vt_->destroy(kernel_);
}
MaskProviderInstance::~MaskProviderInstance() {
  if (provider_) vt_->destroy(provider_);
}
CPStrategyInstance::~CPStrategyInstance() {
  if (strategy_) vt_->destroy(strategy_);
}

}  // namespace lca::core
