// Matrix expansion; see cells.hpp.
#include "core/matrix/cells.hpp"

#include <algorithm>
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

}  // namespace

std::string Cell::key() const {
  return kernel + "|" + mask.label() + "|" + std::to_string(seqlen) + "|" + heads.label() + "|" +
         std::to_string(head_dim) + "|" + dtype + "|" + pass;
}

nlohmann::json Cell::to_json() const {
  return {{"kernel", kernel},     {"device", device},       {"mask", mask.pattern},
          {"mask_params", mask.params}, {"mask_label", mask.label()}, {"seqlen", seqlen},
          {"heads_q", heads.heads_q}, {"heads_kv", heads.heads_kv}, {"head_dim", head_dim},
          {"dtype", dtype},       {"pass", pass}};
}

Cell Cell::from_json(const nlohmann::json& j) {
  Cell c;
  c.kernel = j.at("kernel").get<std::string>();
  c.device = j.value("device", "cpu");
  c.mask.pattern = j.at("mask").get<std::string>();
  c.mask.params = j.value("mask_params", nlohmann::json::object());
  c.seqlen = j.at("seqlen").get<int64_t>();
  c.heads.heads_q = j.at("heads_q").get<int>();
  c.heads.heads_kv = j.at("heads_kv").get<int>();
  c.head_dim = j.at("head_dim").get<int>();
  c.dtype = j.at("dtype").get<std::string>();
  c.pass = j.at("pass").get<std::string>();
  return c;
}

std::vector<Cell> expand_cells(const MatrixSpec& spec, const Registry& registry,
                               const MaskSource& masks, const HostDevices& devices) {
  std::vector<const PluginRecord*> kernels;
  if (std::find(spec.kernels.begin(), spec.kernels.end(), "*") != spec.kernels.end()) {
    for (const auto* k : registry.loaded("kernel"))
      if (std::find(spec.exclude_kernels.begin(), spec.exclude_kernels.end(), k->name()) ==
          spec.exclude_kernels.end())
        kernels.push_back(k);
  } else {
    for (const auto& name : spec.kernels) {
      const auto* rec = registry.find(name, "kernel");
      if (rec == nullptr) {
        std::string known;
        for (const auto* k : registry.loaded("kernel")) known += (known.empty() ? "" : ", ") + k->name();
        throw std::runtime_error("matrix " + spec.name + ": unknown kernel '" + name +
                                 "'; loaded kernels: " + (known.empty() ? "(none)" : known) +
                                 " (see `lcahost list`)");
      }
      kernels.push_back(rec);
    }
  }

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
      if (masks.find(m.pattern) == nullptr) {
        std::string known;
        for (const auto& e : masks.patterns()) known += (known.empty() ? "" : ", ") + e.info.name;
        throw std::runtime_error("matrix " + spec.name + ": unknown mask '" + m.pattern +
                                 "'; known masks: " + (known.empty() ? "(no mask provider loaded)" : known) +
                                 " (see `lcahost masks`)");
      }
      mask_specs.push_back(std::move(m));
    }
  }

  // The union of lengths over the devices of the chosen kernels, in ascending order.
  std::vector<int64_t> all_lengths;
  for (const auto* k : kernels)
    for (auto n : spec.seqlens_for(k->manifest.kernel.device)) all_lengths.push_back(n);
  std::sort(all_lengths.begin(), all_lengths.end());
  all_lengths.erase(std::unique(all_lengths.begin(), all_lengths.end()), all_lengths.end());

  std::vector<Cell> cells;
  for (const auto& mask : mask_specs)
    for (auto seqlen : all_lengths)
      for (const auto& heads : spec.heads)
        for (int d : spec.head_dims)
          for (const auto& dtype : spec.dtypes)
            for (const auto* k : kernels) {
              const auto& caps = k->manifest.kernel;
              const auto& lens = spec.seqlens_for(caps.device);
              if (std::find(lens.begin(), lens.end(), seqlen) == lens.end()) continue;
              for (const auto& pass : spec.passes) {
                Cell c{k->name(), caps.device, mask, seqlen, heads, d, dtype, pass, ""};
                c.skip = skip_reason(c, caps, devices);
                cells.push_back(std::move(c));
              }
            }
  return cells;
}

}  // namespace lca::core
