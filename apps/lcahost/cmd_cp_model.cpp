// lcahost cp-model: the scaling model's table (per strategy and world size: per-GPU TFLOP/s,
// share of one GPU, time, and where the slowest rank spends it), and --validate, which predicts
// every measured CP cell of a results file at its own world size and prints the error.
#include "commands.hpp"

#include "core/mask/mask_source.hpp"
#include "core/model/cp_model.hpp"
#include "core/model/kernel_tiles.hpp"
#include "core/plugin/registry.hpp"

#include <lca/error.hpp>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace lca::app {

namespace {

using core::model::Machine;
using core::model::Prediction;

// The (bytes a GPU sends to other ranks, ms) a pattern measured, its sizes scaled by `off_rank`
// (the share of a rank's bytes that leaves it).
std::vector<std::pair<double, double>> probe_points(const nlohmann::json& pattern, double off_rank) {
  std::vector<std::pair<double, double>> out;
  for (const auto& x : pattern.value("sizes", nlohmann::json::array()))
    if (x.value("bytes", 0.0) > 0 && x.value("ms", 0.0) > 0) out.emplace_back(x["bytes"].get<double>() * off_rank, x["ms"].get<double>());
  std::sort(out.begin(), out.end());
  return out;
}

// The links from a probe file (lcahost cp-probe --out); links it did not measure keep `m`'s. The
// ring gives the one-peer figures of its link, the all-to-all the several-peer ones (of the
// intra-node link on one node; of the inter-node link across nodes, whose part decides its time).
void read_probe(const std::string& path, Machine& m) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("--probe " + path + ": cannot read the file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error("--probe " + path + ": not JSON; give a file written by `lcahost cp-probe --out`");
  }
  if (!j.is_object() || j.value("type", "") != "cp_probe" || !j.contains("links"))
    throw std::runtime_error("--probe " + path + ": not a probe file (no \"type\": \"cp_probe\" with links); "
                             "give a file written by `lcahost cp-probe --out`");
  const nlohmann::json patterns = j.value("patterns", nlohmann::json::object());
  for (const char* name : {"intra", "inter"}) {
    if (!j["links"].contains(name)) continue;
    const auto& l = j["links"][name];
    core::model::Link& dst = std::string(name) == "intra" ? m.intra : m.inter;
    dst.GBps = l.value("bandwidth_GBps", dst.GBps);
    dst.latency_us = l.value("latency_us", dst.latency_us);
    const std::string from = l.value("from", "");
    dst.points = patterns.contains(from) ? probe_points(patterns[from], 1.0) : decltype(dst.points){};
  }
  const int W = j.value("world_size", 0);
  if (patterns.contains("all_to_all") && W > 1) {
    // The probe's all-to-all sends bytes / W to every rank, itself included; the model counts
    // only the bytes that leave a rank.
    const auto& a = patterns["all_to_all"];
    const double off = double(W - 1) / W;
    core::model::LinkCurve& dst = a.value("link", "") == "intra" ? m.intra.fanout : m.inter.fanout;
    dst.GBps = a.value("bandwidth_GBps", 0.0) * off;
    dst.latency_us = a.value("latency_us", 0.0);
    dst.points = probe_points(a, off);
  }
  if (patterns.contains("one_to_all") && W > 1) {
    // One rank sends bytes / (W - 1) to each other rank: every byte leaves it.
    const auto& a = patterns["one_to_all"];
    core::model::LinkCurve& dst = a.value("link", "") == "intra" ? m.intra.lone : m.inter.lone;
    dst.GBps = a.value("bandwidth_GBps", 0.0);
    dst.latency_us = a.value("latency_us", 0.0);
    dst.points = probe_points(a, 1.0);
  }
}

struct RateQuery {
  std::string mask_label, dtype, pass;
  nlohmann::json params;
  int heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t seqlen = 0;
};

