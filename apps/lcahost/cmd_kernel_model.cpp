// lcahost kernel-model: flex_flash's share of its own full as its schedule predicts it
// (core/model/kernel_tiles.hpp: own_full_share), without a GPU. With --matrix, for every mask,
// length, heads, head dim and pass of a matrix; with --validate, beside the share each flex_flash
// cell of a results file measured against its own full, and how far apart they are.
#include "commands.hpp"

#include "core/mask/mask_source.hpp"
#include "core/model/kernel_tiles.hpp"
#include "core/plugin/registry.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <tuple>

namespace lca::app {

namespace {

constexpr int kH100Sms = 132;
constexpr int64_t kH100L2 = int64_t{50} << 20;

std::string heads_text(int64_t q, int64_t kv) { return std::to_string(q) + ":" + std::to_string(kv); }

// Full at a length, made by the loaded provider (the cell a share is of), once a length and seed.
class FullMasks {
 public:
  explicit FullMasks(core::MaskSource& masks) : masks_(masks) {}
  const lca_mask& at(int64_t seqlen, uint64_t seed) {
    auto& g = made_[{seqlen, seed}];
    if (!g) g = masks_.generate(core::MaskSpec{"full", nlohmann::json::object()}, seqlen, seed);
    return g->mask();
  }

