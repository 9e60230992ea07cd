// The plugin registry: discovers manifests in a folder, validates them, loads each library with
// Boost.DLL, negotiates the ABI and hands out live objects. The face of core/plugin.
// Rule: every object handed out shares ownership of its library; the library is unloaded only
// after the last object from it is destroyed.
#pragma once

#include "core/plugin/manifest.hpp"

#include <lca/abi.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace boost::dll {
class shared_library;
}

namespace lca::core {

using LibraryPtr = std::shared_ptr<boost::dll::shared_library>;

struct PluginRecord {
  Manifest manifest;
  bool loaded = false;
  std::string refusal;   // one line: why it was refused (empty when loaded)
  LibraryPtr library;
  const lca_plugin_descriptor* descriptor = nullptr;

  const std::string& name() const { return manifest.name; }
  const std::string& kind() const { return manifest.kind; }
};

// A refusal that had no manifest to attach to (a file that does not parse, say).
struct Refusal {
  std::filesystem::path file;
  std::string message;  // one line, names the file and the fix
};

class KernelInstance;
class MaskProviderInstance;
class CPStrategyInstance;

class Registry {
 public:
  // Scans `dir` for *.json manifests (not recursive). Never throws for a bad plugin or a bad
  // entry of the folder (a link loop, a file it may not read): it is recorded as refused and the
  // rest load. A manifest's library must resolve inside `dir`. Throws std::runtime_error if `dir`
  // does not exist or cannot be listed.
  static Registry load(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const std::vector<PluginRecord>& plugins() const { return plugins_; }
  const std::vector<Refusal>& refusals() const { return refusals_; }
  // Loaded plugins that name what nothing provides (a mask no provider makes): one line each.
  const std::vector<std::string>& warnings() const { return warnings_; }

  // Loaded plugins of one kind, in name order.
  std::vector<const PluginRecord*> loaded(const std::string& kind) const;
  const PluginRecord* find(const std::string& name, const std::string& kind) const;
  // The loaded kernel whose manifest says it is the reference for `device`.
  const PluginRecord* reference_kernel(const std::string& device) const;

  // host_config_json: options for the plugin ("{}" for none). Throw std::runtime_error with the
  // plugin's own message when create fails.
  std::shared_ptr<KernelInstance> make_kernel(const PluginRecord& rec,
                                              const std::string& config_json = "{}") const;
  std::shared_ptr<MaskProviderInstance> make_mask_provider(const PluginRecord& rec) const;
  std::shared_ptr<CPStrategyInstance> make_cp_strategy(const PluginRecord& rec,
                                                       const std::string& config_json = "{}") const;

  // Data folder shared by plugins (distributions): <dir>/data.
  std::filesystem::path data_dir() const { return dir_ / "data"; }

 private:
  std::filesystem::path dir_;
  std::vector<PluginRecord> plugins_;
  std::vector<Refusal> refusals_;
  std::vector<std::string> warnings_;

  void warn_unknown_masks();
};

// Host-side handle on a kernel object. Holds the library alive.
class KernelInstance {
 public:
  KernelInstance(LibraryPtr lib, const lca_kernel_vtable* vt, lca_kernel* k, std::string name)
      : lib_(std::move(lib)), vt_(vt), kernel_(k), name_(std::move(name)) {}
  ~KernelInstance();
  KernelInstance(const KernelInstance&) = delete;
  KernelInstance& operator=(const KernelInstance&) = delete;

  const std::string& name() const { return name_; }
  const lca_kernel_vtable& vtable() const { return *vt_; }
  lca_kernel* get() const { return kernel_; }
  lca_kernel_ref ref() const { return lca_kernel_ref{sizeof(lca_kernel_ref), vt_, kernel_}; }
  bool has_backward() const { return vt_->backward != nullptr; }

 private:
  LibraryPtr lib_;
  const lca_kernel_vtable* vt_;
  lca_kernel* kernel_;
  std::string name_;
};

class MaskProviderInstance {
 public:
  MaskProviderInstance(LibraryPtr lib, const lca_mask_provider_vtable* vt, lca_mask_provider* p,
                       std::string name)
      : lib_(std::move(lib)), vt_(vt), provider_(p), name_(std::move(name)) {}
  ~MaskProviderInstance();
  MaskProviderInstance(const MaskProviderInstance&) = delete;
  MaskProviderInstance& operator=(const MaskProviderInstance&) = delete;

  const std::string& name() const { return name_; }
  const lca_mask_provider_vtable& vtable() const { return *vt_; }
  lca_mask_provider* get() const { return provider_; }

 private:
  LibraryPtr lib_;
  const lca_mask_provider_vtable* vt_;
  lca_mask_provider* provider_;
  std::string name_;
};

class CPStrategyInstance {
 public:
  CPStrategyInstance(LibraryPtr lib, const lca_cp_strategy_vtable* vt, lca_cp_strategy* s,
                     std::string name)
      : lib_(std::move(lib)), vt_(vt), strategy_(s), name_(std::move(name)) {}
  ~CPStrategyInstance();
  CPStrategyInstance(const CPStrategyInstance&) = delete;
  CPStrategyInstance& operator=(const CPStrategyInstance&) = delete;

  const std::string& name() const { return name_; }
  const lca_cp_strategy_vtable& vtable() const { return *vt_; }
  lca_cp_strategy* get() const { return strategy_; }

 private:
  LibraryPtr lib_;
  const lca_cp_strategy_vtable* vt_;
  lca_cp_strategy* strategy_;
  std::string name_;
};

}  // namespace lca::core