// The local kernel's TFLOP/s for this mask, shape and pass: the single-GPU record at the length
// nearest the total (in ratio). Throws naming what is missing and the way out.
const nlohmann::json& find_rate(const std::vector<nlohmann::json>& records, const std::string& kernel,
                                const RateQuery& q, const std::string& file) {
  const nlohmann::json* found = nullptr;
  double best = -1, best_dist = 1e300;
  for (const auto& r : records) {
    if (r.value("type", "") != "cell" || r.value("status", "") != "ok" || r.value("kernel", "") != kernel) continue;
    if (r.value("mask", "") != q.mask_label || r.value("mask_params", nlohmann::json::object()) != q.params) continue;
    if (r.value("heads_q", 0) != q.heads_q || r.value("heads_kv", 0) != q.heads_kv ||
        r.value("head_dim", 0) != q.head_dim || r.value("pass", "") != q.pass || r.value("dtype", "") != q.dtype)
      continue;
    const double s = r.value("seqlen", 0.0);
    if (s <= 0 || !r.contains("tflops") || !r["tflops"].is_number()) continue;
    const double d = std::abs(std::log(s / double(q.seqlen)));
    if (d < best_dist) best_dist = d, best = r["tflops"].get<double>(), found = &r;
  }
  if (best <= 0)
    throw std::runtime_error("--rates " + file + ": no ok " + kernel + " record for " + q.mask_label +
                             (q.params.empty() ? "" : " " + q.params.dump()) + " " + q.pass + " heads " +
                             std::to_string(q.heads_q) + ":" + std::to_string(q.heads_kv) + " d" +
                             std::to_string(q.head_dim) + " " + q.dtype +
                             "; run that cell on one GPU (lcahost --matrix ...) or give --rate TFLOPS");
  return *found;
}

int dtype_bytes(const std::string& d) {
  if (d == "bf16" || d == "f16") return 2;
  if (d == "f32") return 4;
  throw std::runtime_error("--dtype '" + d + "': bf16, f16 or f32");
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

nlohmann::json to_json(const Prediction& p) {
  nlohmann::json j = {{"strategy", p.strategy}, {"world", p.world}};
  if (!p.refused.empty()) {
    j["refused"] = p.refused;
    return j;
  }
  j.update({{"head_degree", p.head_degree}, {"context_degree", p.context_degree}, {"window", p.window},
            {"zigzag", p.zigzag}, {"time_ms", p.time_ms}, {"tflops_per_gpu", p.tflops_per_gpu},
            {"share", p.share}, {"flops", p.total_flops},
            {"slowest_rank", {{"rank", p.slowest.rank}, {"kernel_ms", p.slowest.kernel_ms},
                              {"comm_ms", p.slowest.comm_ms}, {"memory_ms", p.slowest.memory_ms},
                              {"exposed_ms", p.slowest.exposed_ms}, {"calls", p.slowest.calls}}},
            {"breakdown", {{"ideal_ms", p.breakdown.ideal_ms}, {"imbalance_ms", p.breakdown.imbalance_ms},
                           {"tiles_ms", p.breakdown.tiles_ms}, {"exposed_ms", p.breakdown.exposed_ms},
                           {"memory_ms", p.breakdown.memory_ms}, {"mean_total_ms", p.breakdown.mean_total_ms}}}});
  return j;
}

// The slowest rank's time as ideal + imbalance + tiles + exposed + memory (ms).
std::string breakdown_text(const Prediction& p) {
  const auto& b = p.breakdown;
  char t[256];
  std::snprintf(t, sizeof t, "%.2f = ideal %.2f + imbalance %.2f + tiles %.2f + exposed %.2f + memory %.2f", p.time_ms,
                b.ideal_ms, b.imbalance_ms, b.tiles_ms, b.exposed_ms, b.memory_ms);
  return t;
}

// min..max over ranks of one of RankTime's fields.
template <class F>
std::string rank_range(const Prediction& p, F field) {
  double lo = 1e300, hi = 0;
  for (const auto& r : p.ranks) lo = std::min(lo, field(r)), hi = std::max(hi, field(r));
  return fmt("%.2f", lo) + ".." + fmt("%.2f", hi);
}

struct Setup {
  Machine machine;
  core::model::KernelRate rate;
  std::vector<nlohmann::json> rate_records;
};

}  // namespace

