// Test support: open one plugin library directly (no host, no manifest) and reach its vtable.
// Used by contract tests that exercise a plugin through the real C ABI.
// Rule: the PluginHandle must outlive every object created through its vtable.
#pragma once

#include <lca/abi.h>

#include <boost/dll/shared_library.hpp>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace lca::test {

inline std::filesystem::path plugin_dir() { return LCA_TEST_PLUGIN_DIR; }

class PluginHandle {
 public:
  // name: the plugin's name; the library is lib lca_<name>.so in the plugin folder.
  explicit PluginHandle(const std::string& name)
      : lib_((plugin_dir() / ("liblca_" + name + ".so")).string()) {
    auto entry = lib_.get<const lca_plugin_descriptor*()>(LCA_PLUGIN_ENTRY_SYMBOL);
    desc_ = entry();
    if (desc_ == nullptr) throw std::runtime_error("null descriptor from " + name);
  }
  const lca_plugin_descriptor& descriptor() const { return *desc_; }
  const lca_kernel_vtable& kernel() const { return *desc_->kernel; }
  const lca_mask_provider_vtable& mask_provider() const { return *desc_->mask_provider; }
  const lca_cp_strategy_vtable& cp_strategy() const { return *desc_->cp_strategy; }

 private:
  boost::dll::shared_library lib_;
  const lca_plugin_descriptor* desc_ = nullptr;
};

}  // namespace lca::test
