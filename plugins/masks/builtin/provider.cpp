// BuiltinMaskProvider: the IMaskProvider behind liblca_builtin.so, exported through the C ABI.
#include "patterns.hpp"

#include <lca/checked.hpp>
#include <lca/error.hpp>
#include <lca/mask_provider.hpp>

#include <filesystem>
#include <memory>
#include <string>

namespace lca::masks {

namespace {

std::filesystem::path data_dir_of(const lca_host_info& host) {
  if (host.data_dir != nullptr && *host.data_dir != '\0') return host.data_dir;
  if (host.plugin_dir != nullptr && *host.plugin_dir != '\0') {
    return std::filesystem::path(host.plugin_dir) / "data";
  }
  return "data";
}

}  // namespace

class BuiltinMaskProvider final : public IMaskProvider {
 public:
  explicit BuiltinMaskProvider(const lca_host_info& host) : dists_(data_dir_of(host)) {}

  std::string describe() override { return describe_patterns(); }

  std::unique_ptr<OwnedMask> generate(const lca_mask_request& request) override {
    const std::string name = request.pattern ? request.pattern : "";
    const PatternSpec* spec = nullptr;
    std::string names;
    for (const auto& p : pattern_catalogue()) {
      if (p.name == name) spec = &p;
      names += (names.empty() ? "" : ", ") + p.name;
    }
    if (spec == nullptr) {
      invalid_argument("builtin: unknown pattern '" + shown(name) + "'; allowed: " + names);
    }
    if (request.seqlen <= 0 || request.seqlen > max_seqlen) {
      invalid_argument(name + ": seqlen = " + std::to_string(request.seqlen) + " is out of range; allowed: " +
                       seqlen_allowed());
    }
    const Params params(name, spec->params, request.params_json);
    Rng rng(request.seed);
    PatternContext ctx{request.seqlen, params, rng, dists_};
    auto mask = std::make_unique<OwnedMask>();
    mask->seqlen_q = mask->seqlen_k = request.seqlen;
    spec->generate(ctx, *mask);
    return mask;
  }

 private:
  DistributionLibrary dists_;
};

}  // namespace lca::masks

LCA_EXPORT_MASK_PROVIDER(lca::masks::BuiltinMaskProvider, "builtin", "0.1.0")