int cmd_cp_model(const Options& opt) {
  Setup su;
  su.machine.gpus_per_node = opt.model_gpus_per_node;
  if (!opt.model_probe.empty()) read_probe(opt.model_probe, su.machine);
  if (opt.model_intra_GBps > 0) su.machine.intra.GBps = opt.model_intra_GBps;
  if (opt.model_inter_GBps > 0) su.machine.inter.GBps = opt.model_inter_GBps;
  if (opt.model_intra_us >= 0) su.machine.intra.latency_us = opt.model_intra_us;
  if (opt.model_inter_us >= 0) su.machine.inter.latency_us = opt.model_inter_us;
  // A link given by flags is that link: the probe's measured sizes and several-peer figures go.
  if (opt.model_intra_GBps > 0 || opt.model_intra_us >= 0) su.machine.intra.points.clear(), su.machine.intra.fanout = {}, su.machine.intra.lone = {};
  if (opt.model_inter_GBps > 0 || opt.model_inter_us >= 0) su.machine.inter.points.clear(), su.machine.inter.fanout = {}, su.machine.inter.lone = {};
  if (opt.model_hbm_GBps > 0) su.machine.hbm_GBps = opt.model_hbm_GBps;
  su.rate.call_us = opt.model_call_us;
  if (opt.model_message_us >= 0) su.machine.message_us = opt.model_message_us;
  if (opt.model_rates.empty() && opt.model_rate <= 0)
    throw std::runtime_error("cp-model needs the local kernel's rate: --rates FILE.jsonl (single-GPU results) or "
                             "--rate TFLOPS");
  for (const auto& file : opt.model_rates)
  {
    // A one-GPU record is calibrated against its own mask: the seed and SMs of its run go with it.
    uint64_t seed = 42;
    int sms = 0;
    int64_t l2 = 0;
    for (auto& r : read_json_lines(file, "--rates")) {
      if (r.value("type", "") == "run") {
        seed = r.contains("matrix") ? r["matrix"].value("seed", uint64_t(42)) : 42;
        sms = r.contains("gpu") ? r["gpu"].value("sm_count", 0) : 0;
        l2 = r.contains("gpu") ? r["gpu"].value("l2_bytes", int64_t(0)) : 0;
      }
      r["run_seed"] = seed;
      r["run_sms"] = sms;
      r["run_l2_bytes"] = l2;
      su.rate_records.push_back(std::move(r));
    }
  }
  std::string rate_files;
  for (const auto& file : opt.model_rates) rate_files += (rate_files.empty() ? "" : ", ") + file;
  nlohmann::json options;
  try {
    options = nlohmann::json::parse(opt.cp_options);
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error("--cp-options '" + opt.cp_options + "' is not valid JSON; give an object");
  }
  if (!options.is_object()) throw std::runtime_error("--cp-options '" + opt.cp_options + "' is not a JSON object");

  const auto reg = core::Registry::load(plugin_dir(opt));
  core::MaskSource masks(reg);
  auto slices_of = [&](const core::MaskSpec& spec, int64_t S, uint64_t seed) {
    const auto g = masks.generate(spec, S, seed);
    const lca_mask& m = g->mask();
    if (m.block_sparse != nullptr && m.num_slices == 0)
      throw std::runtime_error("mask " + spec.label() + " is block-sparse only; the model needs slices");
    return std::vector<lca_slice>(m.slices, m.slices + m.num_slices);
  };
  const bool by_tiles = opt.model_kernel_time == "tiles" && opt.model_rate <= 0;
  // The local kernel's rate, and (by_tiles) the time of a tile unit: the one-GPU record's time over
  // the tile units of its own mask at its own length.
  // Whether the kernel that gave a one-GPU record grouped the forward's heads (its plan_info names
  // heads_together; flex_flash before that ran them heads outer).
  auto grouped_heads = [](const nlohmann::json& r) {
    const auto pi = r.find("plan_info");
    if (pi == r.end() || !pi->is_object()) return true;
    const auto fwd = pi->find("forward");
    return fwd == pi->end() || !fwd->is_object() || fwd->contains("heads_together");
  };
  // Whether it split the forward's row tiles by default (split-KV: its plan_info names
  // split_row_tiles, and its options do not turn fwd_split off).
  auto split_forward = [](const nlohmann::json& r) {
    const auto pi = r.find("plan_info");
    if (pi == r.end() || !pi->is_object()) return false;
    const auto fwd = pi->find("forward");
    if (fwd == pi->end() || !fwd->is_object() || !fwd->contains("split_row_tiles")) return false;
    const auto o = r.find("options");
    return o == r.end() || !o->is_object() || o->value("fwd_split", std::string("auto")) != "off";
  };
  auto rate_for = [&](const core::MaskSpec& spec, const core::model::Problem& P, const std::string& dtype,
                      int64_t* at, core::model::KernelRate& rate) {
    rate.unit_ms = 0;
    rate.heads_together = true;
    rate.fwd_split = false;
    rate.l2_bytes = 0;
    if (opt.model_rate > 0) {
      rate.tflops = opt.model_rate;
      return;
    }
    RateQuery q{spec.pattern, dtype, P.backward ? "bwd" : "fwd", spec.params, P.heads_q, P.heads_kv, P.head_dim,
                P.seqlen};
    if (by_tiles && !opt.model_rate_from.empty()) {
      // A mask without a record of its own: a tile at the time of --rate-from's record, and the
      // mask's one-GPU time (what its share is of) its own whole-mask tiles at that time.
      try {
        (void)find_rate(su.rate_records, opt.model_rate_kernel, q, rate_files);
      } catch (const std::runtime_error&) {
        const core::MaskSpec from = core::MaskSpec::parse(opt.model_rate_from);
        RateQuery fq = q;
        fq.mask_label = from.pattern;
        fq.params = from.params;
        const nlohmann::json& r = find_rate(su.rate_records, opt.model_rate_kernel, fq, rate_files);
        *at = r.value("seqlen", int64_t(0));
        core::model::Problem one = P;
        one.seqlen = *at;
        one.slices = slices_of(from, *at, r.value("run_seed", uint64_t(42)));
        const double from_tflops = r["tflops"].get<double>();
        const int sms = r.value("run_sms", 0) > 0 ? r.value("run_sms", 0) : su.machine.sms;
        rate.heads_together = grouped_heads(r);
        rate.fwd_split = split_forward(r);
        rate.l2_bytes = r.value("run_l2_bytes", int64_t(0));
        rate.unit_ms = core::model::calibrate_tiles(one, core::model::mask_flops(one) / (from_tflops * 1e12) * 1e3, sms,
                                                    rate.heads_together, rate.fwd_split, rate.l2_bytes);
        const lca_mask whole{sizeof(lca_mask), P.seqlen, P.seqlen, static_cast<int64_t>(P.slices.size()),
                             P.slices.data(), nullptr, 0, nullptr};
        const double units =
            core::model::tile_units(whole, P.backward, P.heads_q, P.heads_kv, sms, rate.heads_together, rate.fwd_split,
                                    P.head_dim, rate.l2_bytes);
        if (units <= 0 || rate.unit_ms <= 0)
          throw std::runtime_error("--rate-from " + opt.model_rate_from + ": no tile to time the mask by");
        rate.tflops = core::model::mask_flops(P) / (units * rate.unit_ms * 1e-3) / 1e12;
        return;
      }
    }
    const nlohmann::json& r = find_rate(su.rate_records, opt.model_rate_kernel, q, rate_files);
    rate.tflops = r["tflops"].get<double>();
    *at = r.value("seqlen", int64_t(0));
    if (!by_tiles) return;
    core::model::Problem one = P;
    one.seqlen = *at;
    one.slices = slices_of(spec, *at, r.value("run_seed", uint64_t(42)));
    const double ms = core::model::mask_flops(one) / (rate.tflops * 1e12) * 1e3;
    const int sms = r.value("run_sms", 0);
    rate.heads_together = grouped_heads(r);
    rate.fwd_split = split_forward(r);
    rate.l2_bytes = r.value("run_l2_bytes", int64_t(0));
    rate.unit_ms = core::model::calibrate_tiles(one, ms, sms > 0 ? sms : su.machine.sms, rate.heads_together,
                                                rate.fwd_split, rate.l2_bytes);
  };

  // The machine and timing the predictions used, for --json.
  auto machine_json = [&] {
    return nlohmann::json{{"gpus_per_node", su.machine.gpus_per_node},
                          {"intra", {{"GBps", su.machine.intra.GBps}, {"latency_us", su.machine.intra.latency_us}}},
                          {"inter", {{"GBps", su.machine.inter.GBps}, {"latency_us", su.machine.inter.latency_us}}},
                          {"intra_several_peers", {{"GBps", su.machine.intra.fanout.GBps},
                                                   {"latency_us", su.machine.intra.fanout.latency_us}}},
                          {"intra_lone_sender", {{"GBps", su.machine.intra.lone.GBps},
                                                 {"latency_us", su.machine.intra.lone.latency_us}}},
                          {"inter_several_peers", {{"GBps", su.machine.inter.fanout.GBps},
                                                   {"latency_us", su.machine.inter.fanout.latency_us}}},
                          {"hbm_GBps", su.machine.hbm_GBps},
                          {"sms", su.machine.sms},
                          {"kernel_time", by_tiles ? "tiles" : "area"},
                          {"call_us", su.rate.call_us},
                          {"message_us", su.machine.message_us}};
  };
  auto write_json = [&](const nlohmann::json& j) {
    std::ofstream f(opt.model_json);
    f << j.dump(1) << "\n";
    if (!f) throw std::runtime_error("--json " + opt.model_json + ": cannot write the file");
  };

  if (!opt.model_validate.empty()) {
    // Every measured multi-GPU cell at its own world size, mask, shape and pass, the local calls
    // timed both ways: by their FLOPs at the one-GPU rate (area) and by their tiles (tiles).
    const auto records = read_json_lines(opt.model_validate, "--validate");
    nlohmann::json run;
    struct Tally {
      int n = 0, within = 0;
      double worst = 0, sum_abs = 0;
      void add(double err) {
        ++n;
        within += std::abs(err) <= 0.15;
        worst = std::max(worst, std::abs(err));
        sum_abs += std::abs(err);
      }
    } area, tiles;
    const bool show_tiles = opt.model_rate <= 0;
    nlohmann::json compared = nlohmann::json::array();  // --json: a row a cell
    std::printf("%-15s %-30s %4s %-9s %8s %8s %7s %8s %7s  %s\n", "strategy", "mask", "pass", "heads", "measured",
                "area", "error", show_tiles ? "tiles" : "", show_tiles ? "error" : "",
                "kernel ms measured/model (busiest rank), comm/memory ms model (slowest)");
    for (const auto& r : records) {
      if (r.value("type", "") == "run") run = r;
      if (r.value("type", "") != "cell" || r.value("status", "") != "ok" || !r.contains("cp_ranks")) continue;
      const int W = run.contains("cp") ? run["cp"].value("world_size", 0) : 0;
      if (W < 2) continue;
      const std::string kernel = r.value("kernel", "");
      const std::string strategy = kernel.substr(0, kernel.find('/'));
      if (!opt.model_strategies.empty() &&
          std::find(opt.model_strategies.begin(), opt.model_strategies.end(), strategy) == opt.model_strategies.end())
        continue;
      core::MaskSpec spec{r.value("mask", ""), r.value("mask_params", nlohmann::json::object())};
      core::model::Problem P;
      P.seqlen = r.value("seqlen", int64_t(0));
      P.heads_q = r.value("heads_q", 0);
      P.heads_kv = r.value("heads_kv", 0);
      P.head_dim = r.value("head_dim", 0);
      P.dtype_bytes = dtype_bytes(r.value("dtype", "bf16"));
      P.backward = r.value("pass", "fwd") == "bwd";
      const uint64_t seed = run.contains("matrix") ? run["matrix"].value("seed", uint64_t(42)) : 42;
      P.slices = slices_of(spec, P.seqlen, seed);
      Machine m = su.machine;
      const int local = run["cp"].value("local_size", 0);
      if (opt.model_gpus_per_node_given == false && local > 0) m.gpus_per_node = local;
      if (run.contains("gpu") && run["gpu"].value("sm_count", 0) > 0) m.sms = run["gpu"]["sm_count"].get<int>();
      int64_t at = 0;
      core::model::KernelRate rate = su.rate;
      rate_for(spec, P, r.value("dtype", "bf16"), &at, rate);
      // What ran: the cell's configuration with every default explicit where the record has one
      // (a later default must not change what an old record replays), else the options as given.
      const nlohmann::json run_options =
          r.contains("cp_config") && r["cp_config"].is_object() ? r["cp_config"]
                                                                 : run["cp"].value("options", nlohmann::json::object());
      core::model::KernelRate by_area = rate;
      by_area.unit_ms = 0;
      const Prediction pa = core::model::predict(P, strategy, run_options, W, m, by_area);
      const Prediction pt = rate.unit_ms > 0 ? core::model::predict(P, strategy, run_options, W, m, rate) : pa;
      const double measured = r.value("tflops", 0.0);
      const std::string heads = std::to_string(P.heads_q) + ":" + std::to_string(P.heads_kv);
      const std::string pass = std::to_string(W) + " " + (P.backward ? "bwd" : "fwd");
      if (!pa.refused.empty()) {
        std::printf("%-15s %-30s %4s %-9s %8.1f   model refuses: %s\n", strategy.c_str(), spec.label().c_str(),
                    pass.c_str(), heads.c_str(), measured, pa.refused.c_str());
        continue;
      }
      const double ea = (pa.tflops_per_gpu - measured) / measured, et = (pt.tflops_per_gpu - measured) / measured;
      area.add(ea);
      tiles.add(et);
      const Prediction& p = by_tiles ? pt : pa;
      const double kernel_measured = r["cp_ranks"].contains("compute_ms")
                                         ? r["cp_ranks"]["compute_ms"].value("max", 0.0) : 0.0;
      double kernel_model = 0;  // the busiest rank's, as cp_ranks' max is
      for (const auto& x : p.ranks) kernel_model = std::max(kernel_model, x.kernel_ms);
      compared.push_back({{"strategy", strategy},
                          {"mask", spec.label()},
                          {"world_size", W},
                          {"pass", P.backward ? "bwd" : "fwd"},
                          {"heads_q", P.heads_q},
                          {"heads_kv", P.heads_kv},
                          {"seqlen", P.seqlen},
                          {"measured_tflops", measured},
                          {"area", {{"tflops", pa.tflops_per_gpu}, {"error", ea}}},
                          {"kernel_ms", {{"measured", kernel_measured}, {"model", kernel_model}}}});
      if (show_tiles) compared.back()["tiles"] = {{"tflops", pt.tflops_per_gpu}, {"error", et}};
      std::string label = spec.label();
      if (label.size() > 30) label = label.substr(0, 29) + "~";
      std::printf("%-15s %-30s %4s %-9s %8.1f %8.1f %+6.1f%% %8s %7s  %.1f/%.1f, %.1f/%.1f\n", strategy.c_str(),
                  label.c_str(), pass.c_str(), heads.c_str(), measured, pa.tflops_per_gpu, 100 * ea,
                  show_tiles ? fmt("%.1f", pt.tflops_per_gpu).c_str() : "",
                  show_tiles ? fmt("%+.1f%%", 100 * et).c_str() : "", kernel_measured, kernel_model,
                  p.slowest.comm_ms, p.slowest.memory_ms);
      if (opt.model_breakdown) {
        auto range = [&](const char* key) {
          const auto& c = r["cp_ranks"];
          return c.contains(key) ? fmt("%.2f", c[key].value("min", 0.0)) + ".." + fmt("%.2f", c[key].value("max", 0.0))
                                 : std::string("-");
        };
        std::printf("    model ms %s; ranks model/measured: time %s / %s, kernel %s / %s, comm %s / %s\n",
                    breakdown_text(p).c_str(), rank_range(p, [](const auto& x) { return x.total_ms; }).c_str(),
                    range("time_ms").c_str(), rank_range(p, [](const auto& x) { return x.kernel_ms; }).c_str(),
                    range("compute_ms").c_str(), rank_range(p, [](const auto& x) { return x.comm_ms; }).c_str(),
                    range("comm_ms").c_str());
      }
    }
    if (area.n == 0)
      throw std::runtime_error("--validate " + opt.model_validate +
                               ": no ok context-parallel cell of 2 or more GPUs (records with cp_ranks under a run "
                               "record whose cp.world_size >= 2)");
    const auto& in = su.machine.intra;
    std::printf("# links: intra %.1f GB/s %.0f us one peer, %s; inter %.0f GB/s %.0f us, %s; memory %.0f GB/s; "
                "%.0f us a call, %.1f us a message beyond one each way a peer\n",
                in.GBps, in.latency_us,
                in.fanout.GBps > 0 ? (fmt("%.1f", in.fanout.GBps) + " GB/s several (probe all-to-all)" + (in.lone.GBps > 0 ? fmt(", %.1f", in.lone.GBps) + " one sender alone (one_to_all)" : std::string())).c_str()
                                   : "several peers: no all-to-all figure, the one-peer figures serve",
                su.machine.inter.GBps, su.machine.inter.latency_us,
                su.machine.inter.fanout.GBps > 0 ? (fmt("%.1f", su.machine.inter.fanout.GBps) + " GB/s several").c_str()
                                                 : "several peers at the one-peer figures",
                su.machine.hbm_GBps, su.rate.call_us, su.machine.message_us);
    auto line = [](const char* name, const Tally& t, bool chosen) {
      std::printf("# summary %-5s: %d cells, %d within 15%%, mean |error| %.1f%%, worst %.1f%%%s\n", name, t.n,
                  t.within, 100 * t.sum_abs / t.n, 100 * t.worst, chosen ? " (--kernel-time)" : "");
    };
    line("area", area, !by_tiles);
    if (show_tiles) line("tiles", tiles, by_tiles);
    if (!opt.model_json.empty()) {
      auto summary = [](const Tally& t) {
        return nlohmann::json{{"cells", t.n}, {"within_15pct", t.within}, {"mean_abs_error", t.sum_abs / t.n},
                              {"worst_abs_error", t.worst}};
      };
      nlohmann::json sum{{"area", summary(area)}};
      if (show_tiles) sum["tiles"] = summary(tiles);
      write_json({{"type", "cp_model_validate"},
                  {"validate", opt.model_validate},
                  {"machine", machine_json()},
                  {"summary", sum},
                  {"cells", compared}});
    }
    return 0;
  }

  // The table: every mask x pass x strategy x world size.
  std::vector<std::string> mask_list;
  for (const auto& m : opt.masks)
    for (const auto& x : core::split_mask_list(m)) mask_list.push_back(x);
  if (mask_list.empty()) mask_list = {"full", "causal", "causal_document"};
  std::vector<std::string> strategies = opt.model_strategies;
  if (strategies.empty()) strategies = core::model::strategy_names();
  // Bad names are refused before any table is printed.
  const auto& known = core::model::strategy_names();
  for (const auto& st : strategies)
    if (std::find(known.begin(), known.end(), st) == known.end())
      throw std::runtime_error("--strategies: unknown CP strategy '" + st +
                               "' (known: ulysses, ring_p2p, ring_allgather, usp, loongtrain, balanced)");
  for (const auto& m : mask_list)
    if (!masks.find(core::MaskSpec::parse(m).pattern))
      throw std::runtime_error("--masks: unknown mask '" + m + "' (see `lcahost masks`)");
  const int hq = opt.model_heads_q, hkv = opt.model_heads_kv;
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& mtext : mask_list) {
    const core::MaskSpec spec = core::MaskSpec::parse(mtext);
    for (const std::string& pass : opt.model_passes) {
      if (pass != "fwd" && pass != "bwd") throw std::runtime_error("--pass '" + pass + "': fwd or bwd");
      if (opt.format == "md")
        std::printf("\n%s, %s, heads %d:%d, d%d, %s\n\n| strategy | GPUs | u x cp | TFLOP/s a GPU | share | ms | "
                    "kernel / comm / memory ms |\n|---|---|---|---|---|---|---|\n",
                    spec.label().c_str(), pass.c_str(), hq, hkv, opt.model_head_dim, opt.model_dtype.c_str());
      else
        std::printf("\n# %s %s heads %d:%d d%d %s\n%-15s %5s %8s %13s %6s %10s   %s\n", spec.label().c_str(),
                    pass.c_str(), hq, hkv, opt.model_head_dim, opt.model_dtype.c_str(), "strategy", "GPUs", "u x cp",
                    "TFLOP/s a GPU", "share", "ms", "slowest rank: kernel / comm / memory ms");
      for (int W : opt.model_worlds) {
        core::model::Problem P;
        P.seqlen = opt.model_seqlen > 0 ? opt.model_seqlen : opt.model_tokens_per_gpu * int64_t(W);
        P.heads_q = hq;
        P.heads_kv = hkv;
        P.head_dim = opt.model_head_dim;
        P.dtype_bytes = dtype_bytes(opt.model_dtype);
        P.backward = pass == "bwd";
        P.slices = slices_of(spec, P.seqlen, opt.model_seed);
        int64_t at = 0;
        core::model::KernelRate rate = su.rate;
        try {
          rate_for(spec, P, opt.model_dtype, &at, rate);
        } catch (const std::runtime_error& e) {
          // One missing rate leaves the other masks' tables standing.
          if (opt.format == "md") std::printf("| all | %d | | no rate | | | %s |\n", W, e.what());
          else std::printf("%-15s %5d   no rate: %s\n", "all", W, e.what());
          all.push_back({{"mask", spec.label()}, {"pass", pass}, {"world", W}, {"no_rate", e.what()}});
          continue;
        }
        for (const std::string& st : strategies) {
          const Prediction p = core::model::predict(P, st, options, W, su.machine, rate);
          nlohmann::json j = to_json(p);
          j.update({{"mask", spec.label()}, {"pass", pass}, {"seqlen", P.seqlen}, {"heads_q", hq}, {"heads_kv", hkv},
                    {"head_dim", P.head_dim}, {"rate_tflops", rate.tflops}});
          if (at > 0) j["rate_seqlen"] = at;
          if (rate.unit_ms > 0) j["tile_unit_ms"] = rate.unit_ms;
          all.push_back(j);
          const std::string shape = std::to_string(p.head_degree) + "x" + std::to_string(p.context_degree);
          if (!p.refused.empty()) {
            if (opt.format == "md") std::printf("| %s | %d | — | refused | | | %s |\n", st.c_str(), W, p.refused.c_str());
            else std::printf("%-15s %5d   refused: %s\n", st.c_str(), W, p.refused.c_str());
            continue;
          }
          const std::string split = fmt("%.1f", p.slowest.kernel_ms) + " / " + fmt("%.1f", p.slowest.comm_ms) +
                                    " / " + fmt("%.1f", p.slowest.memory_ms);
          const std::string more = opt.model_breakdown ? "; " + breakdown_text(p) : "";
          if (opt.format == "md")
            std::printf("| %s | %d | %s | %.0f | %.2f | %.1f | %s%s |\n", st.c_str(), W, shape.c_str(),
                        p.tflops_per_gpu, p.share, p.time_ms, split.c_str(), more.c_str());
          else
            std::printf("%-15s %5d %8s %13.0f %6.2f %10.1f   %s%s\n", st.c_str(), W, shape.c_str(), p.tflops_per_gpu,
                        p.share, p.time_ms, split.c_str(), more.c_str());
        }
      }
    }
  }
  if (!opt.model_json.empty()) write_json({{"type", "cp_model"}, {"machine", machine_json()}, {"predictions", all}});
  return 0;
}

}  // namespace lca::app