 private:
  core::MaskSource& masks_;
  std::map<std::pair<int64_t, uint64_t>, std::shared_ptr<core::GeneratedMask>> made_;
};

int predict_matrix(const Options& opt, const core::Registry& reg, core::MaskSource& masks) {
  core::MatrixSpec spec = core::load_matrix_spec(opt.matrix, reg.dir());
  apply_run_options(opt, spec);
  std::vector<core::MaskSpec> specs;
  if (std::find(spec.masks.begin(), spec.masks.end(), "*") != spec.masks.end()) {
    for (const auto& e : masks.patterns()) specs.push_back(core::MaskSpec{e.info.name, nlohmann::json::object()});
  } else {
    for (const auto& text : spec.masks) specs.push_back(core::MaskSpec::parse(text));
  }
  const int sms = opt.kmodel_sms > 0 ? opt.kmodel_sms : kH100Sms;
  const int64_t l2 = opt.kmodel_l2_mib > 0 ? int64_t{opt.kmodel_l2_mib} << 20 : kH100L2;
  std::printf("# flex_flash's share of its own full as its schedule predicts it (%d SMs, L2 %lld MiB, seed %llu)\n",
              sms, static_cast<long long>(l2 >> 20), static_cast<unsigned long long>(spec.seed));
  std::printf("# fill: the mask's cells over the cells of the 128-row tiles computed, against full's (a limit of the\n"
              "# tiling); predicted: the share of own full, fill times full's simulated time a tile over the mask's\n"
              "# (row tiles' fixed costs, the blocks' dispatch on the SMs)\n");
  std::printf("%-44s %8s %6s %4s %4s %6s %9s\n", "mask", "seqlen", "heads", "dim", "pass", "fill", "predicted");
  FullMasks fulls(masks);
  for (const auto& mask : specs) {
    std::string label = mask.label();
    if (label.size() > 44) label = label.substr(0, 43) + "~";
    for (const int64_t seqlen : spec.seqlens_for("cuda")) {
      const auto m = masks.generate(mask, seqlen, spec.seed);
      const lca_mask& full = fulls.at(seqlen, spec.seed);
      for (const auto& h : spec.heads)
        for (const int d : spec.head_dims)
          for (const auto& pass : spec.passes) {
            const bool backward = pass == "bwd";
            const double share =
                core::model::own_full_share(m->mask(), full, backward, h.heads_q, h.heads_kv, sms, d, l2);
            const double fill = core::model::tile_fill(m->mask(), backward) / core::model::tile_fill(full, backward);
            std::printf("%-44s %8lld %6s %4d %4s %6.2f %9.2f\n", label.c_str(), static_cast<long long>(seqlen),
                        h.label().c_str(), d, pass.c_str(), fill, share);
          }
    }
  }
  return 0;
}

// A measured cell with what its run record says: the matrix's seed and the GPU.
struct Measured {
  nlohmann::json cell;
  size_t run = 0;
  uint64_t seed = 0;
  int sms = kH100Sms;
  int64_t l2 = kH100L2;
};

// A cell's run, row, length, heads, head dim, dtype and pass: where its own full is found.
using ShapeKey = std::tuple<size_t, std::string, int64_t, int64_t, int64_t, int64_t, std::string, std::string>;
ShapeKey shape_of(const Measured& m) {
  const auto& r = m.cell;
  return {m.run, r.value("label", r.value("kernel", "")), r.value("seqlen", int64_t{0}), r.value("heads_q", int64_t{0}),
          r.value("heads_kv", int64_t{0}), r.value("head_dim", int64_t{0}), r.value("dtype", ""), r.value("pass", "")};
}

int validate(const Options& opt, core::MaskSource& masks) {
  // A results file: a run record (matrix seed, GPU) before the cells it ran.
  std::vector<Measured> cells;
  std::map<ShapeKey, double> full_tflops;
  Measured context;
  for (const auto& path : opt.kmodel_validate) {
    for (auto& r : read_json_lines(path, "--validate")) {
      if (r.contains("matrix") && r["matrix"].is_object()) {
        ++context.run;
        context.seed = r["matrix"].value("seed", uint64_t{42});
        const auto gpu = r.value("gpu", nlohmann::json::object());
        context.sms = gpu.is_object() ? gpu.value("sm_count", kH100Sms) : kH100Sms;
        context.l2 = gpu.is_object() ? gpu.value("l2_bytes", kH100L2) : kH100L2;
        continue;
      }
      if (!r.contains("pass") || r.value("status", "") != "ok" || r.value("device", "") != "cuda") continue;
      if (r.value("label", r.value("kernel", "")) != opt.kmodel_kernel || !r.contains("tflops") || !r["tflops"].is_number())
        continue;
      Measured m = context;
      m.cell = std::move(r);
      if (m.cell.value("mask", "") == "full") full_tflops[shape_of(m)] = m.cell["tflops"].get<double>();
      else cells.push_back(std::move(m));
    }
  }
  struct Row {
    std::string what;
    double measured = 0, predicted = 0;
  };
  std::map<std::string, std::vector<Row>> by_pass;
  int other_draw = 0, without_full = 0;
  FullMasks fulls(masks);
  for (const auto& m : cells) {
    const auto& r = m.cell;
    const auto full = full_tflops.find(shape_of(m));
    if (full == full_tflops.end() || full->second <= 0) {
      ++without_full;
      continue;
    }
    const int64_t seqlen = r["seqlen"].get<int64_t>(), hq = r["heads_q"].get<int64_t>(), hkv = r["heads_kv"].get<int64_t>(),
                  d = r["head_dim"].get<int64_t>();
    const std::string pass = r["pass"].get<std::string>();
    const core::MaskSpec spec{r["mask"].get<std::string>(), r.value("mask_params", nlohmann::json::object())};
    const auto g = masks.generate(spec, seqlen, m.seed);
    if (r.contains("area") && r["area"].is_number() && core::mask_area(g->mask()) != r["area"].get<int64_t>()) {
      ++other_draw;  // the provider draws this mask otherwise now: not the cell that ran
      continue;
    }
    const double predicted =
        core::model::own_full_share(g->mask(), fulls.at(seqlen, m.seed), pass == "bwd",
                                    static_cast<int>(hq), static_cast<int>(hkv), m.sms, static_cast<int>(d), m.l2);
    if (predicted <= 0) continue;
    by_pass[pass].push_back({spec.label() + "  " + std::to_string(seqlen) + " tokens  " + heads_text(hq, hkv) + " d" +
                                 std::to_string(d) + " " + pass,
                             r["tflops"].get<double>() / full->second, predicted});
  }
  std::printf("# flex_flash's share of its own full, measured and as its schedule predicts it (the plan of today's\n"
              "# tree on each run's GPU; a run of an older tree may have planned otherwise)\n");
  for (auto& [pass, rows] : by_pass) {
    std::vector<double> err;
    int within = 0;
    for (const auto& x : rows) {
      const double ratio = x.measured / x.predicted;
      err.push_back(std::fabs(std::log(ratio)));
      within += ratio >= 1.0 / 1.15 && ratio <= 1.15;
    }
    std::sort(err.begin(), err.end());
    const double median = err.empty() ? 0.0 : err[err.size() / 2];
    std::printf("# summary %s: %zu cells, %d within 15%%, median |error| %.1f%%\n", pass.c_str(), rows.size(), within,
                100.0 * (std::exp(median) - 1.0));
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return a.measured / a.predicted < b.measured / b.predicted;
    });
    const size_t shown = std::min<size_t>(rows.size(), static_cast<size_t>(opt.kmodel_worst));
    if (shown > 0) std::printf("#   furthest below the prediction (measured / predicted):\n");
    for (size_t i = 0; i < shown; ++i)
      std::printf("#   %.2f  measured %.2f predicted %.2f  %s\n", rows[i].measured / rows[i].predicted, rows[i].measured,
                  rows[i].predicted, rows[i].what.c_str());
  }
  if (by_pass.empty()) std::printf("# no %s cell beside its own full in these files\n", opt.kmodel_kernel.c_str());
  if (other_draw > 0)
    std::printf("# %d cells left out: the mask provider draws their masks otherwise now (their area differs)\n",
                other_draw);
  if (without_full > 0) std::printf("# %d cells left out: no full of the same shape and pass in their run\n", without_full);
  return 0;
}

}  // namespace

int cmd_kernel_model(const Options& opt) {
  if (opt.kmodel_validate.empty() == opt.matrix.empty())
    throw std::runtime_error("kernel-model needs either --matrix M (predict its cells) or --validate R.jsonl "
                             "(predict the cells a run measured)");
  const auto reg = core::Registry::load(plugin_dir(opt));
  core::MaskSource masks(reg);
  return opt.matrix.empty() ? validate(opt, masks) : predict_matrix(opt, reg, masks);
}

}  // namespace lca::app
